"""A message that asks two things at once (proxy/step.py `questions`): each question is
searched on its own and gets its own passages, as it would asked alone."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from proxy.config import Settings
from proxy.pipeline import Pipeline
from proxy.step import questions
from store.base import MemoryStore
from store.relevance import RelevanceIndex
from tests.support.asking import ask
from tests.support.messages import assistant, call, tool, user

TWO = ("The duty chief is calling back. He wants two things: which engine is laid up "
       "waiting on repairs right now? And which road was shut because of the downed lines?")


def test_a_message_is_split_into_its_questions_only_when_it_asks_two_or_more() -> None:
    assert questions(TWO) == [
        "The duty chief is calling back. He wants two things: which engine is laid up "
        "waiting on repairs right now?",
        "And which road was shut because of the downed lines?"]
    assert questions("Which engine is laid up? Send the list to Dana.") == []
    assert questions("Done. Is 4.1 the version? Ok.") == []  # one question only
    assert len(questions("Which one failed? Who fixed it? When?")) == 3


def test_two_questions_joined_by_and_under_one_question_mark_are_two() -> None:
    """", and" joins two questions when each side has its own question word and enough
    words to be searched alone; a short tail ("and how many times?") stays with its
    question."""
    joined = ("For the description: how long did the single worst test take in that "
              "timing report you ran, and that red build from Tuesday night - which "
              "runner machine did its failing shard run on?")
    assert questions(joined) == [
        "For the description: how long did the single worst test take in that timing "
        "report you ran",
        "that red build from Tuesday night - which runner machine did its failing shard "
        "run on?"]
    assert questions("Which pod restarted overnight, and how many times?") == []
    assert questions("Which pods restarted, and which ones were evicted by the "
                     "node pressure?") == []  # "Which pods restarted": too few words


def units(n: int) -> str:
    return json.dumps([{"unit": f"E{3400 + 10 * n + k}", "type": "Type 3 engine",
                        "station": f"Station {k + 2}", "crew": 3 + k % 2,
                        "status": ("out of service - awaiting repairs" if (n, k) == (2, 5)
                                   else "available")} for k in range(9)], indent=1)


def roads(n: int) -> str:
    return "\n".join(
        [f"{'road':<16}{'status':<10}reason", *(
            f"{name:<16}{('closed' if (n, k) == (3, 2) else 'open'):<10}"
            f"{'downed power lines' if (n, k) == (3, 2) else 'traffic control point'}"
            for k, name in enumerate(("Calle Serrano", "Old Mill Rd", "Route 9",
                                      "Canyon Dr", "Ridge Ln", "Mesa Blvd")))])



async def tool_turns(pipeline: Pipeline, st: Settings, msgs: list[dict[str, Any]], n: int,
                     output: Callable[[int], tuple[str, str]]) -> None:
    """`n` tool turns onto `msgs` (a call, its `output(k)` as (tool, text), the agent's
    word, "Keep going."), each sent as the agent would."""
    for k in range(n):
        cid = f"call_{k}"
        name, out = output(k)
        msgs += [assistant(None, call(cid, name, "{}")), tool(cid, out),
                 assistant(f"Board updated ({k})."), user("Keep going.")]
        await pipeline.prepare({"model": "t-1", "messages": list(msgs)}, st.routes[0],
                               "t", "s")

def test_each_question_of_two_finds_its_answer_as_strongly_as_asked_alone() -> None:
    index = RelevanceIndex()
    for n in range(12):
        index.add(f"out{n}", units(n) if n % 2 == 0 else roads(n))
    _, both = ask(index, TWO)
    for alone, chunk in ((questions(TWO)[0], "out2"), (questions(TWO)[1], "out3")):
        _, solo = ask(index, alone)
        best = next(h for h in solo if h.chunk_id == chunk)
        mine = next(h for h in both if h.chunk_id == chunk and h.piece == best.piece)
        assert mine.strength == best.strength


async def test_a_message_asking_two_things_recalls_both_answers_back_to_back() -> None:
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "t", "model": "t-*", "context_window": 3000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"},
        "recall": {"question_top_k": 1}}])  # one passage a question: both if asked apart
    pipeline = Pipeline(st, MemoryStore())
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You support dispatch."},
                                  user("Keep the board current while the fire runs.")]
    try:
        await tool_turns(pipeline, st, msgs, 20, lambda n: ("unit_status", units(n))
                         if n % 2 == 0 else ("roads", roads(n)))
        before = await pipeline.prepare({"model": "t-1", "messages": list(msgs)},
                                        st.routes[0], "t", "s")
        prep = await pipeline.prepare({"model": "t-1", "messages": [*msgs[:-1], user(TWO)]},
                                      st.routes[0], "t", "s")
    finally:
        await pipeline.close()
    engine, road = "E3425", "closed    downed power lines"
    sent = json.dumps(before.body["messages"])
    assert engine not in sent and road not in sent  # the premise: both evicted
    sent = json.dumps(prep.body["messages"])
    assert engine in sent and road in sent


async def test_a_question_reaches_question_top_k_passages_where_another_step_has_top_k(
        ) -> None:
    """The answer to a question is often a few matches down (a value none of its words
    names): a question may bring `question_top_k` passages, any other step `top_k`."""
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "t", "model": "t-*", "context_window": 3000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"},
        "recall": {"top_k": 1, "question_top_k": 3, "min_relevance": 0.1}}])
    pipeline = Pipeline(st, MemoryStore())
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You support dispatch."},
                                  user("Keep the board current while the fire runs.")]

    def passages(prep: Any) -> int:
        return sum(str(m.get("content")).count("[chunk ") for m in prep.body["messages"])

    try:
        await tool_turns(pipeline, st, msgs, 20, lambda n: ("unit_status", units(n)))
        asked = await pipeline.prepare(
            {"model": "t-1", "messages": [*msgs[:-1], user(
                "Which Type 3 engine at Station 4 had a crew of 3?")]}, st.routes[0], "t", "s")
        told = await pipeline.prepare(
            {"model": "t-1", "messages": [*msgs[:-1], user(
                "Board: Type 3 engine at Station 4, crew of 3.")]}, st.routes[0], "t", "s")
    finally:
        await pipeline.close()
    assert passages(asked) == 3
    assert passages(told) == 1


def sensors(n: int) -> str:
    """An alarm journal: every line says engine room, temperature and alarm."""
    return "\n".join(f"2024-11-14 0{k}:{10 + n:02d}  MV Loch Varra  TT-ME{k}-{100 + n}  "
                     f"engine room temperature alarm {'HIGH' if k % 2 else 'cleared'}"
                     for k in range(8))


async def test_each_question_of_two_gets_its_best_passages_before_the_others_rest() -> None:
    """One question of two matching many passages (every line of an alarm journal says
    "engine room temperature alarm") took every place recall had, and the other's answer,
    a weaker match ("shut" for `closed`), none: each question's best passages now come
    before the rest."""
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "t", "model": "t-*", "context_window": 3000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"},
        "recall": {"question_top_k": 4}}])
    pipeline = Pipeline(st, MemoryStore())
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You run the ferry desk."},
                                  user("Keep the sailings board current today.")]
    both = ("Two quick ones: which vessel had the engine room temperature alarm? And which "
            "road did the crews shut after the storm brought the lines down?")
    try:
        await tool_turns(pipeline, st, msgs, 16, lambda n: ("alarms", sensors(n))
                         if n % 2 == 0 else ("roads", roads(n)))
        prep = await pipeline.prepare({"model": "t-1", "messages": [*msgs[:-1], user(both)]},
                                      st.routes[0], "t", "s")
    finally:
        await pipeline.close()
    sent = json.dumps(prep.body["messages"])
    assert "engine room temperature alarm" in sent  # the first question's answers
    assert "closed    downed power lines" in sent  # and the second's


async def board_question(recall: dict[str, Any], turns: int,
                         output: Callable[[int], tuple[str, str]], question: str,
                         policy: str = "rwoe") -> Any:
    """`turns` tool turns of a dispatch board (`output(k)`) on a 3,000-token route with
    these `recall` settings, then `question` in place of the last "Keep going.": the
    request as prepared."""
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "t", "model": "t-*", "context_window": 3000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"}, "recall": recall,
        "policy": policy}])
    pipeline = Pipeline(st, MemoryStore())
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You support dispatch."},
                                  user("Keep the board current while the fire runs.")]
    try:
        await tool_turns(pipeline, st, msgs, turns, output)
        return await pipeline.prepare({"model": "t-1", "messages": [*msgs[:-1],
                                                                    user(question)]},
                                      st.routes[0], "t", "s")
    finally:
        await pipeline.close()


async def test_a_question_about_a_long_history_casts_a_wider_net() -> None:
    """The more of a history is out of sight, the more rivals a question's answer has
    among its matches: where the request evicts `far_history` times its room or more, a
    question may take `question_budget_far` of the room, elsewhere
    `question_budget_fraction`."""

    async def recall(turns: int, far: float) -> tuple[int, int]:
        asked = await board_question({"question_budget_far": far}, turns,
                                     lambda n: ("unit_status", units(n)),
                                     "Which Type 3 engine at Station 4 had a crew of 3?")
        return asked.recalled, sum(e.tokens for e in asked.events if e.action == "recall")

    room = 3000 - 256
    wide, narrow = await recall(24, 0.4), await recall(24, 0.2)  # ~4 rooms evicted
    assert wide[0] > narrow[0] and wide[1] > 0.2 * room >= narrow[1]
    assert await recall(7, 0.4) == await recall(7, 0.2)  # evicts under two rooms


async def test_a_question_keeps_matches_down_to_question_min_relative_of_its_best() -> None:
    """A question's answer often shares fewer of its words than the passage matching
    them best: its matches within `question_min_relative` (0.35) of the best come back,
    where any other step's need `min_relative` (0.5)."""

    async def strengths(share: float) -> list[float]:
        asked = await board_question(
            {"question_min_relative": share}, 20,
            lambda n: ("unit_status", units(n)) if n % 2 == 0 else ("roads", roads(n)),
            "Which road was closed, and why was the engine out of service?")
        return [float(e.reason.split()[2]) for e in asked.events
                if e.action == "recall" and e.reason.startswith("lexical match")]

    wide, narrow = await strengths(0.35), await strengths(0.5)
    assert min(wide) < 0.5 * max(wide)
    assert min(narrow) >= 0.5 * max(narrow)
    assert len(wide) > len(narrow)


def roster(n: int) -> str:
    """A shift's crew list: its header names what a question asks about, its rows only
    names, units and roles."""
    names = [f"{first} {last}" for last in ("Whitlock", "Ortega", "Okafor", "Duarte")
             for first in ("Dana", "Luis", "Mae", "Ivo", "Rui", "Noor")]
    roles = ("captain", "engineer", "medic", "firefighter")
    return "\n".join(["CREW ROSTER  Station 4  shift B  (relief crews included)",
                      *(f"E{41 + k // 4}   {name:<16} {roles[k % 4]}"
                        for k, name in enumerate(names))])


async def test_a_question_clearly_matching_a_small_output_brings_all_of_it() -> None:
    """The question matches the roster's header; its last rows, the next passage, hold
    none of its words. The whole roster comes back (the oldest out first: `truncate` keeps
    nothing for its relevance), as one event whose reason counts the passages it
    brought; the question's other matches, records of a large board, come alone."""
    asked = await board_question({}, 24, lambda n: ("read_file", roster(n)) if n == 1
                                 else ("unit_status", units(n)),
                                 "Who was on the crew roster for Station 4 shift B?",
                                 policy="truncate")
    recalled = {e.chunk_id: e.reason for e in asked.events if e.action == "recall"}
    sent = json.dumps(asked.body["messages"])
    assert "Dana Whitlock" in sent and "Noor Duarte" in sent  # the roster's last row too
    roster_event = next(r for r in recalled.values() if "more passage" in r)
    assert roster_event.startswith("lexical match 1.00")
    assert sum("more passage" in r for r in recalled.values()) == 1
