"""What Gemini's generateContent rejects, with Google's own words, for `gemini_server`.

Each rule raises `Rejected(400, <Google's error body>)`. The messages follow the real API's
(v1beta, 2025): `contents` holds only `user` and `model` turns, each with parts; a turn of
`functionCall` parts comes right after a user turn (or a function response turn) and is
answered by the very next turn with as many `functionResponse` parts (the fake also wants
the names in the same order, as every client that pairs them by name needs); and the
prompt must fit the input window (Gemini counts the output apart from it, so
`maxOutputTokens` is not added). A request that passes here would not be refused by Gemini
for the same reasons. Field names are read in both spellings, as Google's JSON parser does
(`function_call` or `functionCall`, `system_instruction` or `systemInstruction`).
"""

from __future__ import annotations

from typing import Any

import orjson
import tiktoken

import proxy  # noqa: F401  (offline defaults: tiktoken reads its cache dir from the env)
from tests.support.openai_server import Rejected

_ENC: list[tiktoken.Encoding] = []
_CALL_AFTER = ("Please ensure that function call turn comes immediately after a user turn or "
               "after a function response turn.")
_RESPONSE_AFTER = ("Please ensure that function response turn comes immediately after a "
                   "function call turn.")
_COUNT = ("Please ensure that the number of function response parts is equal to the number of "
          "function call parts of the function call turn.")
_NAMES = ("Please ensure that the name of each function response part matches the name of the "
          "function call part in the same position of the function call turn.")
# The `status` Google gives each HTTP status in its error body
STATUSES = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
            429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
            504: "DEADLINE_EXCEEDED"}


def error_body(code: int, message: str, details: list[dict[str, Any]] | None = None) -> bytes:
    """Google's error shape: `{"error": {"code", "message", "status"[, "details"]}}`."""
    err: dict[str, Any] = {"code": code, "message": message,
                           "status": STATUSES.get(code, "UNKNOWN")}
    if details:
        err["details"] = details
    return orjson.dumps({"error": err})


def invalid(message: str) -> Rejected:
    return Rejected(400, error_body(400, message))


def get(obj: dict[str, Any], snake: str) -> Any:
    """`obj[snake]`, else the camelCase spelling: Google reads both."""
    head, *rest = snake.split("_")
    return obj.get(snake, obj.get(head + "".join(w.title() for w in rest)))


def check(body: dict[str, Any], window: int | None) -> int:
    """Raise `Rejected` for what Gemini refuses; return the prompt's token count."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise invalid("* GenerateContentRequest.contents: contents is not specified\n")
    for i, turn in enumerate(contents):
        role = turn.get("role") if isinstance(turn, dict) else None
        if role not in ("user", "model"):
            raise invalid("Please use a valid role: user, model.")
        parts = turn.get("parts")
        if not isinstance(parts, list) or not parts:
            raise invalid(f"* GenerateContentRequest.contents[{i}].parts: contents.parts must "
                          "not be empty.\n")
        for j, part in enumerate(parts):
            if not isinstance(part, dict) or not any(v not in (None, "") for k, v in
                                                     part.items() if k != "thoughtSignature"):
                raise invalid(f"* GenerateContentRequest.contents[{i}].parts[{j}].data: "
                              "required oneof field 'data' must have one initialized field\n")
    _function_turns(contents)
    tokens = count_tokens(body)
    if window is not None and tokens > window:
        raise invalid(f"The input token count ({tokens}) exceeds the maximum number of tokens "
                      f"allowed ({window}).")
    return tokens


def names(turn: dict[str, Any], kind: str) -> list[str]:
    """The function names of a turn's `function_call` or `function_response` parts."""
    return [str((get(p, kind) or {}).get("name")) for p in turn["parts"] if get(p, kind)]


def _function_turns(contents: list[dict[str, Any]]) -> None:
    asked: list[str] = []  # the previous turn's function calls, by name
    prev_role = None
    for turn in contents:
        calls, answers = names(turn, "function_call"), names(turn, "function_response")
        if answers and not asked:
            raise invalid(_RESPONSE_AFTER)
        if asked and not answers:
            raise invalid(_RESPONSE_AFTER)
        if asked and len(answers) != len(asked):
            raise invalid(_COUNT)
        if asked and answers != asked:
            raise invalid(_NAMES)
        if calls and prev_role != "user":
            raise invalid(_CALL_AFTER)
        asked = calls if turn["role"] == "model" else []
        prev_role = turn["role"]
    if asked:
        raise invalid(_RESPONSE_AFTER)


def _text(parts: Any) -> str:
    """Every text, call and response of a list of parts, as one string to count."""
    out: list[str] = []
    for p in parts if isinstance(parts, list) else ():
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            out.append(p["text"])
        else:
            out.append(orjson.dumps({k: v for k, v in p.items()
                                     if k != "thoughtSignature"}).decode())
    return " ".join(out)


def count_tokens(body: dict[str, Any]) -> int:
    """A rough count (o200k, not Gemini's tokenizer): system + contents + tools, 4 a turn."""
    if not _ENC:
        _ENC.append(tiktoken.get_encoding("o200k_base"))
    enc = _ENC[0]
    system = get(body, "system_instruction") or {}
    texts = [_text(system.get("parts"))] + [_text(t.get("parts")) for t in body["contents"]]
    if body.get("tools"):
        texts.append(orjson.dumps(body["tools"]).decode())
    return sum(len(enc.encode(t, disallowed_special=())) for t in texts) + 4 * len(
        body["contents"])
