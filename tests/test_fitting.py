"""Fitting: exact token accounting, valid tool pairs, sticky decisions, the watermark."""

from __future__ import annotations

import json
from typing import Any

from policies.base import Chunk, ChunkClass, Policy, PolicyContext
from proxy.analysis import MessageAnalyzer
from proxy.chunking import Chunker, Conversation
from proxy.config import ClassificationSettings
from proxy.fitting import Fit, Fitter
from proxy.stubs import stub_text
from proxy.tokens import REPLY_PRIMING, TokenCounter, encoding_for
from proxy.validate import validate_messages
from tests.support.messages import assistant, call, filler, tau_trajectories, tool, user

COUNTER = TokenCounter(encoding_for("gpt-4o"))


class Oldest(Policy):
    """Hand-written policy for these tests: evict by insertion turn."""

    name = "oldest-test"

    def priority(self, chunk: Chunk, ctx: PolicyContext) -> float:
        return float(chunk.turn)


def run(messages: list[dict[str, Any]], budget: int, sticky: set[str] | None = None,
        watermark: float = 0.85) -> tuple[Conversation, Fit, list[dict[str, Any]]]:
    conv = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(messages)
    fitter = Fitter(COUNTER)
    fit = fitter.fit(conv, sticky or set(), budget, int(budget * watermark), Oldest(),
                     PolicyContext(turn=conv.turn))
    out = fitter.assemble(conv, messages, fit.evicted)
    return conv, fit, out


def cost(messages: list[dict[str, Any]]) -> int:
    return REPLY_PRIMING + sum(COUNTER.message(m) for m in messages)


def session(n_rounds: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, user("the goal")]
    for i in range(n_rounds):
        cid = f"c{i}"
        msgs += [assistant(f"step {i}", call(cid, "read", f'{{"n": {i}}}')),
                 tool(cid, filler(200, f"r{i}")), assistant(f"noted {i}"), user(f"go on {i}")]
    return msgs


def test_under_budget_forwards_messages_untouched() -> None:
    msgs = session(2)
    _, fit, out = run(msgs, budget=100_000)
    assert fit.new == [] and out == msgs and all(a is b for a, b in zip(out, msgs, strict=True))


def test_over_budget_fits_to_watermark_with_exact_accounting() -> None:
    msgs = session(12)
    budget = cost(msgs) // 3
    _, fit, out = run(msgs, budget)
    validate_messages(out)
    assert fit.tokens == cost(out)  # what we counted is what we send
    assert fit.tokens <= int(budget * 0.85)
    assert out[0] == msgs[0] and out[1] == msgs[1] and out[-1] == msgs[-1]


def test_stub_keeps_the_pair_and_names_the_chunk() -> None:
    msgs = session(3)
    conv, fit, out = run(msgs, budget=cost(msgs) - 150, watermark=1.0)
    stubs = [m for m in out if m["role"] == "tool" and "ctxwarden" in m["content"]]
    assert stubs, "the oldest tool result should have become a stub"
    evicted_tool = next(p for p in conv.parts if p.role == "tool" and p.chunk.id in fit.evicted)
    assert evicted_tool.chunk.id in stubs[0]["content"]
    validate_messages(out)


def test_decisions_are_sticky_and_the_prefix_stays_put() -> None:
    msgs = session(10)
    budget = cost(msgs) // 2
    _, first, out1 = run(msgs, budget)
    assert first.new
    longer = msgs + [assistant("more"), user("and more")]
    _, second, out2 = run(longer, budget, sticky=first.evicted)
    assert second.new == []  # the watermark left room: nothing new evicted
    assert first.evicted <= second.evicted
    assert out2[: len(out1)] == out1  # same prefix, new messages appended


def test_permanent_alone_over_budget_is_reported() -> None:
    msgs = [{"role": "system", "content": filler(500)}, user("goal"), assistant("a"),
            user(filler(300, "q"))]
    _, fit, _ = run(msgs, budget=200)
    assert fit.tokens > 200 and fit.permanent_tokens == fit.tokens


def test_groups_drop_whole_when_stubs_are_not_enough() -> None:
    msgs = session(30)
    conv, fit, out = run(msgs, budget=400)
    validate_messages(out)
    dropped = [h for h in conv.groups if conv.parts[h].chunk.id in fit.evicted]
    assert dropped and fit.tokens == cost(out)
    assert all(p.chunk.klass is not ChunkClass.PERMANENT or p.chunk.id not in fit.evicted
               for p in conv.parts)


def test_every_tau_bench_prefix_fits_and_stays_valid() -> None:
    for traj in tau_trajectories()[:40]:
        msgs = traj["traj"]
        for end in range(2, len(msgs) + 1):
            prefix = msgs[:end]
            if prefix[-1]["role"] == "assistant" and prefix[-1].get("tool_calls"):
                continue  # not a request an agent would send
            _, fit, out = run(prefix, budget=1_600)
            validate_messages(out)
            assert fit.tokens == cost(out)
            assert fit.tokens <= 1_600 or fit.tokens == fit.permanent_tokens


def test_mask_stubs_old_tool_outputs_even_under_budget() -> None:
    from policies import get_policy

    msgs = session(6)
    conv = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(msgs)
    fitter = Fitter(COUNTER)
    fit = fitter.fit(conv, set(), 100_000, 85_000, get_policy("mask", keep=2),
                     PolicyContext(turn=conv.turn))
    out = fitter.assemble(conv, msgs, fit.evicted)
    validate_messages(out)
    tools = [m for m in out if m["role"] == "tool"]
    masked = [m for m in tools if m["content"].startswith("[ctxwarden:")]
    assert len(tools) == 6 and len(masked) == 4  # all but the newest two
    assert all(d.reason.startswith("observation masked") for d in fit.new)
    assert fit.tokens == cost(out)


def test_mask_says_which_evictions_masking_made_and_which_the_budget_needed() -> None:
    """Masking alone does not fit a small budget: the rest goes oldest first (the
    agent's and the user's messages too), and the log says so, not "observation masked"
    (a black-box run)."""
    from policies import get_policy

    msgs = session(6)
    conv = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(msgs)
    fitter = Fitter(COUNTER)
    fit = fitter.fit(conv, set(), cost(msgs) // 3, cost(msgs) // 4, get_policy("mask", keep=2),
                     PolicyContext(turn=conv.turn))
    validate_messages(fitter.assemble(conv, msgs, fit.evicted))
    reasons: dict[str, set[str]] = {d.part.role: set() for d in fit.new}
    for d in fit.new:
        reasons[d.part.role].add(d.reason)
    masked = {"observation masked (older than the last tool outputs kept)"}
    fallback = {"oldest first: masking alone did not fit the budget"}
    assert reasons.keys() - {"tool"} and all(reasons[r] == fallback for r in reasons
                                             if r != "tool")
    assert reasons["tool"] == masked | fallback  # masked, then the newest two to fit


def test_mask_turn_by_turn_in_a_roomy_window_restores_nothing_it_masked() -> None:
    """Restore (room returned after a spike) took back what `mask` masks whatever the
    budget: each turn masked the newly old output and restored the ones before it, a
    prefix change every turn and nothing masked for long."""
    from policies import get_policy

    policy, fitter, sticky = get_policy("mask", keep=2), Fitter(COUNTER), set[str]()
    analyzer = MessageAnalyzer(COUNTER)
    for rounds in range(3, 8):  # the session grows a tool call and its output a turn
        msgs = session(rounds)
        conv = Chunker(analyzer, ClassificationSettings()).split(msgs)
        fit = fitter.fit(conv, sticky, 100_000, 85_000, policy, PolicyContext(turn=conv.turn))
        assert fit.restored == []
        sticky |= {d.part.chunk.id for d in fit.new}
        out = fitter.assemble(conv, msgs, fit.evicted)
        masked = [m for m in out if m["role"] == "tool" and m["content"].startswith("[ctx")]
        assert len(masked) == rounds - 2  # all but the newest two, every turn


def test_an_oversized_current_tool_result_is_cut_head_and_tail() -> None:
    from proxy.cutting import CUT_MARKER

    big = "HEAD-MARK " + filler(3000, "mid") + " TAIL-MARK"
    msgs = [{"role": "system", "content": "sys"}, user("the goal"),
            assistant(None, call("c1", "read_log")), tool("c1", big)]
    conv = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(msgs)
    fitter = Fitter(COUNTER)
    fit = fitter.fit(conv, set(), 1_000, 850, Oldest(), PolicyContext(turn=conv.turn))
    assert fit.tokens > 1_000  # the tail alone is over: nothing evictable helps
    fitter.cut(conv, fit, 1_000)
    out = fitter.assemble(conv, msgs, fit.evicted, fit.cuts)
    validate_messages(out)
    assert fit.tokens == cost(out) <= 1_000
    text = out[-1]["content"]
    assert text.startswith("HEAD-MARK") and text.endswith("TAIL-MARK")
    cid = conv.parts[-1].chunk.id
    marker_head = CUT_MARKER.split("{cut}")[0]
    assert marker_head in text and f"chunk {cid}" in text
    # the same request cuts the same way (the prefix cache sees the same bytes)
    conv2 = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(msgs)
    fit2 = fitter.fit(conv2, set(), 1_000, 850, Oldest(), PolicyContext(turn=conv2.turn))
    fitter.cut(conv2, fit2, 1_000)
    assert fit2.cuts == fit.cuts


def test_the_results_of_parallel_calls_share_the_cut_evenly() -> None:
    """Four files read in parallel, each too big for the window: each keeps about a
    quarter of the room, not three of them a marker and the fourth all the rest; a small
    result of the same turn stays whole."""
    calls = [call(f"c{i}", "read_file", json.dumps({"path": f"f{i}.py"})) for i in range(5)]
    results = [tool(f"c{i}", filler(3000, f"f{i}")) for i in range(4)]
    msgs = [{"role": "system", "content": "sys"}, user("the goal"), assistant(None, *calls),
            *reversed(results), tool("c4", "exit 0, 12 files changed")]
    conv = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(msgs)
    fitter = Fitter(COUNTER)
    fit = fitter.fit(conv, set(), 2_000, 1_700, Oldest(), PolicyContext(turn=conv.turn))
    fitter.cut(conv, fit, 2_000)
    out = fitter.assemble(conv, msgs, fit.evicted, fit.cuts)
    validate_messages(out)
    assert fit.tokens == cost(out) <= 2_000
    assert out[-1]["content"] == "exit 0, 12 files changed"
    kept = [COUNTER.text(m["content"]) for m in out[3:7]]
    assert min(kept) > 300 and max(kept) - min(kept) < 40, kept


def test_a_fit_that_overshoots_the_watermark_gives_back_what_fits() -> None:
    """The ranking evicts a small message, then a large one that frees far more than was
    still needed: the small one comes back (this turn's evictions, most valuable first,
    while under the watermark), so the request holds what fits, not a tenth of it."""
    msgs = [{"role": "system", "content": "sys"}, user("the goal"),
            assistant(filler(200, "plan")), user(filler(3000, "pasted log")),
            assistant("Read it."), user("What failed?")]
    conv, fit, out = run(msgs, budget=3000)
    target = int(3000 * 0.85)
    assert [d.part.chunk.index for d in fit.new] == [3]  # the paste only
    assert out == [m for i, m in enumerate(msgs) if i != 3]
    assert fit.tokens == cost(out) <= target
    validate_messages(out)


def rwoe_run(messages: list[dict[str, Any]], budget: int, sticky: set[str] | None = None,
             ) -> tuple[Conversation, Fit, list[dict[str, Any]]]:
    from policies import get_policy

    conv = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(messages)
    fitter = Fitter(COUNTER)
    fit = fitter.fit(conv, sticky or set(), budget, int(budget * 0.85), get_policy("rwoe"),
                     PolicyContext(turn=conv.turn))
    return conv, fit, fitter.assemble(conv, messages, fit.evicted)


def test_a_spike_evicts_the_users_words_and_room_returning_restores_them() -> None:
    from proxy.fitting import RESTORE_REASON

    fact = user("My agent ID is AG-57968; log everything under it.")
    msgs = session(4)
    msgs += [fact, assistant("Noted."), user("Now read the log."),
             assistant(None, call("big", "read_log")), tool("big", filler(745, "log"))]
    budget = 2_300
    conv, spike, out = rwoe_run(msgs, budget)
    assert fact not in out  # the spike left no room even for the user's words
    assert spike.new and spike.tokens <= budget
    later = [*msgs, assistant(None, call("next", "read")), tool("next", filler(200, "nx"))]
    conv2, fit, out2 = rwoe_run(later, budget, sticky=spike.evicted)
    fact_id = next(p.chunk.id for p in conv2.parts if p.info.text == fact["content"])
    assert fact in out2 and fact_id not in fit.evicted  # room came back: restored
    assert any(d.part.chunk.id == fact_id and d.reason == RESTORE_REASON for d in fit.restored)
    validate_messages(out2)
    assert fit.tokens == cost(out2) <= int(budget * 0.85)


def test_a_call_whose_results_are_all_stubs_goes_before_a_user_message() -> None:
    msgs = session(24)
    users_before = [m for m in msgs if m["role"] == "user"]
    _, fit, out = rwoe_run(msgs, budget=cost(msgs) // 4)
    validate_messages(out)
    assert all(u in out for u in users_before)  # calls and stubs went, not the user's words
    assert fit.tokens == cost(out)


def test_an_unreachable_watermark_evicts_only_what_the_budget_needs() -> None:
    """What must stay is above the watermark: the fit goes to the budget, not below it,
    and the user's words stay."""
    fact = user("Log everything under my agent ID AG-48852, please.")
    msgs = session(4)
    msgs += [fact, assistant("Noted."), user("Now read the log."),
             assistant(None, call("big", "read_log")), tool("big", filler(700, "log"))]
    budget = 2_300
    conv, fit, out = rwoe_run(msgs, budget)
    assert fit.permanent_tokens > int(budget * 0.85)  # the watermark is out of reach
    validate_messages(out)
    assert fact in out and fit.tokens == cost(out) <= budget
    assert fit.new  # something still had to go


def test_a_stub_keeps_the_identifiers_of_what_it_offloaded() -> None:
    """An evicted record's stub lists its ids, dates and numbers with their JSON keys (what
    the agent copies into a later call: the payment id, the date of birth), not the keys
    themselves; a long output's stays bounded; the accounting stays exact."""
    record = ('{"name": {"first_name": "Mia", "last_name": "Li"}, "address": {"address1": '
              '"975 Sunset Drive", "zip": "78750"}, "dob": "1990-04-05", "payment_methods": '
              '{"credit_card_4421486": {"source": "credit_card", "last_four": "7447", "id": '
              '"credit_card_4421486"}}, "reservations": ["NO6JO3", "AIXC49"]}')
    msgs = [{"role": "system", "content": "sys"}, user("book a flight"),
            assistant(None, call("c0", "get_user_details", '{"user_id": "mia_li_3668"}')),
            tool("c0", record), assistant("noted"), user("and search"),
            assistant(None, call("c1", "search", "{}")), tool("c1", filler(400, "s")),
            assistant("found"), user("yes, proceed")]
    conv, fit, out = run(msgs, budget=cost(msgs) - 300, watermark=1.0)
    validate_messages(out)
    assert fit.tokens == cost(out)  # the stubs cost what was counted
    stub = stub_text(conv.parts[3])
    assert conv.parts[3].chunk.id in stub
    for kept in ("dob=1990-04-05", "id=credit_card_4421486", "last_four=7447", "zip=78750",
                 "reservations=NO6JO3", "reservations=AIXC49"):
        assert kept in stub
    assert "address1" not in stub and "Sunset" not in stub
    assert "identifiers in it" not in stub_text(conv.parts[7])  # plain text: a plain stub
    many = json.dumps({"flights": [{"flight_number": f"HAT{i:04d}", "date": "2024-05-17"}
                                   for i in range(300)]})
    conv, fit, out = run([*msgs[:7], tool("c1", many), *msgs[8:]],
                         budget=cost(msgs) - 300, watermark=1.0)
    big = stub_text(conv.parts[7])  # 300 records: the stub keeps a bounded few
    assert "flight_number=HAT0000" in big and big.count("=") == 16
    assert COUNTER.text(big) < conv.parts[7].chunk.tokens / 4


def test_room_after_an_overshoot_restores_only_what_leaves_the_next_turns_room() -> None:
    """A turn evicts a large result and overshoots the watermark; an older, smaller result
    evicted before would fit under the watermark again. Restored up to the watermark, the
    next turn's output pushed the request over the budget and it went again: two prefix
    changes for nothing (a black-box run: 12 of 43 messages kept as the prefix, twice).
    A restore now leaves RESTORE_ROOM free below the watermark, as it needs to start."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, user("the goal")]
    for cid, n in (("a", 130), ("b", 300), ("c", 300), ("d", 80)):
        msgs += [assistant(f"step {cid}", call(cid, "read", f'{{"f": "{cid}"}}')),
                 tool(cid, filler(n, cid)), assistant(f"noted {cid}"), user(f"go on {cid}")]
    older = Chunker(MessageAnalyzer(COUNTER), ClassificationSettings()).split(msgs).parts[3]
    assert older.role == "tool" and older.info.text.startswith("a")
    budget = 2_200
    conv, fit, out = rwoe_run(msgs, budget, sticky={older.chunk.id})
    assert fit.new and fit.restored == []  # the result evicted earlier stays out
    assert older.chunk.id in fit.evicted and fit.tokens == cost(out) <= int(budget * 0.85)
    nxt = [*msgs, assistant(None, call("e", "read")), tool("e", filler(150, "e"))]
    conv, fit2, out2 = rwoe_run(nxt, budget, sticky=fit.evicted)
    assert fit2.new == [] and fit2.restored == []  # the next turn appends: the prefix holds
    assert out2[:len(out) - 1] == out[:-1]
    validate_messages(out2)
