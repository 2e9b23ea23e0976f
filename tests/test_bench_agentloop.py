"""The agent-loop benchmark's own correctness: the generator writes valid OpenAI histories
whose questions never give their answer away, and the scorer counts a fact as kept exactly
when its answer token reaches the upstream."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from bench import agentgen
from bench.agentloop import AgentLoop, Phase, oracle_fit
from bench.harness import HttpTarget
from bench.prefix import bounds
from bench.replay import Meter, ReplayStats, requests_of, tool_pairs_valid
from tests.support.openai_server import UpstreamServer

ROLES = {"system", "user", "assistant", "tool"}


def small(kind: str, seed: int, facts: int = 2) -> agentgen.Session:
    return agentgen.generate(kind, random.Random(f"t{seed}:{kind}"), 9000, facts)


@pytest.mark.parametrize("kind", agentgen.KINDS)
def test_sessions_are_valid_openai_histories(kind: str) -> None:
    s = small(kind, 0)
    assert s.messages[0]["role"] == "system" and s.messages[1]["role"] == "user"
    assert {m["role"] for m in s.messages} <= ROLES
    ids = [c["id"] for m in s.messages for c in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids))  # every call id is unique
    for m in s.messages:
        for c in m.get("tool_calls") or []:
            json.loads(c["function"]["arguments"])  # arguments are JSON
    reqs = requests_of(s.messages)
    assert len(reqs) > 5 and all(tool_pairs_valid(r) for r in reqs)
    assert all(t["function"]["name"] in {t["function"]["name"] for t in s.tools}
               for m in s.messages for t in m.get("tool_calls") or [])
    # every tool output is new: no two are the same text
    outputs = [m["content"] for m in s.messages if m["role"] == "tool"]
    assert len(set(outputs)) == len(outputs)


async def test_the_fake_openai_server_accepts_every_request(upstream: UpstreamServer) -> None:
    s = small("support", 1)
    async with aiohttp.ClientSession() as http:
        for msgs in requests_of(s.messages):
            async with http.post(f"{upstream.url}/chat/completions", json={
                    "model": "mock-1", "messages": msgs, "tools": s.tools}) as r:
                assert r.status == 200, await r.text()
    assert upstream.rejected == 0


@pytest.mark.parametrize("seed", range(6))
def test_questions_never_contain_their_answer_and_each_answer_has_one_home(seed: int) -> None:
    for kind in agentgen.KINDS:
        s = small(kind, seed)
        assert {f.kind for f in s.facts} == set(agentgen.FACT_KINDS)
        for f in s.facts:
            assert f.answer not in f.question
            assert f.question in s.messages[f.asked]["content"]
            assert s.messages[f.asked]["role"] == "user" and f.asked > f.planted
            homes = [i for i, m in enumerate(s.messages) if f.answer in orjson.dumps(m).decode()]
            assert homes == [f.planted]
            if f.kind == "tool":
                assert s.messages[f.planted]["role"] == "tool"
            else:
                assert s.messages[f.planted]["role"] == "user"


def test_paraphrases_vary() -> None:
    """Several wordings per fact kind, so nothing is tuned to one phrasing."""
    for kind in agentgen.FACT_KINDS:
        questions = {q for t in agentgen.TYPES if t.kind == kind for _, qs in t.variants
                     for q in qs}
        assert len(questions) >= 10
        for t in agentgen.TYPES:
            if t.kind == kind:
                assert sum(len(qs) for _, qs in t.variants) >= 2, t.name


def test_oracle_keeps_the_fact_and_fits() -> None:
    s = small("coding", 3)
    meter = Meter()
    f = s.facts[0]
    msgs = s.messages[:f.asked + 1]
    out = oracle_fit(msgs, {f.planted}, meter, 4000)
    assert out is not None and s.messages[f.planted] in out and tool_pairs_valid(out)
    assert meter.prompt(out) <= 4000 and out[-1] == msgs[-1]


@pytest.fixture
async def dropper(upstream: UpstreamServer) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """A stand-in proxy in front of the upstream: replaces the content of any message
    holding one of `drop`'s tokens by a stub, or moves the token into a recall block
    appended to the last message when the token maps to "recall", or keeps it as one of
    the stub's identifiers when it maps to "stub"."""
    rules: dict[str, str] = {}

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        msgs: list[dict[str, Any]] = body["messages"]
        recalled = 0
        for token, how in rules.items():
            for i, m in enumerate(msgs):
                if token in orjson.dumps(m).decode() and i != len(msgs) - 1:
                    msgs[i] = {**m, "content": "[offloaded]" if how != "stub" else (
                        "[ctxwarden: 9 tokens of tool output offloaded as chunk c; relevant "
                        f"passages are recalled automatically; identifiers in it: {token}]")}
                    if how == "recall":
                        recalled += 1
                        last = msgs[-1]
                        msgs[-1] = {**last, "content": f"{last['content']}\n\n<ctxwarden-recall>"
                                    f"{token}</ctxwarden-recall>"}
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{upstream.url}/chat/completions", json=body) as r:
                raw = await r.read()
        return web.Response(body=raw, status=r.status, content_type="application/json",
                            headers={"X-Ctxwarden-Recalled": str(recalled)})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", rules
    finally:
        await runner.cleanup()


async def test_a_fact_is_kept_exactly_when_its_token_reaches_the_upstream(
        upstream: UpstreamServer, dropper: tuple[str, dict[str, str]]) -> None:
    url, rules = dropper
    s = small("research", 4, facts=2)
    fate = {}
    for i, f in enumerate(s.facts):  # dropped, kept, recalled, kept in a stub in turn
        fate[f.answer] = ("drop", "keep", "recall", "stub")[i % 4]
        if fate[f.answer] != "keep":
            rules[f.answer] = fate[f.answer]
    phase = Phase(ReplayStats(window=10**9, max_output=0))
    async with aiohttp.ClientSession() as http:
        target = KnownDirect(http, url, upstream, "mock-1")
        questions = {("s", n): f for n, f in s.question_requests().items()}
        await AgentLoop(target, phase, Meter(), s.tools, questions=questions).session(
            s.messages, "s")
    expected = {k: sum(fate[f.answer] != "drop" for f in s.facts if f.kind == k)
                for k in agentgen.FACT_KINDS}
    assert phase.facts.kept == expected
    assert phase.facts.total == len(s.facts) == 6
    assert len(phase.facts.misses) == sum(v == "drop" for v in fate.values())
    assert phase.facts.via_stub == sum(v == "stub" for v in fate.values()) > 0
    assert phase.stats.recalling > 0 and max(phase.recall_tokens) > 0
    assert phase.stats.forwarded == phase.stats.requests and phase.stats.invalid == 0
    # each request's pair went one way or the other: the proxy first on even steps, and
    # each list holds the time of the call that went first
    via, direct = phase.first
    assert len(via) + len(direct) == len(phase.overhead) == phase.stats.requests
    assert len(via) == (phase.stats.requests + 1) // 2 and min(via) > 0
    assert set(direct) == {KnownDirect.MS} and KnownDirect.MS not in via


class KnownDirect(HttpTarget):
    """The direct call made as usual, its time reported as a value no real call takes."""

    MS = 12_345.0

    async def direct(self, body: dict[str, Any]) -> float:
        await super().direct(body)
        return self.MS


def test_prefix_bounds_follow_their_definitions() -> None:
    meter = Meter()
    traj = [{"role": "system", "content": "policy " * 40}]
    for i in range(4):
        traj += [{"role": "user", "content": f"question {i} " * 30},
                 {"role": "assistant", "content": f"answer {i} " * 20}]
    n = [meter.tokens(m) for m in traj]
    totals = [sum(n[:k]) for k in range(2, len(traj), 2)]  # the four requests' prompts

    # Room for everything: the ceiling is 1 - new/total per request, and nothing is dropped.
    ceiling, best, _ = bounds([traj], meter, budget=10_000)
    pairs = list(zip(totals, totals[1:], strict=False))
    assert ceiling == pytest.approx(sum(1 - (b - a) / b for a, b in pairs) / 3)
    assert best == pytest.approx(sum(a / b for a, b in pairs) / 3)

    # The fourth request is over budget; with mark 0 it keeps only its newest message, and
    # the prefix breaks right after the system prompt.
    budget = totals[3] - 1
    ceiling, best, mark = bounds([traj], meter, budget, marks=(0.0,))
    last = n[0] + n[7]
    assert mark == 0.0
    assert best == pytest.approx((totals[0] / totals[1] + totals[1] / totals[2]
                                  + n[0] / last) / 3)
    new4 = totals[3] - totals[2]
    assert ceiling == pytest.approx((1 - (totals[1] - totals[0]) / totals[1]
                                     + 1 - (totals[2] - totals[1]) / totals[2]
                                     + 1 - new4 / budget) / 3)


async def test_every_tau_trajectory_is_counted_per_block_and_in_all(tmp_path: Path) -> None:
    """bench/tauall.py: blocks of 40 in order, and the overall rate is the pooled one (not
    a mean of the blocks' rates)."""
    from bench import tauall
    from bench.agentloop import TAU, TAU_WINDOW

    trajs = json.loads(TAU.read_text())[:42]
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(trajs))
    held = await tauall.measure(path, ("rwoe", "truncate"), TAU_WINDOW)
    rw = held[0]
    assert [s.trajectories for s in rw.blocks] == [40, 2]
    pooled = 1 - sum(s.misses for s in rw.blocks) / sum(s.reused for s in rw.blocks)
    assert rw.hit_rate == pooled
    table = tauall.table(held, TAU_WINDOW)
    assert "| 0-39 | 40-41 |" in table and "| rwoe | " in table
    assert tauall.verdict(held)[0].startswith("- tau-bench reference hits over all 42")


async def test_the_window_sweep_replays_every_policy_at_each_window() -> None:
    """bench/tauall.py `windows`: a row per window, a cell per policy in order; a larger
    window keeps at least as many references (nothing else changes)."""
    from bench import tauall
    from bench.agentloop import TAU

    sweep = await tauall.windows(TAU, ("rwoe", "truncate"), (2_500, 6_000), limit=3)
    assert list(sweep) == [2_500, 6_000]
    assert [[s.label for s in row] for row in sweep.values()] == [["rwoe", "truncate"]] * 2
    small, large = sweep[2_500][1], sweep[6_000][1]
    assert small.trajectories == large.trajectories == 3
    assert small.reused == large.reused > 0 and small.hit_rate <= large.hit_rate
    table = tauall.windows_table(sweep, ("rwoe", "truncate"))
    assert "| window | rwoe | truncate |" in table and "| 2,500 | " in table
