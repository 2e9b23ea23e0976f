"""The per-session lexical index: terms, BM25 order, strength, incremental adds."""

from __future__ import annotations

import json

import pytest

from store.relevance import RelevanceIndex
from store.terms import Blob, passages, stem, terms, text_terms

FACT = ("Infra notes: the staging database runs on host pg-stg-7741.internal behind the "
        "bastion; backups at 02:00 UTC.")
NOISE = [
    "src/api/handlers.py: def create_user(request): validate(request.json); return 201",
    "GET /v2/orders?page=3 -> 200 OK, 50 orders, next cursor c_9921",
    "pytest: 143 passed, 2 skipped in 12.04s",
    "The marketing page lists three pricing tiers: starter, team and enterprise.",
    "Deploy log: building image web:4.2.1, pushing to registry, rollout 3/3 ready",
]


def index_with(*texts: str) -> RelevanceIndex:
    idx = RelevanceIndex()
    for i, t in enumerate(texts):
        idx.add(f"c{i}", t)
    return idx


def test_identifiers_count_whole_and_in_pieces() -> None:
    ts = terms("host pg-stg-7741.internal failed in rotateKeys()")
    assert "pg-stg-7741.internal" in ts
    assert {"pg", "stg", "7741", "internal", "rotat", "keys", "fail", "host"} <= set(ts)


def test_a_value_of_a_named_kind_also_yields_the_kind() -> None:
    """"Which port" of `0.0.0.0:26692`, "what IP", "which email": the value never says
    its kind, the question only names it. A file's line (app.py:14) is no port."""
    assert {"port", "ip"} <= set(terms("Uvicorn running on http://0.0.0.0:26692"))
    assert "port" in terms("db at pg-stg-7741.internal:5432 and localhost:8080/api")
    assert "email" in terms("mail mia.li3818@example.com")
    for s in ("src/app.py:14", "app.py:14", "12:00", "2025-03-07T09:03:12Z", "status:200",
              "x.yaml:3"):
        assert not {"port", "ip", "email"} & set(terms(s)), s


def test_a_texts_terms_are_remembered_as_they_were_computed() -> None:
    """Recall weighs the same passages turn after turn: `text_terms` keeps their terms,
    the same sequence `terms` gives, and hands the kept one back the next time."""
    text = "host pg-stg-7741.internal failed in rotateKeys() at 14:07"
    hits = text_terms.cache_info().hits
    assert text_terms(text) == tuple(terms(text))
    assert text_terms(text) is text_terms(text)
    assert text_terms.cache_info().hits >= hits + 2


def test_stop_words_drop_and_stems_meet() -> None:
    assert terms("Which of the machines is it?") == ["machin"]
    assert stem("databases") == stem("database")
    assert stem("rotation") == stem("rotate")
    assert stem("class") == "class"
    # a five-letter word ending in "e" meets its inflections ("make serve" / "the server")
    for word, other in [("serve", "server"), ("table", "tables"), ("issue", "issues"),
                        ("large", "larger"), ("store", "stored")]:
        assert stem(word) == stem(other), word


def test_plain_words_find_the_fact_first() -> None:
    idx = index_with(*NOISE, FACT)
    hits = idx.search("Which machine hosts the staging database again?")
    assert hits[0].chunk_id == "c5"
    assert 0 < hits[0].strength <= 1
    scores = idx.chunk_scores(hits)
    assert scores["c5"] == 1.0
    assert all(s < 1.0 for cid, s in scores.items() if cid != "c5")


def test_a_question_about_nothing_indexed_matches_nothing() -> None:
    idx = index_with(*NOISE, FACT)
    assert idx.search("What is the capital of Mongolia?") == []
    assert idx.chunk_scores([]) == {}


def test_adds_are_once_per_chunk_and_change_idf() -> None:
    idx = index_with(FACT)
    assert idx.add("c0", "other text") is False
    assert idx.text("c0") == FACT
    before = idx.idf("staging".rstrip("ing"))
    idx.add("c1", "staging staging staging")
    assert idx.idf("stag") < before or before == idx.idf("stag")  # df grew or was new
    assert len(idx) == 2


@pytest.mark.parametrize("size", [50, 200])
def test_passages_cover_the_text_and_respect_size(size: int) -> None:
    text = "\n".join(f"line {i}: " + "x" * 30 for i in range(40)) + "\n" + "y" * 500
    pieces = passages(text, size)
    assert "".join(pieces).replace("\n", "") == text.replace("\n", "")
    assert all(len(p) <= size for p in pieces[:-1])
    assert len(pieces[-1]) < size + size // 4  # a short last piece joins the one before


def test_a_short_last_piece_keeps_its_context() -> None:
    """A line or two left over at the end (the fee and the ticket after an ADR's decision
    line) is not a passage of its own, matched and recalled without what it belongs to."""
    head = "\n".join(f"Decision line {i}: refunds use Decimal, rounded half up." for i in range(7))
    pieces = passages(head + "\nFee 0.35 EUR, ticket PAY-4417.", 400)
    assert len(pieces) == 1 and pieces[0].endswith("PAY-4417.")
    assert len(passages(head + "\n" + "z" * 150, 400)) == 2  # a real piece stays one


def test_a_json_record_shorter_than_a_passage_stays_whole() -> None:
    """A pretty-printed API answer is cut after a record's closing line, not inside the
    record: a ticket's id stays beside its status ("escalated"), an order's total beside
    its note. Records longer than a passage are cut at line ends, as any text."""
    tickets = [{"ticket": f"T{100000 + i}", "opened": "2025-03-14T05:55:01Z",
                "subject": "Damaged monitor arm", "status": "closed", "messages": i}
               for i in range(12)]
    tickets[7] |= {"ticket": "CS-524618", "status": "escalated to tier 2"}
    text = json.dumps({"customer": {"id": "cus_pp41zk0wn3"}, "tickets": tickets}, indent=1)
    pieces = passages(text, 400)
    assert "".join(pieces) == text and all(len(p) <= 400 for p in pieces)
    assert all(p.count('"ticket"') == p.count('"messages"') for p in pieces)  # none split
    assert any("CS-524618" in p and "escalated" in p for p in pieces)
    big = json.dumps([{"log": "x" * 60 + str(i)} for i in range(3)] + [
        {f"k{j}": "v" * 40 for j in range(20)}], indent=1)
    assert "".join(passages(big, 400)) == big  # a record over the size: cut at line ends


def test_a_tool_outputs_call_annotates_every_passage_once() -> None:
    env = "\n".join(f"SERVICE_{i}_URL=https://svc-{i}.cluster.local" for i in range(30))
    idx = index_with(*NOISE, env)
    n = len(passages(env))
    assert n > 1 and not idx.search("staging environment settings")
    assert idx.annotate("c5", 'read_file {"path": "deploy/staging.env"}')
    assert not idx.annotate("c5", "again")  # once per chunk
    assert not idx.annotate("nope", "read_file")  # only chunks it holds
    hits = idx.search("staging environment settings")
    assert {h.chunk_id for h in hits} == {"c5"} and len(hits) == n  # every passage of it
    assert idx.text("c5") == env  # what is shown (and recalled) is unchanged


def test_a_long_query_is_not_diluted() -> None:
    """strength divides by the query's 8 most specific terms, not all of them."""
    idx = index_with(*NOISE, FACT)
    short = idx.search("staging database host")[0].strength
    long_q = "staging database host " + " ".join(NOISE)
    hit = next(h for h in idx.search(long_q) if h.chunk_id == "c5")
    assert hit.strength > 0.3 * short


LAZY_DOCS = [
    FACT, *NOISE,
    "Refund policies: a refund over 500 EUR needs a second approver (rule FIN-22).",
    "rotateKeys() ran at 03:00; the vault token rotation succeeded for svc-billing-02.",
    "Order ORD-88213 shipped; tracking 1Z999AA10123456784, carrier UPS.",
    *(f"log line {i}: worker-{i % 7} processed batch {i * 13} in {i % 50} ms" for i in range(90)),
    "INFO:     Uvicorn running on http://0.0.0.0:26692 (Press CTRL+C to quit)",
    "Pages go to oncall@acme.example.org; the port of Rotterdam is not ours.",
]
QUERIES = ["Which machine hosts the staging database?", "What does the refund policy say?",
           "did the key rotation work?", "ORD-88213", "which carrier shipped it",
           "what did worker 3 process", "pg-stg-7741.internal", "backups", "nothing matches",
           "Which port did the app come up on?", "what email do pages go to", "which IP"]


def _results(idx: RelevanceIndex) -> list[list[tuple[str, int, float, float]]]:
    return [[(h.chunk_id, h.piece, round(h.score, 9), round(h.strength, 9))
             for h in idx.search(q)] for q in QUERIES]


def test_a_cold_history_waits_unindexed_and_answers_as_if_indexed() -> None:
    """A history that arrives whole is not indexed up front (a 1,000-message request would
    spend ~100 ms here): each query indexes only the passages that can hold its terms
    (stems, identifiers and their pieces, an -ies/-y stem, a tool call's annotation), and
    every score is the one the fully indexed session gives."""
    eager, lazy = RelevanceIndex(eager=10**9), RelevanceIndex(eager=8)
    for idx in (eager, lazy):
        for i, t in enumerate(LAZY_DOCS):
            idx.add(f"c{i}", t)
        idx.annotate("c8", 'read_file {"path": "deploy/staging.env"}')
    assert lazy.waiting == lazy.passages_count == eager.passages_count
    assert [h.chunk_id for h in lazy.search("policy")] == ["c6"]  # "policies", stemmed
    assert lazy.search(QUERIES[0])[0].chunk_id == "c0"
    assert 0 < lazy.waiting < lazy.passages_count  # the query indexed what it could match
    got = _results(lazy)
    assert got == _results(eager)
    assert got[1][0][0] == "c6"  # "policy" found "policies"
    assert got[0][0][0] == "c0"
    assert {h[0] for h in got[-3]} == {"c99", "c100"}  # a port's shape, and the word
    assert got[-2][0][0] == "c100"
    assert [h[0] for h in got[-1]] == ["c99"]  # 0.0.0.0 is an address
    for k, q in enumerate(QUERIES):  # each on its own: no earlier query indexed its matches
        fresh = RelevanceIndex(eager=8)
        fresh.add_many((f"c{i}", t) for i, t in enumerate(LAZY_DOCS))
        fresh.annotate("c8", 'read_file {"path": "deploy/staging.env"}')
        assert [(h.chunk_id, h.piece, round(h.score, 9)) for h in fresh.search(q)] == [
            r[:3] for r in got[k]], q
    assert {h.chunk_id for h in lazy.search("staging env settings")} >= {"c0", "c8"}
    assert lazy.rare_identifiers("see ORD-88213", set()) == eager.rare_identifiers(
        "see ORD-88213", set())
    drained = RelevanceIndex(eager=8)
    drained.add_many((f"c{i}", t) for i, t in enumerate(LAZY_DOCS))
    assert drained.index_some(10) == drained.waiting == drained.passages_count - 10
    assert drained.index_some(10**6) == 0
    drained.annotate("c8", 'read_file {"path": "deploy/staging.env"}')
    assert _results(drained) == _results(eager)


def test_an_annotation_is_counted_in_its_outputs_passages_without_indexing_them() -> None:
    """Tool outputs are annotated with what their calling message said ("Next: the
    worker logs."), whose common words many queries hold: a query that matches only the
    annotations counts them in those outputs' waiting passages and indexes none of them
    (it indexed the whole of a 1,000-message history: 49 -> 73 ms), with the scores of
    the fully indexed session, before and after the rest is indexed."""
    eager, lazy = RelevanceIndex(eager=10**9), RelevanceIndex(eager=8)
    for idx in (eager, lazy):
        idx.add_many((f"c{i}", t) for i, t in enumerate(LAZY_DOCS))
        for i in range(4, len(LAZY_DOCS)):
            idx.annotate(f"c{i}", f"read_file Next: the upcoming output {i}.")
    waiting = lazy.waiting
    got = [(h.chunk_id, h.piece, round(h.score, 9)) for h in lazy.search("what's upcoming?")]
    assert len(got) == len(LAZY_DOCS) - 4 and lazy.waiting == waiting  # none indexed
    assert got == [(h.chunk_id, h.piece, round(h.score, 9))
                   for h in eager.search("what's upcoming?")]
    assert _results(lazy) == _results(eager)
    lazy.index_some(10**6)  # the rest, as the background does: counted once
    assert lazy.search("upcoming output 9")[0].score == eager.search("upcoming output 9")[
        0].score
    assert _results(lazy) == _results(eager)


def test_a_turns_few_new_passages_are_indexed_whole() -> None:
    idx = RelevanceIndex(eager=8)
    for i, t in enumerate(NOISE):
        idx.add(f"c{i}", t)
    assert idx.waiting == len(NOISE)
    idx.search("orders")
    assert idx.waiting == 0


def test_a_blob_finds_the_texts_that_can_hold_a_term_and_never_across_two() -> None:
    blob = Blob({3: "Batteries grew", 7: "the Gateway timed", 9: "out at pg-stg-7741"})
    assert blob.holders({"batteri"}) == {3}  # the stem of "batteries"
    assert blob.holders({"battery"}) == {3}  # an -ies stem's "y" is left off the probe
    assert blob.holders({"7741", "gateway"}) == {7, 9}
    assert blob.holders({"timedout"}) == set()  # the end of one text and the next
    assert blob.holders(set()) == set()


# A roster and a candidate record: bag-of-words cannot tell "Mateo Ramaswamy" from a
# roster naming Mateo Delacroix and Sanne Ramaswamy; the pair, adjacent, can.
ROSTERS = [f"Interviewers this week: Mateo {a} (Berlin) and {b} Ramaswamy (remote), both "
           f"free on {day}." for a, b, day in [("Delacroix", "Sanne", "Tuesday"),
                                               ("Okafor", "Dara", "Monday"),
                                               ("Szabo", "Ivo", "Friday")]]
RECORD = ("Notes from the recruiter call, long and mostly about relocation and visas.\n"
          "Candidate: Mateo Ramaswamy\nAvailable from: 2024-09-17\nNotice: 8 weeks")


def test_a_questions_adjacent_words_count_as_a_phrase() -> None:
    idx = index_with(ROSTERS[0], RECORD, *ROSTERS[1:], *NOISE)
    q = "From what day is Mateo Ramaswamy free to join?"
    own = idx.query_terms(q)
    words_only = [h.chunk_id for h in idx.search(own)]
    assert words_only.index("c0") < words_only.index("c1")  # the roster wins on words
    pairs = idx.phrases(q)
    assert set(pairs) == {"mateo ramaswamy"}  # "is Mateo", "free to": stop words
    idf, post = pairs["mateo ramaswamy"]
    assert post == {1: 1} and idf > max(own["mateo"], own["ramaswamy"])  # rarer than each
    assert [h.chunk_id for h in idx.search(own, phrases=pairs)][0] == "c1"
    # the pair must be adjacent, a space apart: a comma or another word between is not it
    assert idx.phrases("Is Ramaswamy Mateo free? Mateo, Ramaswamy?") == {}
    assert idx.phrases("Sanne Ramaswamy") == {"sanne ramaswamy": (idx._idf_of(1), {0: 1})}


def _waits(region: str, rows: int = 60) -> str:
    """A matchmaking report: header, rule, then a row per region and queue, casual first;
    the row that matters (`region`'s ranked queue) comes last, passages after the
    header."""
    head = ("Matchmaking (6h window)\n\n| region | queue | searches | wait_p50 | wait_p95 "
            "| timeouts |\n|---|---|---|---|---|---|\n")
    body = "".join(f"| zz-area-{i} | {q} | {1000 + i * 7} | {20 + i % 9}.{i % 10} s | "
                   f"{90 + i}.{i % 10} s | 0.{i % 7}{i % 3} |\n"
                   for q in ("casual", "ranked") for i in range(rows))
    return head + body + f"| {region} | ranked | 4,596 | 48.7 s | 283.4 s | 0.41 |\n"


def _ticks(region: str, rows: int = 60) -> str:
    """Another table of the same regions and queues, about something else."""
    head = ("| region | queue | servers | tick_rate | cpu | packet_loss |\n"
            "|---|---|---|---|---|---|\n")
    body = "".join(f"| zz-area-{i} | {q} | {40 + i} | 64 Hz | {30 + i % 50} % | 0.{i % 9} % |\n"
                   for i in range(rows) for q in ("casual", "ranked"))
    return head + body + f"| {region} | ranked | 118 | 64 Hz | 71 % | 0.2 % |\n"


def test_a_tables_later_passages_count_its_header() -> None:
    """"How long did ranked players wait in ap-southeast-2?": the row that answers sits
    passages after the header that says the column is a wait; another table holds the
    same region and queue. Each later passage of a table counts its header's terms once
    (its text is unchanged), so the wait table's row comes first, indexed up front or
    lazily alike."""
    waits, ticks = _waits("ap-southeast-2"), _ticks("ap-southeast-2")
    assert len(passages(waits)) > 2 and "wait" not in passages(waits)[-1]
    ask = "How long were ranked players in ap-southeast-2 waiting, at p95?"
    for eager in (10**9, 8):
        idx = RelevanceIndex(eager=eager)
        idx.add_many([("c0", ticks), *((f"n{i}", t) for i, t in enumerate(NOISE)),
                      ("c1", waits)])
        top = idx.search(ask)[0]
        assert (top.chunk_id, "283.4 s" in top.text) == ("c1", True)
        assert idx.text("c1") == waits
    plain = RelevanceIndex()
    plain.add_many([("c0", ticks), ("c1", waits)])
    assert plain._heads == {"c0": frozenset(terms(ticks.split("\n")[0])),
                            "c1": frozenset(terms(waits.split("\n")[2]))}


@pytest.mark.parametrize(("text", "header"), [
    ("| sku | units | return_rate | reason |\n|---|---|---|---|\n| A-1 | 3 | 0.1 | size |",
     "| sku | units | return_rate | reason |"),
    ("Report\nts,txn_id,account,amount,status\n2024-05-01,t1,a9,12.50,ok\n",
     "ts,txn_id,account,amount,status"),
    ("NAME        READY   STATUS    RESTARTS   AGE\napi-7f9c    1/1     Running   0   "
     "       3d\n", "NAME        READY   STATUS    RESTARTS   AGE"),
    ("Well\tSample\tTarget\tBaseline\nA1\tS-01\tGAPDH\t3\n", "Well\tSample\tTarget\tBaseline"),
])
def test_a_table_header_is_found_where_a_table_opens(text: str, header: str) -> None:
    from store.terms import table_header

    assert table_header(text) == header


@pytest.mark.parametrize("text", [
    "You are a careful agent, precise with numbers, brief in replies, and polite.\nBe kind.",
    "| A-1 | 3 | 0.1 | 4 |\n| A-2 | 5 | 0.2 | 6 |",  # values, no names
    "2024-05-01 10:00:01 INFO worker-3 started, queue=7, batch=12, lag=0\n" * 3,
    '{\n  "rules": [\n    {"rule_id": "pr_1", "name": "x"}\n  ]\n}',
    "| region | queue | waits | p95 |\nno table follows, just prose here.",
])
def test_no_table_header_where_no_table_opens(text: str) -> None:
    from store.terms import table_header

    assert table_header(text) == ""


def test_a_date_yields_its_weekday_and_a_time_its_hour_and_part_of_the_day() -> None:
    """"Right after the 2pm shift change on Monday", "overnight", "at 3am": a question
    says when in words a log never prints."""
    from store.terms import when

    assert when("2024-06-10") == ("monday",)
    assert when("14:07") == ("2pm", "afternoon")
    assert when("2024-08-23t03:11:09.068z") == ("friday", "3am", "night", "overnight")
    assert when("00:30:00") == ("12am", "night", "overnight")
    assert when("2024-02-30") == () and when("12:75") == () and when("v1-2") == ()
    assert when("2:30") == ("2am", "2pm") and when("02:30") == ("2am", "night", "overnight")
    assert {"monday", "2pm", "afternoon"} <= set(terms("2024-06-10 14:07 wave released"))
    assert {"monday", "2pm", "overnight", "morn"} <= set(
        terms("on Monday at 2pm, overnight, this morning"))



def test_a_time_as_a_person_writes_it_finds_the_afternoon_row_not_the_nights_log() -> None:
    """"The 2:30 surgery" is at 14:30 on the day's schedule: a one-digit hour is either
    half of the day, and names no part of it, so the night's log at 02:35 does not
    outrank the schedule's row."""
    index = RelevanceIndex()
    index.add("schedule", "\n".join(
        [f"{h:02d}:{m}  {pet:<8} Canine  {why:<9} Dr. {vet}" for h, m, pet, why, vet in [
            (9, "00", "Sable", "Echo", "Mbeki"), (11, "15", "Duke", "Recheck", "Lindgren"),
            (14, "30", "Atlas", "TPLO (R)", "Castellanos"),
            (16, "45", "Tofu", "Post-op", "Ueda")]]))
    index.add("overnight", "[2024-11-14 02:35] night shift: fluids topped up, all quiet\n"
              "[2024-11-14 02:50] night shift: Atlas fasting from midnight")
    top = index.search("Who's doing the 2:30 surgery today?")[0]
    assert top.chunk_id == "schedule", top

WAVES = [f"{d} {h:02d}:{m:02d}  WV-{d[2:4]}{d[5:7]}{d[8:]}-{k}  released  {k % 7 + 1} pickers"
         for k, (d, h, m) in enumerate(
             (f"2024-06-{day:02d}", hour, (day * 7 + hour) % 60)
             for day in range(3, 17) for hour in (6, 10, 14, 18, 22))]


@pytest.mark.parametrize("ask", ["Which wave got released right after 2pm on Monday?",
                                 "What was released overnight on Sunday?",
                                 "Anything on Tuesday evening?"])
def test_a_question_finds_what_happened_when_it_says_and_a_cold_history_alike(
        ask: str) -> None:
    """Each date and time counts its weekday, hour and part of the day; a history sent
    whole and indexed lazily finds them as the fully indexed one does (its waiting
    passages with a date or time that yields them are indexed for the question)."""
    eager, lazy = RelevanceIndex(eager=10**9), RelevanceIndex(eager=8)
    for idx in (eager, lazy):
        idx.add_many((f"w{i}", w) for i, w in enumerate(WAVES))
        idx.add_many((f"n{i}", t) for i, t in enumerate(NOISE))
    top = eager.search(ask)[0]
    assert [(h.chunk_id, round(h.score, 9)) for h in lazy.search(ask)] == [
        (h.chunk_id, round(h.score, 9)) for h in eager.search(ask)]
    day, clock = top.text.split()[:2]
    hour = int(clock[:2])
    if "Monday" in ask:
        assert day in ("2024-06-03", "2024-06-10") and hour == 14
    elif "Sunday" in ask:
        assert day in ("2024-06-09", "2024-06-16") and hour == 22
    else:
        assert day in ("2024-06-04", "2024-06-11") and hour == 18
