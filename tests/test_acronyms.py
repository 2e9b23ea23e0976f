"""A question's spelled-out names find the initials a tool printed (store/acronyms.py)."""

from __future__ import annotations

from proxy.recall import ChunkMeta, select
from proxy.step import CLIPPED_WEIGHT, Step, clipped, related_of, search
from store.acronyms import WEIGHT, initials
from store.related import RelatedWords, related_words
from store.relevance import RelevanceIndex


def test_initials_of_a_run_of_words_with_and_without_its_stop_words() -> None:
    got = initials("which ground power unit packed up during the storm?")
    assert got["gpu"] == "ground power unit"
    assert got["gpup"] == "ground power unit packed"  # a longer run: found only if printed
    assert initials("what was our mean time to recovery last quarter")["mttr"] == (
        "mean time to recovery")
    assert initials("the vehicle identification number on that pickup")["vin"] == (
        "vehicle identification number")
    assert initials("the bill of lading for that box")["bol"] == "bill of lading"
    # two words are too few, a run never starts or ends on a stop word
    assert "pr" not in initials("which pull request fixed it")
    assert "sct" not in initials("when the storm came through")  # "through" is a stop word
    # initials that are a word of their own are not taken for a name
    assert "won" not in initials("which work order number", known={"won"})
    assert "won" in initials("which work order number")


def index_of(texts: dict[str, str]) -> RelevanceIndex:
    index = RelevanceIndex()
    for cid, text in texts.items():
        index.add(cid, text)
    return index


INVENTORY = "\n".join(
    f"  - id: GPU-M{n}\n    status: {'U/S' if n == 117 else 'OK'}" for n in range(114, 120))
# what else the shift looked at: bag scans, stand plans, a weather report
SHIFT = {f"scan-{i}": f"LS11{i:02d},02209{i:05d},BULK,LOADED,stand {i}" for i in range(12)}


def test_a_question_finds_the_record_its_initials_name_and_recall_says_why() -> None:
    index = index_of({
        **SHIFT,
        "inventory": INVENTORY,
        "weather": "Thunderstorm over the field from 18:10; lightning within 5 km.",
        "chat": "Ground crew report all stands clear after the storm.",
        "q": "Which ground power unit packed up during the storm?"})
    question = Step(index.text("q"), "", frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert related["gpu"] == ("ground power unit", WEIGHT)
    found = {h.chunk_id for h in search(index, question, related)}
    assert "inventory" in found
    assert "inventory" not in {h.chunk_id for h in search(index, question)}  # without it
    hits = search(index, question, related)
    meta = {c: ChunkMeta(1, "tool", "transient") for c in ("inventory", "weather", "chat")}
    chosen = select(hits, {"inventory", "weather", "chat"}, meta, query=question.words,
                    min_relevance=0.1, min_relative=0.0, top_k=8, budget=4000,
                    count=lambda t: len(t) // 4, related=related)
    why = {r.hit.chunk_id: r.why for r in chosen}
    assert "gpu (~ground power unit)" in why["inventory"]


def test_initials_a_session_never_printed_add_nothing_and_off_means_off() -> None:
    index = index_of({"log": "Deploy finished; 3 pods restarted on node-7.",
                      "q": "Which ground power unit packed up?"})
    question = Step(index.text("q"), "", frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert "gpu" in related and "gpu" not in index.related_terms(related, {})
    assert related_of(question, RelatedWords({}), 0.95) == {}  # above their cosine
    assert related_of(question, related_words(), 1.0) == {}


# an alarm journal prints a chilled-water pump's point as `CHWP-2`; a colleague says
# "the CHW pump"
JOURNAL = "\n".join([
    "2024-07-28 14:12:36  P4  LAB.AHU-05.SF-FAIL  offnormal  ack: Bogdan",
    "2024-07-28 14:27:26  P2  CUP.CHWP-2.STS  CHWP-2 FAILED - run command active",
    "2024-07-28 14:29:49  P3  ONC.AHU-31.SAT-HI  supply air temp high 61.6F",
])


def test_an_abbreviation_in_capitals_and_the_next_words_initial_name_a_point() -> None:
    got = initials("What was the next alarm after the CHW pump failure in the journal?")
    assert got["chwp"] == "chw pump"
    assert "chwa" not in got and "chwt" not in got  # "after", "the": no name's word
    assert "chwp" not in initials("what was the next alarm after the chw pump failure")
    index = index_of({"journal": JOURNAL,
                      "plant": "Chiller plant: CH-1 running, CHW supply 44.1F.",
                      "q": "What was the next alarm after the CHW pump failure?"})
    question = Step(index.text("q"), "", frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert related["chwp"] == ("chw pump", WEIGHT)
    assert "chwp" in index.related_terms(related, {})
    without = {k: v for k, v in related.items() if k != "chwp"}

    def journal(rel: dict[str, tuple[str, float]]) -> float:
        return next(h.score for h in search(index, question, rel) if h.chunk_id == "journal")
    assert journal(related) > journal(without)  # the point's name counts for it


def test_a_long_word_finds_its_clipping_and_a_clipping_that_is_a_word_is_left_alone() -> None:
    """"The one communications-failure alarm": the journal prints `RTU COMMS FAIL`.
    A word's first four to six letters stand for it where they are no word of their own
    ("perf", "config"); "portion" is too short to clip, "port" of "portfolio" a word."""
    table = related_words().table
    assert clipped("communications", table) == ["comm", "commu", "commun"]
    assert "config" in clipped("configuration", table)
    assert "part" not in clipped("particularly", table)  # a word of its own
    assert "pass" not in clipped("passengers", table)
    assert clipped("reported", table) == []  # too short a word to be clipped
    pumps = "\n".join(f"06/12 0{i}:48:05  HI    PS-07 KINGSRIDGE  P3 FAIL TO START"
                      for i in range(6))
    index = index_of({"pumps": pumps, "rtu": "06/12 02:48:05  HI  RTU-OAKVALE-PRV3  RTU COMMS "
                                            "FAIL (NO POLL RESPONSE 3x)",
                      "q": "There was one communications failure; which site was it?"})
    question = Step(index.text("q"), "", frozenset({"q"}), asks=True)
    related = related_of(question, related_words(), 0.35)
    assert related["comm"] == ("communications", CLIPPED_WEIGHT)
    assert search(index, question, related)[0].chunk_id == "rtu"
    unclipped = {w: r for w, r in related.items() if r[1] != CLIPPED_WEIGHT}
    assert search(index, question, unclipped)[0].chunk_id == "pumps"  # without them
