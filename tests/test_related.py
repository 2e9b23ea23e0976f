"""Related words (store/related.py): the shipped table is the packaged model's, a
question's words reach passages worded differently, and only a question's."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import Settings
from proxy.step import Step, related_of, search, without_asides
from store.base import MemoryStore
from store.embed import PACKAGED_MODEL, resolve_model
from store.related import (
    FLOOR,
    UNDOUBLED,
    RelatedWords,
    build,
    opposite,
    related_words,
    undoubled,
)
from store.relevance import EAGER, RelevanceIndex
from tests.support.messages import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.trips import file_listing

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def test_the_shipped_table_is_the_packaged_models() -> None:
    shipped = related_words()
    sample = sorted(shipped.table)[::97] + ["big", "growth", "started", "poll", "pay"]
    rebuilt = build(Path(resolve_model(PACKAGED_MODEL)), sample)
    assert len(rebuilt) == len(set(sample)) > 200
    for word, near in rebuilt.items():  # as the table has them, opposites included
        assert " ".join(f"{w}:{c}" for w, c in near) == shipped.table[word], word
    assert ("large", 0.59) in shipped.of("big") and ("grew", 0.49) in shipped.of("growth")
    assert ("survey", 0.49) in shipped.of("poll") and ("began", 0.68) in shipped.of("started")


def test_a_word_never_stands_for_its_opposite() -> None:
    """The model's neighbours include opposites (`high` -> `low` 0.58): a black-box run's
    "how high can their damages exposure go?" matched a table of risk ratings through
    `low`. Listed pairs in their inflected forms, and negations by prefix, are left out;
    synonyms stay."""
    table = related_words()
    gone = {"high": "low", "fail": "succeed", "open": "closed", "increase": "decrease",
            "big": "small", "highest": "lowest", "success": "unsuccessful",
            "approve": "disapproval", "private": "publicly", "late": "early"}
    for word, other in gone.items():
        assert other not in dict(table.of(word)), word
    assert ("large", 0.59) in table.of("big") and ("failure", 0.65) in table.of("fail")
    assert ("unsuccessful", 0.52) in table.of("failed")  # a synonym, though negated
    assert opposite("bigger", "small") and opposite("warmest", "colder")
    assert not opposite("index", "dex") and not opposite("big", "huge")
    question = Step("How high can their damages exposure go?", "", frozenset({"q"}),
                    asks=True)
    assert "low" not in related_of(question, table, 0.35)


def test_expand_skips_stop_words_and_keeps_each_words_best_cosine() -> None:
    table = RelatedWords({"big": "large:59 sizable:49", "huge": "large:70", "what": "which:90"})
    assert table.expand(["What", "big", "huge"], 0.5) == {"large": ("huge", 0.70)}
    assert table.expand(["big"], FLOOR) == {"large": ("big", 0.59), "sizable": ("big", 0.49)}
    assert table.of("unknown") == []


def index_of(texts: dict[str, str]) -> RelevanceIndex:
    index = RelevanceIndex()
    for cid, text in texts.items():
        index.add(cid, text)
    return index


def test_a_question_finds_the_passage_in_other_words_and_a_step_that_asks_nothing_does_not(
        ) -> None:
    index = index_of({
        "page": "Installed battery storage capacity grew by 9.98% in 2023.",
        "other": "Prices for heat pumps fell in most regions during the winter.",
        "q": "What growth did the report give for batteries that year?",
        "task": "Summarise the report for batteries and growth."})
    question = Step(index.text("q"), "", frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert related["grew"] == ("growth", 0.49)
    page = {h.chunk_id: h for h in search(index, question, related)}["page"]
    alone = {h.chunk_id: h for h in search(index, question)}["page"]  # on "battery" only
    assert page.score > alone.score and "other" not in {h.chunk_id for h in search(
        index, question, related)}
    # the strength's yardstick is the question's own words, with or without related ones
    own = index.query_terms(question.words)
    assert page.strength == min(1.0, page.score / index.ideal(own))
    assert alone.strength == min(1.0, alone.score / index.ideal(own))
    task = Step(index.text("task"), "", frozenset({"task"}), asks=False)
    assert related_of(task, related_words(), 0.35) == {}
    assert related_of(question, related_words(), 1.0) == {}  # turned off


def test_a_questions_asides_do_not_choose_what_it_finds() -> None:
    """ "Just answer briefly and continue" is about the conversation: its words are rare in
    the session, so in BM25 they outscored the question's own and found the passage that
    happens to say "brief", "task" and "continue"."""
    q = ("Quick question before you go on: How many people took part in that survey? "
         "Just answer briefly and continue.")
    assert without_asides(q) == "How many people took part in that survey?"
    assert without_asides("Hold on. Which task did the scheduler skip? Then carry on with "
                          "the task.") == "Which task did the scheduler skip?"
    assert without_asides("Quick one: how far can exposure go under clause 4.1?") == (
        "how far can exposure go under clause 4.1?")  # "one:" ends it; "4.1" does not
    assert without_asides("Hold on.") == "Hold on."  # nothing else: all of it
    # a clause too, and an instruction about the answer's length
    assert without_asides("Before you go on, what ceiling did I give you for lodging? Keep "
                          "it short.") == "what ceiling did I give you for lodging?"
    assert without_asides("Which host, db-1 or db-2, did we pick?") == (
        "Which host, db-1 or db-2, did we pick?")
    index = index_of({
        "fact": "The survey was fielded online among 6,098 adults in fourteen countries.",
        "aside": "A brief survey of earlier work: the task force will continue its review.",
        "other": "Prices for heat pumps fell in most regions during the winter.",
        "q": q})
    question = Step(q, "", frozenset({"q"}), asks=True)
    found = [h.chunk_id for h in search(index, question, related_of(
        question, related_words(), 0.35))]
    assert found[0] == "fact"
    # the whole message's words would have put the aside's passage first
    assert index.search(index.query_terms(q), {"q"})[0].chunk_id == "aside"


def test_on_a_history_sent_whole_related_words_index_nothing_more() -> None:
    """The question's own terms bring their passages into the index on the request;
    related words score among those, and the rest waits for the background."""
    texts = {f"c{i}": f"Line {i}: a huge person walked past the large building."
             for i in range(EAGER * 4)}
    texts["fact"] = "Installed battery capacity grew by 9.98% in 2023."
    question = Step("How big was the growth for batteries?", "", frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert {"large", "huge"} <= related.keys()  # big's, and on every filler line
    waiting = []
    for rel in (None, related):
        index = index_of({**texts, "q": question.words})
        hits = search(index, question, rel)
        waiting.append(index.waiting)
        assert [h.chunk_id for h in hits] == ["fact"]
    assert waiting[0] == waiting[1] > 0  # the filler, holding "huge" and "large", waits


def test_on_a_history_sent_whole_a_related_word_few_passages_hold_is_indexed_for_it() -> None:
    """A contract sent whole, the question last: "extend" is the question's word, "renew"
    the clause's, and no word of the question is in it. The two passages that may hold
    "renew" are indexed on the request and the clause is found; the filler, where every
    line holds "contract" (another related word, of "deal"), still waits."""
    texts = {f"c{i}": f"Line {i}: the contract binder was filed in the cabinet."
             for i in range(EAGER * 4)}
    texts["clause"] = ("2.1 The Initial Term is thirty-six months and shall automatically "
                       "renew for successive 18-month periods.")
    texts["note"] = "Renewal notices go to the legal inbox."
    question = Step("If nobody acts, how long does the deal extend itself each time?", "",
                    frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert related["renew"] == ("extend", 0.5) and related["contract"] == ("deal", 0.5)
    index = index_of({**texts, "q": question.words})
    found = [h.chunk_id for h in search(index, question, related)]
    assert sorted(found) == ["clause", "note"], found  # nothing else holds a word of it
    assert index.waiting == EAGER * 4  # the filler: not indexed for "contract"


REPORT = "\n".join(
    [f"Report section {i}: the report's table {i} repeats the report's regional figures; "
     f"see the report appendix, report page {40 + i}." for i in range(12)]
    + ["Installed capacity grew by 9.98% in 2023, the report finds."]
    + [f"Report note {i}: the report's authors thank the report reviewers." for i in range(8)])
ANSWER = "9.98%"
ASK = "What growth did the study give for batteries that year?"


def session(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a research agent."},
                                  user("Read the energy sources and take notes.")]
    for t in range(1, turns + 1):
        out = REPORT if t == 2 else file_listing(t)
        msgs += [assistant(None, call(f"call_{t}", "read_pdf", json.dumps({"page": t}))),
                 tool(f"call_{t}", out)]
    return msgs


async def ask(aiohttp_client: ClientFactory, upstream: UpstreamServer,
              related: float) -> tuple[str, list[dict[str, Any]]]:
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "agent", "model": "agent-*", "context_window": 3000, "max_output_tokens": 256,
        "recall": {"related_words": related},
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"}}])
    client = await aiohttp_client(init_app(st, store=MemoryStore()))
    history = session(16)
    headers = {"X-Session-ID": f"s-{related}"}
    for end in range(4, len(history) + 1, 2):  # back to back, no embedder anywhere
        resp = await client.post("/v1/chat/completions", headers=headers,
                                 json={"model": "agent-1", "messages": history[:end]})
        assert resp.status == 200, await resp.text()
    assert ANSWER not in json.dumps(upstream.history[-1].body["messages"])  # evicted
    resp = await client.post("/v1/chat/completions", headers=headers, json={
        "model": "agent-1", "messages": [*history, assistant("Notes taken."), user(ASK)]})
    assert resp.status == 200, await resp.text()
    log = await (await client.get("/admin/evictions",
                                  params={"session": f"s-{related}"})).json()
    return json.dumps(upstream.history[-1].body["messages"]), [
        e for e in log["events"] if e["action"] == "recall"]


async def test_a_question_in_other_words_recalls_the_fact_and_says_which_word_led_there(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    sent, recalls = await ask(aiohttp_client, upstream, 0.35)
    assert ANSWER in sent
    assert any("grew (~growth)" in e["reason"] for e in recalls), recalls
    # the same session with related words off: the report's many "report"s win the room
    sent, recalls = await ask(aiohttp_client, upstream, 1.0)
    assert ANSWER not in sent and not any("~" in e["reason"] for e in recalls)


def test_a_doubled_consonant_stands_for_its_root() -> None:
    """"How many tests got skipped?" of a dbt summary that prints `SKIP=9`: the stemmer
    leaves "skipped" as `skipp`, so the question's word also stands for `skip`; a word
    that doubles l, s, f or z ("passed", "called") or none ("added") is left alone."""
    assert [undoubled(w) for w in ("skipped", "stopping", "planner", "tagged")] == [
        "skip", "stop", "plan", "tag"]
    assert [undoubled(w) for w in ("passed", "called", "staffed", "added", "skip")] == [
        None] * 5
    assert ("skip", UNDOUBLED) in related_words().of("skipped")
    assert RelatedWords({}, idioms={}).of("stopped") == [("stop", UNDOUBLED)]
    index = RelevanceIndex()
    index.add("summary", "10:42:23  Finished running 70 data tests in 41.2s.\n"
                         "10:42:23  Done. PASS=55 WARN=4 ERROR=2 SKIP=9 TOTAL=70")
    index.add("note", "The refund tests ran after the fix; two models were rebuilt.")
    index.add("q", "How many tests got skipped in that run?")
    step = Step("How many tests got skipped in that run?", "", frozenset({"q"}), asks=True)
    found = search(index, step, related_of(step, related_words(), 0.35))
    assert found[0].chunk_id == "summary", [(h.chunk_id, round(h.score, 2)) for h in found]
    without = search(index, step, related_of(step, RelatedWords({}, idioms={}), 0.35))
    alone = {h.chunk_id: h.score for h in without}
    assert found[0].score > alone["summary"]  # `SKIP` counts only through "skipped"
