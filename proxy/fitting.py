"""Fit a conversation to its budget: sticky decisions first, then the policy's ranking.

Token accounting is exact for what will be sent (proxy/accounting.py: an evicted tool
result becomes a stub, a call goes only with all its results, any other evicted message
is dropped). Eviction starts only when the request is over budget and then frees down to
the low watermark, so the next turns append without evicting and the prompt prefix stays
put. A policy may also force evictions whatever the budget (`Policy.forced`: observation
masking).

When even everything evictable gone leaves the request over budget, the tail's oversized
tool results are cut head-and-tail (`cut`): the middle is replaced by one marked line
(proxy/cutting.py) naming the chunk, whose full text is offloaded and recallable.
Stubs and what they cost: proxy/stubs.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from policies.base import ChunkClass, Policy, PolicyContext, Ranked
from proxy.accounting import Accounting, permanent
from proxy.analysis import counted
from proxy.chunking import RESULTS, Conversation, Part
from proxy.cutting import cut
from proxy.tokens import REPLY_PRIMING, TokenCounter


@dataclass(frozen=True, slots=True)
class Decision:
    part: Part
    score: float
    reason: str


@dataclass(slots=True)
class Fit:
    evicted: set[str]  # every chunk out of context in this request (sticky + new)
    new: list[Decision] = field(default_factory=list)
    tokens: int = 0  # what the fitted messages cost
    permanent_tokens: int = 0
    cuts: dict[str, str] = field(default_factory=dict)  # chunk id -> head-and-tail text
    cut_parts: list[Part] = field(default_factory=list)
    restored: list[Decision] = field(default_factory=list)  # sticky evictions taken back


RESTORE_ROOM = 0.10  # of the budget free below the watermark before anything is restored
RESTORE_REASON = ("room returned: restored, most valuable first of what fits with room "
                  "left below the watermark")
FITS_REASON = "the whole request fits the budget: earlier evictions do not apply"


EXACT_ROUNDS = 2  # fits with estimated parts counted, before every part is counted
RESCALE = 0.10  # counts off the estimates by more than this rescale the rest
LEARN_FROM = 500  # estimated tokens counted in a request before its ratio is the route's


class Fitter(Accounting):
    """Fits a conversation to its budget; what each part then costs and sends is
    `Accounting`'s (proxy/accounting.py)."""

    def __init__(self, counter: TokenCounter) -> None:
        super().__init__(counter)
        # counted / estimated on this route's last cold history (`fit`): the generated
        # coding histories count 0.63-0.65 of their estimate, request after request
        self.scale = 1.0

    def fit(self, conv: Conversation, sticky: set[str], budget: int, target: int,
            policy: Policy, ctx: PolicyContext) -> Fit:
        """Sticky decisions, then the policy's ranking, down to `target` once over `budget`.
        A part whose content is only estimated (a cold history's: `analysis.measure`) is
        counted once the fit keeps it, and what those counts say of the estimates (their
        ratio) rescales the parts still estimated. When the counted request is over
        `budget`, or the rescaling moved the estimates, the fit runs again (EXACT_ROUNDS
        times, then with every part counted), so what is sent is always counted, and a
        history whose text the estimate misjudges (prose: ×1.5) still fills the budget."""
        # what the parts still estimated are scaled by: at first what this route's last
        # counts said of its estimates (one round fewer when its traffic holds steady)
        scale = self.scale if any(not p.info.exact for p in conv.parts) else 1.0
        if scale != 1.0:
            self._rescale(conv, scale)
        fit = self._fit(conv, sticky, budget, target, policy, ctx)
        guessed = found = 0  # kept contents so far: as estimated, as counted
        for round_ in range(EXACT_ROUNDS + 1):
            sums = self._count_kept(conv, fit.evicted)
            stubs = self.stubs.count_sent(conv, fit.evicted)
            if sums is None and not stubs:
                return fit
            if sums is not None:
                guessed, found = guessed + sums[0], found + sums[1]
            fit.tokens = self.cost(conv, fit.evicted)
            fit.permanent_tokens = permanent(conv)
            ratio = found / guessed if guessed else 1.0
            if guessed >= LEARN_FROM:
                self.scale = ratio
            moved = abs(ratio / scale - 1) > RESCALE
            if moved:
                scale = ratio
                self._rescale(conv, scale)
            if fit.tokens <= budget and not moved:
                return fit
            if round_ == EXACT_ROUNDS:
                break
            fit = self._fit(conv, sticky, budget, target, policy, ctx)
        self._count_kept(conv, set())
        self.stubs.count_sent(conv, None)
        return self._fit(conv, sticky, budget, target, policy, ctx)

    def _count_kept(self, conv: Conversation, evicted: set[str]) -> tuple[int, int] | None:
        """Count the estimated parts the fit keeps: their contents as estimated and as
        counted, or None if there were none. An evicted one sends nothing of its own: it
        is dropped or stubbed (the evicted message that can stay whole, a call whose
        results stay, has tool calls, and is never estimated)."""
        guessed = found = 0
        for p in conv.parts:
            if p.info.exact or p.chunk.id in evicted:
                continue
            guessed += p.info.content_tokens
            p.info = counted(self.counter, p.info)
            p.chunk.tokens = p.info.tokens
            found += p.info.content_tokens
        return (guessed, found) if guessed or found else None

    @staticmethod
    def _rescale(conv: Conversation, scale: float) -> None:
        """The parts still estimated, at `scale` times their estimate, for the fit only:
        their info (what a stub says and the next turn sees) keeps the estimate."""
        for p in conv.parts:
            if not p.info.exact:
                framing = p.info.tokens - p.info.content_tokens
                p.chunk.tokens = framing + math.ceil(p.info.content_tokens * scale)

    def _fit(self, conv: Conversation, sticky: set[str], budget: int, target: int,
             policy: Policy, ctx: PolicyContext) -> Fit:
        parts = conv.parts
        evicted = {p.chunk.id for p in parts
                   if p.chunk.id in sticky and p.chunk.klass is not ChunkClass.PERMANENT}
        fit = Fit(evicted=evicted)
        fit.permanent_tokens = permanent(conv)
        if evicted and REPLY_PRIMING + sum(p.chunk.tokens for p in parts) <= budget:
            # Sticky decisions keep the prefix stable while a conversation is over budget;
            # they never shrink a request that fits whole (the client trimmed its history,
            # or another conversation opened the same way): only a forced eviction stays.
            masked = {m.chunk.id for m in policy.forced([p.chunk for p in parts], ctx)}
            fit.restored = [Decision(p, 0.0, FITS_REASON) for p in parts
                            if p.chunk.id in evicted and p.chunk.id not in masked]
            evicted -= {d.part.chunk.id for d in fit.restored}
        by_id = {p.chunk.id: p for p in parts}
        total = self.cost(conv, evicted)
        forced = policy.forced([p.chunk for p in parts if p.chunk.id not in evicted], ctx)
        for r in forced:
            part = by_id[r.chunk.id]
            if part.group is not None and part.role in RESULTS and (
                    part.chunk.tokens > self.stub_cost(part)):
                total = self._evict(conv, part, r, policy, fit, total,
                                    policy.forced_reason or policy.reason)
        if total > budget:
            candidates = [p.chunk for p in parts if p.chunk.id not in evicted]
            ranking = policy.rank(candidates, ctx)
            deferred: dict[str, Ranked] = {}
            for r in ranking:
                if total <= target:
                    break
                part = by_id[r.chunk.id]
                if part.role == "assistant" and part.group is not None:
                    if not self._group_evictable(conv, part, evicted, whole=False):
                        deferred[part.chunk.id] = r
                        continue
                elif part.group is not None and part.chunk.tokens <= self.stub_cost(part):
                    continue  # a stub would cost as much as the result
                total = self._evict(conv, part, r, policy, fit, total)
                if part.role in RESULTS and part.group is not None and total > target:
                    # Its call was passed over while a result stood; once every result is a
                    # stub, the call (ranked lower than this) goes before anything ranked
                    # higher: otherwise stubs fill the room and user messages go first.
                    head = parts[part.group]
                    ready = deferred.get(head.chunk.id)
                    if ready is not None and self._group_evictable(conv, head, evicted,
                                                                   whole=False):
                        del deferred[head.chunk.id]
                        total = self._evict(conv, head, ready, policy, fit, total)
            for r in deferred.values():  # still over: drop whole groups, in ranking order
                if total <= target:
                    break
                head = by_id[r.chunk.id]
                if self._group_evictable(conv, head, fit.evicted, whole=True):
                    for j in conv.groups[head.chunk.index]:
                        if parts[j].chunk.id not in fit.evicted:
                            total = self._evict(conv, parts[j], r, policy, fit, total)
                    total = self._evict(conv, head, r, policy, fit, total)
        fit.tokens = total
        room = budget - target + RESTORE_ROOM * budget  # free below the watermark, and more
        if fit.new and total > target:
            self._give_back(conv, fit, budget)
        elif budget - total >= room:
            if fit.new:  # one large chunk freed far more than was needed: this turn's
                # evictions first (no prefix change), never what the policy forces
                self._give_back(conv, fit, target, {r.chunk.id for r in forced})
            if budget - fit.tokens >= room:  # and what it leaves: the next turns' room
                self._restore(conv, fit, target - int(RESTORE_ROOM * budget), policy, ctx)
        return fit

    def _give_back(self, conv: Conversation, fit: Fit, limit: int,
                   keep: frozenset[str] | set[str] = frozenset()) -> None:
        """Give this turn's evictions back, most valuable first, while the request stays
        within `limit`. The budget, when the watermark was out of reach (what must stay
        is too big: evicting down toward it took everything evictable, the user's own
        words included, for nothing): evict only what fitting needs. The watermark, when
        the ranking overshot it by more than RESTORE_ROOM (a large result evicted after
        small ones: a question turn after a big tool turn sent 976 tokens of a 3,760
        budget): send what fits. `keep`: evictions that stay (the policy's forced)."""
        for d in reversed(list(fit.new)):
            if d.part.chunk.id not in keep and self._take_back(conv, fit, d.part, limit):
                fit.new.remove(d)

    def _restore(self, conv: Conversation, fit: Fit, limit: int, policy: Policy,
                 ctx: PolicyContext) -> None:
        """After a spike (a huge tool output that had to push everything out) the room comes
        back, but sticky evictions would keep the user's facts out for good. Take back
        evicted messages and tool results, most valuable first, while they fit under
        `limit`: RESTORE_ROOM below the watermark, the room it needs free to start. One
        prefix change after a spike, not churn: restored up to the watermark itself, a
        chunk came back on a turn that evicted and the next turn's output pushed the
        request over the budget, so it went again (two prefix changes, a black-box run).
        What the policy evicts whatever the budget (`forced`: masked tool outputs) stays
        out: taken back, `mask` in a roomy window masked each turn's newly old output and
        restored the ones before it, a prefix change every turn and nothing masked."""
        new = {d.part.chunk.id for d in fit.new}
        parts = conv.parts
        masked = {r.chunk.id for r in policy.forced([p.chunk for p in parts], ctx)}
        cands = [p.chunk for p in parts if p.chunk.id in fit.evicted
                 and p.chunk.id not in new and p.chunk.id not in masked]
        by_id = {p.chunk.id: p for p in parts}
        for r in reversed(policy.rank(cands, ctx)):
            if self._take_back(conv, fit, by_id[r.chunk.id], limit):
                fit.restored.append(Decision(by_id[r.chunk.id], r.score, RESTORE_REASON))

    def _take_back(self, conv: Conversation, fit: Fit, part: Part, limit: int) -> bool:
        """Un-evict `part` if the request then still fits `limit` (fit.tokens follows). A
        dropped tool call is not taken back (its results would have to come back too)."""
        if part.group is not None and (part.role == "assistant" or
                                       conv.parts[part.group].chunk.id in fit.evicted):
            return False
        affected = self._affected(conv, part)
        before = sum(self.part_cost(conv, p, fit.evicted) for p in affected)
        fit.evicted.discard(part.chunk.id)
        after = sum(self.part_cost(conv, p, fit.evicted) for p in affected)
        if fit.tokens - before + after > limit:
            fit.evicted.add(part.chunk.id)
            return False
        fit.tokens += after - before
        return True

    def cut(self, conv: Conversation, fit: Fit, budget: int) -> None:
        """The tail's oversized tool results cut head-and-tail (proxy/cutting.py)."""
        cut(self.counter, lambda p: self.part_cost(conv, p, fit.evicted), conv, fit, budget)

    def _evict(self, conv: Conversation, part: Part, r: Ranked, policy: Policy, fit: Fit,
               total: int, reason: str | None = None) -> int:
        evicted = fit.evicted
        if part.group is None or (part.role in RESULTS and
                                  conv.parts[part.group].chunk.id not in evicted):
            # most evictions, counted alone (a cold history's ~900 a fit): a message that
            # is no tool call's goes whole; a result whose call stays leaves its stub and
            # changes no other part's cost (`part_cost`)
            before = self.part_cost(conv, part, evicted)
            evicted.add(part.chunk.id)
            fit.new.append(Decision(part, r.score, reason or policy.reason))
            return total - before + (0 if part.group is None else self.stub_cost(part))
        affected = self._affected(conv, part)
        before = sum(self.part_cost(conv, p, fit.evicted) for p in affected)
        fit.evicted.add(part.chunk.id)
        fit.new.append(Decision(part, r.score, reason or policy.reason))
        return total - before + sum(self.part_cost(conv, p, fit.evicted) for p in affected)

    def _group_evictable(self, conv: Conversation, head: Part, evicted: set[str],
                         whole: bool) -> bool:
        for j in conv.groups.get(head.chunk.index, ()):
            c = conv.parts[j].chunk
            if c.klass is ChunkClass.PERMANENT:
                return False
            if not whole and c.id not in evicted:
                return False
        return True
