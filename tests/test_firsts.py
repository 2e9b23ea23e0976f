"""A question that asks for the first of something prefers the passage where it first
happens (proxy/firsts.py)."""

from __future__ import annotations

import json
from typing import Any

from proxy.config import Settings
from proxy.firsts import asks_first, first_passages
from proxy.pipeline import Pipeline
from store.base import MemoryStore
from store.relevance import RelevanceIndex
from tests.support.messages import assistant, call, tool, user


def _access_log() -> str:
    """An API's access log in time order: 200s, then a deploy, then the first 500, then
    a burst of 500s, each of them a line that BM25 scores like the first."""
    lines = [f'{{"ts": "02:{m:02d}:10", "request_id": "req_a{m:03d}", "status": 200, '
             f'"path": "/v1/holds"}}' for m in range(12)]
    lines.append('{"ts": "02:12:00", "event": "new version 3.8.1 started", "pod": "api-q2"}')
    lines += [f'{{"ts": "02:{m:02d}:10", "request_id": "req_b{m:03d}", "status": 200, '
              f'"path": "/v1/venues"}}' for m in range(13, 20)]
    lines.append('{"ts": "02:20:53", "request_id": "req_7f3a9c21e0b4", "status": 500, '
                 '"path": "/v1/holds/H-5/confirm"}')
    lines += [f'{{"ts": "02:{m:02d}:10", "request_id": "req_c{m:03d}", "status": 500, '
              f'"path": "/v1/holds/H-{m}/confirm", "error": 500}}' for m in range(21, 40)]
    return "\n".join(lines)


def _index(log: str) -> RelevanceIndex:
    idx = RelevanceIndex()
    idx.add("talk", "The rollout finished overnight; the new version is live on every pod.")
    idx.add("log", log)
    return idx


def test_the_first_matching_line_of_a_log_is_the_stated_passage() -> None:
    log = _access_log()
    idx = _index(log)
    q = "What was the request ID of the very first 500 after the new version started?"
    hits = idx.search(q)
    first = next(h.piece for h in idx.chunk_hits("log") if "req_7f3a9c21e0b4" in h.text)
    best = next(h for h in hits if h.chunk_id == "log")
    assert best.piece != first  # BM25 alone: a later passage, dense with 500s, first
    assert first_passages(idx, hits, q, {"log"}) == {("log", first)}
    assert first_passages(idx, hits, q, set()) == frozenset()  # in context: not recall's


def test_what_came_after_an_event_starts_after_the_line_that_names_it() -> None:
    idx = _index(_access_log())
    q = "Which path got the first request after the new version started?"
    hits = idx.search(q)
    (got,) = first_passages(idx, hits, q, {"log"})
    text = next(h.text for h in idx.chunk_hits("log") if h.piece == got[1])
    assert text.startswith('{"ts": "02:13:10", "request_id": "req_b013"')  # not req_a000


def test_which_questions_ask_for_a_first() -> None:
    assert asks_first("What time did the first pit-gain alarm go off?")
    assert asks_first("Which workstation was the first to open the disk image?")
    assert asks_first("When does significant wave height first drop below two metres?")
    assert not asks_first("What is the on-call engineer's first name?")
    assert not asks_first("First, check the logs. Which pod restarted?")
    assert not asks_first("At first the queue looked fine; which consumer lagged?")


async def test_recall_brings_the_first_500_of_an_evicted_log_back_to_back() -> None:
    st = Settings(store={"path": ":memory:"}, routes=[{
        "name": "t", "model": "t-*", "context_window": 3000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_key": "unused"},
        "recall": {"question_top_k": 1}}])  # one passage: the first 500's, or not
    pipeline = Pipeline(st, MemoryStore())
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You debug the API."},
                                  user("The API threw 500s after last night's deploy.")]
    msgs += [assistant(None, call("c_log", "read_log", "{}")), tool("c_log", _access_log()),
             assistant("Read the access log."), user("Keep going.")]
    q = "What was the request ID of the very first 500 after the new version started?"
    try:
        for k in range(12):  # other outputs push the log out
            msgs += [assistant(None, call(f"c{k}", "read_file", "{}")),
                     tool(f"c{k}", "\n".join(f"src/holds/mod{k}.py:{j}: def confirm_{j}"
                                              f"(hold, now): return hold.expires > now"
                                              for j in range(40))),
                     assistant(f"Read module {k}."), user("Keep going.")]
            last = await pipeline.prepare({"model": "t-1", "messages": list(msgs)},
                                          st.routes[0], "t", "s")
        before = json.dumps(last.body["messages"])  # the premise: the log is evicted
        prep = await pipeline.prepare({"model": "t-1", "messages": [*msgs[:-1], user(q)]},
                                      st.routes[0], "t", "s")
    finally:
        await pipeline.close()
    assert "req_7f3a9c21e0b4" not in before
    assert "req_7f3a9c21e0b4" in json.dumps(prep.body["messages"])
