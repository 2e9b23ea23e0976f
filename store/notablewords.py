"""The words a question uses to ask for a notable row (store/notable.py): each kind's
(`WORDS`), the tag each kind's rows count in the lexical index (`TAGS`, a term no text
yields), and the tags a question's words name (`asked`), superlatives among them
(`superlative`).
"""

from __future__ import annotations

import re

from store.terms import WORD

#: the words a question about each kind of row uses ("below zero", "the biggest amount");
#: the row's passage counts its kind's tag, a term no text yields, and a question's words
#: add the tags they name (`asked`). Words that say little alone ("top", "most",
#: "under", "below") are left out: "under review" is no question about a low value.
WORDS = {
    "negative": "negative zero minus deficit shortfall oversold overdrawn overpaid "
                "overpayment",
    "nonzero": "nonzero non-zero discrepancy discrepancies mismatch mismatched unbalanced gap",
    # a spike stands above the rows either side of it: a peak, as much as a step up
    "highest": "highest largest biggest greatest maximum peak worst outlier hottest warmest "
               "heaviest spike spiked spikes surge surged",
    "lowest": "lowest smallest least minimum cheapest fewest worst outlier drop dropped dip "
              "coldest coolest lightest",
    "jump": "jump jumped jumps jumping spike spiked surge surged suddenly",
    # a row past a limit its own row states (store/limits.py): the first SPC breach
    "over": "breach breached breaches breaching exceed exceeded exceeds exceeding "
            "exceedance violation violations violated overrun overran excursion",
    "odd": "problem problems fail failed failing failure flagged alarm alarms anomaly "
           "anomalous abnormal unusual odd marked missing without empty blank untagged unlabeled "
           "unlabelled broken no different differs differed unlike instead except "
           "rejected denied declined disapproved refused wouldn couldn didn doesn never "
           "cannot "
           # a version or image left behind: "still on the older image"
           "older outdated stale behind lagging",
}
TAGS = {kind: f"~{kind}" for kind in WORDS}
_ASKS: dict[str, frozenset[str]] = {}  # a question's word -> the tags it names
for _kind, _words in WORDS.items():
    for _w in _words.split():
        _ASKS[_w] = _ASKS.get(_w, frozenset()) | {TAGS[_kind]}


# "did not pass", "would not load": "didn't" and "wouldn't" (`WORDS`), written out
_NOT = re.compile(r"\b(?:did|does|would|could) not\b", re.IGNORECASE)
_ADD_UP = re.compile(r"\b(?:add|adds|added|adding) up\b", re.IGNORECASE)
# "under a dollar", "below 5 %", "less than one cent": under a quantity, not "under review"
_UNDER = re.compile(r"\b(?:under|below|less than)\s+(?:(?:a|an|one)\b|[$€£]?\d)",
                    re.IGNORECASE)


# "Different thing —", "on a different note", "something else": a change of subject, not
# a question about the row that differs
_NEW_SUBJECT = re.compile(
    r"\b(?:different|other|another|separate|unrelated) (?:thing|question|topic|subject|"
    r"note|matter|angle|point|track|direction)s?\b|\bsomething (?:different|else)\b",
    re.IGNORECASE)  # not "issue" or "item": "a different issue from the rest" asks


# what is still waiting ("whose file was still waiting on their records", "which orders
# are outstanding") is the odd row, its cell empty; not what has been waiting the
# longest, a start's earliest date (store/extremes.py `SINCE_WORDS`), nor "how long were
# players waiting", a duration
_STILL = re.compile(r"\bstill\s+(?:waiting|pending)\b|\bawaiting\b|\boutstanding\b",
                    re.IGNORECASE)

# "renewed far more than anything else", "much lower than the rest": a row that stands
# apart from its column, above or below (an intensifier first: "more than a day" is not)
_FAR = re.compile(r"\b(?:far|much|way|vastly|many times)\s+(?:(more|higher|larger|bigger|"
                  r"greater|longer|heavier)|(less|fewer|lower|smaller|shorter|lighter))\b",
                  re.IGNORECASE)


def asked(question: str) -> set[str]:
    """The tags `question`'s words name."""
    question = _NEW_SUBJECT.sub(" ", question)
    out: set[str] = {TAGS["lowest"]} if _UNDER.search(question) else set()
    if _STILL.search(question) and not any(superlative(w.lower())
                                           for w in WORD.findall(question)):
        out.add(TAGS["odd"])
    if _NOT.search(question):
        out.add(TAGS["odd"])
    if _ADD_UP.search(question):  # "which kit didn't add up": a difference left over
        out |= {TAGS["nonzero"], TAGS["negative"]}
    for m in _FAR.finditer(question):
        out.add(TAGS["highest"] if m.group(1) else TAGS["lowest"])
    for w in WORD.findall(question):
        low = w.lower()
        tags = _ASKS.get(low)
        if tags:
            out |= tags
        elif superlative(low):
            out |= _EXTREMES  # "the longest", "the oldest": which end, the column says
    return out


def superlative(word: str) -> bool:
    """A lower-cased word that is a superlative ("longest", "slowest"), not another "-est"
    ("request", "interest")."""
    return word.endswith("est") and len(word) >= 6 and word not in _NOT_SUPERLATIVE


_EXTREMES = frozenset({TAGS["highest"], TAGS["lowest"]})
_NOT_SUPERLATIVE = frozenset(
    "request requests interest interests suggest suggests latest contest forest honest "
    "modest harvest manifest protest digest invest arrest priest guest quest midwest "
    "southwest northwest earnest conquest inquest bequest".split())
