"""proxy/items.py on its own: Responses items to chat messages and the fitted messages
back, order, reasoning and byte-for-byte items kept."""

from __future__ import annotations

import orjson
import pytest

from proxy.items import Untranslatable, to_chat, to_items
from tests.support.items import fc, out, said


def test_items_left_out_take_their_reasoning_and_keep_their_order() -> None:
    items = [said("user", "go"), {"type": "reasoning", "id": "rs_0", "summary": []},
             fc("c0"), fc("c1"), out("c0", "zero"), out("c1", "one"),
             {"type": "reasoning", "id": "rs_1", "summary": []}, said("assistant", "done"),
             said("user", "next")]
    plan = to_chat({"input": items, "instructions": "be brief"})
    roles = [m["role"] for m in plan.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert [c["id"] for c in plan.messages[2]["tool_calls"]] == ["c0", "c1"]  # parallel
    assert plan.sources[2] == [1, 2, 3] and plan.sources[5] == [6, 7]
    # the calls and their outputs left out (as the fit drops a group): so is rs_0
    kept = (0, 1, 5, 6)
    fitted = [plan.messages[k] for k in kept]
    assert to_items(plan, fitted, kept) == [items[0], items[6], items[7], items[8]]
    # a stub in place of an output, and a recall block on the last user message
    stub = {**plan.messages[3], "content": "[ctxwarden: offloaded]"}
    block = {**plan.messages[6], "content": [*plan.messages[6]["content"],
                                             {"type": "text", "text": "[recalled]"}]}
    got = to_items(plan, [plan.messages[0], plan.messages[1], plan.messages[2], stub,
                          plan.messages[4], plan.messages[5], block], tuple(range(7)))
    assert got[4] == {**items[4], "output": "[ctxwarden: offloaded]"}
    assert got[-1]["content"] == [*items[8]["content"],
                                  {"type": "input_text", "text": "[recalled]"}]
    assert got[:4] == items[:4] and got[5:8] == items[5:8]


def test_a_trailing_reasoning_item_is_not_translated() -> None:
    with pytest.raises(Untranslatable, match="ends in a reasoning item"):
        to_chat({"input": [said("user", "go"), {"type": "reasoning", "id": "rs_9"}]})


def test_reasoning_counts_with_the_message_it_precedes() -> None:
    plan = to_chat({"input": [said("user", "go"), {"type": "reasoning", "id": "rs_0",
                    "encrypted_content": "gAAAA" * 40}, fc("c0"), out("c0", "x")]})
    assert "gAAAA" in plan.messages[1]["reasoning"]  # counted (proxy/tokens.py)


def test_media_parts_become_the_chat_parts_they_are_priced_as() -> None:
    image = {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}
    stored = {"type": "input_image", "file_id": "file-img1"}
    pdf = {"type": "input_file", "file_id": "file-doc1", "filename": "a.pdf"}
    plan = to_chat({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "look"}, image, stored, pdf]}]})
    assert plan.messages[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                            "detail": "low"}},
        # no URL to read its size from: the price of an image of unknown size
        {"type": "image_url", "image_url": {"url": "file-id:file-img1", "detail": "auto"}},
        {"type": "file", "file": {"file_id": "file-doc1", "filename": "a.pdf"}}]


def test_hosted_and_shell_calls_are_translated_and_written_back_whole() -> None:
    """A web search the provider ran is the assistant's doing (its JSON its words); a shell
    call the client ran pairs with its output like a function's."""
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "pg 16 release notes"}}
    shell = {"type": "local_shell_call", "id": "lsh_1", "call_id": "sh_1",
             "status": "completed", "action": {"type": "exec", "command": ["ls", "-la"]}}
    result = {"type": "local_shell_call_output", "call_id": "sh_1", "output": "total 0"}
    items = [said("user", "look it up, then list"), search, said("assistant", "Found it."),
             shell, result, said("user", "thanks")]
    plan = to_chat({"input": items})
    assert plan.messages[1] == {"role": "assistant", "content": orjson.dumps(
        {k: v for k, v in search.items() if k != "id"}).decode()}
    assert plan.messages[2]["content"] == [{"type": "text", "text": "Found it."}]
    assert plan.messages[2]["tool_calls"] == [{"id": "sh_1", "type": "function", "function": {
        "name": "local_shell", "arguments": '{"action":{"type":"exec","command":["ls","-la"]}}'}}]
    assert plan.messages[3] == {"role": "tool", "tool_call_id": "sh_1",
                                "content": "total 0", "name": "local_shell"}
    kept = tuple(range(len(plan.messages)))
    assert to_items(plan, plan.messages, kept) == items  # nothing changed: byte for byte
    stub = {**plan.messages[3], "content": "[ctxwarden: offloaded]"}
    back = to_items(plan, [*plan.messages[:3], stub, plan.messages[4]], kept)
    assert back[4] == {**result, "output": "[ctxwarden: offloaded]"}
