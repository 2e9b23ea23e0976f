"""A question that matches a tool call gets what the call returned: the first and last
passages of the call's evicted results follow the call (proxy/results.py)."""

from __future__ import annotations

from typing import Any

from bench.seeds import settings
from proxy.pipeline import Pipeline
from proxy.recall import HEADER, ChunkMeta, Recalled
from proxy.results import EXTRA, MAX_CALLS, TOP, matched_calls, with_results
from store.base import MemoryStore
from store.relevance import Hit, RelevanceIndex
from tests.support.messages import assistant, call, tool, user

# a plan's output: what it refreshes and creates, its count in the closing summary
PLAN = "\n".join(
    [*(f"module.m{i}.aws_instance.node[{i}]: Refreshing state... [id=i-0{i:05x}]"
       for i in range(40)),
     *(f'  # module.m{i}.aws_lambda_permission.worker will be created\n'
       f'  + resource "aws_lambda_permission" "worker" {{\n'
       f'      + action = "lambda:InvokeFunction"\n  }}' for i in range(30)),
     "Plan: 23 to add, 4 to change, 7 to destroy.",
     "Saved the plan to: tfplan"])


def _meta(*ids: str) -> dict[str, ChunkMeta]:
    return {c: ChunkMeta(3, "tool", "TRANSIENT") for c in ids}


def _chosen(index: RelevanceIndex, *keys: tuple[str, int]) -> list[Recalled]:
    out = []
    for cid, piece in keys:
        h = next(h for h in index.chunk_hits(cid) if h.piece == piece)
        out.append(Recalled(h, 3, "assistant", "TRANSIENT", len(h.text) // 4 + HEADER, "x"))
    return out


def test_a_chosen_call_brings_its_results_first_and_last_passages() -> None:
    index = RelevanceIndex()
    index.add("call", 'Running the first staging plan.\nshell({"command": "terraform plan"})')
    index.add("plan", PLAN)
    index.add("other", "an unrelated note about the deploy window")
    pieces = index.chunk_hits("plan")
    assert len(pieces) > 3 and "7 to destroy" in pieces[-1].text
    chosen = _chosen(index, ("call", 0), ("other", 0))
    got = with_results(chosen, ["call"], {"call": ["plan"]}, index, {"call", "plan", "other"},
                       _meta("call", "plan", "other"), lambda t: len(t) // 4, 10_000)
    assert [(r.hit.chunk_id, r.hit.piece) for r in got] == [
        ("call", 0), ("plan", 0), ("plan", pieces[-1].piece), ("other", 0)]
    assert got[2].why == "the result of a call the question matched (call)"
    # a result still in context is not recalled
    assert with_results(chosen, ["call"], {"call": ["plan"]}, index, {"call", "other"},
                        _meta("call", "plan", "other"), lambda t: len(t) // 4,
                        10_000) == chosen
    # past the budget by EXTRA at most; what recall chose stays
    spent = sum(r.tokens for r in chosen)
    tight = with_results(chosen, ["call"], {"call": ["plan"]}, index, {"call", "plan", "other"},
                         _meta("call", "plan", "other"), lambda t: len(t) // 4,
                         spent + got[1].tokens - EXTRA)
    assert [(r.hit.chunk_id, r.hit.piece) for r in tight] == [("call", 0), ("plan", 0),
                                                             ("other", 0)]


def test_the_calls_among_a_questions_best_matches_bring_their_results() -> None:
    """In context or recalled, the best matched calls (`MAX_CALLS`, among the first
    `TOP` matches, at the floor or more) bring their results; a call still in context
    (its result a stub) puts them first."""
    hits = [Hit(f"call{i}", 0, "", 1.0 - i / 10, 0.9 - i / 10) for i in range(4)]
    results = {f"call{i}": [f"out{i}"] for i in range(4)}
    assert matched_calls(hits, results, 0.1) == ["call0", "call1"][:MAX_CALLS]
    assert matched_calls(hits, results, 0.85) == ["call0"]
    assert matched_calls([Hit("x", 0, "", 1, 1)] * TOP + hits, results, 0.1) == []
    index = RelevanceIndex()
    index.add("call0", "Checking the manifest.")
    index.add("out0", '[package]\nname = "logsift"\nrust-version = "1.74.1"')
    index.add("other", "an unrelated note")
    got = with_results(_chosen(index, ("other", 0)), ["call0"], results, index,
                       {"out0", "other"}, _meta("out0", "other"), lambda t: len(t) // 4,
                       10_000)
    assert [r.hit.chunk_id for r in got] == ["out0", "other"]


def _session() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an infrastructure agent."},
        user("Move the staging environment to the new module layout."),
        assistant("Running the first staging plan against the new module layout.",
                  call("c0", "shell", '{"command": "cd envs/staging && terraform plan"}')),
        tool("c0", PLAN)]
    for i in range(1, 40):  # later work, each turn new output, until the plan is evicted
        msgs += [assistant(f"Checking service {i}.", call(f"c{i}", "shell",
                                                          f'{{"command": "svc {i}"}}')),
                 tool(f"c{i}", "\n".join(f"svc{i} line {j}: status=ok latency={j * 7}ms "
                                         f"node=n{i}-{j}" for j in range(40)))]
    return msgs


async def _asked_about_the_plan(far: float) -> Any:
    """The session, then a colleague's question about "that first staging plan" long
    after it was evicted; `far`: `recall.question_budget_far`."""
    st = settings("rwoe")
    st.routes[0].recall.question_budget_far = far
    pipeline = Pipeline(st, MemoryStore())
    history = _session()
    try:
        for k in range(2, len(history) + 1):
            if history[k - 1]["role"] in ("user", "tool"):
                await pipeline.prepare({"model": "loop-1", "messages": history[:k]},
                                       st.routes[0], "t", "s")
        question = user("On that first staging plan, how many resources was Terraform "
                        "going to tear down?")
        return await pipeline.prepare({"model": "loop-1", "messages": [*history, question]},
                                      st.routes[0], "t", "s")
    finally:
        await pipeline.close()


async def test_a_question_about_a_calls_output_gets_its_summary_line() -> None:
    """Through the pipeline: the plan's count, in its last line, reaches the model when a
    colleague asks about "that first staging plan" long after it was evicted. Within a
    fifth of the room (`question_budget_far` off) the plan does not come back whole: the
    call the question matched brings its summary line."""
    prep = await _asked_about_the_plan(far=0)
    reasons = {e.reason for e in prep.events if e.action == "recall"}
    assert any(r.startswith("the result of a call the question matched") for r in reasons)
    sent = "\n".join(str(m.get("content")) for m in prep.body["messages"])
    assert "7 to destroy" in sent
    assert PLAN not in sent  # the plan itself stays evicted: its passages came back
    # with the wider net a history this long gets (40 %), the count reaches it as well
    prep = await _asked_about_the_plan(far=0.4)
    assert "7 to destroy" in "\n".join(str(m.get("content")) for m in prep.body["messages"])
