"""Relevance at wire speed, through the app: recall on the very next turn with no embedder
and no pause, a cold history keeps its evidence, no recall when nothing is asked, a stable
recall block, and an oversized tool result cut rather than refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from proxy.app import init_app
from proxy.config import Settings
from proxy.errors import StoreUnavailable
from proxy.keys import PIPELINE
from proxy.recall import HEADER, OPEN
from proxy.step import asking
from store.base import MemoryStore
from store.relevance import EAGER
from tests.support.messages import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
FACT = "\n".join([
    "# Infra notes", "Owners: platform team; on-call rotates weekly on Mondays.",
    "CI runs on self-hosted runners in two pools (small, large); caches live 7 days.",
    "The staging database runs on host pg-stg-7741.internal behind the bastion.",
    "Nightly backups start at 02:00 UTC and are kept for 30 days in cold storage.",
    "Feature flags are served by the flag service; defaults live in flags.yaml.",
    "Log retention: 14 days hot, 90 days archived; dashboards in the metrics UI.",
    "Release trains leave every other Thursday; hotfixes need two approvals.",
] * 3)
ANSWER = "pg-stg-7741.internal"
ASK = "Before I forget: which machine hosts the staging database?"


class NoSearchStore(MemoryStore):
    """The store as the request path may use it: durable writes, no search, no vectors."""

    down = False  # set: every write fails as a LanceStore's does when its disk fails

    async def recall(self, query: Any) -> Any:
        raise AssertionError("recall must not wait on the store")

    async def record(self, chunks: Any, events: Any) -> None:
        if self.down:
            raise StoreUnavailable("The store could not make this write durable (test).")
        await super().record(chunks, events)

    async def log(self, events: Any) -> None:
        if self.down:
            raise StoreUnavailable("The store could not make this write durable (test).")
        await super().log(events)


def settings(upstream: UpstreamServer, window: int = 3000, **route: Any) -> Settings:
    return Settings(store={"path": ":memory:"}, routes=[{
        "name": "agent", "model": "agent-*",
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
        "context_window": window, "max_output_tokens": 256, **route}])


def listing(i: int) -> str:
    """A 300-token tool output about something else entirely."""
    return "\n".join(f"src/module_{i}/part_{j}.py: def handler_{i}_{j}(request): "
                     f"return render(template_{j}, status={200 + j})" for j in range(14))


def agent_session(turns: int, fact_at: int = 2) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  user("Refactor the request handlers, module by module.")]
    for t in range(1, turns + 1):
        cid = f"call_{t}"
        out = FACT if t == fact_at else listing(t)
        msgs += [assistant(None, call(cid, "read_file", json.dumps({"path": f"notes/{t}.md"}))),
                 tool(cid, out)]
    return msgs


async def steps(client: TestClient[Any, Any], history: list[dict[str, Any]]) -> None:
    """`history` sent back to back, one request per agent step (each call's result)."""
    for end in range(4, len(history) + 1, 2):
        await post(client, history[:end])


async def ask_last(client: TestClient[Any, Any], upstream: UpstreamServer,
                   history: list[dict[str, Any]], ask: str) -> str:
    """`ask` after `history`, as the user's next message: what that message carried
    upstream (its recall block)."""
    await post(client, [*history, assistant("Handlers are done."), user(ask)])
    return str(upstream.history[-1].body["messages"][-1]["content"])


async def post(client: TestClient[Any, Any], msgs: list[dict[str, Any]],
               sid: str = "s-1") -> Any:
    resp = await client.post("/v1/chat/completions", headers={"X-Session-ID": sid},
                             json={"model": "agent-1", "messages": msgs})
    assert resp.status == 200, await resp.text()
    return resp


async def test_evicted_on_turn_n_is_recalled_on_turn_n_plus_1(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(16)
    await steps(client, history)
    assert ANSWER not in json.dumps(upstream.history[-1].body["messages"])  # evicted
    resp = await post(client, [*history, assistant("Handlers are done."), user(ASK)])
    sent = upstream.history[-1].body["messages"]
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert sent[-1]["content"].startswith(ASK) and OPEN in sent[-1]["content"]
    assert ANSWER in sent[-1]["content"]
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    recalls = [e for e in log["events"] if e["action"] == "recall"]
    assert recalls and recalls[0]["reason"].startswith("lexical match")
    assert "stag" in recalls[0]["reason"] and "databas" in recalls[0]["reason"]


class GatedStore(NoSearchStore):
    """Writes of decisions alone (a recall, a restore) wait at `gate`; writes that carry
    chunks go through."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()

    async def record(self, chunks: Any, events: Any) -> None:
        if not chunks:
            await self.gate.wait()
        await super().record(chunks, events)


async def test_a_recall_goes_upstream_while_its_decisions_are_written(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A turn that drops nothing is forwarded while its log is written, and its client is
    answered once that is written: the write is off the forward's path, not lost, and
    /admin shows the recall when the answer arrives."""
    store = GatedStore()
    client = await aiohttp_client(init_app(settings(upstream), store=store))
    history = agent_session(16)
    await steps(client, history)  # its evictions carry chunks: through the gate
    store.gate.clear()
    n = len(upstream.history)
    asked = asyncio.ensure_future(
        post(client, [*history, assistant("Handlers are done."), user(ASK)]))
    async with asyncio.timeout(10):
        while len(upstream.history) == n:  # the question went upstream, recall and all
            await asyncio.sleep(0.005)
    assert ANSWER in upstream.history[-1].body["messages"][-1]["content"]
    await asyncio.sleep(0.05)
    assert not asked.done()  # its client waits for the decisions' write
    assert not [e for e in await store.events("default", "s-1") if e.action == "recall"]
    store.gate.set()
    resp = await asked
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    assert [e for e in log["events"] if e["action"] == "recall"]


async def test_what_the_client_removed_or_rewrote_is_never_recalled(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A message the client no longer sends stays stored but is not put back: a redacted
    tool output, a deleted call and its result, another branch of the same opening."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(16)
    await steps(client, history)
    asked = [assistant("Handlers are done."), user(ASK)]
    fact = next(i for i, m in enumerate(history) if m.get("content") == FACT)
    redacted = [*history[:fact], {**history[fact], "content": "[redacted by the user]"},
                *history[fact + 1:]]
    deleted = [*history[:fact - 1], *history[fact + 1:]]
    for label, msgs in (("redacted", redacted), ("deleted", deleted)):
        resp = await post(client, [*msgs, *asked])
        sent = json.dumps(upstream.history[-1].body["messages"])
        assert ANSWER not in sent, label
        assert "pg-stg" not in sent, label
        assert resp.headers["X-Ctxwarden-Session"] == "s-1"
    # the same history with the message still in it: recalled as before
    resp = await post(client, [*history, *asked])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert ANSWER in upstream.history[-1].body["messages"][-1]["content"]
    # ... and its block, which would ride on the next tool turn, goes once it is redacted
    step = [assistant(None, call("c_x", "read_file", '{"path": "x.md"}')), tool("c_x", "ok")]
    await post(client, [*history, *asked, *step])
    assert ANSWER in json.dumps(upstream.history[-1].body["messages"])  # carried
    await post(client, [*redacted, *asked, *step])
    assert ANSWER not in json.dumps(upstream.history[-1].body["messages"])
    # a branch that shares the opening (same session) but never held the fact
    other = [*history[:2], *(m for t in range(20, 36) for m in (
        assistant(None, call(f"b_{t}", "read_file", json.dumps({"path": f"b/{t}.md"}))),
        tool(f"b_{t}", listing(t))))]
    resp = await post(client, [*other, *asked])
    assert ANSWER not in json.dumps(upstream.history[-1].body["messages"])
    evicted = (await (await client.get("/admin/evictions",
                                       params={"session": "s-1"})).json())["events"]
    assert any(e["action"] == "evict" and e["chunk_id"] for e in evicted)  # still stored


async def test_a_recall_whose_event_cannot_be_written_still_answers(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A turn that evicts nothing new and recalls: its only write is the recall event. The
    store failing it does not turn the good request into a 503: the decision goes to the
    log line and is written when the store is back."""
    store = NoSearchStore()
    # a question's recall within the room the watermark left (a larger share evicts)
    client = await aiohttp_client(init_app(settings(
        upstream, recall={"question_budget_fraction": 0.1}), store=store))
    history = agent_session(15)  # its last turn evicted down to the watermark: room left
    await steps(client, history)
    store.down = True
    with capture_logs() as logs:
        resp = await post(client, [*history, assistant("Handlers are done."), user(ASK)])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert ANSWER in upstream.history[-1].body["messages"][-1]["content"]
    line = next(e for e in logs if e["event"] == "events_unrecorded")
    assert line["retry"] is True and line["events"][0].startswith("recall ")
    assert not [e for e in await store.events("default", "s-1") if e.action == "recall"]
    store.down = False
    for _ in range(50):  # the retry rides the turn log's next batch (0.25 s linger)
        recalls = [e for e in await store.events("default", "s-1") if e.action == "recall"]
        if recalls:
            break
        await asyncio.sleep(0.05)
    assert recalls and recalls[0].reason.startswith("lexical match")


async def test_the_recall_block_goes_only_into_a_user_message_or_a_tool_result(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A trailing system reminder or an assistant prefill never carries recalled text:
    system authority for tool output, or words put in the model's mouth."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(16)
    await steps(client, history)
    asked = [*history, assistant("Handlers are done."), user(ASK)]
    for tail in ({"role": "system", "content": "Reminder: answer in one line."},
                 {"role": "developer", "content": "Reminder: cite the file."},
                 {"role": "assistant", "content": "The staging database is on"}):
        resp = await post(client, [*asked, tail])
        assert resp.headers["X-Ctxwarden-Recalled"] != "0"
        sent = upstream.history[-1].body["messages"]
        assert sent[-1] == tail  # untouched
        hosts = [m["role"] for m in sent if OPEN in str(m.get("content"))]
        assert hosts == ["user"] and sent[-2]["content"].startswith(ASK)
        assert ANSWER in sent[-2]["content"]


async def test_a_step_that_asks_nothing_recalls_nothing(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(16)
    resp = await post(client, history)
    assert int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    assert resp.headers["X-Ctxwarden-Recalled"] == "0"
    assert OPEN not in json.dumps(upstream.history[-1].body["messages"])


STAGING_ENV = "\n".join(
    [f"{s.upper()}_URL=https://{s}.svc.cluster.local" for s in (
        "billing", "search", "mailer", "catalog", "profile", "ledger", "export", "webhook")]
    + ["PGHOST=pg-stg-5171.internal"]
    + [f"{s.upper()}_TTL={30 + i}" for i, s in enumerate(("cache", "session", "invoice"))])


def test_what_counts_as_a_question() -> None:
    for q in ("Which server does the staging DB live on?", "what port did it bind",
              "Tell me the order total.", "Remind me of the tracking code", "Is it up? Check.",
              "Hold on. Remind me which server the staging DB lives on.",
              "Sorry, one thing: which branch do I push to",
              "Grab me the trace ID of the slowest request in that first batch of logs.",
              "Pull up the config value we set for retries."):
        assert asking(q), q
    for s in ("Check module 5.", "The staging DB moves to a new server soon.",
              "Fetch https://x.test/?q=1 and summarise it.", "However, carry on.",
              "Done with module 3. Next, module 4.", "v1.2: whatever works, ship it.",
              "Get the tests green, then open a PR."):
        assert not asking(s), s


async def test_a_question_recalls_a_tool_output_by_what_its_call_asked_for(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The output of `read_file("deploy/staging.env")` never says "staging": only its call
    does, and a tool output is indexed with its call's name and arguments. The user's
    question matches it weakly (the word "staging" among `KEY=value` lines: a strength
    under `min_relevance`), yet a question is about what the conversation has seen, so
    it recalls at `question_min_relevance`; the same words as a statement do not."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(30, fact_at=0)
    history[4] = assistant(None, call("call_2", "read_file", '{"path": "deploy/staging.env"}'))
    history[5] = tool("call_2", STAGING_ENV)
    await steps(client, history)
    assert "pg-stg-5171" not in json.dumps(upstream.history[-1].body["messages"])  # evicted
    done = [*history, assistant("Handlers are done.")]
    resp = await post(client, [*done, user("The staging DB moves to a new server soon.")])
    assert resp.headers["X-Ctxwarden-Recalled"] == "0"  # a statement: nothing recalled
    resp = await post(client, [*done, user("For the release checklist: which server does "
                                           "the staging DB live on?")])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert "pg-stg-5171.internal" in upstream.history[-1].body["messages"][-1]["content"]
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    why = next(e["reason"] for e in log["events"] if e["action"] == "recall")
    strength = float(why.split()[2])
    assert why.startswith("lexical match") and "stag" in why
    assert 0.10 <= strength < 0.25  # under min_relevance: only a question recalls it


CUTOFF = "t0: 2024-08-23 17:00 PT\nref: PR-8841\nby: ops-fin\nnext: 2024-09-20 17:00 PT"


async def test_a_question_recalls_a_tool_output_by_what_the_agent_said_it_was_reading(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The output of `read_file("conf/p2.yaml")` says neither "payroll" nor "cutoff", and
    neither does its call: the agent's words beside the call do ("Checking the payroll
    cutoff calendar."), and a tool output is indexed with them too. Without them the
    question recalls the agent's message, not what it read."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(30, fact_at=0)
    history[4] = assistant("Checking the payroll cutoff calendar.",
                           call("call_2", "read_file", '{"path": "conf/p2.yaml"}'))
    history[5] = tool("call_2", CUTOFF)
    await steps(client, history)
    assert "PR-8841" not in json.dumps(upstream.history[-1].body["messages"])  # evicted
    resp = await post(client, [*history, assistant("Handlers are done."),
                               user("What time is the payroll cutoff?")])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert "17:00 PT\nref: PR-8841" in upstream.history[-1].body["messages"][-1]["content"]


async def test_a_cold_history_keeps_the_evidence_for_its_last_question(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """Sent whole for the first time, 4x the window, the question last."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = [*agent_session(36, fact_at=5), assistant("All modules done."), user(ASK)]
    resp = await post(client, history, sid="cold")
    assert int(resp.headers["X-Ctxwarden-Tokens-In"]) > 4 * 2500
    assert ANSWER in json.dumps(upstream.history[-1].body["messages"])
    # Its passages were not all indexed on the request path (the question indexed what it
    # could match); the rest are indexed in the background, between requests.
    index = client.app[PIPELINE].sessions.get("default", "cold").index
    assert index.passages_count > EAGER
    async with asyncio.timeout(10):
        while index.waiting:
            await asyncio.sleep(0.01)
    await post(client, [*history, assistant(f"It is {ANSWER}."), user(ASK)], sid="cold")
    assert ANSWER in json.dumps(upstream.history[-1].body["messages"])


def sweep() -> str:
    """A sweep's runs, one of which crashed: its row says `crashed`, nothing more."""
    rows = [f"osv3-lr{k}e5-bs{b}-{k}{b}x   {'running' if k == 4 and b == 64 else 'finished'}"
            f"   06-09 {10 + k}:{b % 60:02d}   {k * 3}h{b % 60:02d}m   {k}e-5   {b}"
            f"   0.{7400 + k * 13 + b}" for k in range(1, 9) for b in (32, 64, 128)]
    rows[13] = "osv3-lr5e5-bs64-54ujm   crashed    06-09 20:51   21h33m   5e-5   64   -"
    return "\n".join(["run   state   started   runtime   lr   batch   val_loss", *rows])


async def test_a_cold_history_keeps_the_output_the_agent_summed_up_for_its_question(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """"Which run died partway through?": the question's words are in what the agent
    said after reading the sweep ("one crashed partway through"), not in the sweep, whose
    row reads only `crashed`. Sent whole for the first time, the summary's match counts
    for the output it summed up (RWOE's similarity), and the sweep is kept where it was."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(30, fact_at=0)
    history[5] = tool("call_2", sweep())
    history.insert(6, assistant("Sweep has 24 runs: 22 finished, 1 still running and one "
                                "crashed partway through with no val loss logged."))
    ask = "Going back to the sweep: which run died partway through?"
    await post(client, [*history, assistant("Handlers are done."), user(ask)], sid="cold")
    sent = upstream.history[-1].body["messages"]
    assert {"role": "tool", "tool_call_id": "call_2", "content": sweep()} in sent  # whole


def stock_levels() -> str:
    """An inventory export whose one odd row is a negative count (store/notable.py)."""
    sites = ["RNO1", "PHL1", "CMH2", "DFW2"]
    rows = [f"{kind}-{color}-{size},{sites[(i + j) % 4]},{120 + 37 * i + j},{40 + j},"
            f"{80 + 37 * i},{(i * j) % 5 * 100},{20 + i + j}"
            for i, kind in enumerate(["TNT", "BSL", "GLV", "PNT", "HKB"])
            for j, (color, size) in enumerate([("NVY", "41"), ("ORG", "XL"), ("SND", "38"),
                                               ("GRY", "XS"), ("TEA", "L"), ("RED", "44")])]
    rows[17] = "CAP-MGT-XXL,RNO1,0,11,-11,0,20"
    return "\n".join(["sku,site,on_hand,allocated,available,on_order,lead_days", *rows])


@pytest.mark.parametrize("cold", [False, True])
async def test_a_question_about_a_tables_odd_one_out_recalls_its_row(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, cold: bool) -> None:
    """No word of "which item was showing stock below zero in the Reno building?" is in
    the row that answers it (`CAP-MGT-XXL,RNO1,0,11,-11,...`); it is the export's one
    negative count, and "below zero" names that kind of row. Back to back with no
    embedder, and on the same history sent whole for the first time."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(20, fact_at=0)
    history[4] = assistant(None, call("call_2", "wms_export", '{"report": "levels"}'))
    history[5] = tool("call_2", stock_levels())
    if not cold:
        await steps(client, history)
        assert "CAP-MGT-XXL" not in json.dumps(upstream.history[-1].body["messages"])
        index = client.app[PIPELINE].sessions.get("default", "s-1").index
        async with asyncio.timeout(10):  # the background looks for notable rows between
            while index.unexamined:  # turns; a question examines whatever is left
                await asyncio.sleep(0.01)
    ask = "Which item was showing stock below zero in the Reno building?"
    resp = await post(client, [*history, assistant("Handlers are done."), user(ask)])
    sent = upstream.history[-1].body["messages"]
    assert "CAP-MGT-XXL,RNO1,0,11,-11,0,20" in json.dumps(sent)
    if cold:  # the question feeds RWOE's similarity: the export stays whole
        assert resp.headers["X-Ctxwarden-Recalled"] == "0"
        return
    assert "CAP-MGT-XXL,RNO1,0,11,-11,0,20" in sent[-1]["content"]  # recalled, last
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    (why,) = [e["reason"] for e in log["events"] if e["action"] == "recall"]
    assert "on: a notable row (" in why and "negative available" in why


def instances() -> str:
    """An EC2 listing whose one instance nobody labelled: `"Tags": []` (store/notable.py)."""
    teams = ["search", "platform", "data", "web", "ml", "ops", "billing", "growth"]
    found = [{"InstanceId": "i-0" + hashlib.sha1(t.encode()).hexdigest()[:16],
              "InstanceType": "m6i.xlarge", "State": "running",
              "Tags": [{"Key": "team", "Value": t}, {"Key": "env", "Value": "prod"}]}
             for n, t in enumerate(teams)]
    found[5] = {**found[5], "InstanceId": "i-013842e6920fdf9e8", "Tags": []}
    return json.dumps({"Reservations": [{"Instances": found}]}, indent=1)


async def test_a_question_about_what_one_record_lacks_recalls_that_record(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """"The one with no team label": no word of the question is in the record that
    answers it but its empty list, odd where every other record holds tags. Back to
    back, no embedder."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(20, fact_at=0)
    history[4] = assistant(None, call("call_2", "describe_instances", '{"region": "all"}'))
    history[5] = tool("call_2", instances())
    await steps(client, history)
    sent = json.dumps(upstream.history[-1].body["messages"])  # its stub keeps the ids
    assert "i-013842e6920fdf9e8" in sent and '\\"Tags\\": []' not in sent
    ask = "Which machine was the one with no team label on it?"
    recalled = await ask_last(client, upstream, history, ask)
    assert re.search(r'"InstanceId": "i-013842e6920fdf9e8",[^}]*"Tags": \[\]', recalled)
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    (why,) = [e["reason"] for e in log["events"] if e["action"] == "recall"]
    assert "a notable row (odd Tags)" in why, why


async def test_the_same_recall_renders_byte_identical(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(16)
    await steps(client, history)
    history += [assistant("Done."), user(ASK)]
    await post(client, history)
    first = upstream.history[-1].body["messages"][-1]["content"]
    await post(client, history)
    assert upstream.history[-1].body["messages"][-1]["content"] == first
    sent = upstream.history[-1].body["messages"]
    assert OPEN in first
    more = [*history, assistant(None, call("c_x", "read_file", "{}")), tool("c_x", "ok")]
    await post(client, more)
    after = upstream.history[-1].body["messages"]
    # The block stays on the question, byte for byte: the whole previous prompt is a
    # prefix of this one (the client resent the question without it).
    assert after[: len(sent)] == sent and after[len(sent) - 1]["content"] == first


async def test_an_oversized_tool_result_is_cut_not_refused(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    store = MemoryStore()
    client = await aiohttp_client(init_app(settings(upstream, window=2000), store=store))
    big = "BEGIN " + " ".join(f"row {i}: status=ok latency={i % 97}ms" for i in range(900))
    msgs = [{"role": "system", "content": "You are an agent."}, user("Check the logs."),
            assistant(None, call("c1", "read_log", "{}")), tool("c1", big + " END")]
    resp = await post(client, msgs, sid="big")
    sent = upstream.history[-1].body["messages"]
    text = sent[-1]["content"]
    assert text.startswith("BEGIN") and text.endswith("END")
    assert "tokens cut from the middle of this read_log output" in text
    assert int(resp.headers["X-Ctxwarden-Tokens-Out"]) <= 2000
    (chunk,) = store.chunks.values()
    assert chunk.text == big + " END"  # the whole text is stored
    cuts = [e for e in await store.events("default", "big") if e.action == "cut"]
    assert len(cuts) == 1 and cuts[0].chunk_id == chunk.chunk_id


class OtherSessionStore(MemoryStore):
    """A store whose vector search answers from the tenant's other sessions, or stalls."""

    def __init__(self, stall: float = 0.0) -> None:
        super().__init__()
        self.stall = stall
        self.queries: list[Any] = []

    async def recall(self, query: Any) -> Any:
        from store.base import Passage

        self.queries.append(query)
        await asyncio.sleep(self.stall)
        return [Passage("other-chunk", "other-chunk:0", "Vendor contact: Dana at 555-0142.",
                        0.71, 3, "tool", "TRANSIENT", 14)]


async def test_cross_session_recall_searches_the_store_when_the_session_has_nothing(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    store = OtherSessionStore()
    client = await aiohttp_client(init_app(
        settings(upstream, recall={"cross_session": True}), store=store))
    resp = await post(client, [{"role": "system", "content": "sys"},
                               user("Who was the vendor contact?")])
    assert resp.headers["X-Ctxwarden-Recalled"] == "1"
    assert "555-0142" in upstream.history[-1].body["messages"][-1]["content"]
    assert store.queries[0].cross_session and store.queries[0].tenant == "default"


async def test_a_stalled_cross_session_search_is_skipped_not_waited_for(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    store = OtherSessionStore(stall=5.0)
    client = await aiohttp_client(init_app(
        settings(upstream, recall={"cross_session": True, "timeout_ms": 50}), store=store))
    with capture_logs() as logs:
        resp = await post(client, [{"role": "system", "content": "sys"},
                                   user("Who was the vendor contact?")])
    assert resp.headers["X-Ctxwarden-Recalled"] == "0"
    skipped = [e for e in logs if e["event"] == "recall_skipped"]
    assert skipped == [{"event": "recall_skipped", "reason": "timeout", "timeout_ms": 50,
                        "log_level": "warning"}]


def test_focus_keeps_the_best_matching_lines_in_order() -> None:
    from proxy.excerpt import focus
    from proxy.tokens import TokenCounter, encoding_for
    from store.terms import terms

    count = TokenCounter(encoding_for("gpt-4o")).text
    text = "\n".join(["# ADR-012: Refund rounding", "Status: accepted.",
                      "Context: refunds were floats and lost a cent.",
                      "Decision: the partial-refund fee is 0.35 EUR; ticket PAY-4417.",
                      "Consequences: invoices and refunds round alike."])
    q = set(terms("Which ticket tracks it, and what about the partial-refund fee?"))
    decision = text.splitlines()[3]
    assert focus(text, q, count(decision) + 2, count) == decision  # the best line first
    both = focus(text, q, 60, count).splitlines()
    assert both[0] == text.splitlines()[0] and decision in both  # more room: in order
    assert focus(text, q, 4, count) == ""


def test_focus_cuts_a_long_line_around_what_matches() -> None:
    """Minified JSON is one long line: cut to the budget, the part kept is the one that
    holds the query's terms, not the line's head, and the cut is marked."""
    from proxy.excerpt import focus
    from proxy.tokens import TokenCounter, encoding_for
    from store.terms import terms

    count = TokenCounter(encoding_for("gpt-4o")).text
    q = set(terms("I'll charge the Visa card ending in 7447."))
    cut = focus(PROFILE, q, 60, count)
    assert cut.startswith("… ") and cut.endswith(" …") and count(cut) <= 60
    assert '"brand": "visa", "last_four": "7447"' in cut and "credit_card_4421486" in cut
    assert "Sunset Drive" not in cut  # the head, which matches nothing
    assert focus(PROFILE, set(), 60, count).startswith('{"name"')  # no match: the head


PROFILE = json.dumps({
    "name": {"first_name": "Mia", "last_name": "Li"},
    "address": {"address1": "975 Sunset Drive", "address2": "Suite 217", "city": "Austin",
                "country": "USA", "province": "TX", "zip": "78750"},
    "email": "mia.li3818@example.com", "dob": "1990-04-05",
    "payment_methods": {
        "certificate_4856383": {"source": "certificate", "amount": 100},
        "credit_card_4421486": {"source": "credit_card", "brand": "visa",
                                "last_four": "7447", "id": "credit_card_4421486"},
        "gift_card_1955700": {"source": "gift_card", "amount": 62}},
    "saved_passengers": [{"first_name": n, "last_name": "Li", "dob": f"19{60 + i}-0{1 + i}-1{i}"}
                         for i, n in enumerate(("Amelia", "Noah", "Ava", "Mason"))],
    "membership": "gold", "reservations": [f"R{i:02d}X{7 * i % 10}Q" for i in range(40)]})


async def test_a_reply_recalls_what_the_proposal_it_confirms_needs(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """"Yes, go ahead" means what it answers: the agent's proposal ("your Visa card ending
    in 7447") is the step, so the evicted profile holding that card's payment id comes
    back for the call the agent is about to make. The same reply to a proposal that
    names nothing evicted recalls nothing."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(24, fact_at=0)
    history[2] = assistant(None, call("call_1", "get_user_details", '{"user_id": "mia_li"}'))
    history[3] = tool("call_1", PROFILE)
    await steps(client, history)
    assert "credit_card_4421486" not in json.dumps(upstream.history[-1].body["messages"])
    yes = user("Yes, please proceed with that booking. Thank you!")
    resp = await post(client, [*history, assistant("Handlers are done. Shall I go on?"), yes])
    assert resp.headers["X-Ctxwarden-Recalled"] == "0"
    resp = await post(client, [*history, assistant(
        "The total is $255: $250 from your certificate and $5 charged to your Visa card "
        "ending in 7447. Shall I proceed with the booking?"), yes])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    sent = upstream.history[-1].body["messages"]
    assert sent[-1]["content"].startswith(yes["content"])
    assert "credit_card_4421486" in sent[-1]["content"]


async def test_a_reply_keeps_the_proposal_it_answers_in_place(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """"Yes, go ahead" is about the agent's proposal: that message is the step itself, so
    it ranks as most relevant and stays in place, whole. It used to get no similarity
    at all (a step's source is left out of its own matches) and went first among the
    agent's messages, while older options that share its words stayed."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history: list[dict[str, Any]] = [{"role": "system", "content": "You book flights."},
                                     user("Move my IAH to SEA trip to May 24, in business.")]
    for k in range(30):
        history += [assistant(f"Option {k}: flight HAT{100 + k} from IAH on May 24 in "
                              f"business, fare ${700 + k}, one stop in Las Vegas. " * 4),
                    user(f"Option {k} is over my budget. Anything cheaper?")]
    legs = " ".join(f"Leg {j}: flight HAT{286 + j} from IAH on May 24 in business, fare "
                    f"${897 + j}, seat {j + 1}A, one stop in Las Vegas." for j in range(12))
    proposal = assistant(f"To confirm the new itinerary. {legs} The difference is charged to "
                         "the Visa ending in 7447. Shall I proceed?")  # over the room left
    for end in range(4, len(history) + 1, 2):
        await post(client, history[:end])
    await post(client, [*history, proposal, user("Yes, please proceed.")])
    sent = upstream.history[-1].body["messages"]
    assert sent[-2] == proposal
    evicted = [e for e in (await (await client.get(
        "/admin/evictions", params={"session": "s-1"})).json())["events"]
        if e["action"] == "evict" and e["preview"].startswith("Option")]
    assert evicted  # the premise: the older options do not all fit


class EmbeddingStore(MemoryStore):
    """A MemoryStore with an embedder, as a LanceStore has one."""

    def __init__(self, embedder: Any) -> None:
        super().__init__()
        self.embedder = embedder


async def test_vectors_refine_where_ready_a_paraphrase_with_no_shared_word(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    from proxy.keys import PIPELINE
    from tests.support.fakes import TopicEmbedder

    embedder = TopicEmbedder({"money": ["spending", "ceiling", "eur", "money", "afford"]})
    # a 5 % margin (the default for a model without its own tokenizer): the memo is out
    app = init_app(settings(upstream, recall={"min_similarity": 0.5, "vector_wait_ms": 500},
                            safety_margin=0.05), store=EmbeddingStore(embedder))
    client = await aiohttp_client(app)
    fact = "\n".join(["Procurement memo.", "Spending ceiling approved: 4,140 EUR.",
                      *[f"Line item {i}: reviewed." for i in range(40)]])
    history = agent_session(16)
    history[5] = {**history[5], "content": fact}  # turn 2's tool output holds the fact
    for end in range(4, len(history) + 1, 2):
        await post(client, history[:end])
        await app[PIPELINE].relater.flush()  # a paced loop: the embedder keeps up
    assert "4,140" not in json.dumps(upstream.history[-1].body["messages"])
    ask = "How much money can we afford?"  # no word shared with the memo's line
    resp = await post(client, [*history, assistant("Done."), user(ask)])
    sent = upstream.history[-1].body["messages"][-1]["content"]
    assert resp.headers["X-Ctxwarden-Recalled"] != "0" and "4,140 EUR" in sent
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    reasons = [e["reason"] for e in log["events"] if e["action"] == "recall"]
    assert any(r.startswith("vector match, cosine") for r in reasons)
    assert any(ask in batch for batch in embedder.calls)  # asked for on the request


async def test_vectors_pushed_out_of_the_embedders_cache_still_count(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The embedder's cache is an LRU shared by every session. When the request path
    looked its vectors up there, a memo embedded, then pushed out by another session's
    passages before its own session's next turn looked, never got a vector and a
    paraphrase missed it. Rows now land in their session as the batch comes back."""
    from proxy.keys import PIPELINE
    from tests.support.fakes import TopicEmbedder

    embedder = TopicEmbedder({"money": ["spending", "ceiling", "eur", "money", "afford"]},
                             cache_size=64)  # a turn's lines, not a whole session's
    app = init_app(settings(upstream, recall={"min_similarity": 0.5, "vector_wait_ms": 500},
                            safety_margin=0.05), store=EmbeddingStore(embedder))
    client = await aiohttp_client(app)
    relater = app[PIPELINE].relater
    fact = "\n".join(["Procurement memo.", "Spending ceiling approved: 4,140 EUR.",
                      *[f"Line item {i}: reviewed." for i in range(40)]])
    history = agent_session(16)
    history[5] = {**history[5], "content": fact}
    await post(client, history[:6])
    await relater.flush()  # the memo is embedded, and in the cache
    await post(client, agent_session(16), sid="s-2")  # another session, 16 outputs
    await relater.flush()  # ... whose lines push the memo's out
    for end in range(8, len(history) + 1, 2):
        await post(client, history[:end])
        await relater.flush()
    assert "4,140" not in json.dumps(upstream.history[-1].body["messages"])
    resp = await post(client, [*history, assistant("Done."), user("How much money can we afford?")])
    sent = upstream.history[-1].body["messages"][-1]["content"]
    assert resp.headers["X-Ctxwarden-Recalled"] != "0" and "4,140 EUR" in sent
    memo = [batch for batch in embedder.calls if any("4,140 EUR" in t for t in batch)]
    assert len(memo) == 1  # embedded once, and kept by its session


async def test_without_ready_vectors_nothing_waits_and_lexical_still_works(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """An embedder that never answers: requests go on, the words still find the fact."""
    from tests.support.fakes import TopicEmbedder

    class Stalled(TopicEmbedder):
        def _start(self, texts: list[str], urgent: bool) -> Any:
            from concurrent.futures import Future
            return Future()  # never done

    client = await aiohttp_client(init_app(settings(upstream), store=EmbeddingStore(
        Stalled({"x": ["x"]}))))
    history = agent_session(16)
    await steps(client, history)
    resp = await post(client, [*history, assistant("Done."), user(ASK)])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert ANSWER in upstream.history[-1].body["messages"][-1]["content"]


async def test_an_embedder_that_cannot_answer_now_is_not_waited_for(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """Loading its model or busy with a batch (its vectors never arrive here): the request
    does not wait the vector_wait_ms, and the step's words are still handed over."""
    from concurrent.futures import Future

    from tests.support.fakes import TopicEmbedder

    class Loading(TopicEmbedder):
        def answers_now(self) -> bool:
            return False

        def _start(self, texts: list[str], urgent: bool) -> Any:
            self.calls.append(list(texts))
            return Future()  # never done: a wait would last the whole vector_wait_ms

    embedder = Loading({"x": ["x"]})
    client = await aiohttp_client(init_app(settings(upstream, recall={"vector_wait_ms": 1000}),
                                           store=EmbeddingStore(embedder)))
    await post(client, [{"role": "system", "content": "sys"}, user("A brand new question?")])
    assert embedder.waits == []  # never the 1 s wait (nor any)
    assert any("A brand new question?" in batch for batch in embedder.calls)  # handed over


FIVE_TOPICS = {"money": ["spending", "ceiling", "eur", "money"], "cloud": ["cloud"],
               "staff": ["staff"], "travel": ["travel"], "hardware": ["hardware"]}
MEMO = "\n".join(["Procurement memo.", "Spending ceiling approved: 4,140 EUR.",
                  *[f"Line item {i}: reviewed." for i in range(40)]])


def silent_on(ask: str) -> Any:
    """A TopicEmbedder on FIVE_TOPICS whose vector for `ask` never comes (a wait for it
    lasts its whole bound); asked for, it is in `calls`."""
    from concurrent.futures import Future

    from tests.support.fakes import TopicEmbedder

    class NoAnswer(TopicEmbedder):
        def _start(self, texts: list[str], urgent: bool) -> Any:
            if texts == [ask]:
                self.calls.append(list(texts))
                return Future()  # never done
            return super()._start(texts, urgent)

    return NoAnswer(FIVE_TOPICS)


async def memo_evicted(aiohttp_client: ClientFactory, upstream: UpstreamServer,
                       embedder: Any, recall: dict[str, Any], memos: tuple[str, ...] = (MEMO,)
                       ) -> tuple[TestClient[Any, Any], list[dict[str, Any]]]:
    """A paced loop on `embedder` (each turn's passages embedded before the next) whose
    session s-1 has evicted the memo (`memos`: in the 2nd, 3rd... tool results): (the
    client, the history so far)."""
    app = init_app(settings(upstream, recall=recall, safety_margin=0.05),
                   store=EmbeddingStore(embedder))
    client = await aiohttp_client(app)
    history = agent_session(16)
    for i, memo in enumerate(memos):
        history[5 + 2 * i] = {**history[5 + 2 * i], "content": memo}
    for end in range(4, len(history) + 1, 2):
        await post(client, history[:end])
        await app[PIPELINE].relater.flush()
    assert "4,140" not in json.dumps(upstream.history[-1].body["messages"])
    return client, history


async def test_a_question_waits_for_its_vector_when_the_embedder_has_caught_up(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A paced loop: every passage is embedded between turns. A question that shares no
    word with the memo (related words off) waits for its own vector and brings back its
    nearest evicted passage, though the cosine (0.45) is under min_similarity; the same
    words as a statement do not (no wait, no recall under min_similarity)."""
    from tests.support.fakes import TopicEmbedder

    client, history = await memo_evicted(aiohttp_client, upstream,
                                         TopicEmbedder(FIVE_TOPICS), {"related_words": 1.0})
    done = [*history, assistant("Done.")]
    said = "We must fund cloud, staff, travel and hardware with that money."
    await post(client, [*done, user(said)], sid="s-2")  # another session, same history
    assert "4,140" not in json.dumps(upstream.history[-1].body["messages"])
    ask = "How much money is there for cloud, staff, travel and hardware?"
    resp = await post(client, [*done, user(ask)])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert "4,140 EUR" in upstream.history[-1].body["messages"][-1]["content"]
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    reasons = [e["reason"] for e in log["events"] if e["action"] == "recall"]
    assert reasons and all(r.startswith("a question's nearest passages by vector, cosine 0.4")
                           for r in reasons), reasons


async def test_a_questions_vector_is_asked_for_before_its_request_is_analysed(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """As soon as the body is parsed, not after the analysis, chunking and fit it would
    wait behind: the model works meanwhile. One job serves the request's wait, and the
    question still brings back its nearest evicted passage by vector."""
    from proxy.analysis import fingerprint
    from tests.support.fakes import TopicEmbedder

    ask = "How much money is there for cloud, staff, travel and hardware?"
    analysed: list[bool] = []

    class Recording(TopicEmbedder):
        def _start(self, texts: list[str], urgent: bool) -> Any:
            if texts == [ask]:
                rt = next(iter(client.app[PIPELINE].runtimes.values()))
                analysed.append(rt.analyzer.cached(fingerprint(user(ask))) is not None)
            return super()._start(texts, urgent)

    client, history = await memo_evicted(aiohttp_client, upstream,
                                         Recording(FIVE_TOPICS), {"related_words": 1.0})
    resp = await post(client, [*history, assistant("Done."), user(ask)])
    assert analysed == [False]  # asked for once, before the question was analysed
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert "4,140 EUR" in upstream.history[-1].body["messages"][-1]["content"]


async def test_a_question_its_own_words_find_clearly_does_not_wait_for_its_vector(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The embedder has caught up, but the question names what it asks ("spending
    ceiling"): lexical matching finds the memo as strongly as recall wants, so the
    question does not wait for its vector (here it never comes: a wait would last 1 s)
    and the memo comes back all the same."""
    ask = "What spending ceiling was approved?"
    embedder = silent_on(ask)
    client, history = await memo_evicted(aiohttp_client, upstream, embedder,
                                         {"question_vector_wait_ms": 1000})
    resp = await post(client, [*history, assistant("Done."), user(ask)])
    assert embedder.waits == []  # never the 1 s wait (nor any)
    assert [ask] in embedder.calls  # asked for all the same: it lands for later turns
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    assert "4,140 EUR" in upstream.history[-1].body["messages"][-1]["content"]


async def test_a_question_its_words_find_in_many_evicted_records_still_waits_for_its_vector(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """Three evicted memos approve a spending ceiling each: the question's words match all
    three as strongly as recall wants, which says what they share, not which one is
    meant. So the question still waits for its vector (`question_vector_wait_ms` at most:
    here it never comes), where one memo matched that strongly it does not (above)."""
    ask = "What spending ceiling was approved?"
    memos = tuple(MEMO.replace("Procurement memo.", f"Procurement memo, {team}.")
                  .replace("4,140", amount)
                  for team, amount in (("cloud", "4,140"), ("staff", "9,800"),
                                       ("travel", "2,250")))
    embedder = silent_on(ask)
    client, history = await memo_evicted(aiohttp_client, upstream, embedder,
                                         {"question_vector_wait_ms": 50}, memos)
    sent = json.dumps(upstream.history[-1].body["messages"])
    assert "9,800" not in sent and "2,250" not in sent  # evicted too
    await post(client, [*history, assistant("Done."), user(ask)])
    assert embedder.waits == [0.05]  # one bounded wait
    assert "4,140 EUR" in upstream.history[-1].body["messages"][-1]["content"]


async def test_a_question_its_words_find_only_in_context_still_waits_for_its_vector(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The same question asked a second time matches its first asking, in context, at
    full strength; that is no answer (recall brings back what was evicted), so the
    question still waits for its vector, `question_vector_wait_ms` at most (here it
    never comes)."""
    ask = "How much money is there for cloud, staff, travel and hardware?"
    embedder = silent_on(ask)
    client, history = await memo_evicted(aiohttp_client, upstream, embedder,
                                         {"related_words": 1.0, "question_vector_wait_ms": 50})
    again = [*history, assistant("Done."), user(ask), assistant("Let me look that up.")]
    await post(client, [*again, user(ask)])
    assert embedder.waits == [0.05]  # one bounded wait


async def test_a_question_does_not_wait_while_the_sessions_passages_are_being_embedded(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """Back to back the embedder lags: a question's vector would find nothing embedded to
    compare with, so the question does not wait for it (here: never, had it waited)."""
    from concurrent.futures import Future

    from tests.support.fakes import TopicEmbedder

    class Lagging(TopicEmbedder):
        def _start(self, texts: list[str], urgent: bool) -> Any:
            self.calls.append(list(texts))
            return Future()  # never done, background or urgent

    embedder = Lagging(FIVE_TOPICS)
    client = await aiohttp_client(init_app(settings(upstream, recall={
        "related_words": 1.0, "question_vector_wait_ms": 1000}), store=EmbeddingStore(embedder)))
    history = agent_session(16)
    await steps(client, history)
    ask = "How much money is there for cloud, staff, travel and hardware?"
    await post(client, [*history, assistant("Done."), user(ask)])
    assert embedder.waits == []  # never the 1 s wait (nor any)
    assert any(ask in batch for batch in embedder.calls)  # handed over for next time


def test_a_reply_on_a_history_sent_whole_indexes_nothing_more_for_the_proposal() -> None:
    """The proposal a reply answers has many common words; on a history that arrived whole
    they would index most of it on this request (110-180 ms of a 1,000-message one).
    They count among the passages indexed so far instead; a question still settles."""
    from proxy.step import Step, search
    from store.relevance import RelevanceIndex

    proposal = ("I will update the retry backoff in the payment worker and deploy the "
                "notifier behind the feature flag. Shall I go ahead?")
    filler = [f"log {i}: the payment worker deployed the notifier, retry {i} of the flag"
              for i in range(200)]

    def waiting_after(step: Step) -> int:
        idx = RelevanceIndex(eager=8)
        idx.add_many((f"c{i}", t) for i, t in enumerate(filler))
        search(idx, step)
        return idx.waiting

    words = f"{proposal}\nYes, please go ahead."
    assert waiting_after(Step(words, "", frozenset(), reply=True)) == len(filler)
    assert waiting_after(Step(words, "", frozenset())) < len(filler) // 2


async def test_the_turns_after_a_history_sent_whole_do_not_depend_on_background_indexing(
        ) -> None:
    """A history sent whole leaves passages for the background to index (`_drain`). How
    far it got before the next turns must not change what they forward: a partly indexed
    history gave a reply other document frequencies, and the recall it chose differed
    between two replicas serving the same conversation. The next request indexes what the
    earlier ones left (`Postings.catch_up`)."""
    from proxy.pipeline import Pipeline
    from tests.support.trips import session

    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "test", "model": "test-*", "context_window": 4000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"},
        "recall": {"budget_fraction": 0.15}}])
    runs: dict[int, list[Any]] = {}
    for drained in (0, 10, 30, 1000):  # passages the background indexes between turns
        pipeline = Pipeline(st, MemoryStore())
        runs[drained] = []
        for turn, n in enumerate((12, 14, 16)):
            prep = await pipeline.prepare({"model": "test-1", "messages": session(n)},
                                          st.routes[0], "t", "s")
            runs[drained].append(prep.body)
            index = pipeline.sessions.get("t", "s").index
            if turn == 0:
                assert index.waiting > EAGER  # the premise: left to the background
            index.index_some(drained)
        await pipeline.close()
    assert runs[10] == runs[30] == runs[1000] == runs[0]


async def test_a_tool_turn_after_a_history_sent_whole_leaves_the_indexing_to_the_background(
        ) -> None:
    """A turn that ends in tool results scores only terms it settles (their rare
    identifiers): exact whatever the background indexed. It does not index what an
    earlier request left (`catch_up` is for a reply's or related words), so the turn
    after a history sent whole costs what any turn costs (docs/design-notes.md), and
    forwards the same however far the drain got."""
    from proxy.pipeline import Pipeline
    from tests.support.trips import session

    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "test", "model": "test-*", "context_window": 4000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"},
        "recall": {"budget_fraction": 0.15}}])
    history = [*session(16)[:-1], user("Next, find what went wrong in the nightly job.")]
    turns = [history]
    for t in range(3):  # the agent goes on: a call and its result per turn
        cid = f"later_{t}"
        out = "src/app.py\nsrc/db.py\n" if t else "Found reservation ZFA04Y again."
        turns.append([*turns[-1], assistant(None, call(cid, "list_files", '{"dir": "src"}')),
                      tool(cid, out)])
    runs: dict[int, list[Any]] = {}
    waiting: dict[int, list[int]] = {}
    for drained in (0, 10, 1000):  # passages the background indexes between turns
        pipeline = Pipeline(st, MemoryStore())
        runs[drained], waiting[drained] = [], []
        for msgs in turns:
            prep = await pipeline.prepare({"model": "test-1", "messages": msgs},
                                          st.routes[0], "t", "s")
            runs[drained].append(prep.body)
            index = pipeline.sessions.get("t", "s").index
            waiting[drained].append(index.waiting)
            index.index_some(drained)
        await pipeline.close()
    assert runs[10] == runs[1000] == runs[0]
    assert waiting[0][0] > EAGER  # the premise: the history was left to the background
    assert min(waiting[0]) > EAGER  # and no tool turn caught up with it
    assert "ZFA04Y" in json.dumps(runs[0][1])  # its identifier's record still recalled


async def test_a_question_may_fill_the_room_left_beyond_the_recall_share(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """`recall.budget_fraction` bounds what a recall takes of the budget, evicting to make
    room if it must; on a turn where the user asks, recall may also take the room the
    request leaves free anyway (it fits the budget, nothing more is evicted for it). A
    tool turn stays within the share."""
    recall = {"budget_fraction": 0.02, "min_budget_tokens": 0}
    client = await aiohttp_client(init_app(settings(upstream, recall=recall),
                                           store=NoSearchStore()))
    history = agent_session(16)
    await steps(client, history)
    asked = [*history, assistant("Handlers are done."),
             user("Which machine hosts the staging database, how long are backups kept, "
                  "and how long is log retention?")]
    resp = await post(client, asked)
    turn = int(resp.headers["X-Ctxwarden-Turn"])
    rows = (await (await client.get("/admin/turns", params={"session": "s-1"})).json())["turns"]
    row = next(r for r in rows if r["turn"] == turn)
    share = row["recall_budget"]
    assert 0 < share < row["recall_block"]  # more than the share, within the budget
    assert all(r["recall_block"] <= r["recall_budget"] for r in rows if r["turn"] < turn)
    assert row["tokens_out"] <= row["budget"] + row["tools"]
    sent = upstream.history[-1].body["messages"][-1]["content"]
    assert ANSWER in sent and "30 days" in sent and "14 days hot" in sent


def inventory(hosts: int = 110) -> str:
    """A ~2,300-token tool output whose one line, in the middle, answers ASK."""
    lines = [f"host app-{k:03d}.internal role=web zone=eu-{k % 3} cpu={k % 16} "
             f"mem={k * 3 % 64}G" for k in range(hosts)]
    lines.insert(hosts // 2, f"host {ANSWER} role=database env=staging zone=eu-1 cpu=8")
    return "\n".join(lines)


async def test_what_the_room_for_a_recall_evicts_can_itself_be_recalled(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The answer sits in the latest tool output, in context; recall picks weaker evicted
    matches and, to make room for them, evicts that output. Recall then chooses again
    among what is evicted now, so the answer's line comes back: it had been sent
    nowhere (a generated paced session lost its tracking number so)."""
    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        user("Refactor the handlers, then check the staging database setup.")]
    for t in range(1, 13):
        todo = (f"\n# TODO: the staging database migration for module {t} is pending"
                if t % 3 == 0 else "")
        msgs += [assistant(None, call(f"c{t}", "read_file", json.dumps({"path": f"m{t}.py"}))),
                 tool(f"c{t}", "\n".join(listing(t).splitlines()[:12]) + todo)]
        await post(client, msgs)
    msgs += [assistant(None, call("inv", "bash", json.dumps({"cmd": "cat inventory.txt"}))),
             tool("inv", inventory())]
    await post(client, msgs)
    assert ANSWER in json.dumps(upstream.history[-1].body["messages"])  # in context
    resp = await post(client, [*msgs, assistant("Inventory read."),
                               user("Which machine hosts the staging database?")])
    assert resp.headers["X-Ctxwarden-Evicted"] != "0"
    sent = upstream.history[-1].body["messages"]
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    turn = int(resp.headers["X-Ctxwarden-Turn"])
    now = {(e["action"], e["chunk_id"]) for e in log["events"] if e["turn"] == turn}
    assert ANSWER in sent[-1]["content"] and OPEN in sent[-1]["content"]
    assert any(("evict", c) in now for a, c in now if a == "recall")  # evicted, recalled


LEDGER = "\n".join(  # one tool output, several passages: each names an overdue invoice
    f"INV-{7100 + i}: customer acme-{i:02d}, 4{i}0.00 EUR, overdue since "
    f"2026-0{1 + i % 9}-1{i % 9}; "
    + "reminder sent, no reply from the accounts payable desk " * 3 for i in range(12))


async def test_several_passages_of_one_chunk_recalled_on_one_turn_are_logged_whole(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """The log keeps one row per (turn, chunk, action): passages of one chunk recalled
    together are one recall row whose tokens are theirs summed and whose reason says how
    many more came (it had kept one passage's row: a black-box run saw 5 passages and
    679 tokens forwarded, 2 rows and 223 tokens logged)."""
    client = await aiohttp_client(init_app(settings(upstream), store=MemoryStore()))
    history = agent_session(16, fact_at=0)
    history[5] = tool("call_2", LEDGER)
    await steps(client, history)
    assert "INV-7103" not in json.dumps(upstream.history[-1].body["messages"])  # evicted
    await post(client, [*history, assistant("Handlers are done."),
                        user("Which invoices are overdue, and since when?")])
    block = upstream.history[-1].body["messages"][-1]["content"]
    state = client.app[PIPELINE].sessions.get("default", "s-1")
    chosen = sorted((r.hit.piece, r.hit.chunk_id, r.hit.text) for b in state.blocks
                    for r in b.passages if "INV-71" in r.hit.text)
    ledger = [text for _, _, text in chosen]
    assert len(ledger) >= 2 and all(text in block for text in ledger), block
    # consecutive passages read on under one header line
    runs = 1 + sum(b[0] != a[0] + 1 for a, b in zip(chosen, chosen[1:], strict=False))
    assert block.count(f"[chunk {chosen[0][1]},") == runs
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    rows = [e for e in log["events"] if e["action"] == "recall" and "INV-71" in e["preview"]]
    assert len(rows) == 1
    count = client.app[PIPELINE].runtimes["agent"].counter.text
    assert rows[0]["tokens"] == sum(count(text) + HEADER for text in ledger)
    assert re.search(rf"\(\+{len(ledger) - 1} more passages? of this chunk\)$",
                     rows[0]["reason"])


async def test_a_question_naming_a_column_recalls_a_row_far_below_its_header(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """"How long were ranked players in Sydney's region waiting, at p95?": the row
    (`ap-southeast-2 | ranked | ... | 283.4 s`) sits passages below the header that says
    its columns are waits, and a table of tick rates holds the same region and queue.
    Back to back, no embedder: the wait table's row is recalled, under its header (the
    tick rates may come back too, a history this long gets a wide net, but not over it)."""
    from tests.test_relevance import _ticks, _waits

    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(20, fact_at=0)
    history[4] = assistant(None, call("call_2", "matchmaking_report", '{"window": "6h"}'))
    history[5] = tool("call_2", _waits("ap-southeast-2"))
    history[8] = assistant(None, call("call_4", "server_report", '{"window": "6h"}'))
    history[9] = tool("call_4", _ticks("ap-southeast-2"))
    await steps(client, history)
    assert "283.4 s" not in json.dumps(upstream.history[-1].body["messages"])
    ask = "How long were ranked players in ap-southeast-2 waiting, at p95?"
    recalled = await ask_last(client, upstream, history, ask)
    assert "| ap-southeast-2 | ranked | 4,596 | 48.7 s | 283.4 s | 0.41 |" in recalled
    # shown under its header (its first passage, or the header over "…"), not under the
    # tick rates'
    head = "| region | queue | searches | wait_p50 | wait_p95 | timeouts |\n"
    at = recalled.index("283.4 s")
    assert recalled.count(head) == 1
    assert recalled.rfind("tick_rate", 0, at) < recalled.index(head) < at


async def test_a_question_for_a_columns_top_row_recalls_it(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """"Which pod had by far the most restarts?": the pod's row holds none of the
    question's words (its column's name is in the header, passages up); it is the
    RESTARTS column's top row (store/extremes.py). Back to back, no embedder."""
    from tests.test_extremes import PODS

    client = await aiohttp_client(init_app(settings(upstream), store=NoSearchStore()))
    history = agent_session(20, fact_at=0)
    pods = PODS + "\n" + "\n".join(
        f"checkout    worker-{i}-9d2f1c               1/1     Running            {i % 4}"
        f"              {i + 1}d" for i in range(40))
    history[4] = assistant(None, call("call_2", "kubectl", '{"args": "get pods -A"}'))
    history[5] = tool("call_2", pods)
    await steps(client, history)
    assert "dag-processor-2nwf-chlf2" not in json.dumps(upstream.history[-1].body["messages"])
    ask = "Which pod had by far the most restarts when we listed them?"
    recalled = await ask_last(client, upstream, history, ask)
    assert "dag-processor-2nwf-chlf2     0/1     CrashLoopBackOff   568 (4m ago)" in recalled
    log = (await (await client.get("/admin/evictions", params={"session": "s-1"})).json())
    (why,) = [e["reason"] for e in log["events"] if e["action"] == "recall"]
    assert "restart (in its table's header)" in why and "a notable row (max RESTARTS)" in why, why
