"""A Responses API request's input items as chat messages, and the fitted messages back
as items (proxy/responses.py manages `/v1/responses` with them).

`to_chat(body)` reads `instructions` as a system message and each input item as chat
reads it:

- a `message` (or the short form `{"role", "content"}`) is a message of its role, its
  `input_text` / `output_text` parts text parts, `input_image` an image part (one sent
  by `file_id` costs what an image of unknown size may), `input_file`
  a file part, `refusal` a refusal part (anything else: its JSON as text, the safe side of
  the count);
- consecutive call items are one assistant message's `tool_calls` (with the assistant's
  words just before them as its content, as chat has them), each `call_id` its id, and
  each output item a `tool` message answering it, named by its call's tool as chat names
  results: `function_call`, `custom_tool_call`, and any other `*_call` the client runs
  (`local_shell_call`: its action as the arguments of a call named `local_shell`);
- a call the provider ran itself (`web_search_call`, `file_search_call`,
  `code_interpreter_call`, `image_generation_call`, `mcp_call`, `mcp_list_tools`: no
  output item, its results inside it) is what the assistant did: its JSON as its words;
- a `reasoning` item goes with the item that follows it (an assistant's calls or words):
  kept with them, dropped with them, counted with them (its summary and its encrypted
  content, as text), so the items keep their order;

and says which items each message came from. A request holding any other item (a
`computer_call`, whose outputs are screenshots, an `item_reference`, MCP approvals) is
not translated (`Untranslatable`): the caller passes it through unchanged.

`to_items(plan, fitted, kept)` writes the fitted messages back over the items they came
from: a message forwarded as it was keeps its items byte for byte; a tool result that
became a stub or a cut has that text as its `output`; a message that took a recall block
has it as one more `input_text` part (or appended to its text); a message left out leaves
its items out, a reasoning item with the calls it preceded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

ROLES = ("user", "system", "developer", "assistant")
CALLS = {"function_call": "function", "custom_tool_call": "custom"}
# the provider's own tools, run on its side: a call item, no output item (its results are
# in the call); read as what the assistant did, its JSON as its words
HOSTED = frozenset({"web_search_call", "file_search_call", "code_interpreter_call",
                    "image_generation_call", "mcp_call", "mcp_list_tools"})
UNPAIRED = frozenset({"computer_call"})  # its outputs are screenshots: not counted here


def is_call(kind: Any) -> bool:
    """A call the client runs: a function's, a custom tool's, or another `*_call` with a
    `call_id` answered by a `*_call_output` (`local_shell_call`)."""
    return kind in CALLS or (isinstance(kind, str) and kind.endswith("_call")
                             and kind not in HOSTED and kind not in UNPAIRED)


def is_output(kind: Any) -> bool:
    """The output item answering such a call (`function_call_output`, …)."""
    return isinstance(kind, str) and kind.endswith("_call_output") and \
        kind[:-len("_output")] not in UNPAIRED


class Untranslatable(ValueError):
    """The input holds what chat messages cannot stand for; the reason is the message."""


@dataclass(slots=True)
class Plan:
    messages: list[dict[str, Any]] = field(default_factory=list)
    sources: list[list[int]] = field(default_factory=list)  # message -> its items' indexes
    items: list[Any] = field(default_factory=list)  # the client's, as sent


def to_chat(body: dict[str, Any]) -> Plan:
    items = body.get("input")
    if not isinstance(items, list):
        raise Untranslatable("input is not a list of items")
    plan = Plan(items=items)
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        plan.messages.append({"role": "system", "content": body["instructions"]})
        plan.sources.append([])  # `instructions`: no item's, and never written back
    waiting: list[int] = []  # reasoning items: they go with the next item, whatever it is
    names: dict[str, str] = {}  # call_id -> the tool's name
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise Untranslatable(f"input[{i}] is not an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            waiting.append(i)
            continue
        mine, waiting = [*waiting, i], []
        if is_call(kind):
            names[str(item.get("call_id"))] = str(item.get("name")
                                                  or str(kind).removesuffix("_call"))
            last = plan.messages[-1] if plan.messages else None
            if last is not None and last["role"] == "assistant" and _open(plan, items):
                last.setdefault("tool_calls", []).append(_call(item, i))
                plan.sources[-1].extend(mine)
                _count_reasoning(last, mine[:-1], items)
            else:
                _add(plan, {"role": "assistant", "content": None,
                            "tool_calls": [_call(item, i)]}, mine, items)
        elif is_output(kind):
            if not isinstance(item.get("call_id"), str):
                raise Untranslatable(f"input[{i}] has no call_id")
            answer = {"role": "tool", "tool_call_id": item["call_id"],
                      "content": _output(item.get("output"))}
            name = names.get(item["call_id"])
            if name:  # as chat names a result: its stub and its matches say the tool
                answer["name"] = name
            _add(plan, answer, mine, items)
        elif kind in HOSTED:
            text = orjson.dumps({k: v for k, v in item.items() if k != "id"}).decode()
            _add(plan, {"role": "assistant", "content": text}, mine, items)
        elif kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise Untranslatable(f"input[{i}] has role {role!r}")
            _add(plan, {"role": role, "content": _content(item.get("content"), i)}, mine, items)
        else:
            raise Untranslatable(f"input[{i}] is a {kind!r} item")
    if waiting:
        raise Untranslatable("the input ends in a reasoning item")
    return plan


def _open(plan: Plan, items: list[Any]) -> bool:
    """The last message takes a call item next: it ends in a call (parallel calls), or it
    is an assistant's words with no calls yet (chat's message with content and calls)."""
    last = items[plan.sources[-1][-1]]
    return is_call(last.get("type")) or not plan.messages[-1].get("tool_calls")


def _add(plan: Plan, message: dict[str, Any], sources: list[int], items: list[Any]) -> None:
    _count_reasoning(message, sources[:-1], items)
    plan.messages.append(message)
    plan.sources.append(sources)


def _count_reasoning(message: dict[str, Any], reasoning: list[int], items: list[Any]) -> None:
    """The reasoning items' text rides along on the message as a field the counter counts
    (proxy/tokens.py counts every field beyond the framed ones) and nobody forwards."""
    if reasoning:
        text = "\n".join(orjson.dumps({k: v for k, v in items[j].items() if k != "id"}).decode()
                         for j in reasoning)
        message["reasoning"] = (message.get("reasoning", "") + "\n" + text).lstrip("\n")


def _call(item: dict[str, Any], i: int) -> dict[str, Any]:
    call_id = item.get("call_id")
    named = isinstance(item.get("name"), str) or item["type"] not in CALLS
    if not isinstance(call_id, str) or not named:
        raise Untranslatable(f"input[{i}] has no call_id or name")
    if item["type"] == "custom_tool_call":
        return {"id": call_id, "type": "custom",
                "custom": {"name": item["name"], "input": str(item.get("input", ""))}}
    if item["type"] == "function_call":
        return {"id": call_id, "type": "function", "function": {
            "name": item["name"], "arguments": str(item.get("arguments", ""))}}
    rest = {k: v for k, v in item.items() if k not in ("type", "id", "status", "call_id")}
    return {"id": call_id, "type": "function", "function": {
        "name": item["type"].removesuffix("_call"), "arguments": orjson.dumps(rest).decode()}}


def _output(output: Any) -> Any:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return [_part(p) for p in output]
    return orjson.dumps(output).decode()


def _content(content: Any, i: int) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Untranslatable(f"input[{i}] has content of another kind")
    return [_part(p) for p in content]


def _part(part: Any) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": str(part.get("text", ""))}
    if kind == "refusal":
        return {"type": "refusal", "refusal": str(part.get("refusal", ""))}
    if kind == "input_image":  # by URL, or by `file_id` (priced as an unseen image)
        url = part.get("image_url")
        url = url if isinstance(url, str) else f"file-id:{part.get('file_id', '')}"
        return {"type": "image_url", "image_url": {"url": url,
                                                   "detail": part.get("detail", "auto")}}
    if kind == "input_file" and isinstance(part.get("file_data") or part.get("file_id"), str):
        spec = {k: part[k] for k in ("file_data", "file_id", "filename") if k in part}
        return {"type": "file", "file": spec}
    return {"type": "text", "text": orjson.dumps(part).decode()}


def to_items(plan: Plan, fitted: list[dict[str, Any]], kept: tuple[int, ...]) -> list[Any]:
    """The input items to forward for the fitted messages (`kept`: Prepared.kept)."""
    out: list[Any] = []
    for message, k in zip(fitted, kept, strict=True):
        for j in plan.sources[k]:
            item = plan.items[j]
            if j == plan.sources[k][-1]:  # the message's own item (the rest: reasoning)
                item = _rewritten(item, plan.messages[k], message)
            out.append(item)
    return out


def _rewritten(item: dict[str, Any], before: dict[str, Any], after: dict[str, Any]
               ) -> dict[str, Any]:
    """`item` with what the fit or a recall changed in its message's content: a tool
    result's stub or cut whole, a recall block as one more part (or more text)."""
    was, now = before.get("content"), after.get("content")
    if now == was:
        return item
    key = "output" if is_output(item.get("type")) else "content"
    original = item.get(key)
    if isinstance(was, list) and isinstance(now, list) and isinstance(original, list) and \
            now[:len(was)] == was:
        extra = [{"type": "input_text", "text": p.get("text", "")} for p in now[len(was):]]
        return {**item, key: [*original, *extra]}
    if isinstance(was, str) and isinstance(now, str) and isinstance(original, str) and \
            now.startswith(was):
        return {**item, key: original + now[len(was):]}
    if isinstance(now, str):
        return {**item, key: now}
    return {**item, key: [{"type": "input_text", "text": str(p.get("text", ""))}
                          for p in now or () if isinstance(p, dict)]}
