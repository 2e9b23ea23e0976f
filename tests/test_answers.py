"""A question asking for a quantity prefers the passage that states one (proxy/answers.py)."""

from __future__ import annotations

from dataclasses import replace

from proxy.answers import BOOST, asks_quantity, stated
from store.relevance import RelevanceIndex

# Research notes as an agent reads them: the survey is talked about again and again,
# its size is stated once; years and "14 percent" recur, so they are not an answer.
TALK = [
    "Survey respondents in Lyon were more positive about urban cycling than the national "
    "average. Survey methods differ by up to 14 percent depending on the panel.",
    "A Pew Research survey found that urban cycling rose steadily between 2010 and 2018, "
    "mostly in urban areas; the survey was repeated in 2018.",
    "Critics of the survey argue the figures overstate the trend because of how the "
    "survey samples; estimates differ by up to 14 percent.",
    "Survey respondents in Gdansk said the same; the 2018 survey wave was the largest.",
]
STATES = ("Policy support, not price, was the main driver.\n"
          "The survey was fielded online among 6,098 adults in fourteen countries.\n"
          "Adoption varies widely between regions.")


def ranked(question: str) -> list[str]:
    idx = RelevanceIndex()
    for i, text in enumerate([*TALK, STATES]):
        idx.add(f"c{i}", text)
    own = idx.query_terms(question)
    hits = idx.search(own)
    if asks_quantity(question):  # as recall's selection counts them (proxy/recall.py)
        keys = stated(idx, hits, set(own))
        hits = sorted((replace(h, score=h.score * (1 + BOOST)) if (h.chunk_id, h.piece) in keys
                       else h for h in hits), key=lambda h: -h.score)
    return [h.chunk_id for h in hits]


def test_a_how_many_question_prefers_the_passage_stating_a_number() -> None:
    before = RelevanceIndex()
    for i, text in enumerate([*TALK, STATES]):
        before.add(f"c{i}", text)
    plain = [h.chunk_id for h in before.search("How many people took part in that survey?")]
    assert plain[0] != "c4"  # BM25 alone: the talk outnumbers the fact
    assert ranked("How many people took part in that survey?")[0] == "c4"
    assert ranked("How big was that survey?")[0] == "c4"


def test_only_a_question_for_a_quantity_is_reranked() -> None:
    for q in ("How many people took part?", "What was the total?", "how much did it cost",
              "What's the ticket number?", "How large was the group?"):
        assert asks_quantity(q), q
    for q in ("Which survey was that?", "Who led the study?", "Where does it run?"):
        assert not asks_quantity(q), q
    assert ranked("Which survey was that?")[0] != "c4"  # no reordering


def test_a_value_every_passage_repeats_is_not_an_answer() -> None:
    """2018 and 14 recur across the talk: a passage holding only those is not boosted."""
    idx = RelevanceIndex()
    for i, text in enumerate(TALK):
        idx.add(f"c{i}", text)
    own = idx.query_terms("How many people answered the survey in 2018?")
    assert stated(idx, idx.search(own), set(own)) == frozenset()


def test_the_boost_reorders_recall_without_raising_the_bar_for_the_others() -> None:
    """A stated passage ranks first, and one that clears `min_relative` of the best
    unboosted score still comes back: the bar is not raised by the boost (when it was,
    a paced question's passage found by its words and its vector fell under it)."""
    from proxy.recall import ChunkMeta, select
    from store.relevance import Hit

    talk = Hit("talk", 0, "Survey respondents in Lyon were more positive.", 3.0, 0.20)
    fact = Hit("fact", 0, "The survey was fielded among 6,098 adults.", 4.0, 0.25)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("talk", "fact")}

    def chosen(keys: frozenset[tuple[str, int]]) -> list[tuple[str, float]]:
        got = select([fact, talk], {"talk", "fact"}, meta, query="How many took the survey?",
                     min_relevance=0.10, min_relative=0.5, top_k=8, budget=1000,
                     count=lambda t: len(t) // 4, stated=keys)
        return [(r.hit.chunk_id, round(r.hit.strength, 6)) for r in got]

    # 3.0 clears half the best unboosted score (4.0), not half the boosted one (12.0)
    assert chosen(frozenset({("fact", 0)})) == [("fact", 0.25 * (1 + BOOST)), ("talk", 0.2)]
    assert chosen(frozenset()) == [("fact", 0.25), ("talk", 0.2)]
