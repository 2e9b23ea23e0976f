"""Working words (store/idioms.py): a question in the trade's words reaches what a tool
printed in its own, through the related words and only as one of them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import Settings
from proxy.step import Step, _words, compounds_joined, related_of
from store.base import MemoryStore
from store.idioms import WEIGHT, _parse, idioms
from store.related import RelatedWords, related_words
from store.relevance import RelevanceIndex
from tests.support.asking import ask, without_idioms
from tests.support.messages import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def pytest_run(n: int, failed: str | None) -> str:
    lines = [f"tests/unit/test_module_{n}_{k}.py ....s......s......... [{k * 20}%]"
             for k in range(1, 5)]
    if failed:
        lines += ["=" * 20 + " FAILURES " + "=" * 20,
                  f"FAILED tests/unit/test_module_{n}_2.py::{failed} - AssertionError: "
                  "assert 3 == 4", f"==== 1 failed, 80 passed in 12.{n}s ===="]
    else:
        lines.append(f"==== 0 failed, 81 passed in 11.{n}s ====")
    return "\n".join(lines)


def test_each_asked_word_of_a_line_stands_for_all_its_said_words() -> None:
    table = _parse("""
        red reds: fail failed
        broke: fail error
        red: error
    """)
    assert table == {"red": ("fail", "failed", "error"), "reds": ("fail", "failed"),
                     "broke": ("fail", "error")}
    shipped = idioms()
    assert {"fail", "failed"} <= set(shipped["red"]) and "untagged" in shipped["label"]


def test_an_idiom_joins_the_models_own_words_and_never_lowers_them() -> None:
    words = RelatedWords({"label": "labelled:56", "server": "instance:61 client:36"},
                         idioms={"label": ("tag", "labelled"), "server": ("instance",),
                                 "browser": ("url", "http")})
    assert words.of("label") == [("labelled", 0.56), ("tag", WEIGHT)]
    assert words.of("server") == [("instance", 0.61), ("client", 0.36)]  # the better one
    assert words.of("browser") == [("url", WEIGHT), ("http", WEIGHT)]  # no line of its own
    assert words.of("browser", min_similarity=0.6) == []
    assert RelatedWords({"label": "labelled:56"}, idioms={}).of("label") == [("labelled", 0.56)]


def test_a_check_that_went_red_finds_the_run_that_printed_failed() -> None:
    index = RelevanceIndex()
    for n in range(6):
        index.add(f"run{n}", pytest_run(n, "test_refund_rounding" if n == 2 else None))
    index.add("note", "Red team review of the checkout page is booked for Friday.")
    # without the idiom, "red" finds the red team's note, and the runs tie on their words
    found_by_idiom(index, "Which check went red in the earlier test run?", "fail", "red",
                   "run2")


def found_by_idiom(index: RelevanceIndex, q: str, said: str, asked: str, chunk: str) -> None:
    """`q`'s word `asked` brings `said` as an idiom, and `chunk` comes first with it and
    not without the idioms."""
    related, found = ask(index, q)
    assert related[said] == (asked, WEIGHT)
    assert found[0].chunk_id == chunk, [(h.chunk_id, round(h.score, 2)) for h in found[:4]]
    _, alone = ask(index, q, without_idioms())
    assert not alone or alone[0].chunk_id != chunk


async def test_back_to_back_with_no_embedder_the_red_check_is_recalled_by_its_idiom(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The turn after the runs were evicted, no pause and no embedder: the question's
    "went red" reaches the one run that printed FAILED, and the recall says so."""
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "agent", "model": "agent-*", "context_window": 1200, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"}}])
    client = await aiohttp_client(init_app(st, store=MemoryStore()))
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        user("Get the billing service's test suite green.")]
    for t in range(1, 15):
        out = pytest_run(t, "test_refund_rounding" if t == 3 else None)
        history += [assistant(None, call(f"call_{t}", "run_tests", json.dumps(
            {"selector": f"tests/unit/{t}"}))), tool(f"call_{t}", out)]
    for end in range(4, len(history) + 1, 2):
        resp = await client.post("/v1/chat/completions", headers={"X-Session-ID": "red"},
                                 json={"model": "agent-1", "messages": history[:end]})
        assert resp.status == 200, await resp.text()
    assert "test_refund_rounding" not in json.dumps(upstream.history[-1].body["messages"])
    resp = await client.post("/v1/chat/completions", headers={"X-Session-ID": "red"}, json={
        "model": "agent-1", "messages": [*history, assistant("Done with that batch."),
                                         user("Which check went red in the earlier run?")]})
    assert resp.status == 200, await resp.text()
    assert "test_refund_rounding" in json.dumps(upstream.history[-1].body["messages"])
    log = await (await client.get("/admin/evictions", params={"session": "red"})).json()
    reasons = [e["reason"] for e in log["events"] if e["action"] == "recall"]
    assert any("fail (~red)" in r for r in reasons), reasons


CLAUSES = {
    "term": "14.1 This Agreement renews automatically for successive one (1) year terms.",
    "fees": "7.2 Fees are invoiced monthly in advance and payable within thirty (30) days.",
    "exit": "15.3 Customer may terminate this Agreement for convenience upon ninety (90) "
            "days' prior written notice to Supplier.",
    "law": "19.1 This Agreement is governed by the laws of the State of Delaware.",
    "cap": "11.2 Either party's aggregate liability is capped at the fees paid in the "
           "twelve (12) months before the claim.",
}


def test_how_far_ahead_we_must_tell_them_finds_the_notice_clause() -> None:
    """"In advance" is what a contract calls prior notice."""
    index = RelevanceIndex()
    for name, text in CLAUSES.items():
        index.add(name, text)
    q = "How long in advance do we have to tell them if we want out?"
    related, found = ask(index, q)
    assert related["notice"] == ("advance", WEIGHT) and related["prior"] == ("advance", WEIGHT)
    assert found[0].chunk_id == "exit", [(h.chunk_id, round(h.score, 2)) for h in found]
    _, alone = ask(index, q, without_idioms())  # "advance" alone finds the invoices
    assert not alone or alone[0].chunk_id != "exit"


def gateway_log(hour: int, throttled: str | None) -> str:
    paths = ["/v2/orders", "/v2/invoices", "/v2/customers", "/v2/webhooks"]
    lines = [f"2024-06-0{hour % 9 + 1}T{hour:02d}:{m:02d}:11Z GET {paths[m % 4]} 200 "
             f"{40 + m} ms" for m in range(0, 50, 7)]
    if throttled:
        lines += [f"2024-06-0{hour % 9 + 1}T{hour:02d}:5{k}:02Z POST {throttled} 429 3 ms"
                  for k in range(4)]
    return "\n".join(lines)


def test_a_hyphenated_compound_brings_its_idiom_and_an_idioms_code_counts() -> None:
    """"Rate-limited" is one word to a reader ("ratelimited": a 429), where its parts
    alone say nothing of it; the status code is a term an idiom may name, though a
    number in another related word ("euc1") never counts as one."""
    index = RelevanceIndex()
    for h in range(5):
        index.add(f"gw{h}", gateway_log(h, "/v2/exports/bulk" if h == 3 else None))
    index.add("plan", "Bulk exports are limited to one per customer per hour.")
    found_by_idiom(index, "Which API route got rate-limited the hardest yesterday?", "429",
                   "ratelimited", "gw3")


def test_a_status_said_in_words_finds_its_code() -> None:
    """"A single bad-gateway response" (or "bad gateway", written open) is a 502 in an
    access log, as "rate-limited" is a 429."""
    index = RelevanceIndex()
    for h in range(5):
        log = gateway_log(h, None)
        if h == 2:
            log += "\n2024-06-03T02:58:40Z GET /v2/orders/77 502 30011 ms req-22f07b18"
        index.add(f"gw{h}", log)
    index.add("notes", "The patch went out on Tuesday; latency looks fine since.")
    for q in ("In that slice of the logs there was a single bad-gateway response. Which "
              "request was it?", "Which request got the bad gateway response?"):
        found_by_idiom(index, q, "502", "badgateway", "gw2")
    assert idioms()["gatewaytimeout"] == ("504",)


def test_a_language_named_in_words_finds_its_code_in_a_roster() -> None:
    """A skills matrix lists languages by their codes: "speaks Japanese" is `ja` there,
    as a country's people name its country code."""
    index = RelevanceIndex()
    names = ["Noor Nilsen", "Tessa Morales", "Nadia Sato", "Hamid Laine", "Ivo Berg"]
    for k, name in enumerate(names):
        langs = "[en, pt-BR, ja]" if k == 2 else ("[en, es]" if k % 2 else "[en]")
        index.add(f"agent{k}", f"- agent: {name}\n  team: Falcon\n  languages: {langs}\n"
                                f"  skills:\n    retention: {k + 2}\n  tenure_months: {40 + k}")
    index.add("brief", "Plan the late shift from the roster.")
    found_by_idiom(index, "From the skills matrix, which agent is the one who speaks "
                          "Japanese?", "ja", "japanese", "agent2")


def test_an_open_compound_is_joined_only_where_the_idioms_list_it() -> None:
    """"Second line" and "sample size" are one word to a reader, written open; two words
    that happen to meet ("second, line"; "the line") are not joined."""
    words = _words("Which case went up to the second line? Then log in; second, line.")
    assert words.count("secondline") == 1 and "login" in words
    assert "theline" not in words and "wentup" not in words
    assert {"tier", "escalated"} <= set(idioms()["secondline"])


def test_the_sample_size_of_a_poll_finds_how_many_took_part() -> None:
    """"Sample size" is how many were asked: the sentence that says so names adults, not
    a sample, where another article's "samples" is a verb."""
    index = RelevanceIndex()
    for n, topic in enumerate(("urban cycling", "rooftop solar", "telehealth use")):
        index.add(f"article{n}", f"# {topic.title()}: what the numbers say\n\n"
                  f"Critics argue the figures for {topic} overstate the trend because of "
                  "how the World Bank samples households.\n\n"
                  + (f"The survey was fielded online among {4646 + n} adults in fourteen "
                     "countries.\n\n" if n == 1 else
                     f"Survey respondents in Leeds liked {topic} more than most. An "
                     "earlier survey found the same.\n\n")
                  + f"Policy support, not price, was the main driver of {topic}.")
    found_by_idiom(index, "What was the sample size of the poll we read about?",
                   "adults", "samplesize", "article1")


def test_pre_production_postgres_finds_the_staging_database_host() -> None:
    """"Pre-production" is staging and "Postgres" a `pg-` host, in an env file whose
    keys say neither."""
    index = RelevanceIndex()
    for env in ("prod", "stg", "dev"):
        index.add(f"{env}.env", "\n".join([
            f"CACHE_URL=https://cache-{env}.svc.cluster.local", "EXPORT_POOL=300",
            f"DATABASE_HOST={'pg' if env == 'stg' else 'mysql'}-{env}-8466.internal",
            "NOTIFIER_TIMEOUT=60"]))
    index.add("note", "Production traffic peaks at noon; the database upgrade is next week.")
    found_by_idiom(index, "Where does the pre-production Postgres run?", "stg",
                   "preproduction", "stg.env")


def test_read_only_queries_find_the_ro_replicas_host() -> None:
    """"Read-only" is a replica's `ro`, in a profile whose keys say neither."""
    index = RelevanceIndex()
    for env in ("dev", "prod", "test"):
        index.add(f"application-{env}.yml", "\n".join([
            "spring:", "  datasource:",
            f"    url: jdbc:postgresql://pg-quotes-rw.{env}.internal:5432/quotes",
            "pricing:", "  quotes-data:",
            f"    host: pg-quotes-{'ro-2' if env == 'prod' else 'rw'}.{env}.internal",
            "    pool-size: 12"]))
    found_by_idiom(index, "Which database host do we send the read-only queries to?",
                   "ro", "readonly", "application-prod.yml")


def test_how_long_we_wait_between_retries_finds_the_backoff_commit() -> None:
    """The wait between retries is a backoff: git logs where every commit touches retries,
    and one says "backoff" without "wait"."""
    index = RelevanceIndex()
    for n in range(3):
        lines = [f"{n}{k:03d}a{k:05d} Refactor {area} retry logging (#{k * 7 + n})"
                 for k, area in enumerate(("shipping", "billing", "upload", "tenant", "tax"))]
        if n == 1:
            lines[2] = "9f7a51c2e0 Switch retry backoff to exponential with jitter (#221)"
        index.add(f"log{n}", "\n".join(lines))
    index.add("note", "Ops asked us to hold the release until Friday.")
    found_by_idiom(index, "Which commit changed how long we wait between retries?",
                   "backoff", "retries", "log1")


def test_how_many_respondents_finds_the_adults_a_survey_was_fielded_among() -> None:
    """Respondents are the people who took part: the one sentence that counts them says
    "adults"; the other articles name respondents without a count."""
    index = RelevanceIndex()
    for n, topic in enumerate(("e-book lending", "rooftop solar", "night buses")):
        index.add(f"article{n}", f"# {topic.title()}\n\n"
                  + (f"The survey was fielded online among {4611 + n} adults in fourteen "
                     "countries.\n\n" if n == 1 else
                     f"Survey respondents in Kaunas liked {topic} more than most. An "
                     "earlier survey found the same.\n\n")
                  + f"A follow-up study found weaker effects for {topic} once income "
                  "was controlled for.")
    found_by_idiom(index, "How large was the group of respondents?", "adults",
                   "respondents", "article1")


def test_the_second_line_is_a_support_tier_not_a_tracebacks_line() -> None:
    """"Second line" is the compound the idioms list: the question's own words are it, not
    "line", which every traceback's frame repeats."""
    index = RelevanceIndex()
    for n in range(8):
        index.add(f"note{n}", f"Refund {n} issued for order O-{7100 + n}; customer told.")
    for n in range(2):
        index.add(f"trace{n}", "Traceback (most recent call last):\n" + "\n".join(
            f'  File "/srv/app/{mod}.py", line {100 + 37 * k + n}, in sync_{mod}\n'
            f"    {mod} = load_{mod}(cache)" for k, mod in enumerate(("ledger", "coupon"))))
    index.add("tickets", json.dumps([
        {"ticket": f"T{6100 + k}", "subject": f"Damaged parcel {k}",
         "status": "escalated to tier 2" if k == 3 else "closed"} for k in range(6)],
        indent=1))
    q = "Which older case went up to the second line?"
    assert compounds_joined(q) == "Which older case went up to the secondline?"
    assert compounds_joined("log  in, second line") == "login, secondline"
    _, found = ask(index, q)
    assert found[0].chunk_id == "tickets", [(h.chunk_id, round(h.score, 2)) for h in found]
    # the same question with the compound's parts counted as its own words
    related = related_of(Step(q, "", frozenset({"q"}), asks=True), related_words(), 0.35)
    hits = index.search({**index.query_terms(q), **index.related_terms(
        related, index.query_terms(q))}, frozenset({"q"}))
    assert hits[0].chunk_id.startswith("trace")
