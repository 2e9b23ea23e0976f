"""A question put to a relevance index as the request path puts it (proxy/step.py)."""

from __future__ import annotations

from proxy.step import Related, Step, related_of, search
from store.related import RelatedWords, related_words
from store.relevance import Hit, RelevanceIndex


def ask(index: RelevanceIndex, question: str, words: RelatedWords | None = None,
        min_similarity: float = 0.35) -> tuple[Related, list[Hit]]:
    """The question's related words (the shipped table's, or `words`) and its hits; the
    question is in the index as chunk "q", as the current step's own message."""
    index.add("q", question)
    step = Step(question, "", frozenset({"q"}), asks=True)
    related = related_of(step, related_words() if words is None else words, min_similarity)
    return related, search(index, step, related)


def without_idioms() -> RelatedWords:
    """The shipped table without the trade's words and the places' codes."""
    return RelatedWords(related_words().table, idioms={})
