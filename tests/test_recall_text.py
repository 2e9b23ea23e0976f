"""What recall brings back of a passage (proxy/recall.py): a record's fields with the line
that matched, across the cut between two passages too, and the best-scoring of the
passages whose strength is capped."""

from __future__ import annotations

import json
from typing import Any

from proxy.excerpt import continued, focus, preceded
from proxy.recall import HEADER, MIN_ROOM, ChunkMeta, Recalled, render, select
from proxy.step import onward_terms
from store.relevance import Hit, RelevanceIndex
from store.terms import terms

COUNT = len  # a character a token: budgets below are in characters


def q(text: str) -> set[str]:
    return set(terms(text))


# A key/value listing as a finance tool prints it, each record's name line first
RECORDS = [(f"INV-2023-{22000 + 37 * i}", f"{1000 + 913 * i:,}.{i:02d}") for i in range(12)]
LISTING = "\n\n".join(
    f"Invoice no:   {n}\nVendor:       Tamsin Holdings\nPo number:    PO-{i:06d}\n"
    f"Due date:     2025-04-{i + 10}\nTotal:        {t}\nCurrency:     EUR"
    for i, (n, t) in enumerate(RECORDS))


def test_a_record_cut_at_a_passages_end_brings_its_fields() -> None:
    idx = RelevanceIndex()
    idx.add("inv", LISTING)
    texts = [idx.passage_text(n) for n in range(idx.passages_count)]
    # passages are cut by length: some record's name ends one passage, its total the next
    cut = [(k, n, t) for k, text in enumerate(texts) for n, t in RECORDS
           if n in text and t not in text]
    assert cut, texts
    k, name, total = cut[0]
    nxt = idx.following("inv", k)
    assert nxt == texts[k + 1] and total in nxt
    assert idx.following("inv", len(texts) - 1) == ""
    got = continued(texts[k], nxt, q(f"How much is {name} for altogether?"))
    assert got.startswith(texts[k].rstrip("\n")) and total in got
    # a question its last lines do not match, a passage ending at a blank line, or prose
    # (a long last line) takes nothing along
    assert continued(texts[k], nxt, q("Which currency?")) == texts[k]
    assert continued(texts[k] + "\n", nxt, q(name)) == texts[k] + "\n"
    prose = "The survey " + "was fielded online among adults in fourteen countries " * 3 + "\n"
    assert continued(prose, "and 1,562 answered.", q("the survey size")) == prose


def test_a_record_cut_inside_a_minified_json_line_brings_its_value() -> None:
    rows: list[dict[str, Any]] = [
        {"query_tag": f"churn_q{i}_v7", "query_id": f"01b3526f-0000-d6f9-{i:04d}",
         "user": "bilal.thibodeaux@lumenly.com", "warehouse": "REPORTING_WH_56",
         "stats": {"bytes_scanned": f"{172 + i},169,411,782", "rows": 135762 + i}}
        for i in range(12)]
    idx = RelevanceIndex()
    idx.add("q", json.dumps(rows))  # one line, cut by length at spaces and commas
    texts = [idx.passage_text(n) for n in range(idx.passages_count)]
    cut = [(k, r["query_tag"], r["stats"]["bytes_scanned"]) for k, t in enumerate(texts)
           for r in rows if f'"{r["query_tag"]}"' in t and r["stats"]["bytes_scanned"] not in t]
    assert cut, texts
    k, tag, value = cut[0]
    got = continued(texts[k], idx.following("q", k), q(f"What volume did {tag} read?"))
    assert got.startswith(texts[k]) and value in got and got.endswith(" …")
    assert len(got) <= len(texts[k]) + 240 + 2
    # prose cut inside a long line takes nothing along: no JSON key in it
    prose = "The survey was fielded online among adults in fourteen countries, " * 8
    assert continued(prose[:400], prose[400:], q("survey countries")) == prose[:400]


def test_a_passage_cut_to_the_budget_keeps_the_fields_after_the_match() -> None:
    text = ("Summary: Strong systems design, a bit light on streaming.\n"
            "Name: Yuki Lindqvist\nEmployer: Northwind Logistics\n"
            "Phone: +49 791 2956018\nExpected salary: 70,192.40\nNotice: 9 weeks")
    got = focus(text, q("What number do we have for Yuki Lindqvist?"), 90, COUNT)
    assert got.startswith("Name: Yuki Lindqvist\nEmployer: Northwind Logistics\n"
                          "Phone: +49 791 2956018")  # the fields after the name, in order
    assert "Summary" not in got and len(got) <= 90
    # no line matches: the head line, as before
    assert focus(text, q("pension"), 90, COUNT) == text.splitlines()[0]


def test_a_matched_field_cut_to_the_budget_keeps_its_records_id_above_it() -> None:
    """A pretty-printed record matched on a field below its id (`"origin_country": "VN"`):
    cut to the budget, the record's first field (`po_number`) comes along, before the
    fields after the match."""
    orders = [{"po_number": f"PO-{9179325 + 11 * k}", "supplier": f"Supplier {k}",
               "origin_country": "VN" if k == 1 else "CN", "status": "in_transit",
               "ship_to": "ATL3", "incoterm": "FOB", "lines": 18 + k} for k in range(3)]
    text = json.dumps({"purchase_orders": orders}, indent=2)
    got = focus(text, q("Which one comes from the factory in VN?"), 64, COUNT)
    assert got.splitlines() == ['      "po_number": "PO-9179336",',
                                '      "origin_country": "VN",'], got
    # a field that is its record's first, or a line in no record, brings nothing above it
    assert focus(text, q("PO-9179336"), 40, COUNT) == '      "po_number": "PO-9179336",'
    assert focus("Note: ships from VN\nstatus ok", q("VN"), 24, COUNT) == "Note: ships from VN"


def test_among_capped_strengths_the_higher_score_comes_first() -> None:
    """Strength is capped at 1: a phrase or a quantity boost takes many passages there.
    Between them the raw score decides, not the chunk id's hash."""
    weak = Hit("0aaa", 0, "| Net expansion Global Q3 | 1,844.06 |", 15.0, 1.0)
    strong = Hit("ffff", 0, "| Net expansion Global Q2 | 643,254.37 |", 19.7, 1.0)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("0aaa", "ffff")}
    got = select([weak, strong], {"0aaa", "ffff"}, meta, query="Net expansion Global Q2",
                 min_relevance=0.1, min_relative=0.0, top_k=1, budget=1000, count=COUNT)
    assert [r.hit.chunk_id for r in got] == ["ffff"]


def test_a_passage_that_adds_a_query_word_goes_before_its_chunks_repeats() -> None:
    """A list whose every record names the same field ("ticket") matches the question in
    each of its passages alike; the one passage of another chunk that holds the question's
    other word ("duplicate") comes before the list's second and third passages, though it
    scores a little lower. The repeats still fill what room is left."""
    rows = [Hit("aaaa", k, f'{{"ticket": "TCK-{k}", "subject": "Late delivery"}}', 2.0 - k / 100,
                0.30) for k in range(3)]
    plant = Hit("bbbb", 0, '{"invoice": "INV-931", "note": "duplicate charge"}', 1.8, 0.27)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("aaaa", "bbbb")}
    got = select([*rows, plant], {"aaaa", "bbbb"}, meta,
                 query="Which bill was the duplicate? I need it for the ticket.",
                 min_relevance=0.1, min_relative=0.5, top_k=2, budget=1000, count=COUNT)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [("aaaa", 0), ("bbbb", 0)]
    got = select([*rows, plant], {"aaaa", "bbbb"}, meta,
                 query="Which bill was the duplicate? I need it for the ticket.",
                 min_relevance=0.1, min_relative=0.5, top_k=8, budget=1000, count=COUNT)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [
        ("aaaa", 0), ("bbbb", 0), ("aaaa", 1), ("aaaa", 2)]


def test_a_passage_holding_the_question_words_on_one_line_is_no_repeat() -> None:
    """A configuration dump matches "executor" and "memory" in two of its passages: the
    first on two lines (`spark.memory.fraction`, `spark.executor.cores`), the second on
    one (`spark.executor.memory 28g`, the answer). The second adds no word, but it holds
    them together, so it goes before a log line that shares one word only."""
    dump = [Hit("conf", 0, "spark.memory.fraction      0.8\nspark.executor.cores       5",
                5.50, 0.44),
            Hit("conf", 1, "spark.hadoop.fs.s3a.mtqzk  2207\nspark.executor.memory      28g",
                5.46, 0.43)]
    log = Hit("logs", 0, "Stage 32 read 3363 files from the executor layer", 4.40, 0.35)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("conf", "logs")}
    got = select([*dump, log], {"conf", "logs"}, meta,
                 query="What memory setting do the executors run with?",
                 min_relevance=0.1, min_relative=0.5, top_k=2, budget=1000, count=COUNT)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [("conf", 0), ("conf", 1)]
    # the same words on separate lines again: a repeat, after the other chunk's word
    dump[1] = Hit("conf", 1, "spark.memory.offHeap.size  0\nspark.executor.instances  4",
                  5.46, 0.43)
    got = select([*dump, log], {"conf", "logs"}, meta,
                 query="What memory setting do the executors run with?",
                 min_relevance=0.1, min_relative=0.5, top_k=2, budget=1000, count=COUNT)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [("conf", 0), ("logs", 0)]



def test_a_passage_holding_the_row_asked_for_is_no_repeat() -> None:
    """A controlled-drug count matches "count", "drug" and "lot" in its header passage;
    its second passage adds no word, but holds the row the question asks for (the one
    count that did not reconcile: its `note`), so it goes before another chunk's passage
    that shares one word only."""
    count = [Hit("cd", 0, "Controlled drug count\nDrug  Lot  Expected  Counted  Status\n"
                 "Methadone  MT24-9677  50.0 mL  50.0 mL  OK", 6.0, 0.44),
             Hit("cd", 1, "Diazepam  DZ24-7802  51.0 mL  51.0 mL  OK\n"
                 "Hydromorphone  HM24-0719B  18.4 mL  17.6 mL  DISCREPANCY", 5.5, 0.41,
                 note="odd Status")]
    other = Hit("stock", 0, "Lot numbers of the fluids are on the shelf labels.", 4.0, 0.34)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("cd", "stock")}
    ask = "The drug count that didn't reconcile: what was its lot number?"
    got = select([*count, other], {"cd", "stock"}, meta, query=ask, min_relevance=0.1,
                 min_relative=0.5, top_k=2, budget=1000, count=COUNT)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [("cd", 0), ("cd", 1)]
    count[1] = Hit("cd", 1, count[1].text, 5.5, 0.41)  # no row asked for: a repeat
    got = select([*count, other], {"cd", "stock"}, meta, query=ask, min_relevance=0.1,
                 min_relative=0.5, top_k=2, budget=1000, count=COUNT)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [("cd", 0), ("stock", 0)]

def test_a_questions_nearest_passage_by_vector_goes_first() -> None:
    """Code that says "check", "table", "stage" and "order" everywhere matches "How many
    orders appeared more than once when we checked the staging table?" at full strength;
    the query result that answers it (`duplicate_order_ids 9,584`) shares almost no word
    but is the question's nearest passage by vector. It comes first, so the lexical
    noise cannot use up the budget before it. Without a question (`question_similarity`
    unset) the order is the rank's: strength + cosine."""
    code = [Hit(f"code{k}", 0, f"def check_{k}(table):\n    stage = table.filter(order)", 9.0,
                1.0) for k in range(3)]
    answer = Hit("query", 0, "duplicate_order_ids\n-----------------\n9,584\n(1 row)", 0.5,
                 0.03)
    meta = {h.chunk_id: ChunkMeta(1, "tool", "TRANSIENT") for h in [*code, answer]}
    ask = "How many orders appeared more than once when we checked the staging table?"
    vectors = [(answer, 0.45), *((h, 0.12) for h in code)]
    kw: dict[str, Any] = {"query": ask, "min_relevance": 0.1, "min_relative": 0.5,
                          "top_k": 8, "budget": 120, "count": COUNT, "vectors": vectors}
    got = select([*code, answer], {h.chunk_id for h in [*code, answer]}, meta,
                 question_similarity=0.25, **kw)
    assert [r.hit.chunk_id for r in got][0] == "query"
    assert "9,584" in got[0].hit.text
    got = select([*code, answer], {h.chunk_id for h in [*code, answer]}, meta,
                 min_similarity=0.4, **kw)
    assert [r.hit.chunk_id for r in got][0] == "code0"


def cut_record() -> tuple[RelevanceIndex, list[str], int, str, str, str]:
    """The listing indexed; the first passage k whose record's total is in passage k + 1;
    a question about that record's total, vendor and due date."""
    idx = RelevanceIndex()
    idx.add("inv", LISTING)
    texts = [idx.passage_text(n) for n in range(idx.passages_count)]
    k, name, total = next((k, n, t) for k, text in enumerate(texts) for n, t in RECORDS
                          if n in text and t not in text)
    return idx, texts, k, name, total, (f"How much is {name} for altogether? Which vendor, "
                                        "which due date?")


def test_a_record_continued_into_a_passage_recalled_too_is_not_repeated() -> None:
    """A passage that takes the next one's first lines along gives them back when the next
    passage is recalled as well: the block shows those lines once."""
    idx, texts, k, name, total, query = cut_record()
    assert continued(texts[k], texts[k + 1], q(query)) != texts[k]  # it would take lines
    hits = [Hit("inv", n, texts[n], 2.0 - n / 100, 0.5) for n in (k, k + 1)]
    meta = {"inv": ChunkMeta(1, "tool", "TRANSIENT")}
    got = select(hits, {"inv"}, meta, query=query, min_relevance=0.1, min_relative=0.0,
                 top_k=4, budget=10_000, count=COUNT, following=idx.following)
    assert [r.hit.piece for r in got] == [k, k + 1]
    assert got[0].hit.text == texts[k] and got[0].tokens == len(texts[k]) + 16
    assert got[1].hit.text.startswith(texts[k + 1].rstrip("\n"))
    head = texts[k + 1].splitlines()[0]
    assert render(got).count(head) == 1
    alone = select(hits[:1], {"inv"}, meta, query=query, min_relevance=0.1, min_relative=0.0,
                   top_k=4, budget=10_000, count=COUNT, following=idx.following)
    assert total in alone[0].hit.text  # recalled alone, it still brings its total along


def test_a_continued_passage_cut_to_the_budget_does_not_repeat_the_next_ones_lines() -> None:
    """The next passage is recalled first (it scores higher), then the one before it takes
    that passage's first lines along (`continued`) and is cut to the budget left
    (`focus`): the lines it kept of the next passage are not shown a second time."""
    idx, texts, k, name, total, query = cut_record()
    full = continued(texts[k], texts[k + 1], q(query))
    assert full != texts[k]
    hits = [Hit("inv", k + 1, texts[k + 1], 3.0, 0.9), Hit("inv", k, texts[k], 2.0, 0.5)]
    meta = {"inv": ChunkMeta(1, "tool", "TRANSIENT")}
    budget = (len(texts[k + 1]) + 16) + (len(full) + 16) - 40  # the second one is cut
    got = select(hits, {"inv"}, meta, query=query, min_relevance=0.1, min_relative=0.0,
                 top_k=4, budget=budget, count=COUNT, following=idx.following)
    assert sorted(r.hit.piece for r in got) == [k, k + 1]
    block = render(got)
    taken = [ln for ln in full[len(texts[k].rstrip("\n")):].splitlines()
             if ln.strip() and LISTING.count(ln) == 1]  # lines only that record holds
    assert taken
    for ln in taken:
        assert block.count(ln) == 1, ln
    first = next(r for r in got if r.hit.piece == k)
    assert name in first.hit.text and first.tokens == len(first.hit.text) + 16


# A circuit inventory as NetBox prints it: each record longer than a passage, so a
# record's id ends one passage and its description starts the next
CIRCUITS = json.dumps({"results": [
    {"id": 700 + i, "cid": f"LVL/IPT/{887000 + i}", "provider": {"name": "Sparkle"},
     "type": {"name": "IP Transit"}, "status": {"value": "active"},
     "commit_rate": 20_000_000 + i, "termination_a": {"site": "fra2", "device":
                                                      "edge-rtr-01.fra2"},
     "description": "primary transit" if i == 5 else f"backup path {i}"}
    for i in range(9)]}, indent=2)


def test_a_field_that_starts_a_passage_takes_its_records_opening_from_the_one_before() -> None:
    idx = RelevanceIndex()
    idx.add("nb", CIRCUITS)
    texts = [idx.passage_text(n) for n in range(idx.passages_count)]
    k = next(n for n, t in enumerate(texts) if '"description": "primary transit"'
             in t.splitlines()[0])  # the field heads a passage; its cid is in the one before
    assert "LVL/IPT/887005" in texts[k - 1] and "LVL/IPT/887005" not in texts[k]
    assert idx.preceding("nb", k) == texts[k - 1] and idx.preceding("nb", 0) == ""
    query = "What's the carrier's reference for the primary transit link?"
    got = preceded(texts[k], texts[k - 1], q(query))
    assert got.endswith(texts[k]) and got.startswith("    {\n")  # from the record's "{"
    assert "LVL/IPT/887005" in got and "LVL/IPT/887004" not in got  # its own, no other
    assert preceded(texts[k], texts[k - 1], q("Which currency?")) == texts[k]  # no match
    # through recall: the passage alone brings the id; with the one before chosen too,
    # nothing is repeated; with no room left, nothing is added
    meta = {"nb": ChunkMeta(1, "tool", "TRANSIENT")}

    def chosen(pieces: tuple[int, ...], budget: int) -> list[str]:
        hits = [Hit("nb", n, texts[n], 2.0 - n / 100, 0.5) for n in pieces]
        return [r.hit.text for r in select(
            hits, {"nb"}, meta, query=query, min_relevance=0.1, min_relative=0.0, top_k=4,
            budget=budget, count=COUNT, preceding=idx.preceding)]

    assert "LVL/IPT/887005" in chosen((k,), 10_000)[0]
    assert sorted(chosen((k, k - 1), 10_000)) == sorted([texts[k], texts[k - 1]])
    assert chosen((k,), len(texts[k]) + 16) == [texts[k]]


# a linter's report: each file's path, then its findings indented under it
LINT = "\n\n".join(
    f"/home/dev/app/packages/{pkg}/src/{name}.ts\n" + "\n".join(
        f"  {10 + 7 * j}:{3 + j}  {'error' if (pkg, j) == ('analytics', 0) else 'warning'}  "
        f"Unexpected any. Specify a different type  @typescript-eslint/no-explicit-any"
        for j in range(3))
    for pkg, name in [("ui", f"Widget{i}") for i in range(6)] + [("analytics", "segmentQueue")]
    + [("ui", f"Panel{i}") for i in range(6)])
# `git log`: a commit's hash and author, then its date and message
GITLOG = "\n\n".join(
    f"commit {i:040x}\nAuthor: {who} <dev{i}@example.com>\nDate:   Tue Nov 0{i % 9 + 1} "
    f"15:57:00 2024 +0100\n\n    {msg}"
    for i, (who, msg) in enumerate(
        [("Arjun Pillai", f"fix(api): retry {i} on 503") for i in range(5)]
        + [("Mirela Stancu", "feat(storefront): add sales dashboard widget with recharts")]
        + [("Keisha Morgan", f"ci: cache step {i}") for i in range(5)]))


def split_at(text: str, line: str) -> tuple[str, str]:
    """`text` cut into two passages just before `line` (as a length cut may fall)."""
    at = text.index(line)
    return text[:at], text[at:]


def test_a_match_that_starts_a_passage_takes_its_paragraphs_first_lines_from_the_one_before(
        ) -> None:
    """A line that answers but does not say whose it is (a finding, a commit's date and
    message) takes the few lines its paragraph opened with in the passage before (the
    file's path, the commit's hash and author); not a paragraph that is long there, nor
    one whose start is not in the passage before, nor for a passage that does not match."""
    prev, text = split_at(LINT, "  10:3  error")
    got = preceded(text, prev, q("Which file had the one genuine error, not a warning?"))
    assert got == "/home/dev/app/packages/analytics/src/segmentQueue.ts\n" + text
    prev, text = split_at(GITLOG, "Date:   Tue Nov 06")
    got = preceded(text, prev, q("Who wrote the commit that added the sales dashboard?"))
    assert got.startswith(f"commit {5:040x}\nAuthor: Mirela Stancu") and got.endswith(text)
    assert preceded(text, prev, q("Which currency?")) == text  # no match in its first lines
    long_prev = prev + "".join(f"Reviewed-by: r{i}\n" for i in range(4))  # 6 lines
    assert preceded(text, long_prev, q("the sales dashboard?")) == text
    assert preceded(text, prev.split("\n\n")[-1], q("the sales dashboard?")) == text


def test_a_long_row_cut_to_its_matching_stretch_keeps_its_first_field() -> None:
    """A work-order row too long for the room left, matched on its description: the cut
    keeps the order's number, which the question ("which work order … after the backwash
    pump went down") asks for and does not name."""
    row = ("WO-241004-0387  10/04 01:06  BW-P1     Backwash pump 1 tripped on overload during "
           "F-05 BW — megger motor, check impeller for debris, inspect OL relay  EMERG     "
           "rtorres      WAPPR→APPR  Maint on-call (D. Haverford)")
    got = focus(row, q("the backwash pump went down"), 120, COUNT)
    assert got.startswith("WO-241004-0387 … ") and "Backwash pump 1 tripped" in got
    assert len(got) <= 120
    # a line whose stretch starts at its head, prose, and JSON keep their plain cut
    assert focus(row, q("work order 0387"), 120, COUNT).startswith("WO-241004-0387  10/04")
    prose = "The pump " + "ran fine all week and " * 8 + "then the backwash pump tripped"
    assert focus(prose, q("backwash pump"), 60, COUNT).startswith("… ")
    minified = '{"rows": [' + ", ".join(f'{{"id": {i}}}' for i in range(30)) + ', "pump"]}'
    assert focus(minified, q("pump"), 60, COUNT).startswith("… ")



def test_a_log_line_a_question_asks_what_came_after_takes_the_next_passages_lines() -> None:
    """"Right after the container came back from the OOM kill, which backend was the first
    to fail?": the kill ends one passage of the log, the failed health check opens the
    next. A log line is longer than a record's field, so only the event the question asks
    what came after takes the lines after it along."""
    ask = ("In those API logs, right after the container came back from the OOM kill, which "
           "backend address was the first to fail? And after that keep going.")
    assert onward_terms(ask) == {"contain", "came", "oom", "kill"}  # not the aside's
    assert onward_terms("And after that keep going with the release triage.") == set()
    text = ("2024-05-14T09:14:06.973Z  staging/49558ea872a6  INFO  upstream timeout calling "
            "inventory-svc after 5000ms\n2024-05-14T09:41:07.118Z  staging/ecs-agent     INFO"
            "  Stopping container api (exit code 137, OOMKilled=true)\n")
    nxt = ("2024-05-14T09:41:31.940Z  staging/7c1e0a99f2b4  INFO  listening on :8443 (tls)\n"
           "2024-05-14T09:41:48.213Z  staging/7c1e0a99f2b4  ERROR healthcheck failed "
           "target=10.42.17.201:8443 code=502\n")
    got = continued(text, nxt, q(ask), onward_terms(ask))
    assert got.startswith(text.rstrip("\n")) and "target=10.42.17.201:8443" in got
    assert continued(text, nxt, q(ask)) == text  # asked for the kill alone: its own lines
    assert continued(text, nxt, q(ask), frozenset({"deploy"})) == text  # another event


def test_a_yaml_field_that_starts_a_passage_takes_its_records_dash_line_from_the_one_before(
        ) -> None:
    """A GSE list as YAML: the tug's defect opens one passage, its `- id:` line ends the
    one before; "which pushback tractor was taken out with the leak" needs the id."""
    prev = ("  - id: TMX-415\n    type: pushback tug (towbarless)\n    status: IN USE\n"
            "  - id: TMX-441\n    type: pushback tug (towbarless)\n    status: U/S\n")
    text = '    hours: 14458\n    defect: "hydraulic leak at steering cylinder"\n'
    got = preceded(text, prev, q("which pushback tractor was taken out with the leak"))
    assert got == ("  - id: TMX-441\n    type: pushback tug (towbarless)\n    status: U/S\n"
                   + text)
    # a top-level key is no record's field; a question its first lines miss takes nothing
    assert preceded("defect: leak\n", prev, q("leak")) == "defect: leak\n"
    assert preceded(text, prev, q("which runway")) == text


def test_a_passages_record_opening_counts_in_its_cost_before_weaker_passages_fill_the_room(
        ) -> None:
    """A review note ("Retime this") opens a passage; its shot's line ends the one before.
    The shot's line is part of what the note costs when it is chosen, so a weaker passage
    chosen after it cannot take its room (it was added last, where room was left)."""
    prev = ("Review playlist: LST_204  |  Reviewer: Showrunner\n\nLST_042_0340  v015  [comp]  "
            "status -> cbb\n  - Sky replacement reads too saturated.\n\n"
            "LST_204_0160  v016  [fx]  status -> rev\n")
    note = ("  - Retime this, it's dragging. Speed up the lantern swing by about 20%.\n\n"
            "LST_010_0060  v039  [comp]  status -> rev\n  - Push the atmospherics back.\n")
    other = "The render queue for 204 has sixty jobs; the retimed shots wait on comp.\n"
    texts = {("notes", 0): prev, ("notes", 1): note, ("queue", 0): other}
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("notes", "queue")}
    query = "Which shot did the showrunner ask to have retimed?"
    lead = "LST_204_0160  v016  [fx]  status -> rev\n"
    filler = "Retimed plates: LST_204\n"  # fits the room the shot's line takes, with its header
    meta["plates"] = ChunkMeta(1, "tool", "TRANSIENT")
    hits = [Hit("notes", 1, note, 3.0, 0.9), Hit("queue", 0, other, 2.0, 0.6),
            Hit("plates", 0, filler, 1.5, 0.5)]
    budget = len(lead + note) + len(other) + 2 * 16
    assert len(filler) + 16 == len(lead)
    got = select(hits, {"notes", "queue", "plates"}, meta, query=query, min_relevance=0.1,
                 min_relative=0.0, top_k=4, budget=budget, count=COUNT,
                 preceding=lambda c, n: texts[(c, n - 1)])
    assert [r.hit.text for r in got] == [lead + note, other]
    # with the passage before chosen too, the shot's line shows once, at its end
    both = select([*hits, Hit("notes", 0, prev, 1.0, 0.5)], {"notes", "queue"}, meta,
                  query=query, min_relevance=0.1, min_relative=0.0, top_k=4, budget=10_000,
                  count=COUNT, preceding=lambda c, n: texts[(c, n - 1)])
    assert [r.hit.text for r in both] == [note, other, prev]


def test_a_clear_match_in_a_small_output_brings_the_rest_of_it() -> None:
    """The question matches the header of a small table (its column names); the row that
    answers it, two passages down, holds none of its words. A clear match (strength 0.5
    or more) among a question's first four brings the whole output back when it is at
    most WHOLE_SHARE of the budget; a weak one, or an output too large, brings only the
    passage that matched."""
    rows = "\n".join(f"C{7000 + i}   {12 + i:>3}   {40 + 3 * i:>8.2f}   {900 + 11 * i:>9.2f}"
                     for i in range(24))
    table = "customer_id  tenure_months  monthly_charges  total_charges\n" + rows
    idx = RelevanceIndex()
    idx.add("bills", table)
    every = idx.chunk_hits("bills")
    assert len(every) >= 3
    answer = "C7023"  # the last row: the biggest monthly charge
    assert answer not in every[0].text
    meta = {"bills": ChunkMeta(3, "tool", "TRANSIENT")}
    question = "What was the single biggest monthly bill anyone had?"

    def chosen(strength: float, budget: int) -> list[Any]:
        head = Hit("bills", 0, every[0].text, 6.0, strength)
        return select([head], {"bills"}, meta, query=question, min_relevance=0.1,
                      min_relative=0.5, top_k=30, budget=budget, count=COUNT,
                      whole=idx.chunk_hits)

    size = sum(len(h.text) for h in every)
    budget = int(size / 0.35) + 200
    got = chosen(0.8, budget)
    assert [r.hit.piece for r in got] == list(range(len(every)))
    assert answer in render(got)
    assert got[1].why.startswith("the rest of a small output")
    assert sum(r.tokens for r in got) <= budget
    assert [r.hit.piece for r in chosen(0.3, budget)] == [0]  # a weak match
    assert [r.hit.piece for r in chosen(0.8, int(size / 0.35) - 200)] == [0]  # too large


def test_passages_that_follow_each_other_read_on_under_one_header() -> None:
    """Passages are cut by length: a minified record's long line is cut after a comma,
    which can be inside a value ("1," / "220.05"). Recalled together, the passages of one
    output that follow each other go on under one header line, so the value reads whole;
    one that does not follow gets its own."""
    head, tail = '{"offers": [{"flight": "LH2833", "notes": "', '", "total": "1'
    record = head + "x" * (396 - len(head) - len(tail)) + tail + ',220.05"}'  # its "," at 396
    idx = RelevanceIndex()
    idx.add("fares", record + ', {"flight": "TK1822", "total": "980.40"}' * 30)
    every = idx.chunk_hits("fares")
    assert every[0].text.endswith('"1,') and every[1].text.startswith('220.05"')
    meta = ChunkMeta(2, "tool", "TRANSIENT")

    def block(pieces: list[int]) -> str:
        return render([Recalled(every[k], meta.turn, meta.role, meta.klass, 0, "")
                       for k in pieces])

    together = block([1, 0])
    assert '"total": "1,220.05"' in together and together.count("[chunk fares,") == 1
    assert block([0, 2]).count("[chunk fares,") == 2


def test_a_nearly_full_recall_weighs_no_more_passages() -> None:
    """Once something is chosen and less than `MIN_ROOM` of the budget is left, the
    passages still ranked are not weighed: each could only go in cut to a line. Before
    anything is chosen a small budget still takes a small passage."""
    big = Hit("aaaa", 0, "Berth 4 crane log: " + "spreader twistlock cycle ok; " * 5, 9.0, 0.9)
    small = Hit("bbbb", 0, "crane 7 idle", 5.0, 0.6)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("aaaa", "bbbb")}
    args: dict[str, Any] = {"query": "which crane log", "min_relevance": 0.1,
                            "min_relative": 0.0, "top_k": 8, "count": COUNT}
    room = len(big.text) + HEADER + MIN_ROOM - 1  # after it, one token short of MIN_ROOM
    assert len(small.text) + HEADER < MIN_ROOM  # ...where the small one would still fit
    got = select([big, small], {"aaaa", "bbbb"}, meta, budget=room, **args)
    assert [r.hit.chunk_id for r in got] == ["aaaa"]
    got = select([big, small], {"aaaa", "bbbb"}, meta, budget=room + 1, **args)
    assert [r.hit.chunk_id for r in got] == ["aaaa", "bbbb"]
    got = select([small], {"bbbb"}, meta, budget=len(small.text) + HEADER, **args)
    assert [r.hit.chunk_id for r in got] == ["bbbb"]
