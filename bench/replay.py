"""The one replay core: agent histories sent request by request, scored on what was forwarded.

An agent loop resends its whole history on every call, so a trajectory (a message list)
is replayed as the prefixes that precede each assistant message (`requests_of`), in order,
under one session id, so sticky evictions carry over turn to turn. Every benchmark that
sends histories through ctxwarden goes through `Replay`; what differs is the `Target`:

- `PipelineTarget`: the proxy's own `Pipeline.prepare` in this process (no HTTP): fast,
  for the policy replays (bench/policies/replay.py) and bench/prefix.py;
- `bench.harness.HttpTarget`: the real app over HTTP, with a fake upstream recording every
  body it receives (bench/agentloop.py).

Per request the core scores only what was forwarded, never what the proxy says it did:
validity (OpenAI's tool-pair rules), the window (`sent + tools + max_output_tokens >
window`; one rule everywhere), system prompt and first user message unchanged, tokens the
client sent and tokens forwarded (one tokenizer for both), the cache-prefix ratio and
reference hits (below). Subclasses add what their benchmark needs by overriding `send`
(pacing, timing) and `observe` (what else to score).

Cache-prefix ratio of a forwarded prompt: the share of its tokens that repeat the previous
forwarded prompt of the session message for message (what a provider's prefix cache can
serve); averaged over every request after a session's first. New messages are never in
the previous prompt, so forwarding everything untouched scores below 1.

References: the ids and rare tokens (`proxy.analysis.rare_tokens`: numbers, ids, paths) of
the message the agent actually wrote next that occur in an earlier message of the history.
A reference is a hit when one of its earlier occurrences is in the forwarded request (a
recalled passage counts; a stub names a chunk, not its contents), else a miss.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

import proxy  # noqa: F401  (offline defaults before litellm/tiktoken)
from proxy.analysis import rare_tokens, text_of
from proxy.tokens import REPLY_PRIMING, TokenCounter, encoding_for

Message = dict[str, Any]


def requests_of(traj: list[Message]) -> list[list[Message]]:
    """The prefixes an agent sent: every history that precedes an assistant message."""
    return [traj[:i] for i in range(1, len(traj)) if traj[i]["role"] == "assistant"]


def tool_pairs_valid(messages: list[Message]) -> bool:
    """OpenAI's rule: every tool message answers a call of the assistant message before it
    (with only tool messages between), and every call is answered before anything else."""
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                return False
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return False
        if m.get("role") == "assistant" and m.get("tool_calls"):
            pending = {c.get("id") for c in m["tool_calls"]}
    return not pending


@dataclass(slots=True)
class Sent:
    """What one request became: the messages forwarded upstream (None: not forwarded)."""

    messages: list[Message] | None
    status: int = 200
    code: str | None = None  # the error's code when not forwarded
    recalled: int = 0  # passages the proxy says it recalled
    new_evictions: int = 0
    ms: float = 0.0  # time to the answer, as the client saw it


class Target(Protocol):
    """Where a replay sends each request."""

    async def send(self, body: dict[str, Any], session: str) -> Sent: ...


class Meter:
    """Tokens of a message as the provider counts them, cached by the message's bytes (a
    forwarded message is often a fresh object with the same content)."""

    def __init__(self, model: str = "openai/gpt-4o") -> None:
        self.counter = TokenCounter(encoding_for(model))
        self._tokens: dict[bytes, int] = {}
        self._rare: dict[bytes, frozenset[str]] = {}

    def key(self, m: Message) -> bytes:
        return orjson.dumps(m, option=orjson.OPT_SORT_KEYS)

    def tokens(self, m: Message) -> int:
        k = self.key(m)
        n = self._tokens.get(k)
        if n is None:
            n = self._tokens[k] = self.counter.message(m)
        return n

    def prompt(self, messages: Iterable[Message]) -> int:
        return REPLY_PRIMING + sum(self.tokens(m) for m in messages)

    def rare(self, m: Message) -> frozenset[str]:
        k = self.key(m)
        hit = self._rare.get(k)
        if hit is None:
            hit = self._rare[k] = rare_tokens(text_of(m))
        return hit


def prefix_ratio(meter: Meter, prev: list[Message] | None, cur: list[Message]) -> float:
    """Share of `cur`'s tokens that repeat `prev` message for message, from the start."""
    total = sum(meter.tokens(m) for m in cur)
    if not prev or not total:
        return 0.0
    same = 0
    for a, b in zip(prev, cur, strict=False):
        if meter.key(a) != meter.key(b):
            break
        same += meter.tokens(b)
    return same / total


STUB_OPEN = "[ctxwarden: "  # an evicted tool result's stub (proxy/stubs.py) starts so


def is_stub(m: Message) -> bool:
    content = m.get("content")
    return isinstance(content, str) and content.startswith(STUB_OPEN) and (
        " offloaded as chunk " in content[:200])


def references(meter: Meter, reply: Message, history: list[Message],
               out: list[Message]) -> tuple[int, int, int]:
    """(references the reply makes to the history, of which missing from `out`, of which
    found in `out` only among a stub's identifiers)."""
    used = meter.rare(reply)
    if not used:
        return 0, 0, 0
    earlier: set[str] = set()
    for m in history:
        earlier |= meter.rare(m) & used
    if not earlier:
        return 0, 0, 0
    whole: set[str] = set()
    stubs: set[str] = set()
    for m in out:
        (stubs if is_stub(m) else whole).update(meter.rare(m) & earlier)
    return len(earlier), len(earlier - whole - stubs), len(stubs - whole)


@dataclass
class ReplayStats:
    """Totals over every request of a replay."""

    label: str = ""
    window: int = 0
    max_output: int = 256
    trajectories: int = 0
    requests: int = 0
    refused: int = 0  # 400 context_length_exceeded: even the tail did not fit
    errors: int = 0  # any other failure to forward
    invalid: int = 0
    over_window: int = 0
    head_changed: int = 0
    tokens_in: int = 0  # what the client sent (messages only, every request)
    tokens_out: int = 0  # what was forwarded (messages only, forwarded requests)
    evicting: int = 0  # requests with new evictions
    recalling: int = 0  # requests the proxy recalled into
    reused: int = 0  # references with an earlier source
    misses: int = 0
    stub_hits: int = 0  # references found only among a stub's identifiers
    requests_with_miss: int = 0
    prefix_ratios: list[float] = field(default_factory=list)

    @property
    def forwarded(self) -> int:
        return self.requests - self.refused - self.errors

    @property
    def valid(self) -> int:
        return self.forwarded - self.invalid - self.over_window - self.head_changed

    @property
    def reduction(self) -> float:
        return 1 - self.tokens_out / self.tokens_in if self.tokens_in else 0.0

    @property
    def prefix_ratio(self) -> float:
        return statistics.fmean(self.prefix_ratios) if self.prefix_ratios else 0.0

    @property
    def miss_rate(self) -> float:
        return self.misses / self.reused if self.reused else 0.0

    @property
    def hit_rate(self) -> float:
        return 1 - self.miss_rate

    @property
    def stub_hit_rate(self) -> float:
        """The share of references hit only through a stub's identifiers."""
        return self.stub_hits / self.reused if self.reused else 0.0


@dataclass
class Step:
    """One request of a session, as the core saw it (handed to `Replay.observe`)."""

    session: str
    index: int  # the request's position in the session
    traj: list[Message]
    messages: list[Message]  # what the client sent
    sent: Sent
    fits: bool = False  # forwarded, valid and within the window


class Replay:
    """Sends trajectories through a target and scores every request into `stats`."""

    def __init__(self, target: Target, stats: ReplayStats, meter: Meter | None = None,
                 model: str = "x", tools: list[dict[str, Any]] | None = None) -> None:
        self.target = target
        self.stats = stats
        self.meter = meter or Meter()
        self.model = model
        self.tools = tools
        self.tools_tokens = self.meter.counter.tools(tools) if tools else 0

    def body(self, messages: list[Message]) -> dict[str, Any]:
        b: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.tools:
            b["tools"] = self.tools
        return b

    async def send(self, step: int, messages: list[Message], session: str) -> Sent:
        """One request; subclasses time it, pace it or send it elsewhere too."""
        return await self.target.send(self.body(messages), session)

    async def session(self, traj: list[Message], session: str,
                      requests: list[list[Message]] | None = None) -> None:
        """Every request of one trajectory, in order, under one session id."""
        self.stats.trajectories += 1
        prev: list[Message] | None = None
        for k, msgs in enumerate(requests if requests is not None else requests_of(traj)):
            sent = await self.send(k, msgs, session)
            step = Step(session, k, traj, msgs, sent)
            self.score(step, prev)
            self.observe(step)
            if sent.messages is not None:
                prev = sent.messages

    async def trajectories(self, trajectories: list[dict[str, Any]]) -> None:
        """tau-bench-shaped trajectories ({task_id, trial, traj}), one session each."""
        for t in trajectories:
            await self.session(t["traj"], session_of(t))

    def score(self, step: Step, prev: list[Message] | None) -> None:
        s, m, sent = self.stats, self.meter, step.sent
        s.requests += 1
        s.tokens_in += m.prompt(step.messages)
        out = sent.messages
        if out is None:
            if sent.code == "context_length_exceeded":
                s.refused += 1
            else:
                s.errors += 1
            return
        tokens = m.prompt(out)
        s.tokens_out += tokens
        valid = tool_pairs_valid(out)
        inside = tokens + self.tools_tokens + s.max_output <= s.window
        s.invalid += not valid
        s.over_window += not inside
        s.head_changed += out[:2] != step.traj[:2]
        s.evicting += sent.new_evictions > 0
        s.recalling += sent.recalled > 0
        step.fits = valid and inside
        if step.index:  # the first request of a session has no previous prompt
            s.prefix_ratios.append(prefix_ratio(m, prev, out))
        n = len(step.messages)
        if n < len(step.traj):
            reused, missed, via_stub = references(m, step.traj[n], step.messages, out)
            s.reused += reused
            s.misses += missed
            s.stub_hits += via_stub
            s.requests_with_miss += missed > 0

    def observe(self, step: Step) -> None:
        """What a subclass scores beyond the core (default: nothing)."""


class PipelineTarget:
    """`Pipeline.prepare` in this process: what the proxy would forward, without HTTP.

    `flush_after_evictions` waits for the store's background embedding after every request
    that evicted (the replays' "recall on" assumes an embedder that keeps up)."""

    def __init__(self, route: Any, store: Any, flush_after_evictions: bool = False) -> None:
        from proxy.config import Settings
        from proxy.pipeline import Pipeline
        from store.base import MemoryStore

        self.route = route
        self.store = store if store is not None else MemoryStore()
        self.flush = flush_after_evictions
        self.pipeline = Pipeline(Settings(routes=[route]), self.store)

    async def send(self, body: dict[str, Any], session: str) -> Sent:
        from proxy.errors import ProxyError

        t0 = time.perf_counter()
        try:
            p = await self.pipeline.prepare(body, self.route, "bench", session)
        except ProxyError as exc:
            return Sent(None, exc.status, exc.code)
        if self.flush and p.new_evictions:
            await self.store.flush()
        return Sent(p.body["messages"], recalled=p.recalled, new_evictions=p.new_evictions,
                    ms=(time.perf_counter() - t0) * 1000)

    async def __aenter__(self) -> PipelineTarget:
        return self

    async def __aexit__(self, *exc: object) -> None:
        turns = getattr(self.pipeline, "turns", None)
        if turns is not None:  # the inspector's turn summaries, written lazily
            await turns.close()
        await self.store.close()


def route(window: int, policy: str = "rwoe", recall: bool = False, **extra: Any) -> Any:
    """A replay route: `window` tokens, 256 reserved for the reply."""
    from proxy.config import RouteSettings

    return RouteSettings.model_validate({
        "name": "replay", "model": "*", "upstream": {"model": "openai/gpt-4o"},
        "context_window": window, "max_output_tokens": 256, "policy": policy,
        "recall": {"enabled": recall}, **extra})


async def replay(trajectories: list[dict[str, Any]], r: Any, store: Any = None,
                 label: str = "") -> ReplayStats:
    """tau-bench-shaped trajectories ({task_id, trial, traj}) through the pipeline."""
    stats = ReplayStats(label or r.policy, r.context_window, r.max_output_tokens)
    async with PipelineTarget(r, store) as target:
        await Replay(target, stats).trajectories(trajectories)
    return stats


def session_of(t: dict[str, Any]) -> str:
    return f"tau-{t['task_id']}-{t.get('trial', 0)}"


if __name__ == "__main__":
    import asyncio
    import json
    import sys

    data = json.load(open(sys.argv[1] if len(sys.argv) > 1 else
                          "tests/data/tau-bench-gpt-4o-airline.json"))
    s = asyncio.run(replay(data, route(3000)))
    print(s.requests, f"reduction={s.reduction:.3f} prefix={s.prefix_ratio:.3f} "
          f"hits={s.hit_rate:.3f} refused={s.refused} invalid={s.invalid}")
