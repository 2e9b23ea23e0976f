"""A question that asks for a quantity prefers the passages that state one.

"How many people took part in that survey?" shares one word with its answer's passage
("The survey was fielded online among 6,098 adults …") and the same word with every
passage that only talks about the survey ("Survey respondents in Lyon were more
positive …"); BM25 cannot tell them apart, and the talk outnumbers the fact. What tells
them apart is what the question asks for: a number. So when a question asks how many,
how much, or for a number, size, total, amount, price or cost, a passage where one of
its matched words sits within three lines of a number that only this passage (or one
other) holds has its score and strength multiplied by `1 + BOOST` when recall chooses
(`proxy/recall.py: select`): the passage that states a value beside the question's
words, not the one that repeats them. The others keep their place: the bar they must
clear ("within `min_relative` of the best") stays the best unboosted score, and RWOE's
similarity term is BM25's alone.

A question that asks when ("when does the state need our answer?") prefers, the same
way, a passage where a date written out ("October 17, 2025"; not a log line's ISO stamp,
which every line of a log holds) sits within three lines of its words (`dated_passages`).

Rare, because a number every passage repeats (a year, "14 business days") is
formatting, not an answer. A value is three digits or more ("6,098"), or an amount of
money or a magnitude whatever its digits ("$4.2 million", "€12.5m"). Only for
questions (`Step.asks`): other steps are not looking for a value. Measured in
docs/design-notes.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from proxy.analysis import rare_tokens
from store.relevance import Hit, RelevanceIndex
from store.terms import WORD, text_terms

QUANTITY = re.compile(r"\bhow (?:many|much|large|big|long|often|old|far)\b|"
                      r"\b(?:number|size|count|total|amount|percent(?:age)?|price|cost)s?\b",
                      re.I)
# A question about the asker's own words ("what ceiling did I give you for lodging?",
# "which host did I tell you to leave alone?"): its answer is in a user message.
OWN_WORDS = re.compile(
    r"\b(?:did|do|have|had)\s+I\s+(?:\w+\s+){0,2}?(?:say|tell|give|ask|mention|want|set|"
    r"specify|request|note|write|share|send|pick|choose|prefer|put)\b|"
    r"\bI\s+(?:\w+\s+)?(?:said|told|gave|asked|mentioned|wanted|specified|requested|"
    r"noted|wrote|shared|sent|picked|chose|preferred)\b|"
    r"\bmy\s+(?:own\s+)?(?:instructions?|rules?|limits?|constraints?|requests?|"
    r"preferences?)\b", re.I)
# A question that asks when ("when does the state need our answer", "by what date"):
# its answer is a date, and a notice or a letter writes one out ("October 17, 2025").
WHEN = re.compile(r"\bwhen\b|\bwhat (?:date|day)\b|\bdeadline\b|\bdue (?:date|by)\b",
                  re.I)
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
# a date written out (not a log's ISO stamps, which every line of a log holds)
WRITTEN_DATE = re.compile(rf"\b{_MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}\b|"
                          rf"\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTH}\.?,? \d{{4}}\b|"
                          rf"\b\d{{1,2}}-{_MONTH}-\d{{4}}\b", re.I)
BOOST = 2.0  # the score of a passage stating a rare value beside the question's words
TOP = 64  # the best matches looked at: the answer is among them or not found this way
NEAR = 3  # lines between a matched word and the value: a record's fields
MIN_DIGITS = 3  # "6,098" holds "098"; "14" or "3" is a count any passage may repeat
MAX_DF = 2  # in at most this many passages: the value is this passage's own
ECHO_FROM = 3  # the best matches whose agent's messages name the values looked up
ECHO_MAX_DF = 2  # ... each in at most this many evicted passages among the matches


def asks_quantity(words: str) -> bool:
    return QUANTITY.search(words) is not None


def asks_when(words: str) -> bool:
    return WHEN.search(words) is not None


def dated_passages(hits: list[Hit], qterms: set[str]) -> frozenset[tuple[str, int]]:
    """The passages among the first `TOP` of `hits` where a date written out (`WRITTEN_DATE`)
    sits within `NEAR` lines of one of `qterms`: a question that asks when prefers them,
    as a question that asks how many prefers a stated value (`stated_passages`)."""
    return frozenset((h.chunk_id, h.piece) for h in hits[:TOP]
                     if h.strength < 1.0 and WRITTEN_DATE.search(h.text)
                     and _near(h.text, qterms, lambda ln: WRITTEN_DATE.search(ln) is not None))


def asks_own_words(words: str) -> bool:
    return OWN_WORDS.search(words) is not None


def users_passages(hits: list[Hit], role_of: Callable[[str], str | None]
                   ) -> frozenset[tuple[str, int]]:
    """The passages among the first `TOP` of `hits` that the user wrote, for a question
    about the asker's own words (`asks_own_words`): recall's selection boosts them as it
    does a stated value, so the user's "The hotel total must stay under 1,080.48 USD"
    goes before the hotel listings that share its one word with the question."""
    return frozenset((h.chunk_id, h.piece) for h in hits[:TOP]
                     if h.strength < 1.0 and role_of(h.chunk_id) == "user")


def echoed_passages(hits: list[Hit], role_of: Callable[[str], str | None],
                    evicted: set[str], question: str) -> frozenset[tuple[str, int]]:
    """The evicted passages among the first `TOP` of `hits` that hold a rare value
    (`proxy.analysis.rare_tokens`: an id, a time, a path) which one of the agent's
    messages among the first `ECHO_FROM` hits names and the question does not, in at
    most `ECHO_MAX_DF` of them. The agent says what it found in its words and the value
    ("A payments-api deploy finished at 14:02, three minutes before the errors
    started"); a question asks in like words ("the deploy that landed right before the
    errors began") and the record holding that value holds the answer (the deploy's
    row: who shipped it). Recall's selection boosts them as it does a stated value."""
    said = [h for h in hits[:ECHO_FROM] if role_of(h.chunk_id) == "assistant"]
    values = set().union(*(rare_tokens(h.text) for h in said)) - rare_tokens(question)
    if not values:
        return frozenset()
    holders: dict[str, list[tuple[str, int]]] = {}
    for h in hits[:TOP]:
        if h.chunk_id in evicted and role_of(h.chunk_id) != "assistant":
            for v in values:
                if v in h.text:
                    holders.setdefault(v, []).append((h.chunk_id, h.piece))
    return frozenset(k for ks in holders.values() if len(ks) <= ECHO_MAX_DF for k in ks)


def stated_passages(index: RelevanceIndex, hits: list[Hit], qterms: set[str]
           ) -> frozenset[tuple[str, int]]:
    """The passages among the first `TOP` of `hits` (best first) that state a rare value
    near one of `qterms`, as (chunk id, piece): recall's selection boosts them."""
    return frozenset((h.chunk_id, h.piece) for h in hits[:TOP]
                     if h.strength < 1.0 and states_value(index, h.text, qterms))


def states_value(index: RelevanceIndex, text: str, qterms: set[str]) -> bool:
    """A line of `text` holds a rare value (`MIN_DIGITS`, `MAX_DF`) and a line at most
    `NEAR` away from it holds one of `qterms`. Values are looked for first: most
    passages hold none, and a line's terms cost more than its digits."""
    return _near(text, qterms, lambda ln: _rare_number(index, ln) or _rare_amount(index, ln))


def _near(text: str, qterms: set[str], holds: Callable[[str], bool]) -> bool:
    """A line of `text` `holds` what is asked for, and a line at most `NEAR` away from it
    holds one of `qterms` (the line itself is looked at first: most lines hold none)."""
    lines = text.splitlines()
    for j, ln in enumerate(lines):
        if holds(ln) and any(not qterms.isdisjoint(text_terms(lines[i]))
                             for i in range(max(0, j - NEAR), min(len(lines), j + NEAR + 1))):
            return True
    return False


def _rare_number(index: RelevanceIndex, line: str) -> bool:
    return len(_DIGIT.findall(line)) >= MIN_DIGITS and any(
        sum(c.isdigit() for c in tok) >= MIN_DIGITS
        and 0 < index.df(tok.lower()) <= MAX_DF for tok in WORD.findall(line))


def _rare_amount(index: RelevanceIndex, line: str) -> bool:
    """An amount of money or a magnitude, whatever its digits ("$4.2 million", "€12.5m",
    "3.1 billion"), that at most `MAX_DF` passages hold."""
    return any(0 < index.df((m.group(1) or m.group(2)).lower()) <= MAX_DF
               for m in _AMOUNT.finditer(line))


_DIGIT = re.compile(r"[0-9]")
_AMOUNT = re.compile(r"[$€£¥]\s?(\d[\d,]*(?:\.\d+)?[a-z]*)|"
                     r"\b(\d[\d,]*(?:\.\d+)?)\s?(?:million|billion|trillion|thousand)\b",
                     re.I)
