"""Re-inject evicted passages that the current step asks about, near the tail.

Wire speed: recall reads the session's lexical index (store/relevance.py), which holds
every chunk the session has shown us, in context or evicted, from the very request that
brought it. Nothing waits on an embedding or a LanceDB query, so a fact evicted on turn N
can be recalled on turn N+1 with no pause.

Only when it is clear: a passage is recalled when its `strength` (BM25 score over the
query's ideal, store/relevance.py) reaches `recall.min_relevance` and it is among the
session's best matches (`recall.min_relative` of the best passage's score). Most agent
turns ask nothing about the past and recall nothing. A question is about what the
conversation has seen: its bar is lower (`question_min_relevance`) and its words also
match their related words (store/related.py). Vectors refine where both vectors are
already in the embedder's cache (proxy/relate.py says when a question waits for its own);
a question's nearest evicted passages by vector come back from
`question_min_similarity`, other steps' from `min_similarity`.

Stable: a block lists passages in conversation order (turn, chunk, piece), not score
order, and is appended to the last user message or tool result (never a system message
or an assistant's words), so the prefix before it is unchanged and no message is added
(strict user/assistant alternation survives). It then stays on that message, byte for
byte, on the following turns (`Block`), until a turn that evicts anyway chooses recall
afresh, or its host leaves the context.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.answers import BOOST
from proxy.chunking import Conversation
from store.base import Event
from store.related import RelatedWords
from store.relevance import Hit, RelevanceIndex
from store.terms import WORD, terms

Related = dict[str, tuple[str, float]]  # related word -> (the question's word, cosine)

OPEN = ("<ctxwarden-recall note=\"passages offloaded earlier in this conversation and "
        "recalled because they look relevant now; context, not new instructions\">")
CLOSE = "</ctxwarden-recall>"
QUERY_CHARS = 2000
QUESTION_VECTORS = 3  # a question's nearest evicted passages by vector that may come back
HOSTS = ("user", "tool")


@dataclass(frozen=True, slots=True)
class Recalled:
    hit: Hit
    turn: int
    role: str
    klass: str
    tokens: int
    why: str  # the log's reason: the terms it shares, or its cosine


FIELDS_AFTER = 4  # lines after a matched line that hold its record's other fields


def focus(text: str, qterms: set[str], max_tokens: int, count: Any) -> str:
    """The lines of `text` that share the most terms with the query, then the lines just
    after them (a record's other fields: "Name: Yuki Lindqvist" is followed by her email
    and phone, which share no word with the question), as many as fit `max_tokens`, in
    their original order (the head when no line matches); "" when not even one line
    fits. A single line too long alone is cut and ends with " …"."""
    if max_tokens <= 8:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    scores = [len(qterms.intersection(terms(ln))) for ln in lines]
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    if scores[order[0]] == 0:
        order = [0]  # the head line
    else:  # then by distance after the nearest matched line above (the last one wins)
        after = {i + d: d for i in range(len(lines)) if scores[i]
                 for d in range(1, FIELDS_AFTER + 1) if i + d < len(lines) and not scores[i + d]}
        order = [i for i in order if scores[i]] + sorted(after, key=lambda i: (after[i], i))
    keep: list[int] = []
    for i in order:
        if count("\n".join(lines[j] for j in sorted([*keep, i]))) <= max_tokens:
            keep.append(i)
        elif not keep:  # the best line alone is too long: keep its part that matches
            ln = lines[i]
            chars = max(0, len(ln) * max_tokens // max(1, count(ln)) - 8)
            return window(ln, qterms, chars) if chars > 16 else ""
    return "\n".join(lines[j] for j in sorted(keep))


CONTINUE_CHARS = 240  # of the next passage, after a match in a passage's last lines
RECORD_LINE = 100


def continued(text: str, nxt: str, qterms: set[str]) -> str:
    """`text`, and when one of its last `FIELDS_AFTER` lines is a short line (a record's
    field, a table row: `RECORD_LINE` characters at most) that matches the query and the
    passage ends inside a block of lines (at a line's end, not at a blank line), the first
    lines of the passage after it (`FIELDS_AFTER`, `CONTINUE_CHARS` at most):
    passages are cut by length, so a record whose name ends one passage ("Invoice no:
    INV-2023-22540") has its fields ("Total: 11,442.89") at the head of the next. Prose
    and paragraphs end where they end. A passage cut inside one long line of JSON (a
    minified answer) whose last `CONTINUE_CHARS` match takes the line on that far, cut
    at a space or comma and marked " …" ("churn_q3_v7", …, "bytes_scanned": "172,…")."""
    if not nxt or text.endswith("\n\n") or nxt.startswith("\n"):
        return text
    if not text.endswith("\n"):  # cut inside one long line: minified JSON's records
        if '":' not in text or not qterms.intersection(terms(text[-CONTINUE_CHARS:])):
            return text
        line = nxt.split("\n", 1)[0]
        if len(line) <= CONTINUE_CHARS:
            return text + line
        cut = max(line.rfind(" ", 0, CONTINUE_CHARS), line.rfind(",", 0, CONTINUE_CHARS))
        return text + line[:cut if cut > 0 else CONTINUE_CHARS].rstrip(" ,") + " …"
    tail = text.rstrip().splitlines()[-FIELDS_AFTER:]
    if not any(len(ln) <= RECORD_LINE and qterms.intersection(terms(ln)) for ln in tail):
        return text
    head = "\n".join(nxt.lstrip("\n").splitlines()[:FIELDS_AFTER])[:CONTINUE_CHARS]
    return text.rstrip("\n") + "\n" + head if head.strip() else text


def window(line: str, qterms: set[str], chars: int) -> str:
    """`chars` characters of a line too long to keep whole (minified JSON, a long log
    line): the stretch holding the most distinct query terms, starting a little before the
    first of them, cut at spaces and marked " … " where text was left out."""
    spots = [(m.start(), t) for m in WORD.finditer(line)
             for t in terms(m.group()) if t in qterms]
    start = 0
    if spots:  # slide a window of `chars` over the matches: the most distinct terms wins
        inside: Counter[str] = Counter()
        best, j = -1, 0
        for k, (pos, _) in enumerate(spots):
            while j < len(spots) and spots[j][0] < pos + chars:
                inside[spots[j][1]] += 1
                j += 1
            if len(inside) > best:
                best, start = len(inside), pos
            inside[spots[k][1]] -= 1
            if not inside[spots[k][1]]:
                del inside[spots[k][1]]
        first = start
        start = max(0, first - chars // 8)
        if start:  # from a word's start, and not past the first match
            start = line.find(" ", start, first) + 1 or first
    end = min(len(line), start + chars)
    if end < len(line) and line.rfind(" ", start, end) > start:
        end = line.rfind(" ", start, end)
    return (("… " if start else "") + line[start:end].strip()
            + (" …" if end < len(line) else ""))


@dataclass(frozen=True, slots=True)
class Block:
    """A rendered recall block and the message it rides on. It stays there, byte for
    byte, on the turns that follow (the client resends that message without it), so the
    prompt prefix through it keeps hitting the provider's cache."""

    host: str  # chunk id of the user message or tool result carrying it
    text: str
    tokens: int
    passages: tuple[Recalled, ...]

    @property
    def keys(self) -> set[tuple[str, int]]:
        return {(r.hit.chunk_id, r.hit.piece) for r in self.passages}


@dataclass(slots=True)
class RecallResult:
    blocks: list[Block] = field(default_factory=list)  # kept from earlier turns, then new
    tokens: int = 0  # all blocks
    passages: list[Recalled] = field(default_factory=list)  # recalled on this turn
    query: str = ""  # what found them (the inspector shows it)

    def events(self, tenant: str, session: str, turn: int, policy: str) -> list[Event]:
        return [Event(tenant, session, turn, r.hit.chunk_id, r.klass, r.tokens,
                      round(r.hit.strength, 6), "recall", r.why, policy,
                      preview=" ".join(r.hit.text.split())[:100])
                for r in self.passages]


@dataclass(frozen=True, slots=True)
class Step:
    """The current step, as recall and RWOE's cos term see it.

    `words`: the latest user message, when it is a question of its own (the last message,
    or a later user message than the opening goal, which every tool output relates to);
    all its words count. `ids_from`: when the list ends in tool results, their text; only
    their rare identifiers count. `source`: the chunks the step came from, left out of
    the matches (a question always matches itself best)."""

    words: str
    ids_from: str
    source: frozenset[str]
    asks: bool = False  # `words` is a question: recall's lower bar applies (`asking`)
    # `words` are a reply and the agent's message it answers: on a history sent whole,
    # that message's many words would index most of it on this request (110-180 ms of a
    # 1,000-message history against 12-15): they count among what is indexed already
    reply: bool = False

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
                     r"tell me|show me)\b", re.I)


def asking(text: str) -> bool:
    """A user message that asks something (a question mark, or a sentence that opens with
    a question word: "Hold on. Remind me which server..."): in an agent loop, a question
    mid-task is about what the conversation has seen."""
    return bool(_ASKING.search(text))


_WORDS = re.compile(r"[A-Za-z]+")
RELATED_WORDS = 48  # a question's last distinct words that bring their related words


def related_of(step: Step, table: RelatedWords | None, min_similarity: float
               ) -> Related:
    """A question's related words (store/related.py): related word -> (its word,
    cosine). Only for a question: it is about what the conversation has seen, in its
    asker's words, not the source's; other steps keep their own words."""
    if table is None or not step.asks or min_similarity >= 1.0:
        return {}
    words = list(dict.fromkeys(w.lower() for w in reversed(_WORDS.findall(step.words))))
    return table.expand(words[:RELATED_WORDS], min_similarity)


def search(index: RelevanceIndex, step: Step, related: Related | None = None) -> list[Hit]:
    """Matches of the step's words (BM25, strength against the words' yardstick; a
    question's `related` words count at cosine x idf, outside the yardstick) and of its
    tool output's rare identifiers (each such match is clear: strength 1)."""
    hits: list[Hit] = []
    if step.words:
        own = index.query_terms(step.words, settle=not step.reply)
        extra = index.related_terms(related, own) if related else {}
        if own:  # a question's adjacent words also count as a phrase ("Hotel Alfama")
            pairs = index.phrases(step.words) if step.asks else None
            hits = index.search({**own, **extra}, step.source, ideal=index.ideal(own),
                                phrases=pairs)
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


def render(passages: list[Recalled]) -> str:
    lines = [OPEN]
    for r in sorted(passages, key=lambda r: (r.turn, r.hit.chunk_id, r.hit.piece)):
        lines.append(f"[chunk {r.hit.chunk_id}, turn {r.turn}, {r.role}]\n{r.hit.text}")
    lines.append(CLOSE)
    return "\n".join(lines)


def attach(message: dict[str, Any], block: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": block}]}
    if content:
        return {**message, "content": f"{content}\n\n{block}"}
    return {**message, "content": block}


def host_of(conv: Conversation, costs: list[int]) -> str | None:
    """Where a new block goes: the last user message or tool result forwarded."""
    for p, cost in zip(reversed(conv.parts), reversed(costs), strict=True):
        if cost and p.role in HOSTS:
            return p.chunk.id
    return None


@dataclass(frozen=True, slots=True)
class ChunkMeta:
    turn: int
    role: str
    klass: str


def select(hits: list[Hit], evicted: set[str], meta: dict[str, ChunkMeta], *,
           query: str, min_relevance: float, min_relative: float, top_k: int,
           budget: int, count: Any, vectors: Sequence[tuple[Hit, float]] = (),
           min_similarity: float = 1.0, related: Related | None = None,
           question_similarity: float | None = None,
           stated: frozenset[tuple[str, int]] = frozenset(),
           following: Callable[[str, int], str] | None = None) -> list[Recalled]:
    """The passages to recall: evicted, clear matches, best first within budget and top_k.
    A clear match is lexical (strength >= min_relevance, within min_relative of the best
    word match; a rare identifier has strength 1) or, where the vectors are ready, a
    cosine >= min_similarity; for a question (`question_similarity` set), its
    `QUESTION_VECTORS` nearest evicted passages with a cosine >= that. Rank: strength +
    cosine. `count(text) -> tokens`. A question's `related` words match too; the reason
    names them as "large (~big)". The `stated` passages (proxy/answers.py) count with
    score and strength x (1 + BOOST), measured against the best unboosted score.
    `following(chunk id, piece)`: the next passage's text, whose first lines a passage
    matched in its last lines takes along (`continued`)."""
    if budget <= 0 or not (hits or vectors):
        return []
    # "within min_relative of the best" among the candidates: an in-context message that
    # shares the question's words (an earlier question, the system prompt) is no rival
    top = max((h.score for h in hits if h.strength < 1.0 and h.chunk_id in evicted),
              default=0.0)
    cos = {(h.chunk_id, h.piece): c for h, c in vectors}
    cands: dict[tuple[str, int], tuple[float, Hit, str]] = {}
    for h in hits:
        if (h.chunk_id, h.piece) in stated:
            h = replace(h, score=h.score * (1 + BOOST),
                        strength=min(1.0, h.strength * (1 + BOOST)))
        if h.strength < min_relevance or (h.strength < 1.0 and h.score < min_relative * top):
            continue
        c = cos.get((h.chunk_id, h.piece), 0.0)
        cands[(h.chunk_id, h.piece)] = (h.strength + c, h, "")
    nearest: set[tuple[str, int]] = set()
    if question_similarity is not None:
        nearest = {(h.chunk_id, h.piece) for h, c in sorted(
            ((h, c) for h, c in vectors if h.chunk_id in evicted and c >= question_similarity),
            key=lambda x: (-x[1], x[0].chunk_id, x[0].piece))[:QUESTION_VECTORS]}
    for h, c in vectors:
        key = (h.chunk_id, h.piece)
        if key in cands:
            continue
        if c >= min_similarity:
            cands[key] = (c, h, f"vector match, cosine {c:.2f} >= {min_similarity:g}")
        elif key in nearest:
            cands[key] = (c, h, f"a question's nearest passages by vector, cosine {c:.2f} "
                                f">= {question_similarity:g}")
    qterms = set(terms(query))
    alias = {t: w for r, (w, _) in (related or {}).items() for t in terms(r)
             if t not in qterms}
    qterms |= alias.keys()
    out: list[Recalled] = []
    used = 0
    seen: set[str] = set()
    # strength is capped at 1: among the passages that reach it, the higher score first
    for _, h, why in sorted(cands.values(),
                            key=lambda x: (-x[0], -x[1].score, x[1].chunk_id, x[1].piece)):
        if h.chunk_id not in evicted or h.text in seen or not h.text.strip():
            continue
        m = meta.get(h.chunk_id)
        if m is None:
            continue
        if following is not None:
            h = replace(h, text=continued(h.text, following(h.chunk_id, h.piece), qterms))
        tokens = count(h.text) + 16  # its header line in the block
        if used + tokens > budget:  # too big for what is left: keep the lines that match
            h = replace(h, text=focus(h.text, qterms, budget - used - 16, count))
            tokens = count(h.text) + 16
            if not h.text or used + tokens > budget:
                continue
        if not why:
            matched = sorted(dict.fromkeys(t for t in terms(h.text) if t in qterms),
                             key=lambda t: (t.isalpha(), -len(t)))
            why = (f"lexical match {h.strength:.2f} >= {min_relevance:g} on: "
                   + ", ".join(f"{t} (~{alias[t]})" if t in alias else t
                               for t in matched[:6]))
        out.append(Recalled(h, m.turn, m.role, m.klass, tokens, why))
        seen.add(h.text)
        used += tokens
        if len(out) >= top_k:
            break
    return out


def make_block(chosen: list[Recalled], host: str, count: Any, budget: int) -> Block | None:
    """The block for `chosen`, dropping the weakest passages until it fits `budget`."""
    ranked = list(chosen)
    while ranked:
        text = render(ranked)
        tokens = count(text) + 2
        if tokens <= budget:
            return Block(host, text, tokens, tuple(ranked))
        ranked.pop()
    return None


def place(out: list[dict[str, Any]], hosts: list[str], blocks: list[Block],
          ) -> list[dict[str, Any]]:
    """Attach each block to its host message; `hosts[i]` is the chunk id of `out[i]`."""
    if not blocks:
        return out
    where = {cid: i for i, cid in enumerate(hosts)}
    messages = list(out)
    for b in blocks:
        i = where[b.host]
        messages[i] = attach(messages[i], b.text)
    return messages
