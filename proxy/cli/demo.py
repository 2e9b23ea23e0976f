"""`ctxwarden demo [--url URL] [--start]`: watch the proxy evict and recall, turn by turn.

Plays a scripted coding-agent session (proxy/cli/demo_script.py) against a running proxy, or
with `--start` against one it starts in this process on the config's demo route (LiteLLM
mock, window 1200: no key, no network). After each request it reads what the proxy did
from the same admin API the inspector uses (`/admin/evictions`, `/admin/turns`), prints
tokens in → out, each eviction (class, tokens, score) and recall, and ends with the
inspector's URL. With `--start` it keeps serving afterwards so the URL works (`--exit`
stops instead).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp

from proxy.auth import DEFAULT_TENANT
from proxy.cli.demo_script import STEPS, SYSTEM, Step
from proxy.cli.demo_server import DEFAULT_URL, DemoError, started


@dataclass
class DemoResult:
    session: str
    url: str
    turns: list[dict[str, Any]] = field(default_factory=list)  # /admin/turns rows
    events: list[dict[str, Any]] = field(default_factory=list)  # /admin/evictions rows
    reply: str = ""  # the model's answer to the last request
    tenant: str | None = None  # the session's, as /admin/sessions names it


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("demo", help="play a scripted agent session through the proxy "
                              "and show what it evicted and recalled")
    p.add_argument("--url", default=None, help=f"a running proxy (default {DEFAULT_URL})")
    p.add_argument("--start", action="store_true",
                   help="start a proxy in this process from --config (its demo route)")
    p.add_argument("--config", default="config.yaml", help="with --start (default config.yaml)")
    p.add_argument("--port", type=int, default=None,
                   help="with --start: port (default: the config's; 0 picks a free one)")
    p.add_argument("--exit", action="store_true",
                   help="with --start: stop when the demo ends instead of serving on")
    p.add_argument("--model", default="demo", help="model to ask for (default demo)")
    p.add_argument("--session", default=None, help="session id (default demo-<random>)")
    p.add_argument("--api-key", default=_env_key("CTXWARDEN_API_KEY", "CTXWARDEN_KEYS"),
                   help="proxy key for /v1 (default $CTXWARDEN_API_KEY, else the first of "
                        "$CTXWARDEN_KEYS, the server's keys_env in the README)")
    p.add_argument("--admin-key", default=_env_key("CTXWARDEN_ADMIN_KEY", "CTXWARDEN_ADMIN_KEYS"),
                   help="admin key for /admin (default $CTXWARDEN_ADMIN_KEY, else the first of "
                        "$CTXWARDEN_ADMIN_KEYS)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    try:
        asyncio.run(_main(args, out or sys.stdout))
    except DemoError as exc:
        print(f"ctxwarden demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _env_key(one: str, many: str) -> str | None:
    """A key from the environment: `one`'s, else the first of `many`'s comma-separated list
    (the variable a server on this machine reads its keys from)."""
    if os.environ.get(one):
        return os.environ[one]
    first = os.environ.get(many, "").split(",")[0].strip()
    return first or None


def _bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def _main(args: argparse.Namespace, out: TextIO) -> None:
    async with started(args) as url, aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=120)) as http:
        session = args.session or f"demo-{secrets.token_hex(4)}"
        await drive(http, url, session, out, model=args.model,
                    api_headers=_bearer(args.api_key),
                    admin_headers=_bearer(args.admin_key or args.api_key),
                    hints=not (args.start and args.exit))  # its own server stops now
        if args.start and not args.exit:
            print(f"serving on {url} (Ctrl+C to stop)", file=sys.stderr)
            await asyncio.Event().wait()


async def _get(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    async with http.get(url, headers=headers) as resp:
        if resp.status != 200:
            raise DemoError(f"GET {url} answered {resp.status}: {(await resp.text())[:300]}"
                            + (" (set --admin-key)" if resp.status in (401, 403) else ""))
        return await resp.json()


async def drive(http: aiohttp.ClientSession, url: str, session: str, out: TextIO, *,
                model: str = "demo", api_headers: dict[str, str] | None = None,
                admin_headers: dict[str, str] | None = None, hints: bool = True) -> DemoResult:
    """Play the script against the proxy at `url`; print and return what it did (and
    where to look next, with `hints`, while that proxy keeps running)."""
    api = {"X-Session-ID": session, **(api_headers or {})}
    admin = admin_headers or {}
    q = f"session={session}"
    result = DemoResult(session, url)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    seen = 0
    out.write(f"ctxwarden demo: session {session} on {url} (model {model!r})\n")
    for n, step in enumerate(STEPS):
        if step.user is not None:
            if step.note:
                messages.append({"role": "assistant", "content": step.note})
            messages.append({"role": "user", "content": step.user})
        else:
            cid = f"call_{n}"
            messages.append({"role": "assistant", "content": step.note, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": step.tool, "arguments": step.args}}]})
            messages.append({"role": "tool", "tool_call_id": cid, "content": step.output})
        async with http.post(f"{url}/v1/chat/completions", headers=api,
                             json={"model": model, "messages": messages}) as resp:
            if resp.status != 200:
                raise DemoError(f"POST /v1/chat/completions answered {resp.status}: "
                                f"{(await resp.text())[:300]}"
                                + (" (set --api-key)" if resp.status == 401 else ""))
            body = await resp.json()
        result.reply = str((body.get("choices") or [{}])[0].get("message", {}).get("content"))
        if result.tenant is None:  # the session's tenant (its key's, in the keyed modes)
            result.tenant = await _tenant_of(http, url, session, admin)
            admin = {**admin, "X-Tenant-ID": result.tenant}
        result.events = (await _get(http, f"{url}/admin/evictions?{q}", admin))["events"]
        result.turns = (await _get(http, f"{url}/admin/turns?{q}", admin))["turns"]
        new, seen = result.events[seen:], len(result.events)
        out.write(_turn_line(result.turns[-1] if result.turns else {}, _what(step),
                             resp.headers))
        for e in new:
            out.write(_event_line(e))
    out.write(_totals(result, hints))
    return result


async def _tenant_of(http: aiohttp.ClientSession, url: str, session: str,
                     admin: dict[str, str], wait_s: float = 3.0) -> str:
    """The session's tenant as `/admin/sessions` names it, once its first turn summary is
    written (they are written in batches, a quarter second apart: proxy/turnlog.py)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        rows = (await _get(http, f"{url}/admin/sessions", admin))["sessions"]
        found = [str(r["tenant"]) for r in rows if r["session"] == session]
        if found or loop.time() >= deadline:
            return found[0] if found else DEFAULT_TENANT
        await asyncio.sleep(0.1)


def _what(step: Step) -> str:
    return step.label + (f" ({step.tool})" if step.tool else "")


WIDTH = max(len(_what(s)) for s in STEPS)


def _turn_line(turn: dict[str, Any], what: str, headers: Any) -> str:
    tin, tout = int(headers["X-Ctxwarden-Tokens-In"]), int(headers["X-Ctxwarden-Tokens-Out"])
    budget = f"  budget {turn['budget']:,}" if "budget" in turn else ""
    return (f"turn {turn.get('turn', '?'):>2}  {what:<{WIDTH}}  tokens {tin:>5,} → {tout:>5,}"
            f"{budget}\n")


def _event_line(e: dict[str, Any]) -> str:
    sign, label = ("-", "evicted ") if e["action"] == "evict" else ("+", "recalled")
    score = "score" if e["action"] == "evict" else "match"  # lexical strength or cosine
    preview = " ".join(str(e["preview"]).split())
    preview = preview if len(preview) <= 48 else preview[:47] + "…"
    return (f"        {sign} {label} {e['class']:<10} {e['tokens']:>4} tok  {score} "
            f"{e['score']:.4f}  {preview}\n")


def _totals(r: DemoResult, hints: bool = True) -> str:
    ev = [e for e in r.events if e["action"] == "evict"]
    rc = [e for e in r.events if e["action"] == "recall"]
    keyed = r.tenant not in (None, DEFAULT_TENANT)
    tenant = f" --tenant {r.tenant}" if keyed else ""
    hash_tenant = f"&tenant={r.tenant}" if keyed else ""
    return (f"\nsession {r.session}: {len(r.turns)} turns, {len(ev)} chunks evicted "
            f"({sum(e['tokens'] for e in ev):,} tokens), {len(rc)} "
            f"passage{'' if len(rc) == 1 else 's'} recalled "
            f"({sum(e['tokens'] for e in rc):,} tokens)\n"
            f"model's last answer: {r.reply}\n"
            + (f"decision log: ctxwarden log --session {r.session}{tenant}\n"
               f"inspector: {r.url}/ui/#session={r.session}{hash_tenant}\n" if hints else ""))
