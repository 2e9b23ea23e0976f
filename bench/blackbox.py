"""Facts kept on workloads written apart: sixteen sets of black-box sessions.

Each was written by a helper that saw none of ctxwarden's code or benches, with a
generator of its own (one-offs, not kept; the sessions are kept as data):
- *first* (`tests/data/blackbox-sessions.json.gz`, 2026-12-05, an audit that also ran
  them through `ctxwarden serve`): five domains (data engineering, cloud cost, contract
  review, a qPCR lab notebook, travel planning), two sessions each; 10 sessions, 47 facts
  (30 values in tool outputs, 10 user statements, 7 constraints), each asked once, at
  least 16k tokens after it was planted. The filler comes from templates, so it repeats
  more than real output does.
- *second* (`tests/data/blackbox2-sessions.json.gz`, 2026-12-05, written to measure):
  six other domains (mobile release and crash triage, security incident response,
  month-end close, network operations, e-commerce inventory, game live ops), two
  sessions each; 12 sessions of 71-86 messages (~38-60k tokens), 66 facts (42 tool, 12
  user, 12 constraint), each asked at least 20 messages later in a colleague's words:
  "who's carrying the pager for the Android side", "how faint was the light arriving at
  that transceiver". Some need a step no lexical match takes ("Frankfurt" for `euc1`).
- *third* (`tests/data/blackbox3-sessions.json.gz`, 2026-12-05, written to measure and
  kept for it: its misses are counted, never studied, and nothing is tuned on it): six
  more domains (hospital bed management, freight dispatch, contract review, a solar
  farm, manufacturing quality, insurance claims), two sessions each; 12 sessions of
  69-118 messages (~35-86k tokens, a few tool outputs of 6-9k), 72 facts (48 tool, 12
  user, 12 constraint), each asked at least 39 messages later ("which truck kept
  running hot on the Denver to Salt Lake run"); the assistant's reply after a question
  repeats its answer, as a real one would.
- *fourth* (`tests/data/blackbox4-sessions.json.gz`, 2026-12-05, written to measure and
  kept for it like the third): six more domains (payroll and HR, a genomics pipeline, a
  CI/CD outage, university admissions, a bank's fraud desk, telecom billing), two
  sessions each; 12 sessions of 87-108 messages (~46-74k tokens, 31-44 tool outputs of
  300 to ~7.9k tokens in a dozen formats), 72 facts (48 tool, 12 user, 12 constraint),
  each asked 35-75 messages later. Its writer was asked for a mix of question kinds,
  the odd one out of a table among them ("one person's last paycheck was stuck instead
  of going out like everyone else's"), after the notable rows were built: it measures
  them on unseen data, not blind to their existence.
- *fifth* (`tests/data/blackbox5-sessions.json.gz`, 2026-12-05, written to be studied
  like the first two): six more domains (ML training runs, Kubernetes on-call,
  residential property management, clinical-trial data management, ad campaign
  analytics, warehouse robot fleets), two sessions each; 12 sessions of 89-106 messages
  (~48-60k tokens, 32-38 tool outputs of ~330 to ~7.5k tokens: aligned listings, CSV,
  JSON, YAML, logs), 72 facts (48 tool, 12 user, 12 constraint), each asked 42-103
  messages later; its writer was asked to mix questions that describe a row in other
  words, ask for the odd one out or the largest or smallest, name a column by a synonym,
  or place a thing by when it happened ("which pod had by far the most restarts", "the
  alert that went off a few minutes after the checkout deploy"). Its misses were read
  (this stop's column ends, aligned tables and summaries came from them).
- *sixth* (`tests/data/blackbox6-sessions.json.gz`, 2026-12-05): six more domains (a
  coding agent fixing a Python web service, retail data analysis, a water utility's
  operations desk, legal e-discovery, a restaurant chain's food safety, a university's
  research-computing helpdesk), two sessions each; 12 sessions of 92-105 messages
  (~40-54k tokens, 381 tool outputs in all), 72 facts (48 tool, 12 user, 12
  constraint), each asked at least 35 messages later; its writer was asked for the fifth
  set's mix of question kinds plus details deep in long logs and tracebacks, nested
  config values, and counts. It was measured before it was read (docs/design-notes.md).
- *seventh* (`tests/data/blackbox7-sessions.json.gz`, 2026-12-06, written to be studied
  after it was measured): six more domains (a coding agent in a TypeScript monorepo, a
  PostgreSQL DBA on call, airline crew scheduling, a hospital pharmacy's stock and
  medication safety, a literature review, SRE on call for a payments API), two sessions
  each; 12 sessions of 98-101 messages (~43-55k tokens; outputs of ~10 to ~7,700 tokens:
  query plans, rosters, lint and test reports, git logs, BibTeX, JSON logs, traces), 72
  facts (48 tool, 12 user, 12 constraint, five of these in the system prompt), each
  asked 35 or more messages later, with the fifth set's mix of question kinds.
- *eighth* (`tests/data/blackbox8-sessions.json.gz`, 2026-12-06, measured first, then
  studied): six more domains (a coding agent fixing a Rust CLI, a Terraform migration on
  AWS, a B2B SaaS support desk, a churn analysis in a notebook, a construction project's
  paperwork, an electricity grid's operations desk), two sessions each; 12 sessions of
  98-105 messages (~42-55k tokens; cargo and clippy output, Terraform plans and applies,
  AWS CLI JSON, CloudWatch queries, CRM and billing JSON, pandas prints, RFI and
  submittal logs, SCADA alarms, rosters), 72 facts (48 tool, 12 user, 12 constraint,
  three of these in the system prompt), each asked 35 or more messages later. Measured
  before anything was changed for it: RWOE kept 46 of 72 back to back (22 of 48 tool
  facts), 55 cold (docs/design-notes.md).
- *ninth* (`tests/data/blackbox9-sessions.json.gz`, 2026-12-06, measured first, then
  studied): six more domains (a coding agent chasing a goroutine leak in a Go service,
  dbt on Snowflake, a Prometheus-to-OpenTelemetry migration, a farm's irrigation desk,
  a customs broker, a newsroom's fact-checking desk), two sessions each; 12 sessions of
  97-100 messages (~45-49k tokens; pprof top and list, goroutine dumps, go mod graph,
  JSON-lines logs, dbt run and test logs, PromQL results, alert rules, Grafana JSON,
  sensor CSV, valve schedules, forecasts, customs entries, tracking events, CMS
  revisions, wire items), 72 facts (48 tool, 12 user, 12 constraint, five of these in
  the system prompt), each asked 35 or more messages later, one of them as a request
  ("Grab me the trace ID of ..."). Measured before anything was changed for it: RWOE
  kept 55 of 72 back to back (31 of 48 tool facts), 57 cold; mask 53 / 52.
- *tenth* (`tests/data/blackbox10-sessions.json.gz`, 2026-12-06, measured first, then
  studied): six more domains (a coding agent chasing an OOM in a Spring Boot service,
  Kafka on call, a hotel group's revenue desk, a veterinary hospital, a container
  terminal's operations, a university's grants office), two sessions each; 12 sessions
  of 100-101 messages (~45-49k tokens, 36-38 tool outputs each: Maven and surefire
  output, class histograms, GC logs, consumer-group lag, partition reassignments, rate
  grids, channel-manager JSON, lab panels, dosing sheets, berth schedules, crane logs,
  reefer alarms, budgets, effort reports, subaward invoices), 72 facts (48 tool, 12
  user, 12 constraint, five of these in the system prompt), each asked 35 or more
  messages later. Measured before it was read: RWOE kept 58 of 72 back to back (34 of
  48 tool facts), 64 cold; mask 57 / 57, lru 56 / 56, truncate 57 / 57.
- *eleventh* (`tests/data/blackbox11-sessions.json.gz`, 2026-12-06, measured first, then
  studied): six more domains (a coding agent fixing a flaky Django/Celery end-to-end
  suite, an airport ramp's turnaround desk, a pharmaceutical batch-release desk, an
  Airflow/dbt/Snowflake nightly pipeline, a wildfire dispatch desk, a mobile game's
  economy), two sessions each; 12 sessions of 97-105 messages (~46-49k tokens, 34-39
  tool outputs each: pytest and CI logs, git blame, docker compose, load sheets, METARs,
  fuel orders, batch records, environmental monitoring, stability tables, DAG runs,
  query history, unit status boards, RAWS readings, A/B results, IAP revenue, currency
  ledgers), 72 facts (48 tool, 12 user, 12 constraint, five of these in the system
  prompt), each asked 35 or more messages later, two to a message: every question
  shares its user message with another ("Two quick ones: … ? And … ?"). Measured
  before it was read (once a message's two facts both counted): RWOE kept 39 of 72
  back to back (15 of 48 tool facts), 42 cold; mask 31 / 30, lru 34 / 31, truncate
  30 / 30.
- *twelfth* (`tests/data/blackbox12-sessions.json.gz`, 2026-12-06, measured first): six
  more domains (a coding agent in a C++/CMake codebase, a semiconductor fab's yield
  engineering, a city transit operations desk, a hospital campus's building management,
  a contact centre's workforce management, DNS/CDN edge operations), two sessions each;
  12 sessions of 98-104 messages (~46-49k tokens, 36-39 tool outputs each: compiler and
  sanitizer output, ctest, perf, wafer maps, SPC CSV, lot histories, AVL pings, schedule
  adherence, BACnet points, trend logs, alarm journals, interval forecasts, queue JSON,
  dig, edge JSON lines, cert inventories, BGP announcements), 144 facts (96 tool, 24
  user, 24 constraint), each asked 35 or more messages later, a third of the asking
  messages asking two (one technician's name, planted twice by its generator, was
  renamed in the earlier output). Measured before it was read, on the code of that
  morning and of that evening: RWOE kept 111 / 115 of 144 back to back / cold, then
  115 / 120; mask 107 / 113, then 115 / 114.
- *thirteenth* (`tests/data/blackbox13-sessions.json.gz`, 2026-12-07, measured first):
  six more domains (a coding agent upgrading a Rails monolith, an offshore drilling
  desk, a bank's transaction-monitoring team, a satellite ground station, a VFX render
  pipeline, an epidemiology surveillance desk), two sessions each; 12 sessions of 98-104
  messages (~46-49k tokens, 34-37 tool outputs each: bundler and rspec output, Rails
  logs, Sidekiq stats, rubocop counts, mud logs, WITSML JSON, crew manifests, alert
  queues, KYC JSON, pass schedules, telemetry frames, command logs, render-farm tables,
  FlexLM status, case line lists, contact tracing tables), 144 facts (96 tool, 24 user,
  24 constraint), each asked 35 or more messages later, a third of the asking messages
  asking two (its writer's request indices were shifted by one to this format's).
  Measured before it was read, on that morning's code: RWOE kept 116 / 117 of 144 back
  to back / cold; mask 116 / 118.
- *fourteenth* (`tests/data/blackbox14-sessions.json.gz`, 2026-12-07, measured first):
  six more domains (a coding agent in an Elixir/Phoenix billing app, a Ceph storage
  cluster on call, a ferry operator's operations desk, a museum's collections and loans
  office, a regional blood centre, a ski resort's mountain operations), two sessions
  each; 12 sessions of 99-104 messages (~47-65k tokens, 36-39 tool outputs each: mix and
  ExUnit output, Oban job tables, Phoenix logs, `ceph osd df` and `ceph health detail`,
  PG dumps, orchestrator listings, marine forecasts, crew rest hours, fare tables,
  condition reports, loan agreements, stock levels, issue queues, avalanche control
  logs, lift status boards), 144 facts (96 tool, 24 user, 24 constraint, ten in the
  system prompt), each asked 38 or more messages later, a third of the asking messages
  asking two. Measured before it was read, on that morning's code: RWOE kept 118 / 120
  of 144 back to back / cold; mask 118 / 116, lru 116 / 112, truncate 117 / 116.
- *fifteenth* (`tests/data/blackbox15-sessions.json.gz`, 2026-12-07, kept for measuring
  like the third and fourth: counted, never studied): six more domains (a coding agent
  in a Node.js/Express and Redis API, a hydroelectric dam's operations desk, mortgage
  underwriting, an ISP's network operations centre on a fibre cut, a zoo's animal-care
  and veterinary records, a broadcast playout control room), two sessions each (the two
  share their tool calls and most question wording; names, ids and values differ); 12
  sessions of 102-105 messages (~45-49k tokens, 35-39 tool outputs of ~7 to ~7.9k
  tokens), 288 facts (192 tool, 48 user, 48 constraint, five in the system prompt), each
  asked 46 or more messages later, a third of the asking messages asking two; the
  assistant answers a question in one templated line. Measured before anything was
  changed for it (`47640e3`): RWOE kept 266 / 268 of 288 back to back / cold (tool
  facts 170 / 192), the same through `ctxwarden serve` with the `openai` SDK as the
  client and no session header; mask 266 / 265, lru 266 / 266, truncate 266 / 265.
- *sixteenth* (`tests/data/blackbox16-sessions.json.gz`, 2026-12-08, measured first):
  six more domains (a coding agent fixing a slow, memory-hungry .NET 8 background worker,
  a wind farm's SCADA desk, a public library network's circulation desk, a cruise ship's
  hotel operations, an agronomy field-trial station, an esports tournament's
  operations), two sessions each (the two ask in nearly the same words; names, ids and
  values differ); 12 sessions of 98-103 messages (~45-48k tokens, 34-36 tool outputs of
  ~6 to ~7,400 tokens: dotnet build and test output, dotnet-counters, EF Core SQL logs,
  turbine boards, 10-minute SCADA CSV, alarm journals, ILS loan and hold tables, RFID
  gate logs, galley temperature logs, folios, plot layouts, soil tests, NDVI summaries,
  bracket JSON, match server logs, anti-cheat flags), 144 facts (96 tool, 24 user, 24
  constraint), each asked 35 or more messages later, a third of the asking messages
  asking two. Measured before it was read, on the code of that session's start and of
  its notable-row change (the same): RWOE kept 113 / 116 of 144 back to back / cold
  (tool facts 65 / 68); mask 112 / 115, lru 112 / 113, truncate 112 / 114. Then read:
  "far more … than the rest" names a column's outlier (117 / 120).
Questions name neither the answer nor, where avoidable, its label.

Replayed here in process (`Pipeline.prepare`, the agent-loop route's settings, every
policy; `JOBS` sets at once, a process each), three ways:
- back to back, lexical path (no embedder), each session's requests in order (a request
  whenever the last message is a user message or a batch's last tool result);
- cold: each fact's history up to its question, sent whole to a new session;
- paced at best, RWOE and mask only (slow: the real embedder): every passage embedded
  before each user turn, as a loop paced by a model's generation time allows.

    .venv/bin/python -m bench.blackbox
"""

from __future__ import annotations

import asyncio
import gzip
import json
import multiprocessing
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

import proxy  # noqa: F401  (offline defaults)
from bench import agentloop
from bench.prefix import bounds
from bench.replay import Meter
from bench.seeds import KINDS, settings
from proxy.pipeline import Pipeline
from store.base import MemoryStore

_DIR = Path(__file__).resolve().parents[1] / "tests" / "data"
SETS = {"first": _DIR / "blackbox-sessions.json.gz",
        "second": _DIR / "blackbox2-sessions.json.gz",
        "third": _DIR / "blackbox3-sessions.json.gz",
        "fourth": _DIR / "blackbox4-sessions.json.gz",
        "fifth": _DIR / "blackbox5-sessions.json.gz",
        "sixth": _DIR / "blackbox6-sessions.json.gz",
        "seventh": _DIR / "blackbox7-sessions.json.gz",
        "eighth": _DIR / "blackbox8-sessions.json.gz",
        "ninth": _DIR / "blackbox9-sessions.json.gz",
        "tenth": _DIR / "blackbox10-sessions.json.gz",
        "eleventh": _DIR / "blackbox11-sessions.json.gz",
        "twelfth": _DIR / "blackbox12-sessions.json.gz",
        "thirteenth": _DIR / "blackbox13-sessions.json.gz",
        "fourteenth": _DIR / "blackbox14-sessions.json.gz",
        "fifteenth": _DIR / "blackbox15-sessions.json.gz",
        "sixteenth": _DIR / "blackbox16-sessions.json.gz"}
DATA = SETS["first"]
PACED = ("rwoe", "mask")


def sessions(path: Path = DATA) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))
    return loaded


def _tally(c: Counter[str], missed: list[str], session: str, fact: dict[str, Any],
           body: dict[str, Any]) -> None:
    """Whether the forwarded `body` holds `fact`'s answer, counted by its kind."""
    c["asked_" + fact["kind"]] += 1
    # as the wire carries it: an answer with a quote (`11'-4" AFF`) is escaped in JSON
    ok = orjson.dumps(fact["answer"]).decode()[1:-1] in orjson.dumps(body["messages"]).decode()
    c["kept_" + fact["kind"]] += ok
    if not ok:
        missed.append(f"{session}:{fact['name']}")


async def loop(policy: str, data: list[dict[str, Any]], paced: bool = False
               ) -> tuple[Counter[str], list[str]]:
    """Facts kept replaying each session's requests in order; paced: with the local
    embedder, every passage embedded before each user turn."""
    st = settings(policy)
    store = MemoryStore()
    embedder = None
    if paced:
        from store.embed import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()  # its own child, closed below
        await embedder.load()
        store.embedder = embedder  # type: ignore[attr-defined]
    pipeline = Pipeline(st, store)
    c: Counter[str] = Counter()
    missed: list[str] = []
    try:
        for i, s in enumerate(data):
            asks: dict[int, list[dict[str, Any]]] = {}  # a message may ask two at once
            for f in s["facts"]:
                asks.setdefault(f["ask_index"] + 1, []).append(f)
            for k in s["requests"]:
                messages = s["messages"][:k]
                if paced and messages[-1]["role"] == "user":
                    await pipeline.relater.flush()
                prep = await pipeline.prepare({"model": "loop-1", "messages": messages},
                                              st.routes[0], "bench", f"s{i}")
                if k != s["requests"][0]:  # what a provider's prefix cache serves
                    c["turns"] += 1
                    c["prefix_permille"] += round(prep.prefix_ratio * 1000)
                for f in asks.get(k, ()):
                    _tally(c, missed, s["id"], f, prep.body)
    finally:
        await pipeline.close()
        if embedder is not None:
            embedder.close()
    return c, missed


async def cold(policy: str, data: list[dict[str, Any]]) -> tuple[Counter[str], list[str]]:
    """Each fact's history up to its question, sent whole to a new session."""
    st = settings(policy)
    pipeline = Pipeline(st, MemoryStore())
    c: Counter[str] = Counter()
    missed: list[str] = []
    try:
        for i, s in enumerate(data):
            for j, f in enumerate(s["facts"]):
                body = {"model": "loop-1", "messages": s["messages"][:f["ask_index"] + 1]}
                prep = await pipeline.prepare(body, st.routes[0], "bench", f"c{i}-{j}")
                _tally(c, missed, s["id"], f, prep.body)
    finally:
        await pipeline.close()
    return c, missed


def _cell(c: Counter[str]) -> str:
    kept = sum(c[f"kept_{k}"] for k in KINDS)
    asked = sum(c[f"asked_{k}"] for k in KINDS)
    kinds = " / ".join(f"{c[f'kept_{k}']}/{c[f'asked_{k}']}" for k in KINDS)
    return f"**{kept}/{asked}** ({kinds})"


JOBS = 2  # sets replayed at once, a process each: what each keeps does not depend on timing


async def run(quick: bool = False) -> str:
    running = asyncio.get_running_loop()  # not `loop`: that is the replay below
    jobs = max(1, min(JOBS, os.cpu_count() or 1))
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        bodies = await asyncio.gather(*(running.run_in_executor(pool, _replayed, name, quick)
                                        for name in SETS))
    return "\n\n".join(f"**The {name} set.** {body}" for name, body in zip(SETS, bodies,
                                                                          strict=True))


def _replayed(name: str, quick: bool) -> str:
    """One set's section, in a worker process of its own."""
    return asyncio.run(run_set(sessions(SETS[name]), quick))


async def run_set(data: list[dict[str, Any]], quick: bool = False) -> str:
    policies = agentloop.POLICIES
    rows = ["| policy | back to back, lexical | cold, question last | paced at best "
            "(with vectors) | cache-prefix ratio, back to back |", "|---|---|---|---|---|"]
    misses: dict[str, list[str]] = {}
    for p in policies:
        b2b, missed = await loop(p, data)
        cc, _ = await cold(p, data)
        paced = "—"
        if p in PACED and not quick:
            pc, pm = await loop(p, data, paced=True)
            paced = _cell(pc)
            if p == "rwoe":
                misses["paced at best"] = pm
        if p == "rwoe":
            misses["back to back"] = missed
        ratio = b2b["prefix_permille"] / 1000 / max(1, b2b["turns"])
        rows.append(f"| {p} | {_cell(b2b)} | {_cell(cc)} | {paced} | {ratio:.3f} |")
    asked = Counter(f["kind"] for s in data for f in s["facts"])
    ceiling, best, mark = bounds([s["messages"] for s in data], Meter(),
                                 agentloop.WINDOW - agentloop.MAX_OUT)
    return (f"{len(data)} sessions, {sum(asked.values())} facts (tool / user / constraint "
            f"{' / '.join(str(asked[k]) for k in KINDS)}), window "
            f"{agentloop.WINDOW:,} tokens; facts kept as kept / asked (tool / user / "
            "constraint).\n\n" + "\n".join(rows) + "\n\nRWOE's misses: "
            + "; ".join(f"{how}: {', '.join(m) or 'none'}" for how, m in misses.items())
            + f". The workload allows a cache-prefix ratio of at most {ceiling:.3f} "
            f"(bench/prefix.py `bounds`: each turn's new messages are never cached); "
            f"dropping the oldest messages down to {mark:g} of the budget scores {best:.3f}.")


if __name__ == "__main__":
    print(asyncio.run(run()))
