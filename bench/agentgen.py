"""Generated agent sessions shaped like real agent loops (coding, research, support), with
facts planted and asked about later in plain words.

Why generated: the proxy's workloads elsewhere in bench/ were written next to the code they
measure. These sessions follow what agent traffic looks like, not what the proxy keys on:

- every step is an assistant tool call followed by NEW tool output of a realistic kind
  (source files, grep hits, test runs, git logs, build logs, JSON API answers, web pages,
  PDF extracts, ticket histories), of very uneven size (a log-normal around ~900 tokens,
  80 to 6,000), with failed calls, re-reads of the same file and user interjections;
- facts of three kinds hold a distinctive answer token (an identifier or a number): in a
  tool output (`tool`), in something the user says (`user`), in a rule the user sets
  (`constraint`);
- later the user asks about each fact once, in plain words that never contain the answer
  token (asserted), from several paraphrases per fact, none written against the proxy;
- when a fact is planted and when it is asked are drawn uniformly over the session's
  length (by tokens), not placed where any policy does well or badly.

Each answer token occurs in exactly one message of the session (asserted), so "the token
reached the upstream" means "the message holding the fact, or a recalled piece of it,
was forwarded". Deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Message = dict[str, Any]
FACTS = Path(__file__).with_name("agentfacts.yaml")
Rng = random.Random
KINDS = ("coding", "research", "support")
FACT_KINDS = ("tool", "user", "constraint")

# -- word banks ---------------------------------------------------------------------------
NOUNS = ("invoice ledger session token cache scheduler export report webhook notifier search "
         "catalog inventory pricing checkout shipping account audit metrics upload thumbnail "
         "payment refund coupon tenant profile consent locale currency address batch queue "
         "importer mailer").split()
VERBS = ("load parse build render validate sync fetch resolve apply compute normalize merge "
         "flush retry dispatch encode decode refresh expire reconcile enqueue serialize").split()
FIRST = ("Amara Jonas Priya Mateo Ines Tomasz Keiko Lucia Farid Nadia Oskar Yara Bruno "
         "Chiara Emeka Hana Ravi Sofia Tariq Ulla").split()
LAST = ("Okafor Lindqvist Moreau Tanaka Alvarez Novak Haddad Brennan Kowalczyk Esposito "
        "Nakamura Oyelaran Vasquez Holmberg Ruiz Adeyemi Fischer Castellanos Petrov Sato").split()
CITIES = ("Lyon Porto Leeds Graz Turku Malmo Bilbao Brno Gdansk Aarhus Ghent Kaunas").split()
TOPICS = ("battery storage", "rooftop solar", "broadband adoption", "urban cycling",
          "telehealth use", "remote work", "heat pump sales", "e-book lending",
          "electric buses", "food waste", "coastal flooding", "microplastics in rivers")
ORGS = ("the OECD", "Eurostat", "the IEA", "a Pew Research survey", "the national statistics "
        "office", "a McKinsey brief", "the World Bank", "a Nature Energy paper", "Ofcom",
        "the European Environment Agency")
PRODUCTS = ("wireless earbuds", "standing desk", "espresso machine", "hiking boots",
            "air purifier", "mechanical keyboard", "robot vacuum", "winter jacket",
            "blender", "monitor arm", "smart thermostat", "road bike helmet")


def _pick(rng: Rng, xs: Sequence[str]) -> str:
    return xs[rng.randrange(len(xs))]


def _hex(rng: Rng, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _alnum(rng: Rng, n: int) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(n))


def _ts(rng: Rng) -> str:
    return (f"2025-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z")


_FIELD = re.compile(r"\{(\w+)(?::([^}:]*))?(?::([^}]*))?\}")
_BANKS = {"verb": VERBS, "noun": NOUNS, "first": FIRST, "last": LAST, "city": CITIES,
          "topic": TOPICS, "org": ORGS, "product": PRODUCTS}


def draw(rng: Rng, pattern: str) -> str:
    """Fill a pattern: {int:LO-HI[:FMT]} {float:LO-HI:FMT} {hex:N} {alnum:N} {choice:A|B}
    {ts} {ident} {city3} and one word of a bank ({verb} {noun} {last} {product} ...)."""
    def one(m: re.Match[str]) -> str:
        kind, arg, fmt = m.group(1), m.group(2) or "", m.group(3) or ""
        if kind in ("int", "float"):
            lo, hi = (float(x) for x in arg.split("-"))
            value: Any = (rng.randint(int(lo), int(hi)) if kind == "int"
                          else rng.uniform(lo, hi))
            return format(value, fmt)
        if kind in _BANKS:
            return _pick(rng, _BANKS[kind])
        special: dict[str, Callable[[], str]] = {
            "hex": lambda: _hex(rng, int(arg)), "alnum": lambda: _alnum(rng, int(arg)),
            "choice": lambda: _pick(rng, arg.split("|")), "ts": lambda: _ts(rng),
            "ident": lambda: f"{_pick(rng, VERBS)}_{_pick(rng, NOUNS)}",
            "city3": lambda: _pick(rng, CITIES)[:3].upper()}
        return special[kind]()
    return _FIELD.sub(one, pattern)


def lines(rng: Rng, chars: int, *templates: str, head: tuple[str, ...] = ()) -> list[str]:
    """Lines drawn from `templates` until about `chars` characters."""
    out = list(head)
    size = sum(len(x) + 1 for x in out)
    while size < chars:
        out.append(draw(rng, _pick(rng, templates)))
        size += len(out[-1]) + 1
    return out


def _with(out: list[str], rng: Rng, insert: str | None, sep: str = "\n", lo: int = 0) -> str:
    if insert is not None:
        out.insert(rng.randint(min(lo, len(out)), len(out)), insert)
    return sep.join(out)


# -- tool outputs (filler): each takes a target size in characters ---------------------------
PY_LINES = ("    {noun} = {noun}.get('{noun}') or {int:0-999}",
            "    if {noun} is None:\n        raise ValueError('missing {noun} for %s' % {noun})",
            "    log.info('{verb} %s', {noun}.id)",
            "    for item in {noun}.{noun}s[:limit]:\n        item.{verb}()",
            "    {noun} = {ident}({noun}, retries={int:1-5})",
            "    return {noun}",
            "\ndef {ident}({noun}, *, limit: int = {choice:10|50|100|500}):\n"
            "    \"\"\"{verb} one {noun}.\"\"\"")


def py_file(rng: Rng, chars: int) -> str:
    head = (draw(rng, '"""{noun} service: {verb}s and {verb}s {noun} records."""'), "",
            "from __future__ import annotations", "", "import logging",
            draw(rng, "from app.{noun} import {noun}_client"), "",
            "log = logging.getLogger(__name__)",
            draw(rng, "\n\ndef {ident}({noun}, *, limit: int = 100):"))
    return "\n".join(lines(rng, chars, *PY_LINES, head=head))


def grep_hits(rng: Rng, chars: int) -> str:
    word = draw(rng, "{ident}")
    return "\n".join(lines(rng, chars, "src/{noun}/{noun}.py:{int:3-900}:    "
                           "{choice:return |x = |}" + word + "({noun}, {noun}={int:0-99})"))


def test_run(rng: Rng, chars: int, failed: str | None = None) -> str:
    head = ("=" * 29 + " test session starts " + "=" * 30,
            draw(rng, "platform linux -- Python 3.12.{int:1-8}, pytest-8.3.{int:0-5}"),
            draw(rng, "collected {int:40-900} items"), "")
    out = lines(rng, chars, "tests/{noun}/test_{noun}.py " + "{choice:.|.|.|.|.|F|s}" * 30
                + " [{int:1-99:3d}%]", head=head)
    if failed:
        out += ["", "=" * 35 + " FAILURES " + "=" * 35,
                draw(rng, "FAILED tests/{noun}/test_{noun}.py::") + failed
                + draw(rng, " - AssertionError: assert {int:1-99} == {int:100-200}")]
    out.append(draw(rng, f"==== {1 if failed else 0} failed, {{int:40-900}} passed in "
                         "{float:3-90:.2f}s ===="))
    return "\n".join(out)


def git_log(rng: Rng, chars: int) -> str:
    return "\n".join(lines(rng, chars, "{hex:10} {choice:Fix|Add|Refactor|Bump|Revert} {noun} "
                           "{verb} {choice:handling|tests|timeouts|logging|types} "
                           "(#{int:100-4999})"))


def build_log(rng: Rng, chars: int) -> str:
    return "\n".join(lines(rng, chars, "{ts} {choice:INFO |INFO |INFO |DEBUG|WARN |ERROR} "
                           "[{noun}-worker-{int:1-9}] {verb} {noun} id={int:100000-9999999} "
                           "took={int:1-4000}ms"))


def dir_listing(rng: Rng, chars: int) -> str:
    return "\n".join(lines(rng, chars, "-rw-r--r-- 1 dev dev {int:120-90000:6d} Mar "
                           "{int:1-28:2d} {int:0-23:02d}:{int:0-59:02d} {ident}.py",
                           head=(draw(rng, "total {int:20-400}"),)))


def traceback_text(rng: Rng, chars: int) -> str:
    frame = ('  File "/srv/app/{noun}/{noun}.py", line {int:10-900}, in {ident}\n'
             "    {noun} = {ident}({noun})")
    return "\n".join([*lines(rng, chars - 80, frame, head=("Traceback (most recent call "
                                                            "last):",)),
                      draw(rng, "{choice:KeyError|TypeError|TimeoutError}: '{noun}'")])


SENTENCES = (
    "{org} reported that {t} rose steadily between {int:2008-2016} and {int:2017-2024}, "
    "mostly in urban areas.",
    "Adoption of {t} varies widely: the top quartile of regions is {int:2-9} times the bottom.",
    "Critics argue the figures for {t} overstate the trend because of how {org} samples.",
    "In {city}, a pilot on {t} ran for {int:3-30} months before it was extended to the region.",
    "The authors caution that {t} data before {int:2008-2016} are not comparable with later "
    "years.",
    "Costs fell by roughly {int:2-40} percent per year, according to {org}, though estimates "
    "differ.",
    "A follow-up study found weaker effects once income and age were controlled for.",
    "Most of the growth in {t} came from households rather than businesses.",
    "Policy support, not price, was the main driver of {t} in the early years.",
    "Survey respondents in {city} were more positive about {t} than the national average.",
    "The report's appendix lists {int:2-9} data sources, several of them commercial.",
    "{org} expects the trend in {t} to slow after {int:2017-2024} as the market saturates.",
    "Regional differences in {t} shrank over the decade but did not disappear.",
    "Independent estimates of {t} differ by up to {int:2-40} percent depending on the method.",
)


def prose(rng: Rng, chars: int, topic: str | None = None) -> str:
    topic = topic or _pick(rng, TOPICS)
    paras: list[str] = []
    while sum(len(p) + 2 for p in paras) < chars:
        sents = [draw(rng, _pick(rng, SENTENCES).replace("{t}", topic))
                 for _ in range(rng.randint(3, 6))]
        paras.append(" ".join(x[0].upper() + x[1:] for x in sents))
    return "\n\n".join(paras)


def web_page(rng: Rng, chars: int, insert: str | None = None) -> str:
    topic = _pick(rng, TOPICS)
    head = (f"# {topic.capitalize()}: what the latest numbers say\n\n"
            + draw(rng, "_{first} {last} · {int:3-14} min read_\n\n"))
    body = _with(prose(rng, chars - len(head), topic).split("\n\n"), rng, insert, "\n\n")
    return head + body + "\n\n[Cookie settings] [Subscribe] [Related articles]"


def search_results(rng: Rng, chars: int, extra: dict[str, Any] | None = None) -> str:
    items: list[dict[str, Any]] = []
    size = 0
    while size < chars:
        topic = _pick(rng, TOPICS)
        items.append({"title": draw(rng, f"{topic.capitalize()} in {{int:2015-2024}}: "
                                         "{choice:a review|new evidence|trends|data}"),
                      "url": draw(rng, "https://{choice:www|blog|research}.{last}.org/"
                                       "{noun}-{int:1-999}").lower(),
                      "snippet": prose(rng, 180, topic)[:220]})
        size += len(json.dumps(items[-1]))
    if extra:
        items.insert(rng.randint(0, len(items)), extra)
    return json.dumps({"results": items}, indent=1)


def pdf_extract(rng: Rng, chars: int, insert: str | None = None) -> str:
    paras = [draw(rng, "--- page {int:2-40} ---"), *prose(rng, chars).split("\n\n")]
    return _with(paras, rng, insert, "\n\n", lo=1)


def csv_table(rng: Rng, chars: int) -> str:
    return "\n".join(lines(rng, chars, "{city},{int:2010-2024},{float:0-900:.1f},"
                           "{choice:GWh|pct|k units|EUR m},{org}",
                           head=("region,year,value,unit,source",)))


def _customer(rng: Rng) -> dict[str, Any]:
    first, last = _pick(rng, FIRST), _pick(rng, LAST)
    return {"customer_id": f"cus_{_alnum(rng, 10).lower()}", "name": f"{first} {last}",
            "email": f"{first.lower()}.{last.lower()}@example.com", "city": _pick(rng, CITIES),
            "since": draw(rng, "20{int:12-24}-{int:1-12:02d}"),
            "orders_count": rng.randint(1, 80), "tier": _pick(rng, ("basic", "plus", "gold"))}


def _order(rng: Rng) -> dict[str, Any]:
    return {"order_id": f"ord_{rng.randint(10**6, 10**7)}", "placed_at": _ts(rng),
            "status": _pick(rng, ("delivered", "shipped", "processing", "returned")),
            "items": [{"sku": f"SKU-{rng.randint(1000, 99999)}", "name": _pick(rng, PRODUCTS),
                       "qty": rng.randint(1, 3), "unit_price": round(rng.uniform(5, 400), 2)}
                      for _ in range(rng.randint(1, 4))],
            "carrier": _pick(rng, ("DHL", "UPS", "DPD", "PostNL"))}


def _ticket(rng: Rng) -> dict[str, Any]:
    return {"ticket": f"T{rng.randint(10**5, 10**6)}", "opened": _ts(rng),
            "subject": draw(rng, "{choice:Late|Damaged|Missing|Wrong} {product}"),
            "status": _pick(rng, ("closed", "closed", "pending", "solved")),
            "messages": rng.randint(1, 12)}


def json_records(rng: Rng, chars: int, extra: dict[str, Any] | None = None,
                 key: str = "orders") -> str:
    make = _order if key == "orders" else _ticket
    recs: list[dict[str, Any]] = []
    size = 0
    while size < chars:
        recs.append(make(rng))
        size += len(json.dumps(recs[-1]))
    if extra:
        recs.insert(rng.randint(0, len(recs)), extra)
    return json.dumps({"customer": _customer(rng), key: recs, "has_more": rng.random() < 0.3},
                      indent=1)


def kb_article(rng: Rng, chars: int, insert: str | None = None) -> str:
    title = draw(rng, "## {choice:Returns|Delivery|Warranty|Payments}: {product} questions\n")
    steps = lines(rng, chars, "- {choice:Check|Confirm|Ask for|Verify} the {noun} "
                  "{choice:status|date|amount|photo} before you "
                  "{choice:refund|reship|escalate|close} the case; allow {int:1-14} business "
                  "days.", head=(title,))
    return _with(steps, rng, insert, lo=1)


def shipment_events(rng: Rng, chars: int, insert: str | None = None) -> str:
    out = lines(rng, chars, "{ts}  {choice:Arrived at|Departed|Processed at|Out for delivery "
                "from} {city} hub  scan={int:1000000-99999999}")
    return _with(out, rng, insert)


def email_thread(rng: Rng, chars: int) -> str:
    mails = lines(rng, chars, "From: {first} {last}\nDate: {ts}\n\nHi, my {product} "
                  "{choice:arrived late|stopped working|is missing a part|was charged twice}. "
                  "Order placed on the {int:1-28}th. Can you look into it? Thanks.\n")
    return "\n".join(mails)


Filler = Callable[[Rng, int], str]
Args = Callable[[Rng], dict[str, Any]]


def _args(**patterns: str) -> Args:
    """Tool-call arguments drawn from patterns (URLs and ids in lower case)."""
    return lambda rng: {k: draw(rng, v).lower() if k in ("url", "customer_id") else
                        draw(rng, v) for k, v in patterns.items()}


FILLERS: dict[str, list[tuple[str, Args, Filler]]] = {
    "coding": [
        ("read_file", _args(path="src/{noun}/{noun}.py"), py_file),
        ("read_file", _args(path="app/{noun}.py"), py_file),
        ("grep", _args(pattern="{ident}", path="src/"), grep_hits),
        ("run_tests", _args(selector="tests/{noun}"), test_run),
        ("bash", _args(cmd="git log --oneline -n 80"), git_log),
        ("bash", _args(cmd="docker compose logs {noun}-worker"), build_log),
        ("bash", _args(cmd="ls -la src/{noun}"), dir_listing),
    ],
    "research": [
        ("web_search", _args(query="{topic} statistics"), search_results),
        ("fetch_page", _args(url="https://{last}.org/{noun}"), web_page),
        ("fetch_page", _args(url="https://news.{last}.com/a/{int:1000-9999}"), web_page),
        ("read_pdf", _args(url="https://data.{last}.eu/report.pdf",
                           pages="{int:1-9}-{int:10-40}"), pdf_extract),
        ("python", _args(code="df.groupby(['region', 'year']).value.sum()"), csv_table),
    ],
    "support": [
        ("get_orders", _args(customer_id="cus_{alnum:10}"), json_records),
        ("get_tickets", _args(customer_id="cus_{alnum:10}"),
         lambda r, c: json_records(r, c, key="tickets")),
        ("search_kb", _args(query="{product} refund"), kb_article),
        ("shipment_events", _args(order_id="ord_{int:1000000-9999999}"), shipment_events),
        ("read_inbox", _args(folder="customer-replies"), email_thread),
    ],
}


# -- facts (the bank is data: bench/agentfacts.yaml) --------------------------------------
Carrier = Callable[[Rng, str, int], tuple[str, dict[str, Any], str]]


@dataclass(frozen=True)
class FactType:
    """One kind of fact: how its answer looks, how it is stated, how it is asked.

    `variants` pair a statement (with `{a}` for the answer) with its own paraphrased
    questions. A `tool` fact names the carrier that builds the tool output the statement
    sits in."""

    kind: str
    name: str
    domains: tuple[str, ...]
    answer: str  # a pattern, see `draw`
    variants: tuple[tuple[str, tuple[str, ...]], ...]
    carrier: str | None = None


def load_types(path: Path = FACTS) -> tuple[FactType, ...]:
    rows = yaml.safe_load(path.read_text())
    return tuple(FactType(r["kind"], r["name"], tuple(r["domains"]), r["answer"],
                          tuple((v["say"], tuple(v["ask"])) for v in r["variants"]),
                          r.get("carrier")) for r in rows)


def _lines_with(make: Filler, rng: Rng, chars: int, statement: str) -> str:
    """A line-based filler with the statement as one more line at a random place."""
    return _with(make(rng, chars).split("\n"), rng, statement, lo=1)


def _config(rng: Rng, chars: int) -> str:
    out = lines(rng, chars, "{noun}_{choice:TIMEOUT|POOL|TTL|LEVEL}={choice:30|60|300|info}",
                "{noun}_URL=https://{noun}.svc.cluster.local",
                head=("# staging environment, loaded by deploy/render.py",))
    return "\n".join(x.split("=")[0].upper() + "=" + x.split("=", 1)[1] if "=" in x else x
                     for x in out)


def _paper(rng: Rng, statement: str, chars: int) -> tuple[str, dict[str, Any], str]:
    title, arxiv = statement.split("|")
    hit = {"title": title, "url": f"https://arxiv.org/abs/{arxiv}",
           "snippet": f"We study {title.lower()}."}
    return "web_search", {"query": "agent memory papers"}, search_results(rng, chars, hit)


def _record(key: str, **fields: Any) -> Carrier:
    """A JSON API answer holding one record with the statement as `field`'s value."""
    name, args = ("get_tickets", {"customer_id": "cus_pp41zk0wn3"}) if key == "tickets" else (
        "get_orders", {"customer_id": "cus_7hq2mxr4ab"})

    def carry(rng: Rng, statement: str, chars: int) -> tuple[str, dict[str, Any], str]:
        base = _ticket(rng) if key == "tickets" else _order(rng)
        extra = {k: statement if v is None else v for k, v in fields.items()}
        return name, args, json_records(rng, chars, {**base, **extra}, key=key)
    return carry


CARRIERS: dict[str, Carrier] = {
    "config": lambda r, s, c: ("read_file", {"path": "deploy/staging.env"},
                               _lines_with(_config, r, c, s)),
    "failing_tests": lambda r, s, c: ("run_tests", {"selector": "tests/"},
                                      test_run(r, c, failed=s)),
    "git_log": lambda r, s, c: ("bash", {"cmd": "git log --oneline -n 120"},
                                _lines_with(git_log, r, c, s)),
    "serve_log": lambda r, s, c: ("bash", {"cmd": "make serve"},
                                  _lines_with(build_log, r, c, s)),
    "worker_log": lambda r, s, c: ("bash", {"cmd": "docker compose logs payment-worker"},
                                   _lines_with(build_log, r, c, s.replace("{ts}", _ts(r)))),
    "survey_page": lambda r, s, c: ("fetch_page", {"url": "https://www.opinionlab.org/survey"},
                                    web_page(r, c, s)),
    "paper_search": _paper,
    "report_pdf": lambda r, s, c: ("read_pdf", {"url": "https://data.iea-mirror.eu/outlook.pdf",
                                                "pages": "12-19"}, pdf_extract(r, c, s)),
    "news_page": lambda r, s, c: ("fetch_page", {"url": "https://news.sciencewire.com/a/8841"},
                                  web_page(r, c, s)),
    "order_tracking": _record("orders", status="shipped", tracking_number=None),
    "order_total": _record("orders", status="processing", note="large order",
                           total_charged_eur=None),
    "tickets": _record("tickets", ticket=None, status="escalated to tier 2"),
    "shipment": lambda r, s, c: ("shipment_events", {"order_id": "ord_5531907"},
                                 shipment_events(r, c, s.replace("{ts}", _ts(r)))),
}
TYPES = load_types()
ASK_WRAPPERS = ("{q}", "Quick question before you go on: {q}", "{q} Then carry on with the task.",
                "Hold on. {q}", "Sorry, one thing: {q}", "{q} Just answer briefly and continue.")


@dataclass
class Fact:
    kind: str  # tool, user or constraint
    name: str
    answer: str
    question: str  # plain words, never containing `answer`
    planted: int = -1  # index of the message holding the answer
    asked: int = -1  # index of the user message asking for it (-1: not asked in-session)


@dataclass
class Session:
    kind: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    facts: list[Fact] = field(default_factory=list)

    def question_requests(self) -> dict[int, Fact]:
        """Request length (messages sent) -> the fact that request asks about."""
        return {f.asked + 1: f for f in self.facts if f.asked >= 0}


SYSTEM = {
    "coding": ("You are a senior software engineer working as an autonomous coding agent in "
               "the user's repository. Use the tools to read files, search, run tests and run "
               "shell commands. Make small, reviewable changes. Explain what you changed and "
               "why. Never push to main. Keep secrets out of logs. When tests fail, read the "
               "failure before changing code. Prefer the project's existing patterns. "),
    "research": ("You are a research assistant. Use web search, page fetching, PDF reading and "
                 "a Python sandbox to answer the user's questions with sources. Quote numbers "
                 "exactly as the source gives them and cite the URL. Say when sources "
                 "disagree. Do not invent references. Summaries must be neutral. "),
    "support": ("You are a customer-support agent for an online electronics shop. Use the "
                "tools to look up customers, orders, tickets, shipments and the knowledge "
                "base. Follow the refund and escalation policy. Be polite and concise. Never "
                "promise what policy does not allow. Confirm the customer's identity first. "),
}
TASKS = {
    "coding": ("The checkout service times out under load and the retry logic looks wrong. "
               "Find out why, fix it, and keep the test suite green."),
    "research": ("I'm writing a policy brief on the energy transition in European cities. "
                 "Collect recent figures, check them against each other and draft an outline."),
    "support": ("Work through today's escalated customer cases: damaged deliveries, missing "
                "parcels and refund requests. Resolve what you can and note the rest."),
}
PROGRESS = ("Let me look at that next.", "That narrows it down.", "Checking one more source.",
            "Next I'll verify this against the other data.", "OK, moving on to the next item.",
            None, None, None)
INTERJECTIONS = ("Looks good so far, continue.", "Also keep an eye on anything that looks "
                 "inconsistent.", "Can you be a bit faster? Skip the obvious ones.",
                 "Good. Keep going.", "Note anything you are unsure about for me.")


def tools_schema(kind: str) -> list[dict[str, Any]]:
    """The functions the agent declares (every carrier's tool is among its fillers')."""
    return [{"type": "function", "function": {
        "name": n, "description": f"{n.replace('_', ' ')} (returns text or JSON)",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}}
        for n in sorted({name for name, _, _ in FILLERS[kind]})]


def _size(rng: Rng, scale: float) -> int:
    """Characters of one tool output: log-normal, median ~3,600 chars (~900 tokens)."""
    tokens = min(6000, max(80, math.exp(rng.gauss(math.log(900), 0.7))))
    return int(tokens * 4 * scale)


def approx_tokens(m: Message) -> int:
    return len(json.dumps(m)) // 4


class _Builder:
    def __init__(self, kind: str, rng: Rng, scale: float,
                 tokens: Callable[[Message], int] = approx_tokens) -> None:
        self.kind, self.rng, self.scale, self.tokens = kind, rng, scale, tokens
        self.msgs: list[Message] = [
            {"role": "system", "content": SYSTEM[kind] + prose(rng, 600)},
            {"role": "user", "content": TASKS[kind]}]
        self.calls = 0
        self._size = self._counted = 0
        self.reads: list[tuple[str, dict[str, Any], Filler]] = []

    @property
    def size(self) -> int:
        """Tokens of the history so far (messages are only ever appended)."""
        for m in self.msgs[self._counted:]:
            self._size += self.tokens(m)
        self._counted = len(self.msgs)
        return self._size

    def step(self, tool: str | None = None, args: dict[str, Any] | None = None,
             output: str | None = None, note: str | None = None) -> int:
        """An assistant tool call and its output; returns the output's message index."""
        rng = self.rng
        if tool is None:
            if self.reads and rng.random() < 0.08:  # the same thing looked at again
                tool, args, make = rng.choice(self.reads)
                output = make(rng, _size(rng, self.scale))
            else:
                tool, make_args, make = rng.choice(FILLERS[self.kind])
                args = make_args(rng)
                if rng.random() < 0.1:  # a failed call
                    output = (f"Error: {tool} failed with exit status {rng.randint(1, 2)}\n"
                              + traceback_text(rng, rng.randint(300, 1500)))
                else:
                    output = make(rng, _size(rng, self.scale))
                    self.reads.append((tool, args, make))
        self.calls += 1
        cid = f"call_{self.kind[:3]}{self.calls:04d}{_alnum(rng, 4).lower()}"
        content = note if note is not None else rng.choice(PROGRESS)
        self.msgs.append({"role": "assistant", "content": content, "tool_calls": [{
            "id": cid, "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args)}}]})
        self.msgs.append({"role": "tool", "tool_call_id": cid, "content": output})
        return len(self.msgs) - 1

    def user(self, text: str) -> int:
        """The agent reports, the user answers; returns the user message's index."""
        self.msgs.append({"role": "assistant", "content": rng_summary(self.rng)})
        self.msgs.append({"role": "user", "content": text})
        return len(self.msgs) - 1


def rng_summary(rng: Rng) -> str:
    return rng.choice((
        "Here's where things stand: I've gone through the items above and noted the open "
        "points. Shall I continue?",
        "Progress update: the first part is done; a few things still need checking.",
        "I've collected what I found so far. Continuing unless you want to redirect me.",
        "Summary so far: nothing blocking, two items need a closer look."))


def _pick_types(kind: str, rng: Rng, per_kind: int) -> list[FactType]:
    out: list[FactType] = []
    for fk in FACT_KINDS:
        pool = [t for t in TYPES if t.kind == fk and kind in t.domains]
        rng.shuffle(pool)
        out += [pool[i % len(pool)] for i in range(per_kind)]
    return out


def generate(kind: str, rng: Rng, target_tokens: int, facts_per_kind: int = 2,
             scale: float = 1.0, max_messages: int | None = None,
             tokens: Callable[[Message], int] = approx_tokens) -> Session:
    """One session of `kind` growing to about `target_tokens` (as `tokens` counts a
    message; default 4 characters a token), with `facts_per_kind` facts of each kind
    planted and asked about later."""
    b = _Builder(kind, rng, scale, tokens)
    target = target_tokens
    types = _pick_types(kind, rng, facts_per_kind)
    # (when, what): plant at 5..60 % of the session's length, ask uniformly after that
    plan: list[tuple[float, str, int]] = []
    for i in range(len(types)):
        at = rng.uniform(0.05, 0.6)
        plan += [(at, "plant", i), (rng.uniform(at + 0.05, 0.97), "ask", i)]
    plan.sort()
    facts: list[Fact | None] = [None] * len(types)
    def more() -> bool:
        if max_messages is not None:
            return len(b.msgs) < max_messages - 1
        return b.size < target or bool(plan)  # every planted fact is asked before the end

    while more():
        if plan and plan[0][0] * target <= b.size:
            _, what, i = plan.pop(0)
            if what == "plant":
                facts[i] = _plant(b, types[i])
            elif (f := facts[i]) is not None:
                f.asked = b.user(_pick(rng, ASK_WRAPPERS).format(q=f.question))
                b.step(note=rng.choice(("Noted. Continuing with the task.", "Understood.",
                                         "Got it; back to the task.")))
            continue
        if rng.random() < 0.06:
            b.user(_pick(rng, INTERJECTIONS))
        b.step()
    s = Session(kind, b.msgs, tools_schema(kind), [f for f in facts if f is not None])
    _make_unique(s, rng, types)
    return s


def _plant(b: _Builder, t: FactType) -> Fact:
    rng = b.rng
    statement, questions = t.variants[rng.randrange(len(t.variants))]
    answer = draw(rng, t.answer)
    fact = Fact(t.kind, t.name, answer, _pick(rng, questions))
    said = statement.replace("{a}", answer)
    if t.carrier is None:
        fact.planted = b.user(said)
    else:
        tool, args, out = CARRIERS[t.carrier](rng, said, _size(rng, b.scale))
        fact.planted = b.step(tool, args, out)
    return fact


def _make_unique(s: Session, rng: Rng, types: list[FactType]) -> None:
    """Every answer occurs in its planted message only; redraw it where filler repeats it."""
    by_name = {t.name: t for t in types}
    for f in s.facts:
        for _ in range(50):
            others = [json.dumps(m) for i, m in enumerate(s.messages) if i != f.planted]
            if not any(f.answer in o for o in others) and f.answer not in f.question:
                break
            new = draw(rng, by_name[f.name].answer)
            m = s.messages[f.planted]
            m["content"] = m["content"].replace(f.answer, new)
            f.answer = new
        assert f.answer in json.dumps(s.messages[f.planted]), f
        assert f.answer not in f.question, f


def sessions(n_per_kind: int, seed: int, window: int, lo: float = 3.0, hi: float = 10.0,
             facts_per_kind: int = 2,
             tokens: Callable[[Message], int] = approx_tokens) -> list[Session]:
    """`n_per_kind` sessions of each kind, histories spread over lo..hi × `window` tokens."""
    out = []
    for k in range(n_per_kind):
        for j, kind in enumerate(KINDS):
            rng = random.Random(f"{seed}:{kind}:{k}")
            i = k * len(KINDS) + j
            ratio = lo + (hi - lo) * i / max(1, n_per_kind * len(KINDS) - 1)
            out.append(generate(kind, rng, int(window * ratio), facts_per_kind,
                                tokens=tokens))
    return out


def cold_case(s: Session, fact: Fact, rng: Rng) -> list[Message]:
    """The whole session, then a question about `fact` last: a conversation sent for the
    first time (a resumed chat, a stateless caller)."""
    q = _pick(rng, ASK_WRAPPERS).format(q=fact.question)
    return [*s.messages, {"role": "user", "content": q}]


def long_history(seed: int, messages: int = 1000, scale: float = 0.25) -> Session:
    """A coding session of exactly `messages` messages (smaller tool outputs), the user's
    last message asking to continue."""
    s = generate("coding", random.Random(f"{seed}:long"), 10**9, 0, scale, messages)
    s.messages.append({"role": "user", "content": "Continue with the next step."})
    return s
