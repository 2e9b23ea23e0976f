"""The current step: what recall and RWOE's cos term compare every chunk with, and the
lexical search for it (store/relevance.py).

A question asked mid-task is about what the conversation has seen (`asking`): its words
count, with their related words (store/related.py), less its asides ("Quick question
before you go on:", "Just answer briefly and continue": `without_asides`). A turn that
ends in tool results counts only their rare identifiers. A reply means what it answers:
the agent's proposal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from proxy.chunking import Conversation
from store.acronyms import WEIGHT as ACRONYM_WEIGHT
from store.acronyms import WORD, initials
from store.idioms import idioms
from store.related import RelatedWords
from store.relevance import Hit, RelevanceIndex
from store.terms import terms

Related = dict[str, tuple[str, float]]  # related word -> (the question's word, cosine)
QUERY_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Step:
    """The current step, as recall and RWOE's cos term see it.

    `words`: the latest user message, when it is a question of its own (the last message,
    or a later user message than the opening goal, which every tool output relates to);
    all its words count. `ids_from`: when the list ends in tool results, their text; only
    their rare identifiers count. `source`: the chunks the step came from, left out of
    the matches (a question always matches itself best) and at 1.0 in RWOE's similarity
    (proxy/relate.py)."""

    words: str
    ids_from: str
    source: frozenset[str]
    asks: bool = False  # `words` is a question: recall's lower bar applies (`asking`)
    # `words` are a reply and the agent's message it answers: on a history sent whole,
    # that message's many words would index most of it on this request (110-180 ms of a
    # 1,000-message history against 12-15): they count among what is indexed already
    reply: bool = False

    @property
    def query(self) -> str:
        """The words the lexical search and the related words take: a question's without
        its asides."""
        return without_asides(self.words) if self.asks else self.words

    @property
    def text(self) -> str:
        return (self.words + "\n" + self.ids_from[-QUERY_CHARS:]).strip()


def current_step(conv: Conversation) -> Step:
    parts = conv.parts
    if not parts:
        return Step("", "", frozenset())
    users = [p for p in parts if p.role == "user"]
    if parts[-1].role != "tool":
        src = users[-1] if users else parts[-1]
        words = src.info.text[-QUERY_CHARS:]
        asks = src.role == "user" and asking(words)
        prev = parts[-2] if len(parts) > 1 and src is parts[-1] else None
        if not asks and prev is not None and prev.role == "assistant" and prev.info.text:
            # a reply ("Yes, go ahead") means what it answers: the agent's proposal
            both = f"{prev.info.text}\n{words}"[-QUERY_CHARS:]
            return Step(both, "", frozenset({src.chunk.id, prev.chunk.id}), reply=True)
        return Step(words, "", frozenset({src.chunk.id}), asks)
    tail = []
    for p in reversed(parts):
        if p.role != "tool":
            break
        tail.append(p)
    ids = {p.chunk.id for p in tail}
    words = ""
    if len(users) > 1:  # a later question the agent is still working on
        ids.add(users[-1].chunk.id)
        words = users[-1].info.text[-QUERY_CHARS:]
    tools = "\n".join(p.info.text for p in reversed(tail))[-4 * QUERY_CHARS:]
    return Step(words, tools, frozenset(ids))


_ASKING = re.compile(r"\?(?:\s|$)|(?:^|[.!:;]\s+|\n)\W*(?:what|which|where|who|whom|whose|"
                     r"when|how|why|remind|recall|remember|did|do you|have you|was|were|"
                     r"tell me|show me|(?:grab|give|get|find|send|pull|dig) (?:me|up|out) "
                     r"(?:the|that|those)|look up (?:the|that|those))\b", re.I)


def asking(text: str) -> bool:
    """A user message that asks something (a question mark, or a sentence that opens with
    a question word: "Hold on. Remind me which server...", or asks to be handed a thing
    seen: "Grab me the trace ID of..."): in an agent loop, a question mid-task is about
    what the conversation has seen."""
    return bool(_ASKING.search(text))


# Words that talk about the conversation, not its content: a sentence of only these (and
# stop words) is an aside. Its rare-in-the-session words ("briefly", "task") outscored
# the question's own in BM25 and recalled passages that happen to say them.
ASIDES = frozenset(terms("quick question brief answer continue carry proceed ahead go "
                         "going hold task help assist moment wait now also first real "
                         "short respond keep concise rush"))
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+|\n")  # not the dot of "4.1" or "a.py"
_CLAUSE_END = re.compile(r"(?<=,)\s+")  # not the comma of "1,080.48"


def without_asides(text: str) -> str:
    """`text` less its sentences and clauses about the conversation itself ("Hold on.",
    "Quick question before you go on:", "Before you go on, what…", "Keep it short.");
    all of it when nothing else is left."""
    kept = [c for s in _SENTENCE_END.split(text) for c in _CLAUSE_END.split(s)
            if not set(terms(c)) <= ASIDES]
    return " ".join(kept) if kept else text


_AFTER = re.compile(r"\b(?:after|following|since)\s+(?!(?:that|this|which|you)\b)"
                    r"([^,.;:?!\n]+)", re.I)


def onward_terms(text: str) -> frozenset[str]:
    """The terms of the event a question asks what came after ("the first backend to fail
    right after the container came back from the OOM kill": contain, came, back, oom,
    kill), to its clause's end; not an aside's ("And after that keep going": none)."""
    return frozenset(t for m in _AFTER.finditer(text) for t in terms(m.group(1))
                     if t not in ASIDES)


_WORDS = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
RELATED_WORDS = 48  # a question's last distinct words that bring their related words


def _words(text: str) -> list[str]:
    """`text`'s words, lower-cased; a hyphenated compound also joined ("sign-ins" ->
    "signins", "rate-limited" -> "ratelimited"), as the idioms (store/idioms.py) list
    it: its parts alone say something else. So is an open compound that the idioms list
    joined ("second line" -> "secondline", "log in" -> "login"): two words with only
    spaces between them."""
    out: list[str] = []
    said = idioms()
    last, end = "", -1
    for m in _WORDS.finditer(text):
        parts = m.group().lower().split("-")
        if len(parts) == 1 and last and text[end:m.start()].isspace():
            pair = last + parts[0]
            if pair in said:
                out.append(pair)
        out.extend(parts if len(parts) == 1 else ["".join(parts), *parts])
        last, end = (parts[0] if len(parts) == 1 else ""), m.end()
    return out


def compounds_joined(text: str) -> str:
    """`text` with each open compound the idioms list joined ("the second line" -> "the
    secondline"): the question's own words are then the compound, not its parts, which
    alone say something else (a traceback's "line 827")."""
    said = idioms()
    out: list[str] = []
    pos, prev = 0, None
    for m in _WORDS.finditer(text):
        if prev is not None and text[prev.end():m.start()].isspace() and (
                prev.group() + m.group()).lower() in said:
            out += [text[pos:prev.end()], m.group()]  # the space between left out
            pos, prev = m.end(), None
            continue
        prev = m
    return "".join(out) + text[pos:]


def related_of(step: Step, table: RelatedWords | None, min_similarity: float
               ) -> Related:
    """A question's related words (store/related.py): related word -> (its word,
    cosine). Only for a question: it is about what the conversation has seen, in its
    asker's words, not the source's; other steps keep their own words. With them, the
    initials of the names it spells out (store/acronyms.py), standing for those words."""
    if table is None or not step.asks or min_similarity >= 1.0:
        return {}
    words = list(dict.fromkeys(reversed(_words(step.query))))
    out = table.expand(words[:RELATED_WORDS], min_similarity)
    if ACRONYM_WEIGHT >= min_similarity:  # "ground power unit" finds GPU-M117
        for letters, phrase in initials(step.query, table.table).items():
            out.setdefault(letters, (phrase, ACRONYM_WEIGHT))
    if CLIPPED_WEIGHT >= min_similarity:  # "communications" finds `RTU COMMS FAIL`
        for word in words[:RELATED_WORDS]:
            for clip in clipped(word.lower(), table.table):
                out.setdefault(clip, (word, CLIPPED_WEIGHT))
    return out


CLIPPED_WEIGHT = 0.6  # a word's clipping ("comms" of "communications"), as a related word
CLIP_MIN, CLIP_MAX, CLIP_FROM = 4, 6, 10  # a clipping's letters; its word's, at least
# words of their own the related words' vocabulary lacks ("passengers" is no `PASS`)
NOT_CLIPPINGS = frozenset("pass port form".split())


def clipped(word: str, vocabulary: dict[str, str] | frozenset[str]) -> list[str]:
    """The clippings a tool output may print `word` by: its first four to six letters
    where that is no word of its own (`comm`, `config`, `auth`, `perf`; not `part` of
    "particularly", a word of the vocabulary, nor `NOT_CLIPPINGS`), for a known word of
    `CLIP_FROM` letters or more ("reported" is no `repo`); its stem matches the clipping
    and its plural ("comms")."""
    if len(word) < CLIP_FROM or not word.isalpha() or word not in vocabulary:
        return []
    return [word[:n] for n in range(CLIP_MIN, CLIP_MAX + 1) if n <= len(word) - 2
            and word[:n] not in vocabulary and word[:n] not in NOT_CLIPPINGS]


def _words_search(index: RelevanceIndex, step: Step, related: Related | None) -> list[Hit]:
    """The lexical matches of `step`'s words (`search`)."""
    own = index.query_terms(compounds_joined(step.query), settle=not step.reply)
    extra = index.related_terms(related, own) if related else {}
    # "the biggest amount": the rows that stand out (store/notable.py); the yardstick
    # when none of the question's own words is in the session
    tags = index.notable_terms(step.query) if step.asks else {}
    if not (own or tags):
        return []
    # a question's adjacent words also count as a phrase ("Hotel Alfama")
    pairs = index.phrases(step.query) if step.asks else None
    return index.search({**own, **extra, **tags}, step.source,
                        ideal=index.ideal(own or tags), phrases=pairs)


_QUESTION_END = re.compile(r"(?<=\?)\s+")


# ", and" between two questions under one question mark: "how long did the worst test
# take in that report, and that red build - which runner did it run on?"
_AND = re.compile(r",\s+and\s+(?:also\s+)?")
_WH = re.compile(r"\b(?:what|which|who|whose|when|where|how|why)\b", re.I)
OWN_TERMS = 4  # terms each side of such an "and" holds, at least, to be a question alone


def questions(text: str) -> list[str]:
    """The questions of a message that asks two or more (each up to its question mark,
    with what leads into it: "Quick ones: what version …?"; or two joined by ", and",
    each with its own question word and `OWN_TERMS` terms); [] for one."""
    asked = []
    for q in _QUESTION_END.split(text.strip()):
        if "?" in q and asking(q):
            asked.extend(_joined(q))
    return asked if len(asked) > 1 else []


def _joined(question: str) -> list[str]:
    """`question` split at an ", and" that joins two questions ("…which shard ran it, and
    who reverted it?"), where both sides ask on their own; `[question]` otherwise."""
    sides = _AND.split(question)
    if len(sides) != 2 or not all(_WH.search(s) and len(terms(s)) >= OWN_TERMS
                                  for s in sides):
        return [question]
    return sides


def search(index: RelevanceIndex, step: Step, related: Related | None = None) -> list[Hit]:
    """Matches of the step's words (BM25, strength against the words' yardstick; a
    question's `related` words count at cosine x idf, outside the yardstick) and of its
    tool output's rare identifiers (each such match is clear: strength 1). A message that
    asks two things or more is searched a question at a time (`questions`), each against
    its own yardstick, and a passage keeps its best match: "which tender was closest? And
    which road was shut?" measured as one query gave each answer half a strength. It also
    keeps its best place among a question's matches (`Hit.rank`): recall takes each
    question's best first (proxy/recall.py `FIRSTS`)."""
    hits: list[Hit] = []
    if step.words:
        asked = questions(step.query) if step.asks else []
        if asked:
            best: dict[tuple[str, int], Hit] = {}
            found = []
            for q in asked:
                own_words, said = set(_words(q)), " ".join(WORD.findall(q.lower()))
                mine = {w: r for w, r in (related or {}).items()
                        if r[0] in own_words or (" " in r[0] and f" {r[0]} " in f" {said} ")}
                found.append(_words_search(index, replace(step, words=q), mine))
            # each question's scores on one scale, its best word match at the best's:
            # recall keeps matches within a share of the best (`recall.question_min_relative`)
            tops = [max((h.score for h in f if h.strength < 1.0), default=0.0) for f in found]
            for f, top in zip(found, tops, strict=True):
                scale = max(tops) / top if top > 0 else 1.0
                for rank, h in enumerate(f):  # its rank: its place in its question's
                    h = replace(h, score=h.score * scale, rank=rank)
                    prev = best.get((h.chunk_id, h.piece))
                    if prev is not None:  # the better match, at the better of its places
                        keep = h if (h.strength, h.score) > (prev.strength, prev.score) else prev
                        h = replace(keep, rank=min(h.rank, prev.rank))
                    best[(h.chunk_id, h.piece)] = h
            hits = sorted(best.values(), key=lambda h: (-h.strength, -h.score, h.chunk_id,
                                                        h.piece))
        else:
            hits = _words_search(index, step, related)
    if step.ids_from:
        rare = index.rare_identifiers(step.ids_from, step.source)
        if rare:
            by_key = {(h.chunk_id, h.piece): h for h in hits}
            for h in index.search(rare, step.source):
                prev = by_key.get((h.chunk_id, h.piece))
                score = h.score + (prev.score if prev else 0.0)
                by_key[(h.chunk_id, h.piece)] = replace(h, score=score, strength=1.0)
            hits = sorted(by_key.values(), key=lambda h: (-h.strength, -h.score,
                                                          h.chunk_id, h.piece))
    return hits
