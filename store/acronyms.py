"""A question's spelled-out names as the initials a tool prints them by.

A colleague asks "which ground power unit packed up during the storm?" of an inventory
that lists `GPU-M117 … status: U/S`, or "which of the hail claims went to the special
investigations unit?" of a claims export whose column says `SIU`. Operations, finance and
medicine print their names as initials; people say them in full. No word of the name is
in the record and the sentence vectors do not join them either (MiniLM ranks such a
record below its top ten on a long history), so BM25 needs the initials as a term.

`initials(text, known)`: every run of `MIN_WORDS` to `MAX_WORDS` words of `text`, not
across punctuation, that starts and ends on a word that is not a stop word, with none
inside but `INNER` ("bill of lading", not "credits had the dbt"), gives its initials: of
all its words ("mean time to recovery" -> mttr, "bill of lading" -> bol) and of those
that are not stop words ("vehicle identification number" -> vin). They join the
question's related words (proxy/step.py `related_of`) at cosine `WEIGHT`, so they count
only where the session's index holds them as a term (store/relevance.py
`related_terms`), and at idf: a common token made up by chance weighs little. Not
initials that are a word of their own (`known`: the related-words table's English
vocabulary, "won" from "work order number") or of fewer than `MIN_LETTERS` letters: two
letters are too many things.

`initials` also joins an abbreviation the question writes in capitals to the initial of
the word after it, as a point name or a tag prints them: "the CHW pump" is `CHWP-2`,
"the AHU fan" `AHUF` (`_compounds`).
"""

from __future__ import annotations

import re
from collections.abc import Container

from store.terms import STOP

WORD = re.compile(r"[A-Za-z]+")
BREAK = re.compile(r"[.,;:?!()\[\]\"/]|\s[-–—]\s")  # a name never spans these
MIN_WORDS, MAX_WORDS = 3, 4
INNER = frozenset({"of", "to", "and", "for", "in", "on"})  # the only stop words in a name
MIN_LETTERS = 3
WEIGHT = 0.9  # as a near-synonym: below the question's own words, above most related ones


def initials(text: str, known: Container[str] = ()) -> dict[str, str]:
    """Initials -> the words they stand for ("gpu" -> "ground power unit"), lower case;
    the first run that gives a set of initials names it."""
    out: dict[str, str] = {}
    for part in BREAK.split(text):
        _runs([w.lower() for w in WORD.findall(part)], known, out)
        _compounds(WORD.findall(part), known, out)
    return out


CAPS = re.compile(r"[A-Z]{2,5}")  # an abbreviation as a question writes it: CHW, AHU


def _compounds(words: list[str], known: Container[str], out: dict[str, str]) -> None:
    """An abbreviation in capitals and the initial of the lower-case word after it
    ("CHW pump" -> chwp), where that word is no stop word."""
    for a, b in zip(words, words[1:], strict=False):
        if CAPS.fullmatch(a) and b.islower() and len(b) >= 3 and b not in STOP:
            letters = a.lower() + b[0]
            if letters not in known and letters not in STOP and letters not in out:
                out[letters] = f"{a.lower()} {b}"


def _runs(words: list[str], known: Container[str], out: dict[str, str]) -> None:
    for n in range(MIN_WORDS, MAX_WORDS + 1):
        for i in range(len(words) - n + 1):
            run = words[i:i + n]
            if (run[0] in STOP or run[-1] in STOP or len(run[0]) < 2 or len(run[-1]) < 2
                    or any(w in STOP and w not in INNER for w in run)):
                continue
            phrase = " ".join(run)
            every = "".join(w[0] for w in run)
            content = "".join(w[0] for w in run if w not in STOP)
            for letters in dict.fromkeys((every, content)):
                if (len(letters) >= MIN_LETTERS and letters not in STOP
                        and letters not in known and letters not in out):
                    out[letters] = phrase
