"""A column's ends: "the most restarts", "the biggest damage charge" find the top or bottom
row of the column the question names; aligned tables with empty cells read by position."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import orjson
import pytest

from proxy.excerpt import focus
from store.extremes import (
    COUNT,
    asked_columns,
    column_terms,
    counted,
    day,
    ends,
    extremes,
    keyed,
    tag,
    unit_terms,
)
from store.fixedwidth import fixed_tables
from store.relevance import RelevanceIndex
from store.tabular import tables
from store.terms import terms
from store.timedlines import timed_lines

# `kubectl get pods -A` as printed: a restart count with a note, a long status widening
# its column, every value under its name
PODS = "\n".join([
    "NAMESPACE   NAME                         READY   STATUS             RESTARTS       AGE",
    *(f"checkout    api-{i}-7c9f5d                 1/1     Running            {i % 3}"
      f"              {i + 2}d" for i in range(8)),
    "analytics   dag-processor-2nwf-chlf2     0/1     CrashLoopBackOff   568 (4m ago)   6d",
    "analytics   scheduler-5d8c-x2kq          1/1     Running            41 (2h ago)    6d",
])
# a fixed-width report whose notes are blank for a clean unit: runs of two spaces give
# its rows fewer cells than its header
MOVE_OUTS = "\n".join([
    "unit  former_resident     move_out    deposit_held  damage_charges  damage_notes",
    " 306  Diego Thompson      2024-05-18     $1,000.00         $433.23  wall holes (x17)",
    " 408  Tomasz Ibrahim      2024-05-03     $1,000.00           $0.00",
    " 310  Valentina Duarte    2024-05-08     $1,200.00         $411.59  burn mark counter",
    " 711  Felix Thompson      2024-05-28     $1,500.00       $3,354.74  LVP replacement",
    " 312  Thandiwe Jovanovic  2024-05-03     $1,000.00           $0.00",
    " 404  Ivan Fong           2024-05-29     $1,500.00         $344.03  cracked sink",
])


def test_an_aligned_table_is_read_by_where_its_columns_are() -> None:
    ((header, rows),) = list(fixed_tables(MOVE_OUTS.splitlines()))
    assert header == ["unit", "former_resident", "move_out", "deposit_held",
                      "damage_charges", "damage_notes"]
    assert rows[1][1] == ["408", "Tomasz Ibrahim", "2024-05-03", "$1,000.00", "$0.00", ""]
    assert rows[3][1][4] == "$3,354.74" and rows[3][0] == (MOVE_OUTS.splitlines()[4].strip(),)
    assert [len(r) for _, r in tables(MOVE_OUTS)] == [6]  # with its header, not in pieces
    ((header, rows),) = list(fixed_tables(PODS.splitlines()))
    assert header[4] == "RESTARTS" and rows[8][1][3:5] == ["CrashLoopBackOff", "568 (4m ago)"]


def test_a_row_padded_unlike_the_rest_is_read_as_printed() -> None:
    """An RFI log whose closed items leave `days_open` blank, and one row printed with
    two spaces between its values instead of the columns' padding: read by position it
    would be cut mid-value; its runs of two spaces give one cell a column. The longest
    waiting is its `opened`; a pprof-style row whose runs do not match stays positional."""
    rows = [f"RFI-0{150 + k}  {'Exterior soffit framing':<30}  {'Coastline Structural':<22}  "
            f"2024-04-{10 + k}  2024-04-{17 + k}  {'Closed' if k % 2 else 'Open':<8}"
            + ("" if k % 2 else f"  {30 - k:>9}") for k in range(6)]
    odd = "RFI-0147  Sprinkler main routing  BR+A Engineers  2024-03-04  2024-03-11  Open  77"
    head = (f"RFI       {'subject':<30}  {'ball_in_court':<22}  opened      due         "
            "status    days_open")
    ((header, read),) = list(fixed_tables([head, *rows[:3], odd, *rows[3:]]))
    assert header == ["RFI", "subject", "ball_in_court", "opened", "due", "status",
                      "days_open"]
    assert read[3][1] == ["RFI-0147", "Sprinkler main routing", "BR+A Engineers",
                          "2024-03-04", "2024-03-11", "Open", "77"]
    assert read[1][1][2:] == ["Coastline Structural", "2024-04-11", "2024-04-18", "Closed", ""]
    found = extremes(tables("\n".join([head, *rows[:3], odd, *rows[3:]])))
    got = asked_columns("Which open question to the design team has been sitting "
                        "unanswered the longest?", {e.tag: column_terms(e.column) for e in found})
    assert got[tag("min", {"open"})] == 1.0
    assert {e.tag: e.probes[0] for e in found}[tag("min", {"open"})].startswith("RFI-0147")


def test_a_summary_under_an_aligned_table_is_no_row_and_joins_no_columns() -> None:
    """`ceph osd df` prints its rows right-aligned, then a TOTAL line and a MIN/MAX line
    that print across the columns' gaps: read into the columns' stretches, they joined
    them all and cut every value in two, so the fullest disk was not the `%USE` top."""
    use = [78.11, 66.49, 68.53, 84.37, 74.29, 64.71, 69.86]
    lines = ["ID  CLASS    WEIGHT  REWEIGHT      SIZE   RAW USE     AVAIL   %USE   VAR  PGS  "
             "STATUS",
             "---  -----  --------  --------  --------  --------  -------  -----  ----  ---  "
             "------",
             *(f"{i:>3}    hdd  14.55269   1.00000  14.6 TiB  {u * 0.146:>5.1f} TiB  "
               f"{14.6 - u * 0.146:>4.1f} TiB  {u:>5.2f}  {u / 71:.2f}  {90 + i:>3}  up"
               for i, u in enumerate(use)),
             "                       TOTAL  102 TiB   75.0 TiB  27.2 TiB  73.77",
             "MIN/MAX VAR: 0.87/1.19  STDDEV: 6.51"]
    ((header, rows),) = list(fixed_tables(lines))
    assert header == ["ID", "CLASS", "WEIGHT", "REWEIGHT", "SIZE", "RAW USE", "AVAIL", "%USE",
                      "VAR", "PGS", "STATUS"]
    assert len(rows) == len(use)  # the two summary lines are no rows
    assert rows[3][1][5:8] == ["12.3 TiB", "2.3 TiB", "84.37"]
    top = {e.tag: e.probes[0] for e in extremes(tables("\n".join(lines)))}
    assert top[tag("max", column_terms("%USE"))].startswith("3    hdd")


def test_a_header_that_stands_apart_from_its_columns_is_read_as_printed() -> None:
    """`sar -u` names no time column and right-aligns its names over the numbers: read
    by position, `%user` and `%nice` came out one cell. Where most rows print a cell for
    each column and their positions disagree, their runs of two spaces are read; a note
    column empty in most rows still comes out whole from the row that has it."""
    idle = [37.11, 64.91, 30.0, 54.79, 47.8, 28.83]
    lines = ["                CPU     %user     %nice   %system   %iowait    %steal     %idle",
             *(f"09:{10 + k:02d}:41     all    {16.6 + k:>5.2f}    0.00     4.01     3.55    "
               f"0.00    {v:>5.2f}" for k, v in enumerate(idle))]
    ((header, rows),) = list(fixed_tables(lines))
    assert header[1:] == ["CPU", "%user", "%nice", "%system", "%iowait", "%steal", "%idle"]
    assert rows[0][1] == ["09:10:41", "all", "16.60", "0.00", "4.01", "3.55", "0.00", "37.11"]
    top = {e.tag: e.probes[0] for e in extremes(tables("\n".join(lines)))}
    assert top[tag("max", column_terms("%idle"))].startswith("09:11:41")
    notes = ["date        action              by                   note",
             *(f"2024-11-{20 + k}  condition check     Bram Mbeki" for k in range(5)),
             "2024-11-26  moved to bay 4      Ada Okoro            frame cracked at joint"]
    ((_, rows),) = list(fixed_tables(notes))
    assert rows[-1][1][-1] == "frame cracked at joint" and rows[0][1][-1] == ""


def test_readings_that_name_themselves_are_columns() -> None:
    """A station log with no header (`avg 36 km/h  gust 57 km/h`), its names of uneven
    length leaving one space before `avg` on some lines: read at runs of two spaces it
    was short runs of rows, each under its first line as a header; "the strongest gust"
    named no column. Each line is now a row of its readings, `gust` a column."""
    stations = ["Lac 2160", "Crêtes 2480", "Pramouton 2550", "Summit 3020", "Mid 1840"]
    gusts = [57, 91, 70, 97, 72, 40, 64]
    lines = [f"05:{10 + k:02d} {stations[k % 5]:<15}avg {30 + k} km/h  gust {g} km/h  "
             f"dir {290 + k}°" for k, g in enumerate(gusts)]
    ((header, rows),) = tables("\n".join(lines))
    assert header == ["avg", "gust", "dir"]
    assert rows[2] == ((lines[2],), ["32 km/h", "70 km/h", "292°"])
    top = {e.tag: e.probes[0] for e in extremes(tables("\n".join(lines)))}
    got = asked_columns("What was the strongest gust in the wind log?",
                        {t: column_terms(t.split(":", 1)[1]) for t in top})
    assert got[tag("max", column_terms("gust"))] == 1.0
    assert top[tag("max", column_terms("gust"))] == lines[3]


@pytest.mark.parametrize("text", [
    "EDC query listing  |  study VRX-201  |  snapshot: 2024-05-20\n" + "a  b  c\n" * 3,
    "12   40   7\n" + "1   2   3\n" * 6,  # values, no header
    "name   role   team\nana    dev    web\n\nbo     ops    db\n",  # rows too few
])
def test_no_aligned_table_where_no_header_heads_five_rows(text: str) -> None:
    assert list(fixed_tables(text.splitlines())) == []


def test_a_superlative_names_an_end_and_most_or_top_alone_too() -> None:
    assert ends("Which pod had by far the most restarts?") == {"max"}
    assert ends("Which campaign got leads the cheapest?") == {"min"}
    assert ends("Which port was the slowest?") == {"max", "min"}
    assert ends("What was the latest deploy?") == {"max"}
    assert ends("What did the request say?") == frozenset()
    assert ends("Which file came out worst in the coverage table?") == {"max", "min"}


def test_a_date_counts_as_its_day_and_a_noted_count_as_its_number() -> None:
    assert day("568 (4m ago)") == 568 and day("$1,500.00") == 1500
    assert day("2024-05-28") == day("2024-05-27") + 1  # type: ignore[operator]
    assert day("2024-05-28T12:00") == day("2024-05-28") + 0.5  # type: ignore[operator]
    assert day("Running") is None and day("2024-13-01") is None
    assert day("4-07:12:00") == pytest.approx(4.3)  # slurm's days-hours:minutes:seconds
    assert day("13:19:00") == pytest.approx(13 / 24 + 19 / 1440)


def test_each_named_column_marks_its_top_and_bottom_row_unless_tied() -> None:
    got = {(e.tag, e.probes[0].split()[0]) for e in extremes(tables(MOVE_OUTS))}
    assert (tag("max", {"damag", "charg"}), "711") in got
    assert (tag("max", {"move"}), "404") in got  # the latest move-out
    assert not any(t == tag("min", {"damag", "charg"}) for t, _ in got)  # $0.00 twice
    assert (tag("min", {"deposit", "held"}), "306") not in got  # $1,000.00 three times
    restarts = {e.tag: e.probes[0] for e in extremes(tables(PODS))}
    assert "568 (4m ago)" in restarts[tag("max", {"restart"})]


def test_a_question_asks_for_the_columns_it_names_by_the_words_both_hold() -> None:
    """Weighted by the terms both hold over the root of the column's count: "money per
    conversion" is `Cost / conv.` (money a cost, the slash "per", `conv` abbreviating
    conversion: 3 of 3) before `Conversions` (1 of 1); "the cheapest per lead" is `Cost
    per Lead` before `Leads`; "the big one" asks for the top of an amount."""
    names = ("damage_charges", "deposit_held", "Cost / conv.", "Conversions", "RESTARTS",
             "Cost per Lead", "Leads", "amount")
    columns = {tag(end, column_terms(c)): column_terms(c) for c in names
               for end in ("max", "min")}
    got = asked_columns("What was the single biggest damage charge in May?", columns)
    assert got == {tag("max", {"damag", "charg"}): pytest.approx(2 ** 0.5),
                   tag("max", {"amount"}): 1.0}  # the biggest: an amount, a size
    got = asked_columns("Which campaign burned the most money per conversion?", columns)
    assert max(got, key=got.__getitem__) == tag("max", {"cost", "per", "conv"})
    assert got[tag("max", {"cost", "per", "conv"})] == pytest.approx(3 ** 0.5)
    assert got[tag("max", {"convers"})] == 1.0
    got = asked_columns("Which campaign got us leads the cheapest?", columns)
    assert max(got, key=got.__getitem__) == tag("min", {"cost", "per", "lead"})
    got = asked_columns("In that AP batch, which invoice was the big one?", columns)
    assert max(got, key=got.__getitem__) == tag("max", {"amount"})
    assert asked_columns("Which pod restarted?", columns) == {}  # no end named
    assert asked_columns("a big deal", columns) == {}  # no end: "big" alone is no "biggest"


def test_a_question_naming_a_column_and_an_end_finds_that_row() -> None:
    """"By far the most restarts": no word of the question but "restarts" is in the pod's
    row, which the header holds, not the row; the column's top row counts its tag, so
    its passage comes first, and a question naming no end scores as before."""
    idx = RelevanceIndex()
    idx.add("pods", PODS)
    idx.add("notes", "Restarts of the checkout pods are expected during the rollout.")
    ask = "Which pod had by far the most restarts?"
    plain = idx.search(idx.query_terms(ask))
    tags = idx.notable_terms(ask)
    assert tags == {tag("max", {"restart"}): pytest.approx(idx._idf(tag("max", {"restart"})))}
    top = idx.search({**idx.query_terms(ask), **tags})[0]
    assert "dag-processor-2nwf-chlf2" in top.text and top.note == "max RESTARTS"
    assert "dag-processor" not in plain[0].text
    assert idx.notable_terms("Which pod restarted?") == {}


# `rc-quota`: a header of eight names over rows of seven cells (no note), two of them
# holding a single space ("88.20 TiB")
QUOTAS = "\n".join([
    "$ rc-quota --fs project --all --sort name",
    "PATH                       USED        QUOTA         PCT      FILES  NOTE",
    *(f"{p:<27}{u:<12}{q:<12}{c:>5}{f:>11}" for p, u, q, c, f in [
        *((f"/project/lab_{i:02d}", f"{10 + i}.20 TiB", "100.00 TiB", f"{10 + i}.2%",
           f"{3 + i},356,218") for i in range(6)),
        ("/project/rosales_genomics", "49.70 TiB", "50.00 TiB", "99.4%", "6,533,943")]),
])
# psql's output: cells between " | ", a "---+---" rule under the header
BASKETS = "\n".join([
    " store_id |  store_name        | txns   | avg_basket | units_per_txn",
    "----------+--------------------+--------+------------+--------------",
    *(f"      {101 + i} | Store {i:<12} | {11 + i},385 |      {60 + i}.20 |          3.53"
      for i in range(6)),
    "      115 | Fairhaven Crossing | 19,881 |      41.87 |          2.27",
])


def test_headers_abbreviations_psql_and_rows_wider_than_their_cells_are_read() -> None:
    """`avg_basket` is an average and `PCT` a percent (their columns' terms hold what
    they abbreviate); psql's tables and an aligned listing whose header has a column no
    row fills keep their headers, so their columns' ends are found."""
    assert column_terms("avg_basket") >= {"avg", "basket", "averag"}
    assert column_terms("LEVEL_%") >= {"level", "percent"}
    (header, rows), = tables(QUOTAS)
    assert header is not None and header[:4] == ["PATH", "USED", "QUOTA", "PCT"]
    top = {e.tag: e.probes[0] for e in extremes(tables(QUOTAS))}
    assert "rosales_genomics" in top[tag("max", column_terms("PCT"))]
    (header, rows), = tables(BASKETS)
    assert header is not None and header[3] == "avg_basket" and len(rows) == 7
    low = {e.tag: e.probes[0] for e in extremes(tables(BASKETS))}
    assert "Fairhaven" in low[tag("min", column_terms("avg_basket"))]


def test_warmth_and_room_name_their_columns() -> None:
    """"The warmest delivery" asks for a temperature's top, "closest to running out of
    space" for a usage percentage's."""
    columns = {tag(end, column_terms(c)): column_terms(c)
               for c in ("PRODUCT TEMP", "PCT", "FILES") for end in ("max", "min")}
    got = asked_columns("Which delivery arrived the warmest of all?", columns)
    assert set(got) == {tag("max", column_terms("PRODUCT TEMP"))}  # the top only
    got = asked_columns("Which freezer ran the coldest?", columns)
    assert set(got) == {tag("min", column_terms("PRODUCT TEMP"))}
    got = asked_columns("Which group was closest to running out of space?", columns)
    assert tag("max", column_terms("PCT")) in got
    assert not any("file" in t for t in got)


def test_the_biggest_order_is_the_most_units() -> None:
    """An order queue's size is its `units` (or a quantity): "which order was the
    biggest" asks for that column's top, not the latest `received`."""
    columns = {tag(end, column_terms(c)): column_terms(c)
               for c in ("units", "received", "qty") for end in ("max", "min")}
    got = asked_columns("Which order in the queue was the biggest?", columns)
    assert set(got) == {tag("max", column_terms("units")), tag("max", column_terms("qty"))}


def test_a_columns_unit_says_what_it_holds_when_its_header_does_not() -> None:
    """`top_oil` in °C is a temperature: "the hottest" asks for its top as it would for
    `temp`'s; the unit's words count beside the header's, not in its share, so a
    question naming the header scores as before. Bare numbers carry no unit."""
    rows = [(f"S{i}  T{i}  {a}  {t} °C", [f"S{i}", f"T{i}", str(a), f"{t} °C"])
            for i, (a, t) in enumerate([(324, 78.4), (844, 79.4), (531, 104.6),
                                        (456, 85.8), (496, 92.1), (248, 64.7)])]
    found = extremes([(["station", "xfmr", "amps", "top_oil"], [((line,), c)
                                                               for line, c in rows])])
    top = next(e for e in found if e.tag == tag("max", column_terms("top_oil")))
    assert top.probes == ("S2  T2  531  104.6 °C",) and top.units == frozenset({"temperatur"})
    assert next(e for e in found if e.column == "amps").units == frozenset()
    columns = {e.tag: column_terms(e.column) for e in found}
    units = {e.tag: e.units for e in found if e.units}
    got = asked_columns("Which transformer was running hottest, and how hot was it?",
                        columns, units)
    assert set(got) == {top.tag}
    assert asked_columns("Which transformer was running hottest?", columns) == {}
    assert unit_terms(["$1,250.00", "$75.10", "$3.00"]) == frozenset(terms("cost price amount"))
    assert unit_terms(["32 %", "41 %", "12"]) == frozenset()  # 2 of 3: under 70 %
    assert unit_terms(["320 ms", "41 ms", "12 ms"]) == frozenset()  # a header says which time


def test_a_recalled_passage_too_long_for_its_room_shows_the_row_asked_for() -> None:
    """The passage holding the column's top row is found by its tag, and when only a few
    of its lines fit, the row is among them: its values share no word with "the most
    restarts", so by words alone the lines kept were others."""
    idx = RelevanceIndex()
    idx.add("pods", PODS)
    ask = "Which pod had by far the most restarts?"
    top = idx.search({**idx.query_terms(ask), **idx.notable_terms(ask)})[0]
    assert top.rows == (next(e.probes for e in extremes(tables(PODS))
                             if e.tag == tag("max", {"restart"})),)
    qterms = set(idx.query_terms(ask))

    def count(text: str) -> int:
        return len(text) // 4

    shown = focus(top.text, qterms, 40, count, top.rows)
    assert "dag-processor-2nwf-chlf2" in shown
    assert "dag-processor" not in focus(top.text, qterms, 40, count)


COVERAGE = "\n".join([
    "Name                     Stmts  Miss  Cover   Missing",
    "---------------------------------------------------------",
    "app/api/admin.py           247    47    81%   10-17, 28",
    "app/api/auth.py            229    58    75%   12, 29-33",
    "app/legacy/csv_export.py   131    88    33%   9-61, 70-140",
    "app/cli.py                 164    31    81%   39, 51-57",
    "app/orders.py               74     6    92%   12-16, 24",
])


def test_a_short_headers_column_is_named_by_a_longer_word() -> None:
    """`Cover` stems to `cov`, under the four letters a prefix match needs; its column
    keeps the header's word, so "worst in the coverage table" (and "cover") names it."""
    assert column_terms("Cover") == {"cover"}
    columns = {e.tag: column_terms(e.column) for e in extremes(tables(COVERAGE))}
    got = asked_columns("Which source file came out worst in the coverage table?", columns)
    assert set(got) == {tag("max", {"cover"}), tag("min", {"cover"})}
    assert tag("min", {"cover"}) in asked_columns("lowest cover of all?", columns)
    low = {e.tag: e.probes[0] for e in extremes(tables(COVERAGE))}
    assert "csv_export" in low[tag("min", {"cover"})]


# a crew roster: report times of day (HH:MM), its columns abbreviated
ROSTER = "\n".join([
    "CREW_ID  NAME                RNK   BASE  PAIRING  RPT_UTC  FDP_END  MAX_FDP  SECT",
    *(f"{40000 + 97 * i}    Crew Member {i:<7} CC    OSL   O{300 + i}A    {6 + i % 9:02d}:"
      f"{(i * 25) % 60:02d}    {17 + i % 6:02d}:30    11:30    {2 + i % 3}" for i in range(12)),
    "64033    Pernille Ravnsborg  CPT   OSL   O221A    03:50    16:20    12:30    4",
    "55657    Jesper Falk         CPT   OSL   O260D    05:25    15:55    10:30    2",
])


def test_a_time_of_day_counts_and_an_abbreviated_header_is_named_by_its_word() -> None:
    """"The earliest report time" is the roster's `RPT_UTC` (rpt: report) at its lowest:
    a time of day (`03:50`) counts as its fraction of a day, as a duration does."""
    assert day("03:50") == pytest.approx((3 * 60 + 50) / 1440)
    assert day("36:45") == pytest.approx(36.75 / 24)  # hours past a day: a duration
    assert "report" in column_terms("RPT_UTC")
    columns = {e.tag: column_terms(e.column) for e in extremes(tables(ROSTER))}
    got = asked_columns("Who on the Oslo roster had the earliest report time?", columns)
    best = max(got, key=lambda t: got[t])
    assert best == tag("min", column_terms("RPT_UTC"))
    low = {e.tag: e.probes[0] for e in extremes(tables(ROSTER))}
    assert "Pernille Ravnsborg" in low[best]


# a controller's schedule: run times in hours and minutes, one of them in minutes alone
SCHEDULE = "\n".join([
    "VALVE  ZONE  BLOCK     START  RUN       DAYS         GPM",
    "V-12   Z-12  Block 4B  22:45  4h 00m    Mon/Wed/Fri  398",
    "V-14   Z-14  Block 6C  20:45  2h 30m    Tue/Thu/Sat  124",
    "V-21   Z-21  Block 2A  05:10  45m       Daily        210",
    "V-40   Z-39  Block 7D  04:00  3h 00m    Every 2d     399",
    "V-41   Z-41  Block 6C  20:30  7h 45m    Tue/Thu/Sat  188",
    "V-43   Z-43  Block 1A  06:00  90m       Daily        156",
])


def test_a_duration_in_units_counts_as_its_length_whatever_its_units() -> None:
    """`7h 45m` is longer than `90m` and `4h 00m`; `4.71s` than `12ms`: one column may
    print its durations in several units (a schedule, `pprof -list`)."""
    assert day("7h 45m") == pytest.approx(7.75 / 24) and day("45m") == pytest.approx(45 / 1440)
    lengths = [day(c) or 0.0 for c in ("4.71s", "850ms", "12ms")]
    assert lengths == sorted(lengths, reverse=True) and lengths[-1] > 0
    assert day("1d 4h") == pytest.approx(28 / 24)
    got = {e.tag: e.probes[0].split()[1] for e in extremes(tables(SCHEDULE))}
    assert got[tag("max", {"run"})] == "Z-41" and got[tag("min", {"run"})] == "Z-21"


# a helpdesk's ticket list: the one open since February is the one waiting longest
TICKETS = "\n".join([
    "ticket     opened      status   prio  subject",
    "---------  ----------  -------  ----  ------------------------------",
    *(f"SUP-{31000 + i}  2024-05-{10 + i:02d}  open     P3    Webhook retries flooding us"
      for i in range(6)),
    "SUP-30918  2024-02-27  open     P3    Need DPA countersigned",
    "SUP-31877  2024-05-30  closed   P1    Invoice shows seats we removed",
])


def test_waiting_the_longest_is_the_earliest_start_and_ran_the_longest_a_duration() -> None:
    """How long a thing has been waiting or open is the distance to its start: "waiting
    the longest" asks for the earliest `opened` and "open the shortest" for the latest;
    without a word of waiting, "longest" still asks for a duration's top."""
    columns = {tag(end, column_terms(c)): column_terms(c) for c in ("opened", "duration")
               for end in ("max", "min")}
    ask = "Of their tickets that are still unresolved, which one has been waiting the longest?"
    assert asked_columns(ask, columns) == {tag("min", {"open"}): 1.0,
                                           tag("max", {"durat"}): 1.0}
    assert tag("max", {"open"}) in asked_columns(
        "Which ticket has been open the shortest?", columns)
    assert asked_columns("Which job ran the longest?", columns) == {
        tag("max", {"durat"}): 1.0}
    idx = RelevanceIndex()
    idx.add("tickets", TICKETS)
    tags = idx.notable_terms(ask)
    top = idx.search({**idx.query_terms(ask), **tags})[0]
    assert "SUP-30918" in top.text and top.note == "min opened"


def test_a_column_is_named_by_what_a_tool_prints_for_the_questions_word() -> None:
    """"Worth the most per year" names `annual_value` by the trade's words (store/idioms.py:
    a year's is annual, worth a value), over `monthly_charge`, whose "month" is only
    near "year" in plain English."""
    names = ("annual_value", "monthly_charge", "tenure_months")
    columns = {tag(end, column_terms(c)): column_terms(c) for c in names
               for end in ("max", "min")}
    got = asked_columns("Which of the churned customers was worth the most per year?",
                        columns)
    assert got == {tag("max", {"annual", "valu"}): pytest.approx(2 ** 0.5)}


def test_a_count_three_levels_down_under_a_numbered_key_is_a_column() -> None:
    """An API's per-endpoint report nests its status codes (`status.4xx.429`): the 429s
    are a column, named by the number its key is, and "rate-limited the hardest" (the
    trade's word for a 429) asks for its top row."""
    endpoints = [{"path": f"/v2/{name}", "requests": 10_000 * (k + 3),
                  "status": {"2xx": 9_000 * (k + 3),
                             "4xx": {"400": 100 + k, "404": 400 - 9 * k,
                                     "429": 1750 if name == "records:batchUpsert" else 40 + k},
                             "5xx": 2 + k}, "p95_ms": 80 + 40 * k}
                 for k, name in enumerate(("records", "files", "records:batchUpsert",
                                           "audit", "webhooks", "users"))]
    text = json.dumps({"account_id": "acc_Q4x81L", "endpoints": endpoints}, indent=2)
    found = {e.tag: e for e in extremes(tables(text))}
    top = found[tag("max", {"429", "statu", "xx"})]
    assert top.column == "status.4xx.429" and top.probes == ('"/v2/records:batchUpsert"',)
    columns = {t: column_terms(e.column) for t, e in found.items()}
    got = asked_columns("Which API route was getting rate-limited the hardest yesterday?",
                        columns)
    assert set(got) == {tag("max", {"429", "statu", "xx"}), tag("min", {"429", "statu", "xx"})}
    assert column_terms("revenue.2024") == {"revenu", "2024"} and column_terms("1.5") == set()


def test_the_driest_is_a_humidity_and_the_closest_a_distance() -> None:
    """"The driest reading" names `rh_pct` (relative humidity), "sitting closest" names
    `MI_TO_ICP` (miles): neither header holds the question's words."""
    names = ("temp_f", "rh_pct", "gust_mph", "SPEED_MPH", "MI_TO_ICP", "HDG")
    columns = {tag(end, column_terms(c)): column_terms(c) for c in names
               for end in ("max", "min")}
    dry = asked_columns("Which of the weather stations had the driest reading today?",
                        columns)
    assert set(dry) == {tag("max", column_terms("rh_pct")), tag("min", column_terms("rh_pct"))}
    near = asked_columns("Which tender was sitting closest to the command post?", columns)
    assert set(near) == {tag(e, column_terms("MI_TO_ICP")) for e in ("max", "min")}


def test_a_headerless_log_of_key_value_readings_names_its_columns_by_their_keys() -> None:
    """`TOC=382.5 ppb  COND=0.56 uS/cm` lines have no header: each column is named by the
    key its cells open with, so "the highest TOC" finds its row; "the most connecting
    bags" names `transfer_pcs` by the trade's words (a connecting bag is a transfer)."""
    lines = [f"2024-08-1{k // 4} {k:02d}:10  LOOP-WFI-2  POU-4.0{k % 3}  "
             f"TOC={(382.5 if k == 5 else 100 + 7 * k):.1f} ppb   COND=0.{40 + k} uS/cm"
             for k in range(8)]
    ((header, rows),) = tables("\n".join(lines))
    assert header is None and keyed(rows) == ["", "", "", "TOC", "COND"]
    found = {e.tag: e for e in extremes(tables("\n".join(lines)))}
    assert found[tag("max", {"toc"})].probes == (lines[5],)
    assert tag("max", {"toc"}) in asked_columns("What was the highest TOC we saw?",
                                                {t: column_terms(e.column)
                                                 for t, e in found.items()})
    columns = {tag("max", column_terms(c)): column_terms(c)
               for c in ("pieces", "weight_kg", "transfer_pcs")}
    got = asked_columns("On the Frankfurt load, which can had the most connecting bags?",
                        columns)
    assert max(got, key=got.__getitem__) == tag("max", column_terms("transfer_pcs"))


# a dbt run as its log prints it: START lines without a time, each model's OK line with
# how long it took in its prose, and the run's total on a summary line
MODELS = [("stg_orders", 4.12), ("stg_refunds", 0.84), ("int_fx_rates", 61.5),
          ("fct_ledger_daily", 812.44), ("fct_invoices", 127.3), ("rpt_churn", 9.07)]
DBT_LOG = "\n".join([
    "10:02:11  Running with dbt=1.7.11",
    *(line for k, (name, secs) in enumerate(MODELS, 1) for line in (
        f"10:{k + 2:02d}:00  {k} of 6 START sql table model analytics.{name} ...... [RUN]",
        f"10:{k + 2:02d}:30  {k} of 6 OK created sql table model analytics.{name} ...... "
        f"[SUCCESS {k * 1000} in {secs}s]")),
    "10:19:57  Finished running 6 models in 0 hours 17 minutes and 46.01 seconds (1066.01s).",
    "10:19:57  Completed successfully",
])


def test_a_logs_lines_that_say_how_long_each_took_are_a_column_of_times() -> None:
    """A log that says in its prose how long each thing took (`[SUCCESS 4000 in
    812.44s]`) is a column of times: "the slowest model" finds its line, not the run's
    total on the summary line (two durations, or `Finished`), and no line without a
    time; an uptime stamp (`[86145.812s]`) is no duration."""
    found = {e.tag: e for e in timed_lines(DBT_LOG)}
    assert {e.column for e in found.values()} == {"duration time"}
    slow = found[tag("max", {"durat", "time"})]
    assert "fct_ledger_daily" in slow.probes[0] and "812.44s" in slow.probes[0]
    assert "stg_refunds" in found[tag("min", {"durat", "time"})].probes[0]
    gc = "\n".join(f"[2024-09-26T02:19:{k:02d}.431+0000][{86100 + k}.812s][info][gc] GC({k}) "
                   f"Pause Young (Normal) 3071M->2954M(3072M) {k * k + 3}.065ms"
                   for k in range(6))
    gc_ends = {e.tag: e.probes[0] for e in timed_lines(gc)}  # the pauses, not the stamps
    assert gc_ends[tag("max", {"durat", "time"})].endswith("28.065ms")
    assert gc_ends[tag("min", {"durat", "time"})].endswith("3.065ms")
    assert timed_lines("\n".join(DBT_LOG.splitlines()[:8])) == []  # three timed lines
    idx = RelevanceIndex()
    idx.add("dbt-run", DBT_LOG)
    ask = "How long did the slowest model take in last night's run?"
    tags = idx.notable_terms(ask)
    assert set(tags) == {tag("max", {"durat", "time"})}
    top = idx.search({**idx.query_terms(ask), **tags})[0]
    assert "812.44s" in top.text and top.note == "max duration time"


def test_on_a_column_of_times_the_slowest_is_its_top_and_the_fastest_its_bottom() -> None:
    """"The slowest", "the worst" of a duration or a latency is its highest; "the
    fastest", "the best" its lowest. Elsewhere the column still tells neither: "the worst
    coverage" asks for both ends."""
    names = ("latency_ms", "duration", "branch_coverage")
    columns = {tag(end, column_terms(c)): column_terms(c) for c in names
               for end in ("max", "min")}
    assert set(asked_columns("Which endpoint had the worst latency?", columns)) == {
        tag("max", {"latency", "ms"})}
    assert set(asked_columns("Which build had the fastest duration?", columns)) == {
        tag("min", {"durat"}), tag("min", {"latency", "ms"})}  # "fastest": a time's word
    assert set(asked_columns("Which file had the worst branch coverage?", columns)) == {
        tag(end, column_terms("branch_coverage")) for end in ("max", "min")}
    # "how long did the worst take": a duration, though no word names the column
    assert set(asked_columns("How long did the single worst test take in that report?",
                             columns)) == {tag("max", {"durat"})}


# a certificate inventory as YAML: a list of records, one field per line
CERTS = "certificates:\n" + "".join(
    f"- cn: {cn}.shopfront.example\n  sans: [{cn}.shopfront.example, www.shopfront.example]\n"
    f"  serial: \"{serial}\"\n  not_after: {until}\n  deployed_pops: {pops}\n"
    for cn, serial, until, pops in [
        ("auth", "8C:1A:C9:1F:42:14:35:AC", "2025-10-05", 8),
        ("video", "54:13:D1:22:42:4A:6D:4A", "2024-12-10", 17),
        ("m", "29:D2:1C:62:D8:75:A4:85", "2024-10-19", 8),
        ("video", "AC:73:38:98:74:A2:2E:0A", "2025-03-31", 4),
        ("img", "77:45:33:0A:2D:EE:23:AB", "2026-01-02", 12)])


def test_a_yaml_list_of_records_is_a_table_told_apart_by_a_field_as_printed() -> None:
    [(header, rows)] = tables(CERTS)
    assert header == ["cn", "sans", "serial", "not_after", "deployed_pops"]
    assert rows[2] == (('serial: "29:D2:1C:62:D8:75:A4:85"',), [
        "m.shopfront.example", "[m.shopfront.example, www.shopfront.example]",
        "29:D2:1C:62:D8:75:A4:85", "2024-10-19", "8"])  # two `video`s: cn tells none apart
    assert tables("steps:\n- name: build\n  run: make\n- name: test\n  run: make test\n") == []
    unique_sans = CERTS.replace("[video.shopfront.example, www", "[video.shopfront.example, v2", 1)
    assert tables(unique_sans)[0][1][2][0] == ('serial: "29:D2:1C:62:D8:75:A4:85"',)  # no list


def test_what_expires_first_is_the_earliest_end_of_a_validity_column() -> None:
    assert column_terms("not_after") == frozenset(terms("expires expiry expiration"))
    assert column_terms("valid_until") >= frozenset(terms("expiry"))
    assert ends("Which certificate in the inventory expires first?") == {"min"}
    assert ends("the serial of the cert that is closest to expiry") == {"min"}  # not both
    assert ends("which licence expires last?") == {"max"}
    assert ends("the first alarm after the trip") == frozenset()  # no expiry: no end
    low = next(e for e in extremes(tables(CERTS)) if e.tag.startswith("~min:expir"))
    assert low.probes == ('serial: "29:D2:1C:62:D8:75:A4:85"',)
    idx = RelevanceIndex()
    idx.add("certs", CERTS)
    idx.add("notes", "Serial numbers of the edge certificates are in the vault.")
    ask = "Which certificate in the inventory expires first? Give me its serial."
    top = idx.search({**idx.query_terms(ask), **idx.notable_terms(ask)})[0]
    assert top.chunk_id == "certs" and "29:D2:1C:62:D8:75:A4:85" in top.text
    assert top.note == "min not_after"


def test_a_columns_two_letter_name_is_matched_by_the_initials_of_two_words() -> None:
    ask = "In yesterday's interval table, what service level did the worst half-hour get?"
    columns = {tag(end, column_terms("sl_pct")): column_terms("sl_pct") for end in ("max", "min")}
    columns[tag("min", column_terms("abandon_pct"))] = column_terms("abandon_pct")
    assert set(asked_columns(ask, columns)) == {tag("max", column_terms("sl_pct")),
                                                 tag("min", column_terms("sl_pct"))}
    assert asked_columns("what was the worst interval?", columns) == {}


def test_a_column_named_by_three_letters_is_matched_when_its_first_word_goes_unsaid() -> None:
    """"the highest organic carbon reading" of a log keyed `TOC=… TEMP=…`: the unsaid
    "total" leaves "organic carbon", which `TOC` ends in; and the words say which
    measurement, so "reading" does not fall back on the temperature."""
    log = "\n".join(f"2024-08-14 {h:02d}:08  LOOP-WFI-2  TOC={t} ppb   TEMP={c}C"
                     for h, t, c in ((8, 225.2, 82.3), (12, 207.7, 82.8), (14, 382.5, 80.9),
                                     (16, 135.0, 83.9), (18, 150.1, 81.0), (20, 98.4, 82.0)))
    columns = {e.tag: column_terms(e.column) for e in extremes(tables(log))}
    ask = "what was the highest organic carbon reading we saw on the water loop that week?"
    assert set(asked_columns(ask, columns)) == {tag("max", {"toc"})}
    temp = tag("max", column_terms("TEMP"))  # its unit's word counts: temperature
    assert set(asked_columns("what was the highest reading?", columns)) == {temp}
    # a three-letter term among others is no name of its own: "eval report" is not `per`
    per = {tag("max", column_terms("loss_per_train")): column_terms("loss_per_train")}
    assert asked_columns("the top checkpoint in the eval report?", per) == {}


def test_a_title_line_over_a_header_of_more_names_is_no_header() -> None:
    report = "\n".join([
        "EXPIRY REPORT  window=90d  run=2024-10-14 06:00",
        "CABINET    ITEM                           LOT      EXPIRES     DAYS_LEFT",
        *(f"2S-ED-{c}    ketorolac 30 mg/mL inj         P3K48{i:02d}  2024-12-{i + 4:02d}  {51 + i}"
          for i, c in enumerate("ABCDEF")),
    ])
    [(header, rows)] = list(fixed_tables(report.splitlines()))
    assert header == ["CABINET", "ITEM", "LOT", "EXPIRES", "DAYS_LEFT"] and len(rows) == 6


def test_a_header_abbreviated_by_its_consonants_and_a_count_of_calls_are_named() -> None:
    sites = json.dumps({"sites": [{"site": s, "thk_A": 4550.0 + s, "gof": 0.98}
                                  for s in range(1, 7)] + [
        {"site": "S26-edge", "thk_A": 4687.9, "gof": 0.99}]})
    thickness = {e.tag: column_terms(e.column) for e in extremes(tables(sites))}
    assert tag("max", {"thk"}) in asked_columns(
        "What was the maximum oxide thickness across the measured sites?", thickness)
    assert asked_columns("What was the maximum you think we hit?", thickness) == {}
    assert asked_columns("which percentage was highest?",  # `pct` counts once, as percent
                         {tag("max", column_terms("sl_pct")): column_terms("sl_pct")}) == {
        tag("max", column_terms("sl_pct")): pytest.approx(1 / 3 ** 0.5)}
    calls = {tag(e, column_terms("calls")): column_terms("calls") for e in ("max", "min")}
    assert tag("max", column_terms("calls")) in asked_columns(
        "In the gprof flat profile, which function was invoked the most times?", calls)


# contact tracing: one exposure setting fills the most rows
CONTACTS = "\n".join([
    "contact_id  source_case  exposure_setting            contact_type  age",
    *(f"CT-{9000 + i}     MSL-24-{i:04d}  {setting:<26}  {kind:<12}  {20 + i}"
      for i, (setting, kind) in enumerate([
          ("Brackley Junior High gym", "household"), ("St. Brigid ED waiting area", "work"),
          ("Riverside church hall", "household"), ("St. Brigid ED waiting area", "school"),
          ("Brackley Junior High gym", "work"), ("St. Brigid ED waiting area", "school"),
          ("St. Brigid ED waiting area", "visitor")])),
])


def test_the_commonest_value_of_a_text_column_is_its_top_when_a_question_counts() -> None:
    found = {e.tag: e for e in extremes(tables(CONTACTS))}
    top = found[tag("top", column_terms("exposure_setting"))]
    assert top.probes[0].startswith("CT-9001") and top.column == "exposure_setting"
    assert tag("top", column_terms("contact_type")) not in found  # two of three kinds tie
    columns = {t: column_terms(e.column) for t, e in found.items()}
    asked = asked_columns("Which exposure setting generated the most contacts?", columns)
    assert max(asked, key=asked.__getitem__) == tag("top", column_terms("exposure_setting"))
    # "the worst" names the column it wants, not one it counts
    assert asked_columns("Which exposure setting had the worst outcome?", columns) == {}
    assert tag("top", column_terms("contact_id")) not in found  # every value once


def test_lagging_is_a_latency_and_el_an_elevation() -> None:
    queues = {tag("max", column_terms("LATENCY")): column_terms("LATENCY"),
              tag("max", column_terms("max_el")): column_terms("max_el")}
    assert set(asked_columns("When you looked at Sidekiq, which queue was lagging the most?",
                             queues)) == {tag("max", column_terms("LATENCY"))}
    assert set(asked_columns("Which of today's passes has the highest peak elevation?",
                             queues)) == {tag("max", column_terms("max_el"))}


# telemetry frames: one line a frame, its readings as key=value pairs a space apart
FRAMES = "\n".join(
    f"FRAME AURORA-2B t=2024-06-12T02:{40 + i}:32Z seq={190453 + i} mode=NOMINAL "
    f"BUS_V={v} BATT_T={16.0 + i / 10:.1f} note=\"pass {i}\""
    for i, v in enumerate(["28.18", "27.91", "26.27", "28.02", "27.75", "28.30"]))


def test_lines_of_key_value_pairs_are_a_table_told_apart_by_a_pair_as_printed() -> None:
    [(header, rows)] = tables(FRAMES)
    assert header == ["t", "seq", "mode", "BUS_V", "BATT_T", "note"]
    assert rows[2] == (("t=2024-06-12T02:42:32Z",), [
        "2024-06-12T02:42:32Z", "190455", "NOMINAL", "26.27", "16.2", "pass 2"])
    low = next(e for e in extremes(tables(FRAMES)) if e.tag == tag("min", {"bus"}))
    assert low.probes == ("t=2024-06-12T02:42:32Z",)
    assert asked_columns("What was the lowest bus voltage in the telemetry frames?",
                         {low.tag: column_terms(low.column)}) == {low.tag: 1.0}
    # a table split alike keeps its own reading; prose with a few pairs is no table
    assert tables("\n".join(f"run {i}: ok retries=0 took=1s" for i in range(3))) == []


def test_key_value_lines_among_other_lines_are_a_table_when_there_are_many() -> None:
    """Ecto's debug log: a `QUERY OK source=… db=…ms` line between the SQL it ran and the
    call site, a third of the lines. Twenty such records or more are a table among the
    rest; "the database time on the slowest query" is `db`'s top."""
    dbs = [4.5, 3.6, 1.5, 312.4, *(2.0 + k / 10 for k in range(20))]
    lines = []
    for k, db in enumerate(dbs):
        lines += [f'[debug] QUERY OK source="invoices" db={db:.1f}ms decode=1.{k % 9}ms '
                  f"queue=0.{k % 7}ms idle={100 + k}.0ms",
                  f'SELECT i0."id", i0."number" FROM "invoices" AS i0 WHERE (i0."id" = ${k})',
                  f"↳ Ledgerline.Receivables.list/1, at: lib/ledgerline/receivables.ex:{40 + k}"]
    [(header, rows)] = tables("\n".join(lines))
    assert header == ["source", "db", "decode", "queue", "idle"] and len(rows) == len(dbs)
    top = next(e for e in extremes(tables("\n".join(lines))) if e.tag.startswith("~max:")
               and e.column == "db")
    assert top.probes == ("idle=103.0ms",)  # the 312.4 ms query's line
    assert top.tag in asked_columns("In that captured server log, what was the database "
                                    "time on the single slowest query?",
                                    {top.tag: column_terms(top.column)})
    assert tables("\n".join(lines[:30])) == []  # ten records among twenty lines: no table


def test_a_metrics_querys_samples_are_rows_and_its_peak_a_values_end() -> None:
    """Prometheus's `query_range` answer keeps each series' samples in a list of
    `[time, "value"]` pairs that no column read: each sample is a row now, under its
    series' labels, and "the single highest value in that metrics query" its top."""
    def value(d: int, k: int) -> str:
        return f"{1873.0 if (d, k) == (33, 4) else 20 + k:.3f}"

    series = [{"metric": {"__name__": "ceph_osd_apply_latency_ms", "ceph_daemon": f"osd.{d}"},
               "values": [[1716249600 + 300 * k, value(d, k)] for k in range(6)]}
              for d in (47, 33, 12)]
    text = orjson.dumps({"status": "success", "data": {"resultType": "matrix",
                                                      "result": series}}).decode()
    [(header, rows)] = tables(text)
    assert header == ["metric.__name__", "metric.ceph_daemon", "time", "values"]
    assert len(rows) == 18
    assert rows[10] == (('"1873.000"',), ["ceph_osd_apply_latency_ms", "osd.33",
                                          1716250800, "1873.000"])
    top = next(e for e in extremes(tables(text)) if e.tag.startswith("~max:"))
    assert top.column == "values" and top.probes == ('"1873.000"',)
    assert top.tag in asked_columns("What was the single highest apply-latency value in "
                                    "that metrics query?", {top.tag: column_terms(top.column)})


# rubocop's offense counts: a count beside each cop, no header, a total under a rule
OFFENSES = "\n".join([
    "379  Rails/RedundantPresenceValidationOnBelongsTo [Unsafe Correctable]",
    "339  Style/SafeNavigation [Unsafe Correctable]", "333  Style/ComparableClamp",
    "313  Metrics/AbcSize", "142  Style/HashSyntax", "5    Lint/MissingSuper", "--",
    "1511  Total in 563 files"])


def test_a_count_beside_each_name_is_a_count_column_and_its_total_no_row() -> None:
    found = {e.tag: e for e in extremes(tables(OFFENSES))}
    top = found[tag("max", column_terms(COUNT))]
    assert top.probes == ("379  Rails/RedundantPresenceValidationOnBelongsTo "
                          "[Unsafe Correctable]",)
    assert found[tag("min", column_terms(COUNT))].probes == ("5    Lint/MissingSuper",)
    columns = {t: column_terms(e.column) for t, e in found.items()}
    assert set(asked_columns("Which cop produced the largest number of offenses?",
                             columns)) == {top.tag}
    assert counted([(("a b c",), ["a", "b", "c"])]) is None  # three cells: no count list


# rspec's summary under a failure's backtrace: the failed examples, one line each
FAILED = "\n".join([
    "  1) Timesheet POST /api/v2/timesheets returns 422",
    "     # ./spec/requests/timesheets_spec.rb:166:in `block (3 levels)'",
    "", "Finished in 6 minutes 5.60 seconds (files took 5.59 seconds to load)",
    "2273 examples, 7 failures", "", "Failed examples:", "",
    "rspec ./spec/requests/timesheets_spec.rb:166 # Timesheet POST returns 422",
    "rspec ./spec/policies/usage_policy_spec.rb:185 # UsageRecord #to_pdf balances",
    "rspec ./spec/requests/timesheets_spec.rb:62 # Coupon POST sends one email",
    "rspec ./spec/mailers/timesheet_mailer_spec.rb:35 # Timesheet renders the totals",
    "rspec ./spec/requests/timesheets_spec.rb:207 # Account .for_period is idempotent",
    "rspec ./spec/models/plan_spec.rb:120 # Plan POST is idempotent",
    "rspec ./spec/requests/timesheets_spec.rb:213 # LineItem renders the totals"])


def test_the_file_most_lines_name_is_the_top_of_a_column_no_line_prints() -> None:
    """"Which spec file accounted for the most failures": rspec's failed examples counted
    by file, its first line (not the backtrace's frame of the same file) holding it."""
    *_, (header, rows) = tables(FAILED)
    assert header == ["file"] and len(rows) == 7  # the frame and the prose are no rows
    assert rows[0] == (("rspec ./spec/requests/timesheets_spec.rb:166",),
                       ["spec/requests/timesheets_spec.rb"])
    top = next(e for e in extremes(tables(FAILED)) if e.tag == tag("top", {"file"}))
    assert top.probes == ("rspec ./spec/requests/timesheets_spec.rb:166",)
    assert set(asked_columns("Which spec file accounted for the most failures in that run?",
                             {top.tag: column_terms(top.column)})) == {top.tag}
    # grep -n's matches name their files too; a word with a dot in prose names none
    grep = "\n".join(f"app/{f}.rb:{i}:  def total" for i, f in enumerate("abcbdb"))
    assert Counter(cells[0] for _, cells in tables(grep)[-1][1])["app/b.rb"] == 3
    assert tables("\n".join(f"Note.{i} the config.yaml said so" for i in range(8))) == []


# a corrections log: when each story ran and when it was fixed
CORRECTIONS = "\n".join([
    "ID       PUBLISHED         CORRECTED         DESK      ERROR_TYPE",
    "-------  ----------------  ----------------  --------  -------------------",
    *(f"CX-{n}  {p}  {c}  metro     wrong date" for n, p, c in [
        ("2235", "2024-07-31 06:00", "2024-08-04 22:00"),
        ("2207", "2024-08-01 04:00", "2024-08-04 08:00"),
        ("2291", "2024-03-02 09:00", "2024-03-12 10:00"),
        ("2224", "2024-08-07 22:00", "2024-08-10 01:00"),
        ("2085", "2024-08-22 06:00", "2024-08-22 22:00"),
        ("2199", "2024-04-10 09:00", "2024-04-12 15:00")])])


def test_how_long_each_row_took_between_two_dates_is_a_column_of_its_own() -> None:
    """"Which correction took the longest between publication and the fix": CX-2291 ran
    ten days uncorrected, and neither of its dates is an end of its own column."""
    found = {e.tag: e for e in extremes(tables(CORRECTIONS))}
    name = "PUBLISHED to CORRECTED duration"
    longest = found[tag("max", column_terms(name))]
    assert longest.column == name and longest.probes[0].startswith("CX-2291")
    assert found[tag("min", column_terms(name))].probes[0].startswith("CX-2085")
    assert found[tag("max", column_terms("CORRECTED"))].probes[0].startswith("CX-2085")
    columns = {t: column_terms(e.column) for t, e in found.items()}
    asked = asked_columns("Which correction took the longest between publication and the "
                          "fix?", columns)
    assert max(asked, key=asked.__getitem__) == longest.tag
    # dates the second of which mostly comes first make no such column
    head, rule, *rows = CORRECTIONS.splitlines()
    swapped = "\n".join([head, rule, *(f"{r[:7]}  {r[27:43]}  {r[9:25]}{r[43:]}" for r in rows)])
    assert swapped.splitlines()[4].startswith("CX-2291  2024-03-12 10:00  2024-03-02 09:00")
    assert not [e for e in extremes(tables(swapped)) if "duration" in e.column]


def test_a_column_is_asked_for_by_an_end_in_its_own_sentence() -> None:
    """"Which device was shared across the most accounts? Draft the reason paragraph.":
    "most" asks for the top of `accounts`, not the commonest `reason`, which only the
    next sentence names."""
    devices = "\n".join(["device,accounts,reason", *(
        f"dfp_{i:03d},{n},{r}" for i, (n, r) in enumerate(
            [(3, "mule"), (8, "mule"), (2, "takeover"), (4, "mule"), (1, "scam"),
             (2, "mule")]))])
    idx = RelevanceIndex()
    idx.add("devices", devices)
    asked = idx.notable_terms("Which device fingerprint was shared across the most "
                              "accounts? Draft the SAR reason-for-suspicion paragraph.")
    assert set(asked) == {tag("max", column_terms("accounts"))}
    both = idx.notable_terms("Which reason is the most common, and which device has the "
                             "most accounts?")
    assert set(both) == {tag("max", column_terms("accounts")),
                         tag("top", column_terms("reason"))}


# `bundle outdated`: each gem's installed and newest versions
OUTDATED = "\n".join(["Gem                       Current  Latest   Requested  Groups", *(
    f"{g:<26}{c:<9}{n:<9}{'':<11}default" for g, c, n in [
        ("actioncable", "6.1.7.6", "7.1.3.2"), ("byebug", "1.6.4", "1.9.2"),
        ("carrierwave", "10.0.3", "15.0.2"), ("childprocess", "4.4.11", "5.6.0"),
        ("connection_pool", "4.7.3", "4.14.1"), ("crass", "4.18.9", "5.0.4")])])


def test_how_far_one_version_column_is_behind_another_is_a_column_of_its_own() -> None:
    """"Which gem was the most major versions behind": carrierwave, five majors between
    10.0.3 and 15.0.2, though neither is an end of its own column."""
    found = {e.tag: e for e in extremes(tables(OUTDATED))}
    name = "Current to Latest versions behind"
    behind = found[tag("max", column_terms(name))]
    assert behind.column == name and behind.probes[0].startswith("carrierwave")
    asked = asked_columns("In the outdated-gems list, which gem was the most major versions "
                          "behind?", {t: column_terms(e.column) for t, e in found.items()})
    assert max(asked, key=asked.__getitem__) == behind.tag
    # prices are no versions
    prices = "\n".join(["item,cost,price", *(f"i{k},{k}.50,{k + 3}.25" for k in range(8))])
    assert not [e for e in extremes(tables(prices)) if "versions" in e.column]


def test_records_told_apart_by_a_whole_number_place_their_ends_by_key_and_number() -> None:
    """A metrology export's sites are numbered (`"site": 12`), one named (`"S26-edge"`):
    the thickest is placed on the passage that prints its site, `"site": 1,` not taken
    for `"site": 12,`."""
    sites: list[dict[str, Any]] = [{"site": i, "x_mm": 3.0 * i, "thk_A": 4550.0 + i}
                                   for i in range(1, 15)]
    sites[12] = {"site": "S26-edge", "x_mm": 71.7, "thk_A": 4687.9}
    sites[0]["thk_A"] = 4401.2
    text = json.dumps({"tool": "MET04", "sites": sites}, indent=1)
    found = {e.tag: e for e in extremes(tables(text))}
    assert found[tag("max", {"thk"})].probes == ('"S26-edge"',)
    assert found[tag("min", {"thk"})].probes == ('"site": 1,',)
    assert '"site": 1,' not in text.replace('"site": 1,\n', "")  # no other site holds it


def test_the_slowest_request_of_a_rails_log_brings_the_line_that_names_its_endpoint() -> None:
    """`Completed 200 OK in 20004ms (Views: … | ActiveRecord: …)` is the slowest line: its
    own time first, its parts in brackets. Its `Started GET "/api/…"` line, tagged with
    the same request id, is where the endpoint is: the first passage holding the id."""
    ids = [f"{i:08x}-dd54-4e40-967f-021c98609d1e" for i in range(7)]
    paths = ["/api/v2/invoices", "/webhooks/stripe", "/api/v2/invoices/bulk_export",
             "/settings/billing", "/reports/revenue", "/health", "/api/v2/customers"]
    took = [98, 134, 20004, 110, 742, 3, 501]
    log = "\n".join(
        f"I, [2024-03-11T23:02:{i:02d}.976000 #9027]  INFO -- : [{rid}] {msg}"
        for i, (rid, path, ms) in enumerate(zip(ids, paths, took, strict=True))
        for msg in (f'Started GET "{path}" for 10.20.3.14', "Processing by Api#index as JSON",
                    f"Completed 200 OK in {ms}ms (Views: {ms / 9:.1f}ms | ActiveRecord: "
                    f"{ms / 11:.1f}ms | Allocations: 110324)"))
    found = [e for e in timed_lines(log) if e.tag == tag("max", column_terms("duration time"))]
    assert found[0].probes[0].endswith("Completed 200 OK in 20004ms")
    assert found[1].probes == (f"[{ids[2]}]",)
    # a run's summary is no row, nor a line of two times side by side
    runs = "\n".join([*(f"{s}.0{i}s call     tests/test_a.py::test_{i}" for i, s in
                        enumerate([3, 23, 1, 2, 5, 4])), "38 passed in 61.02s (0:01:01)"])
    top = next(e for e in timed_lines(runs) if e.tag == tag("max", column_terms("duration time")))
    assert top.probes == ("23.01s call     tests/test_a.py::test_1",)


def test_what_has_already_lapsed_is_the_earliest_end_of_a_validity_column() -> None:
    """"Who on the personnel list has a survival certificate that's already lapsed?":
    the earliest `BOSIET exp`; "had already run out" the earliest `coi_expires`."""
    crew = "\n".join(["Bed  Name             BOSIET exp  Medical exp", *(
        f"{i:03d}  {n:<15}  {b}  {m}" for i, (n, b, m) in enumerate([
            ("Sakura Docherty", "2025-12-04", "2026-07-14"),
            ("Kwame Okafor", "2027-06-25", "2026-08-30"),
            ("Jonas Feld", "2024-11-03", "2025-07-24"),
            ("Noor Kerr", "2028-07-08", "2025-12-13"),
            ("Elif Volkov", "2025-05-02", "2025-06-11"),
            ("Fiona de Vries", "2025-11-13", "2026-05-06")]))])
    found = {e.tag: e for e in extremes(tables(crew))}
    lapsed = found[tag("min", column_terms("BOSIET exp"))]
    assert "Jonas Feld" in lapsed.probes[0]
    columns = {t: column_terms(e.column) for t, e in found.items()}
    asked = asked_columns("Who on the personnel list has a survival certificate that's "
                          "already lapsed?", columns)
    assert lapsed.tag in asked and not any(t.startswith("~max") for t in asked)
    assert asked_columns("Which vendor's insurance had already run out?",
                         {tag("min", column_terms("coi_expires")):
                          column_terms("coi_expires")})
    assert "min" in ends("whose cert has expired") and ends("who is on the list") == set()
