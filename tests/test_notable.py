"""Notable rows: a table's odd one out, found without the question, and a question that
names it in plain words ("below zero", "the biggest amount") finding its passage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.cells import number
from store.extremes import extremes, tag
from store.notable import Notable, notable, placed
from store.notablewords import TAGS, asked
from store.relevance import RelevanceIndex
from store.tabular import tables
from store.terms import passages

STOCK = "\n".join([
    "sku,site,on_hand,allocated,available,on_order,lead_days",
    "RJK-ORG-43,RNO1,679,453,226,0,57", "CAP-NVY-41,PHL1,273,212,61,330,57",
    "TNT-NVY-XL,CMH2,439,157,282,0,59", "BSL-SND-XL,CMH2,370,310,60,0,22",
    "CAP-MGT-XXL,RNO1,0,11,-11,0,20", "GLV-NVY-44,CMH2,502,237,265,0,45",
    "PNT-SND-40,RNO1,59,50,9,350,31", "GLV-ORG-41,DFW2,813,689,124,0,77",
])
AGING = "\n".join([
    "AP aging 2024-04", "| vendor | id | terms | current | 1-30 | 31-60 | 61-90 | 90+ |",
    "|---|---|---|---|---|---|---|---|",
    *(f"| {v} | {i} | NET30 | {a} | 9,728.38 | 3,121.96 | 3,557.59 | {o} |" for v, i, a, o in [
        ("Pied Piper Hosting", "V04924", "14,673.53", "0.00"),
        ("Wayne Metals", "V48568", "3,845.26", "2,073.00"),
        ("Dunder Paper Co.", "V66937", "42,245.01", "0.00"),
        ("Globex Packaging", "V52949", "5,712.47", "1,576.22"),
        ("Marrowfield Castings GmbH", "V18682", "784.41", "133,163.60"),
        ("Stark Components", "V72101", "16,905.76", "0.00")]),
])
PRODUCTS = json.dumps({"total": 7, "products": [
    {"sku": sku, "title": "Ridge Insulated Bottle", "price": price, "status": "active"}
    for sku, price in [("BTL-ORG-41", 89.95), ("BSL-TEA-40", 189.95), ("BTL-CHR-OS", 0.95),
                       ("CAP-OLV-L", 34.5), ("FLC-BLK-S", 129.0), ("GLV-RED-44", 44.0),
                       ("TNT-GRY-45", 249.0)]]}, indent=2)


@pytest.mark.parametrize(("cell", "value"), [
    ("1,234.50", 1234.5), ("-11", -11.0), ("$0.95", 0.95), ("-18.74 dBm", -18.74),
    ("283.4 s", 283.4), ("12%", 12.0), (7, 7.0), (0.5, 0.5), (" 3 ", 3.0),
    ("2024-08-18", None), ("10.4.2.17", None), ("12:30", None), ("1/1", None),
    ("5d3h", None), ("V04924", None), (True, None), (None, None), ("", None),
])
def test_a_number_is_a_value_with_a_short_unit_not_a_date_or_an_address(
        cell: object, value: float | None) -> None:
    assert number(cell) == value


def test_the_one_negative_count_in_a_csv_is_notable() -> None:
    assert notable(STOCK) == [Notable("negative", "available",
                                      ("CAP-MGT-XXL,RNO1,0,11,-11,0,20",))]


def test_a_value_that_dwarfs_its_column_in_a_markdown_table_is_the_highest() -> None:
    """Its header is the column's ("90+"); the zeros beside it are no odd ones."""
    row = next(line for line in AGING.splitlines() if "Marrowfield" in line)
    assert notable(AGING) == [Notable("highest", "90+", (row,))]


def test_a_price_far_under_the_rest_in_json_records_is_the_lowest() -> None:
    """A record is found by its first field that tells the records apart, quoted."""
    assert notable(PRODUCTS) == [Notable("lowest", "price", ('"BTL-CHR-OS"',))]


def test_the_only_nonzero_difference_among_zeros_is_notable() -> None:
    lines = ["pair,receivable,payable,difference"] + [
        f"US10->DE{i},{1000 + i}.00,{1000 + i}.00,0.00" for i in range(8)]
    lines[4] = "US10->MX50,1005.00,997.67,7.33"
    row = ("US10->MX50,1005.00,997.67,7.33",)  # the one pair to MX is odd in shape too
    assert notable("\n".join(lines)) == [Notable("odd", "pair", row),
                                         Notable("nonzero", "difference", row)]


def test_columns_split_by_spaces_are_a_table_too() -> None:
    pods = ["NAME                      READY   STATUS    RESTARTS   AGE"] + [
        f"api-{i}-7c9f                1/1     Running   {i % 2}          3d" for i in range(7)]
    pods[3] = "api-2-7c9f                0/1     CrashLoopBackOff   48   3d"
    assert [(n.kind, n.column) for n in notable("\n".join(pods))] == [
        ("odd", "READY"), ("odd", "STATUS"), ("highest", "RESTARTS")]  # 0/1 among 1/1


def test_the_one_failed_line_among_passes_is_odd_in_every_column_it_differs() -> None:
    """A melt-curve report: the failing well reads two peaks, a second Tm and FAIL where
    every other reads one, one and PASS. Its sample id is no number, so no value rule
    sees it; the shape of its cells (digits aside) does."""
    lines = [f"{w}  s{i:03d}x  Tm1={80 + i % 5}.{i:02d}  peaks=1  PASS"
             for i, w in enumerate(["A1", "A2", "B4", "C3", "D8", "E2", "F5", "G6", "H1"])]
    lines[5] = "E2  S533-X  Tm1=73.75 Tm2=82.77  peaks=2  FAIL (primer-dimer or off-target)"
    found = notable("\n".join(lines))
    assert {n.kind for n in found} == {"odd"} and {n.probes for n in found} == {
        (lines[5],)}
    # odd in three columns (Tm, peaks: a 2 among 1s, the verdict), none with a header:
    assert len(found) == 1  # the row counts once


def test_a_record_whose_list_is_empty_where_the_others_hold_one_is_odd() -> None:
    """`"Tags": []` on the one instance nobody labelled; the others' tags differ in what
    they hold, not in shape."""
    instances = [{"InstanceId": f"i-0{n:016x}", "InstanceType": "m6i.xlarge",
                  "Tags": [{"Key": "team", "Value": team}]}
                 for n, team in enumerate(["search", "platform", "data", "web", "ml", "ops"])]
    instances[2] = {**instances[2], "InstanceType": "p4d.24xlarge", "Tags": []}
    found = notable(json.dumps({"Reservations": [{"Instances": instances}]}, indent=1))
    assert found == [Notable("odd", "InstanceType", (f'"{instances[2]["InstanceId"]}"',)),
                     Notable("odd", "Tags", (f'"{instances[2]["InstanceId"]}"',))]


def test_the_one_that_did_not_pass_is_the_odd_result_written_out_or_not() -> None:
    """"Did not pass" asks for the odd row as "didn't" does: the one FAIL among PASSes."""
    results = [{"id": f"INSP-24-0{6100 + 13 * n}", "type": "Framing", "result": "PASS"}
               for n in range(8)]
    results[5] = {**results[5], "result": "FAIL"}
    assert notable(json.dumps({"inspections": results}, indent=2)) == [
        Notable("odd", "result", (f'"{results[5]["id"]}"',))]
    for q in ("What is the reference for the only inspection that did not pass?",
              "Which inspection didn't pass?", "Which page would NOT load?"):
        assert asked(q) == {TAGS["odd"]}, q
    assert asked("I do not know which inspection is next; what is not booked yet?") == set()


def test_a_reading_far_outside_its_columns_spread_is_the_lowest() -> None:
    """An incubator that holds 37.0 +- 0.2 degrees but for one reading: far under the
    rest by their spread (median absolute deviation), not by a ratio."""
    temps = [37.1, 37.0, 36.9, 37.2, 37.0, 36.8, 37.1, 37.2, 37.0, 36.9]
    lines = [f"2026-11-{10 + i // 4} {i:02d}:15  T={t:.1f} °C  CO2=5.0{i}%  RH=9{i}%"
             for i, t in enumerate(temps)]
    lines[6] = "2026-11-11 06:15  T=35.4 °C  CO2=4.96%  ALARM door open > 10 min"
    found = notable("\n".join(lines))
    assert Notable("lowest", "", (lines[6],)) in found
    assert Notable("odd", "", (lines[6],)) in found and len(found) == 2


def test_the_one_step_that_dwarfs_every_other_between_rows_is_a_jump() -> None:
    """A traceroute whose delay climbs a few ms a hop but for one hop that adds 63: the
    row at the top of the step, however far from the ends of the column it stands."""
    ms = [2.28, 5.17, 6.36, 69.56, 70.59, 71.5, 76.91, 77.71, 79.21]
    lines = ["traceroute to 167.196.180.74 (167.196.180.74), 30 hops max"] + [
        f"{i + 1:2d}  r{i}.core{i % 3}.example.net (10.0.{i}.1)  {v:.3f} ms  {v + 0.4:.3f} ms"
        for i, v in enumerate(ms)]
    assert notable("\n".join(lines)) == [Notable("jump", "", (lines[4].strip(),))]
    assert asked("Where did the delay suddenly jump?") == {TAGS["jump"]}


@pytest.mark.parametrize("cell", ["T=35.4 °C", "peaks=2", "CO2=4.96%"])
def test_a_named_value_is_a_number(cell: str) -> None:
    assert number(cell) == float(cell.split("=")[1].rstrip(" °C%"))


def test_prose_short_outputs_and_tables_full_of_oddities_have_none() -> None:
    assert notable("The build failed: 3 tests, 1 error.\nSee log.") == []
    assert notable('{"status": "ok", "count": 3}') == []
    assert notable("[not json") == []
    wild = "a,b\n" + "\n".join(f"r{i},{10 ** (i * 2)}" for i in range(8))  # 1, 100, ...
    spiky = "\n".join(f"r{i},{v},{w}" for i, (v, w) in enumerate(
        [(1, -5), (2, -6), (3, -4), (4, -3), (5, 1), (6, 2), (7, 3), (8, 4)]))
    assert notable(wild) == [] and notable(spiky) == []


def test_a_rule_under_an_aligned_header_is_no_row() -> None:
    """`-------  ----` under a command's header is no row, so no odd one: the roster
    below has none (the rule was once the odd cell of every column)."""
    roster = "\n".join([
        "crew     foreman   size  yard       status",
        "-------  --------  ----  ---------  --------------",
        *(f"{c:<7}  {f:<8}  {n:>4}  {y:<9}  {st}" for c, f, n, y, st in [
            ("TRB-07", "Romero", 4, "Harlan", "available"),
            ("VEG-11A", "Brooks", 3, "Harlan", "on site"),
            ("SUB-02A", "Larsen", 6, "Eastfield", "en route"),
            ("UG-38", "Haddad", 4, "Harlan", "on site"),
            ("UG-08C", "Kim", 4, "Eastfield", "available"),
            ("LN-15A", "Brooks", 3, "Norcross", "en route"),
            ("TRB-35C", "Fontaine", 5, "Eastfield", "en route")])])
    assert notable(roster) == []


def test_a_count_beside_each_name_is_a_table_of_two_columns() -> None:
    """pandas' `value_counts()` (a name and its count a line): the tier far below the
    rest is the lowest. Two cells a line that are not name and number are no table."""
    counts = "\n".join(["plan_type", *(f"{name:<28} {n}" for name, n in [
        ("basic_5g", 14877), ("family_4line", 12904), ("unlimited_plus", 11263),
        ("prepaid_flex", 9718), ("business_lite", 6402), ("senior_value", 6026),
        ("legacy_unlimited_2019", 212)]), "Name: count, dtype: int64"])
    assert notable(counts) == [Notable("lowest", "", ("legacy_unlimited_2019        212",))]
    settings_dump = "\n".join(f"{k:<20}  {v}" for k, v in [
        ("log_level", "info"), ("region", "eu-west-1"), ("retries", "3"),
        ("timeout", "30s"), ("cache", "off"), ("owner", "platform"), ("tier", "gold")])
    assert notable(settings_dump) == []


def test_a_spike_asks_for_the_highest_and_hottest_or_coldest_for_one_end() -> None:
    assert asked("Which five-minute slot had the big spike?") == {TAGS["highest"],
                                                                  TAGS["jump"]}
    assert asked("Which transformer was running hottest?") == {TAGS["highest"]}
    assert asked("Which freezer ran the coldest overnight?") == {TAGS["lowest"]}


def test_a_question_names_the_odd_one_by_what_it_lacks_or_how_it_failed() -> None:
    assert asked("Which machine was the big one with no team label on it?") == {
        TAGS["odd"]}
    assert asked("Which sample had the double-peak dissociation problem?") == {TAGS["odd"]}
    assert asked("What temperature did the incubator log drop to?") == {TAGS["lowest"]}


@pytest.mark.parametrize(("question", "low"), [
    ("Which product was accidentally live at under a dollar?", True),
    ("Any region below 5% margin?", True), ("Which call took less than an hour?", True),
    ("Which job finished under 10ms?", True), ("Which PR is under review?", False),
    ("What is below the fold?", False), ("Who sits under another manager?", False)])
def test_under_a_quantity_asks_for_the_lowest_and_under_anything_else_does_not(
        question: str, low: bool) -> None:
    assert (TAGS["lowest"] in asked(question)) is low


def test_a_question_names_tags_only_with_words_that_mean_an_extreme() -> None:
    assert asked("Which item was showing stock below zero in Reno?") == {TAGS["negative"]}
    assert asked("Which supplier has the biggest amount past due?") == {TAGS["highest"]}
    assert asked("the worst latency") == {TAGS["highest"], TAGS["lowest"]}
    assert asked("Which tickets are under review? The top one, below.") == set()


def test_far_more_or_much_lower_than_the_rest_asks_for_the_row_apart() -> None:
    """"Renewed far more than anything else", "far more phosphorus than all the
    others": the column's outlier, above or below; "more than a day" is no outlier."""
    assert asked("Which item has been renewed far more than anything else?") == {
        TAGS["highest"]}
    assert asked("which well reads much lower than the rest?") == {TAGS["lowest"]}
    assert asked("Which cabin has had its do-not-disturb up for more than a day?") == set()
    idx = RelevanceIndex()
    idx.add("soil", "\n".join(
        ["sample_id,plot,ph_water,olsen_p_mg_kg,k_mg_kg"]
        + [f"ST-24-{100 + k},{101 + k},6.{k},{'85.4' if k == 7 else 20 + k},2{k}0"
           for k in range(12)]))
    idx.add("notes", "Soil samples went to the lab on Monday; phosphorus results by Friday.")
    assert idx.examine() == 0
    q = "Which soil sample came back with far more phosphorus than all the others?"
    tags = idx.notable_terms(q)
    assert set(tags) == {TAGS["highest"]}
    plain = {h.chunk_id: h.score for h in idx.search(idx.query_terms(q))}
    (row,) = [h for h in idx.search({**idx.query_terms(q), **tags}) if h.chunk_id == "soil"]
    assert row.note == "highest olsen_p_mg_kg" and row.score > plain.get("soil", 0.0)


def test_a_question_names_the_odd_one_by_how_it_differs_and_an_end_by_a_superlative(
        ) -> None:
    """"A different build from the rest", "unlike the others", "instead of finishing",
    "wouldn't load", "got rejected" ask for the odd one; a superlative asks for an end,
    which one the column says ("the slowest": the most seconds or the fewest per hour).
    An "-est" that is no superlative asks for nothing."""
    odd = {TAGS["odd"]}
    assert asked("Which robot runs a different nav build from the rest?") == odd
    assert asked("Which run died partway instead of finishing?") == odd
    assert asked("Which vendor, unlike the others, had no certificate?") == odd
    both = {TAGS["highest"], TAGS["lowest"]}
    assert asked("Which port was the slowest this morning?") == both
    assert asked("Which fault took the longest to recover from?") == both
    assert asked("What was the latest request of the contest?") == set()
    # what failed, said by what it would not do or was refused
    assert asked("Which shard had the images that wouldn't load?") == odd
    assert asked("Which claim never got a volume?") == odd
    assert asked("Which Meta ad got rejected in that pull?") == odd
    assert asked("Which unit had overpaid?") == {TAGS["negative"]}
    assert TAGS["nonzero"] in asked("Which kit didn't add up in the report?")
    assert asked("Any interest in the harvest?") == set()


def test_a_row_goes_to_the_passage_that_holds_it() -> None:
    pieces = passages(AGING, 200)
    (row,) = notable(AGING)
    ((k, rows),) = placed([row], pieces).items()
    assert rows == [row] and "Marrowfield" in pieces[k]
    assert placed([Notable("highest", "x", ("nowhere",))], pieces) == {}


def test_a_question_naming_the_extreme_finds_its_row_and_nothing_else_changes() -> None:
    """The row's passage counts its tag and header: "below zero" finds the negative
    count's passage though no word of the question is in it; its text is unchanged,
    and a step that is no question scores as before (no tags in its terms)."""
    idx = RelevanceIndex()
    idx.add("stock", STOCK)
    idx.add("aging", AGING)
    idx.add("notes", "Reno building inventory review is due on Friday; stock counts below.")
    before = idx.search("stock reno")
    assert idx.unexamined == 3 and idx.examine(limit=2) == 1 and idx.examine() == 0
    assert idx.search("stock reno") == before  # no tag asked: the same scores
    tags = idx.notable_terms("Which item was showing stock below zero in the Reno building?")
    assert set(tags) == {TAGS["negative"]}
    own = idx.query_terms("item stock reno building")
    assert all(h.chunk_id != "stock" for h in idx.search(own))  # no word of it is there
    hits = idx.search({**own, **tags})
    (row,) = [h for h in hits if h.chunk_id == "stock"]
    assert "CAP-MGT-XXL" in row.text and row.text == STOCK  # as written
    # the aging report's notable row is the highest, not what was asked: no hit
    assert {h.chunk_id: h.note for h in hits} == {"stock": "negative available", "notes": ""}


def test_rows_found_while_passages_wait_count_once_they_are_indexed() -> None:
    """A history sent whole waits unindexed (store/postings.py); a question's tags index
    the passages that hold them, and the background finds the same."""
    idx = RelevanceIndex(eager=0)
    idx.add("aging", AGING)
    idx.add("other", "Vendor onboarding checklist: W-9, bank letter, insurance.")
    assert idx.waiting > 0
    tags = idx.notable_terms("Which vendor has the biggest amount past due?")
    assert tags and idx.df(TAGS["highest"]) == 1
    hits = idx.search(tags)
    assert len(hits) == 1 and "Marrowfield" in hits[0].text
    assert hits[0].note == "highest 90+"


def test_an_open_quote_or_a_nul_byte_spoils_only_its_own_line() -> None:
    """CSV is read line by line: a quote left open does not swallow the table after it."""
    text = "\n".join(['note,"an open quote, and more', "a\0b,c,d", STOCK])
    assert [n.kind for n in notable(text)] == ["negative"]


LINE = st.text(st.sampled_from(list("ab01-9.,|\t $\"{}[]:\0−")), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE, max_size=12))
def test_any_text_is_examined_without_an_error(lines: list[str]) -> None:
    """Tool output is anything: examining it never raises (a request depends on it)."""
    text = "\n".join(lines)
    found = notable(text)
    assert len(found) <= 6
    assert all(all(p in text for p in row.probes) for row in found)


CELL = st.one_of(st.integers(-5, 10**6).map(str), st.floats(-1e9, 1e9).map(str),
                 st.text(st.sampled_from(list("ab-:/. $,")), max_size=6))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(CELL, min_size=3, max_size=5), min_size=6, max_size=14),
       st.sampled_from([",", "\t", " | ", "   "]))
def test_any_table_is_examined_without_an_error(rows: list[list[str]], sep: str) -> None:
    lines = [sep.join(r) for r in rows]
    if sep == " | ":
        lines = [f"| {line} |" for line in lines]
    text = "\n".join(lines)
    found = notable(text)
    assert len({row.probes for row in found}) <= 6  # rows: one may be odd in two columns
    assert all(all(p in text for p in row.probes) for row in found)
    json_rows = json.dumps([dict(zip("abcde", r, strict=False)) for r in rows])
    assert len({row.probes for row in notable(json_rows)}) <= 6


def test_json_lines_are_a_table_of_records() -> None:
    """A structured log (`kubectl logs` of a JSON logger) is one record a line: its
    columns' ends are found as a JSON list's are, placed by the record's first unique
    field; a text of a few JSON lines among prose is no table."""
    durations = [28.9, 7.8, 2874.6, 31.0, 12.4, 9.1, 44.0]
    log = "\n".join(json.dumps({"level": "info", "ts": f"2024-03-21T08:11:{i:02d}.439Z",
                                "route": "/v2/quote", "dur_ms": d,
                                "trace_id": f"{i:x}f92f3577b34da6a3ce929d0e0e47"})
                    for i, d in enumerate(durations))
    ((header, rows),) = tables(log)
    assert header == ["level", "ts", "route", "dur_ms", "trace_id"] and len(rows) == 7
    top = {e.tag: e.probes for e in extremes(tables(log))}
    assert top[tag("max", {"dur", "durat", "ms"})] == ('"2024-03-21T08:11:02.439Z"',)
    prose = "Some notes.\n" * 10 + log.splitlines()[0]
    assert tables(prose) == [] or all(h != header for h, _ in tables(prose))


def test_a_prometheus_vector_is_a_table_of_its_series_by_their_labels() -> None:
    """Prometheus's API writes each series as its labels (a nested record) and a sample
    (`[time, "value"]`): the sample counts as its value, and the label that tells the
    series apart places the row (the consumer group furthest behind)."""
    lags = {"ledger-writer": 973089, "fraud-scorer": 129726, "audit-sink": 168052,
            "recon-snapshotter": 2847193, "search-indexer": 339204, "dlq-replayer": 379117}
    vector = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "kafka_consumergroup_lag", "consumergroup": group,
                    "topic": "payments.ledger-postings.v3"},
         "value": [1721274060.5 + i / 10, str(lag)]} for i, (group, lag) in
        enumerate(lags.items())]}})
    assert notable(vector) == [Notable("highest", "value", ('"recon-snapshotter"',))]


def test_a_nested_records_fields_are_columns_of_their_own() -> None:
    """An hourly forecast's `ice_accretion.radial_in`: its top row is the thickest ice."""
    hours = [0.24, 0.26, 0.5, 0.43, 0.33, 0.31, 0.2]
    forecast = json.dumps({"hourly": [
        {"time": f"2025-01-19T{6 + i:02d}:00", "temp_f": 24 + i % 3,
         "ice_accretion": {"radial_in": r, "display": f"{r:.2f} in"}}
        for i, r in enumerate(hours)]}, indent=2)
    top = {e.tag: e.probes for e in extremes(tables(forecast))}
    assert top[tag("max", {"ice", "accret", "radial"})] == ('"2025-01-19T08:00"',)


def test_a_change_of_subject_is_no_question_about_a_row_that_differs() -> None:
    """"Different thing —", "on a different note", "something else": the asker moves on,
    and asks for no odd one; "a different build" still does."""
    assert asked("Different thing — which database host takes the read-only queries?") == set()
    assert asked("Different angle: on the ETA group, which partition lagged?") == set()
    assert asked("Something else: who signed the PO?") == set()
    assert asked("On a different note, which robot runs a different nav build?") == {
        TAGS["odd"]}
    assert asked("Which customer reported a different issue from the rest?") == {TAGS["odd"]}


def test_a_junit_reports_test_cases_are_a_table_of_their_attributes() -> None:
    """Surefire's XML: each `<testcase …/>` a record of its attributes, placed by its
    name; the slowest is the top of `time`. A document with few such elements is none."""
    times = [8.809, 6.035, 5.392, 2.769, 212.604, 9.119, 3.5]
    report = "\n".join([
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<testsuite name="QuoteControllerIT" time="254.506" tests="7" failures="0">',
        '  <properties>', '    <property name="java.version" value="17.0.11"/>',
        '  </properties>',
        *(f'  <testcase name="case{i}" classname="com.acme.QuoteControllerIT" time="{t}"/>'
          for i, t in enumerate(times)), "</testsuite>"])
    ((header, rows),) = tables(report)
    assert header == ["name", "classname", "time"] and len(rows) == 7
    top = {e.tag: e.probes for e in extremes(tables(report))}
    assert top[tag("max", {"time"})] == ('"case4"',)
    assert tables("\n".join(report.splitlines()[:7])) == []


def test_records_five_levels_down_are_a_table() -> None:
    """`kafka-log-dirs --describe`: the partitions of a log dir of a broker, five levels
    down; the largest is the top of `size`."""
    sizes = [412884127331, 61025370078, 8751473204, 31319370982, 8301633279, 64025779024]
    dirs = json.dumps({"version": 1, "brokers": [{"broker": 4, "logDirs": [
        {"logDir": "/data/d3/kafka", "error": None, "partitions": [
            {"partition": f"telemetry.gps-pings-v2-{i}", "size": n, "offsetLag": 0,
             "isFuture": False} for i, n in enumerate(sizes)]}]}]})
    top = {e.tag: e.probes for e in extremes(tables(dirs))}
    assert top[tag("max", {"size"})] == ('"telemetry.gps-pings-v2-0"',)


def test_a_title_line_split_like_the_table_is_not_its_header() -> None:
    """A device log opens with a title line whose fields split like its columns
    (`Device: …   Probe: …   Interval: 15 min   Range: 2.0-8.0 °C`); the header is the
    line of words right above the numbers, so "the highest reading" names `temp` (a
    reading is a temperature or a level: store/extremes.py)."""
    temps = [5.6, 5.9, 6.2, 8.4, 9.6, 7.1, 6.8, 6.5]
    log = "\n".join([
        "Device: FRIDGE-4W-01   Probe: glycol-buffered   Interval: 15 min   Range: 2.0-8.0 °C",
        "timestamp            temp     status   door",
        *(f"2024-10-08 0{k}:00    {t} °C  {'ALARM' if t > 8 else 'OK   '}    closed"
          for k, t in enumerate(temps))])
    ((header, rows),) = tables(log)
    assert header == ["timestamp", "temp", "status", "door"] and len(rows) == len(temps)
    idx = RelevanceIndex()
    idx.add("fridge", log)
    ask = "What was the highest reading the 4 West fridge hit overnight?"
    top = idx.search({**idx.query_terms(ask), **idx.notable_terms(ask)})[0]
    assert top.note == "max temp"  # the row of 9.6 °C: its column's top


def test_a_point_marked_unlike_the_rest_is_asked_for_as_the_odd_one() -> None:
    assert TAGS["odd"] in asked(
        "One point on the AHU-19 controller was marked out-of-service in the BACnet read - which?")


# an SPC export: each row its value and the control limits it is held to
SPC = "\n".join(["ts,lot,chamber,param,value,ucl,lcl,cl,rule", *(
    f"2024-06-14 0{i}:23:53,N9G381.{i},CVD01-PM4,CD_CONTACT_nm,{v},48.420,41.580,45.000,{r}"
    for i, (v, r) in enumerate([("46.178", ""), ("44.903", ""), ("49.165", "WE1"),
                                ("41.020", "WE1"), ("45.300", ""), ("48.990", "WE1"),
                                ("44.110", "")]))])


def test_the_first_and_last_rows_past_their_own_limits_are_over() -> None:
    """"The first upper-limit breach": 49.165 over its `ucl` of 48.420 is no outlier among
    values near 45, and no column's end (48.990 is over too, 41.020 under its `lcl`)."""
    lines = SPC.splitlines()
    over = [n for n in notable(SPC) if n.kind == "over"]
    assert over == [Notable("over", "value", (lines[3],)), Notable("over", "value", (lines[6],))]
    assert TAGS["over"] in asked("What timestamp was the first upper-limit breach on the "
                                 "CD_CONTACT_nm SPC export?")
    # two rows past their limits are both notable; no limit column, none
    two = "\n".join(lines[:5] + lines[7:])
    assert [n.probes for n in notable(two) if n.kind == "over"] == [(lines[3],), (lines[4],)]
    plain = "\n".join(",".join(ln.split(",")[:5]) for ln in lines)
    assert [n for n in notable(plain) if n.kind == "over"] == []


# a command history: some verifications late, one command rejected
COMMANDS = "\n".join(
    f"2024-06-17T{10 + i}:00:00Z  CTR={25000 + 37 * i}  {cmd:<20}  arg={i * 7}  by=ctl.ohassan"
    f"  {status}" for i, (cmd, status) in enumerate([
        ("SA_ROT_RATE", "VERIFIED"), ("CHN_SW_POS", "VERIFIED (late)"),
        ("HTR_BATT_1_ON", "VERIFIED"), ("BCN_PWR_SET", "VERIFIED (late)"),
        ("HTR_PROP_LINE_B_ON", "REJECTED (PRE-EXEC: param out of range)"),
        ("AOCS_WHL_UNLOAD", "VERIFIED"), ("TWTA_17V_ON", "VERIFIED (late)"),
        ("CMD_CTR_RESET", "VERIFIED"), ("CAMP_12V_GAIN_STEP", "VERIFIED"),
        ("HTR_BATT_1_OFF", "VERIFIED")]))


def test_the_one_status_whose_first_word_differs_is_odd_where_shapes_vary_more() -> None:
    """Three "VERIFIED (late)" among VERIFIED are too many odd shapes; by first word the
    REJECTED command is the one odd row."""
    rejected = next(ln for ln in COMMANDS.splitlines() if "REJECTED" in ln)
    assert notable(COMMANDS) == [Notable("odd", "", (rejected,))]
    assert TAGS["odd"] in asked("What was the only command the spacecraft rejected?")


# a propulsion telemetry export: one column per catalyst-bed heater, one of them cold
def heaters(cold: float) -> str:
    return "\n".join(["time_utc," + ",".join(f"PROP_CBH_{n}{s}_T" for n in (1, 2, 3, 4)
                                           for s in "AB") + ",PROP_TANK_OX_P", *(
        f"2024-06-17T00:{5 * i:02d}:00Z," + ",".join(
            f"{(cold if (n, s) == (3, 'A') else 120.9) + (i * 7 + n) % 5 * 0.7:.1f}"
            for n in (1, 2, 3, 4) for s in "AB") + f",{16.8 + i / 100:.2f}"
        for i in range(8))])


def test_the_column_that_reads_apart_from_its_siblings_is_odd() -> None:
    """"Which catalyst-bed heater reading was the odd one out": `PROP_CBH_3A_T` reads 70
    where its seven siblings read 120; no row stands out, and the tank pressure is no
    sibling."""
    assert Notable("odd", "PROP_CBH_3A_T", ("PROP_CBH_3A_T",)) in notable(heaters(70.6))
    assert TAGS["odd"] in asked("Which catalyst-bed heater reading was the odd one out?")
    even = heaters(121.3)  # all eight alike: none
    assert not [n for n in notable(even) if n.column.startswith("PROP_CBH")]


def test_what_is_still_waiting_asks_for_the_odd_row_the_empty_cell() -> None:
    """"Whose file was still waiting on their high school records": the one applicant
    whose transcript cell is empty where the others read "received <date>"."""
    rows = [f"CSU26-{100 + i},Applicant {i},Grant HS,Y,Y,received 2025-11-{i + 2:02d},paid"
            for i in range(7)]
    rows[3] = "CSU26-103,Anjali Ramaswamy-Ortiz,Bellarmine Prep,Y,Y,,paid"
    sheet = "\n".join(["app_ref,name,high_school,essay,rec,transcript,fee", *rows])
    assert Notable("odd", "transcript", (rows[3],)) in notable(sheet)
    assert TAGS["odd"] in asked("Whose file was still waiting on their high school records?")
    assert TAGS["odd"] in asked("Which orders are outstanding?")
    # what has been waiting the longest is a start's earliest date, no odd row; how long
    # someone waited is a duration
    assert TAGS["odd"] not in asked("Which ticket has been waiting the longest?")
    assert TAGS["odd"] not in asked("How long were ranked players waiting, at p95?")


def _deployments(webhooks: str) -> str:
    names = ["api", "worker", "tax", "fraud-hook", "receipts", "reserve", "quote", "promo",
             "webhooks", "validate", "writer", "gift-cards"]
    rows = [f"{'NAME':<22}{'READY':<8}{'IMAGES':<70}AGE"]
    rows += [f"checkout-{n:<13}{'11/11':<8}"
             f"{'ecr.aws/checkout-' + n + ':' + (webhooks if n == 'webhooks' else 'v4.18.2'):<70}"
             f"{40 + k}d" for k, n in enumerate(names)]
    return "\n".join(rows)


def test_the_one_image_left_on_another_tag_is_odd_though_every_name_differs() -> None:
    """Every image's name differs, so its cell has no common shape or value; its tag does
    (`v4.17.9` among `v4.18.2`). "Still on the older image" asks for the odd row."""
    found = notable(_deployments("v4.17.9"))
    assert [(n.kind, n.column) for n in found] == [("odd", "IMAGES")]
    assert "checkout-webhooks" in found[0].probes[0]
    assert TAGS["odd"] in asked("Which deployment was still on the older image?")
    assert notable(_deployments("v4.18.2")) == []


def test_a_version_cell_unlike_the_rest_is_odd_beside_a_row_odd_in_shape() -> None:
    """A daemon on 17.2.5 among 17.2.7s is odd by its cell as written, though the shape
    is the same; the daemon whose version is unknown is odd by shape; both count."""
    rows = [f"{'NAME':<16}{'STATUS':<10}VERSION"] + [
        f"osd.{k:<12}{'running':<10}{'17.2.5' if k == 3 else '<unknown>' if k == 7 else '17.2.7'}"
        for k in range(12)]
    odd = {n.probes[0].split()[0] for n in notable("\n".join(rows)) if n.column == "VERSION"}
    assert odd == {"osd.3", "osd.7"}


def test_a_row_odd_in_several_columns_counts_once_toward_the_cap() -> None:
    """At most `MAX_ROWS` rows of an output are notable: one row odd in four columns is
    one row, not four."""
    rows = [f"{'NAME':<10}{'HOST':<8}{'STATUS':<10}{'VERSION':<10}IMAGE"] + [
        f"d.{k:<8}{'h' + str(k % 3):<8}{'error' if k == 5 else 'running':<10}"
        f"{'16.0.1' if k == 5 else '17.2.7':<10}{'cc65af' if k == 5 else 'ff4519'}"
        for k in range(14)]
    rows[3] = rows[3].replace("ff4519", "aa0000")  # two more rows odd, in one column
    rows[9] = rows[9].replace("17.2.7", "17.2.6")
    found = notable("\n".join(rows))
    assert {n.probes[0].split()[0] for n in found} == {"d.2", "d.5", "d.8"}
    assert len(found) > 3  # d.5's row, odd in three columns
