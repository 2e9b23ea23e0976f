"""Held-out agent-loop workloads: six non-coding domains with planted facts asked late.

Written apart from bench/agentgen.py (only its Fact and Session records are shared) so the
proxy is measured on traffic it was not tuned on. Value specs are small templates: `a|b` picks
one, `{spec}` nests, `n:lo-hi` is an integer, `f:lo-hi` an amount, `#` a digit, `^` an upper-
and `~` a lower-case letter, `%` a hex digit; other names are looked up in `K`. A tool fact is
"slug tool field subject-field(- = first) :: question :: question"; a user fact is
"slug kind answer-spec :: statement | statement :: question :: question".
"""

from __future__ import annotations

import json
import math
import random
import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial
from typing import Any

from bench.agentgen import Fact, Session

Message = dict[str, Any]


@dataclass(frozen=True)
class Tool:
    name: str
    desc: str
    args: str  # "arg=spec;arg=spec"
    fmt: str  # json table csv cols log kv yaml md email diff
    schemas: tuple[str, ...]  # "field=spec;field=spec", one picked per call
    title: str = ""


@dataclass(frozen=True)
class Dom:
    kind: str
    mail: str
    system: str
    task: str
    prose: str
    tools: tuple[Tool, ...]
    tfacts: tuple[str, ...]
    ufacts: tuple[str, ...]


class Ctx:
    def __init__(self, rng: random.Random, dom: Dom) -> None:
        self.rng, self.dom = rng, dom
        self.base = datetime(2024, 1, 8) + timedelta(days=rng.randint(0, 600))
        self.answers: list[str] = []
        self.subjects: set[str] = set()

    def draw(self, spec: str) -> str:
        k = K.get(spec)
        if k is not None:
            return k(self) if callable(k) else self.draw(k)
        alts = _alts(spec)
        if len(alts) > 1:
            return self.draw(self.rng.choice(alts))
        if spec[:2] in ("n:", "f:"):
            lo, hi = (int(x) for x in spec[2:].split("-"))
            if spec[0] == "n":
                return str(self.rng.randint(lo, hi))
            return f"{math.exp(self.rng.uniform(math.log(lo), math.log(hi))):,.2f}"
        return _TOK.sub(self._tok, spec)

    def _tok(self, m: re.Match[str]) -> str:
        return self.draw(m[1]) if m[1] is not None else self.rng.choice(_CH[m[0]])

    def val(self, spec: str) -> str:
        """A drawn value that is no fact's subject and holds no planted answer."""
        for _ in range(300):
            v = self.draw(spec)
            if v not in self.subjects and not any(a in v for a in self.answers):
                return v
        raise RuntimeError(f"cannot draw a clean {spec!r}")


_TOK = re.compile(r"\{([^{}]*)\}|[#^~%]")
_CH = {"#": string.digits, "^": string.ascii_uppercase, "~": string.ascii_lowercase,
       "%": "0123456789abcdef"}


@lru_cache(maxsize=None)
def _alts(spec: str) -> tuple[str, ...]:
    out: list[str] = []
    depth, cur = 0, ""
    for ch in spec:
        depth += (ch == "{") - (ch == "}")
        if ch == "|" and depth == 0:
            out, cur = [*out, cur], ""
        else:
            cur += ch
    return (*out, cur)


@lru_cache(maxsize=None)
def _fields(schema: str) -> tuple[tuple[str, str], ...]:
    return tuple((p.partition("=")[0], p.partition("=")[2]) for p in schema.split(";"))


def _day(c: Ctx, lo: int, hi: int, sign: int = -1) -> str:
    sign = sign or c.rng.choice((-1, 1))
    return (c.base + timedelta(days=sign * c.rng.randint(lo, hi))).strftime("%Y-%m-%d")


K: dict[str, str | Callable[[Ctx], str]] = {
    "first": "Ana|Bilal|Chen|Dara|Emeka|Farah|Goran|Hana|Ivo|Jonas|Kiri|Lucia|Mateo|Noor|Oskar"
    "|Priya|Rafael|Sanne|Tomasz|Yuki",
    "last": "Okafor|Lindqvist|Brannigan|Castellanos|Nakamura|Abernathy|Vasquez|Kowalczyk|Oyelaran"
    "|Thibodeaux|Haraldsen|Moreau|Szabo|Achterberg|Delacroix|Fitzgerald|Ramaswamy|Quintero|Mbeki",
    "person": "{first} {last}",
    "email": lambda c: f"{c.draw('first')}.{c.draw('last')}@{c.draw(c.dom.mail)}".lower(),
    "ts": lambda c: (c.base + timedelta(seconds=c.rng.randint(-1_700_000, 170_000))).strftime(
        "%Y-%m-%dT%H:%M:%SZ"),
    "day": lambda c: _day(c, 0, 35),
    "date": lambda c: _day(c, 40, 420, 0),  # never inside the `ts` / `day` window
    "later": lambda c: _day(c, 40, 420, 1),
    "prose": lambda c: " ".join(c.draw(x) for x in c.rng.sample(_alts(c.dom.prose), 2)),
    "ip": "10.{n:0-255}.{n:0-255}.{n:1-254}",
    "region": "eu-west-1|eu-west-2|eu-west-3|eu-central-1|us-east-1|us-east-2|us-west-2|ap-south-1",
    "zone": "{region}a|{region}b|{region}c",
    "host": "{api|db|cache|worker|edge|queue|ingest}-{n:10-64}.{zone}.prod.internal",
    "svc": "checkout|ledger|payments-api|fraud-score|tokenizer|webhooks|settlement|notifier",
    "image": "registry.paystream.io/{svc}:v{n:1-9}.{n:0-40}.{n:0-9}",
    "company": "{Northwind|Kestrel|Aldous|Brightline|Corvid|Halden|Ostrava|Pinecrest|Quayside"
    "|Tamsin} {Logistics|Systems|Holdings|Freight|Analytics|Partners}",
    "hotel": "{Casa|Hotel|Palacio|Tivoli|Memmo|Pestana|Lumen} {Oriente|Alfama|Tejo|Rossio|Marques"
    "|Chiado|Estrela|Belem}",
    "flight": "{TP|UA|LH|BA|AA|KL|IB}{n:100-2999}",
    "fbasis": "{Q|K|L|T|H|M}{LX|NC|RT|OW}{n:1-9}{US|EU}{S|A}",
    "airport": "ORD|LIS|LHR|FRA|AMS|MAD|EWR|BOS|MDW",
    "wh": "{ANALYTICS|REPORTING|ADHOC}_WH_{n:10-99}",
    "rawtbl": "RAW_{CRM|BILLING|SUPPORT}.{CONTACTS|CARDHOLDERS|PEOPLE}_{n:100-999}",
    "cohort": "{2023|2024}-{01|02|03|04|05|06|07|08|09|10|11|12}",
    "heading": "Limitation of Liability|Indemnities|Term and Renewal|Termination|Fees|Audit"
    "|Confidentiality|Governing Law|Data Protection|Service Levels",
    "glacct": "{n:1000-8999}-{n:10-99}",
    "zoom": "{n:810-989}{n:1000-9999}{n:1000-9999}",
}

DOMAINS: tuple[Dom, ...] = (
    Dom("incident", "paystream.io|paystream.io|pagerduty.com",
        "You are OpsPilot, the on-call assistant for the Paystream SRE team. You have read-only "
        "access to Loki logs, Alertmanager, the Kubernetes API of the prod-eu and prod-us "
        "clusters, the load balancer inventory, deploy history and the infra-manifests repo. "
        "Gather evidence before naming a cause, quote the exact values you rely on and keep a "
        "timeline. Never run mutating commands (restart, scale, rollback, drain) unless the "
        "incident commander approves them in this chat. Keep status updates short.",
        "We just got paged: checkout p99 has been above 2.5s for 15 minutes and 5xx on {svc} is "
        "around {n:3-9} percent. Customers in {region} see card declines. Triage it: what "
        "changed, which hosts and pods are affected, what do you propose? Change nothing yet.",
        "Check the {svc} dashboard for saturation before scaling anything.|Pool exhaustion "
        "usually shows up as timeouts to {host} first.|Roll back only after confirming the "
        "previous release was healthy for an hour.|Impact starts at the first 5xx at the edge.",
        (Tool("search_logs", "Search Loki logs with a LogQL filter.", "service={svc};query=level"
              "=error|status>=500|latency_ms>2000|connection reset;since=ts;limit=n:100-1000",
              "log", ("ts=ts;level=INFO|WARN|ERROR|ERROR;logger={svc}.{http|db|grpc|worker};"
                      "request_id=req_%%%%%%%%%%%%;trace_id=%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%;"
                      "host=host;route=/v1/{charges|refunds|tokens|payouts};status=200|200|499|"
                      "502|503|504;latency_ms=n:4-5200",), "{n:40-900} lines matched"),
         Tool("kubectl", "Run a read-only kubectl command.", "cluster=prod-eu|prod-us;command="
              "get pods -n {svc} -o wide|get pods -A -o wide", "cols",
              ("NAME={svc}-%%%%%%%%%%-~~~~~;READY=1/1|2/2|2/2|0/1;STATUS=Running|Running|Pending|"
               "CrashLoopBackOff|OOMKilled;RESTARTS=n:0-41;AGE={n:2-59}m|{n:1-23}h|{n:2-40}d;"
               "IP=ip;NODE=host",)),
         Tool("list_load_balancers", "List load balancers with listeners, targets and TLS.",
              "region=region;tag=team:{sre|payments|core}", "json",
              ("name={svc}-{public|internal|grpc|canary}-{region};dns=lb-{n:1000-9999}.{region}."
               "paystream.net;ingress_ip=ip;scheme=internet-facing|internal;listener.port=443|"
               "8443;tls.cert_id=cert-%%%%%%%%%%%%;tls.not_after=date;targets.healthy=n:0-24;"
               "targets.unhealthy=n:0-6;created_at=ts",), "load_balancers"),
         Tool("deploy_history", "Recent deploys of a service.", "service={svc};limit=n:10-50",
              "md", ("release={svc}@r{n:1000-9999};commit=%%%%%%%;author=email;deployed_at=ts;"
                     "image=image;status=succeeded|succeeded|rolled_back|failed;"
                     "change=CHG#######|none",), "Deploy history: {svc}"),
         Tool("get_alerts", "List alerts by state.", "state=firing|resolved|all", "json",
              ("alertname={High|Elevated}{Latency|ErrorRate|Saturation|QueueDepth}{Checkout|"
               "Ledger|Payouts|Webhooks};incident=INC-#####;fingerprint=%%%%%%%%%%%%%%%%;"
               "labels.service={svc};labels.cluster=prod-eu|prod-us;value=n:1-9999;starts_at=ts;"
               "conference=https://paystream.zoom.us/j/{zoom}",), "alerts"),
         Tool("git_diff", "Diff the deploy manifests between two revisions.",
              "repo=infra-manifests;from=%%%%%%%;to=%%%%%%%", "diff",
              ("section={svc}-{deployment|hpa|configmap};image=image;replicas=n:2-40;DB_POOL_SIZE"
               "=n:5-200;TIMEOUT_MS=n:200-9000;nodeSelector=host",), "apps/{svc}/values.yaml")),
        ("trace search_logs trace_id request_id :: If I want to follow request {s} across "
         "services, what do I search for? :: What handle ties request {s} together end to end?",
         "request-host search_logs host request_id :: Which machine served request {s}? :: "
         "Where did request {s} land?",
         "pod-node kubectl NODE - :: Which machine was {s} scheduled on? :: Where is {s} running?",
         "pod-ip kubectl IP - :: What in-cluster address did {s} have? :: Which address belonged "
         "to {s} in that listing?",
         "lb-ip list_load_balancers ingress_ip - :: Which address was the {s} balancer reachable "
         "on? :: Where does {s} take traffic, address-wise?",
         "cert-expiry list_load_balancers tls.not_after - :: When does the certificate on {s} run"
         " out? :: Until what day is {s} covered for TLS?",
         "release-commit deploy_history commit - :: Which revision went out with {s}? :: What "
         "code was {s} built from?",
         "release-author deploy_history author - :: Who shipped {s}? :: Who pushed {s} to prod?",
         "alert-incident get_alerts incident - :: Which case got opened for {s}? :: What did "
         "PagerDuty file {s} under?",
         "manifest-image git_diff image - :: After that change, what build is {s} set to run? :: "
         "Which build does the {s} block point at now?"),
        ("bridge user zoom :: The bridge is Zoom {a} if you need anyone. | We're on Zoom {a}, "
         "post there if it gets worse. :: How do I dial into the call we're running? :: Remind "
         "me how people join our call?",
         "change-record user CHG####### :: Log everything you do against {a}. | File this work "
         "under {a} in ServiceNow. :: Which ticket should our work be filed under? :: Where are "
         "we tracking the paperwork for this?",
         "escalation user email :: If I'm not around, escalate to {a}. | My backup IC today is "
         "{a}. :: Who do you go to if I'm unreachable? :: Who covers for me if I drop off?",
         "frozen-zone constraint zone :: Do not touch anything in {a}; it is frozen for the DB "
         "migration. | Hard rule: nothing gets restarted or drained in {a}. :: Is there a part "
         "of the fleet I told you to stay out of? :: Which area is off limits?",
         "cordoned-node constraint host :: Never restart anything on {a}, it has a flaky NIC. | "
         "Leave {a} alone whatever happens. :: Which machine did I say to keep your hands off? "
         ":: Is there a box we must not touch?")),
    Dom("analytics", "lumenly.com|lumenly.com|lumenly-partners.com",
        "You are an analytics copilot in the Lumenly data team's notebook. You can run SQL on the "
        "Snowflake warehouse as ANALYST_RO, execute Python cells, read dbt model docs, inspect "
        "query history and Airflow runs, and open Looker dashboards. Prefer small, filtered "
        "queries; always LIMIT exploratory selects and never read raw PII schemas. When two "
        "numbers disagree, name the exact filter, join or date boundary behind the difference "
        "and show the query you used.",
        "Finance says Q3 net revenue retention in the board deck doesn't match the Revenue Health"
        " dashboard; the deck is about {n:2-6} points higher. Find where the gap comes from. "
        "Start from fct_mrr_monthly and work outwards.",
        "Revenue is recognised on the first day of the billing period.|Accounts migrated from "
        "legacy billing have a null plan before {date}.|NRR excludes accounts created within the"
        " period.|The dashboard drops internal test accounts; the deck query does not.",
        (Tool("run_sql", "Run a read-only SQL query.", "sql=select {account_id, plan, mrr_usd|*}"
              " from {analytics.fct_mrr_monthly|analytics.fct_churn} where {churned_at is not "
              "null|plan <> 'free'} limit {n:50-500};warehouse=wh", "table",
              ("account_id=ACC-######;account_name={company};plan=starter|growth|scale|enterprise"
               ";region=NA|EMEA|APAC;mrr_usd=f:49-48000;churned_at=date",
               "cohort=cohort;accounts=n:1500-12000;retained=n:1200-9800;expansion_usd=f:1000-"
               "250000;nrr={9|10|11}#.##")),
         Tool("run_cell", "Execute a Python cell in the notebook kernel.", "code=df.groupby("
              "'cohort').agg(n=('id', 'nunique')).tail({n:10-40})", "cols",
              ("cohort=cohort;accounts=n:1500-12000;retained=n:1200-9800;expansion_usd=f:1000-"
               "250000;nrr={9|10|11}#.##",)),
         Tool("query_history", "Recent warehouse queries with statistics.", "user=email", "json",
              ("query_tag={nrr|mrr|churn|cohort}_{q3|sept|board|rebuild|adhoc}_v{n:1-9};query_id"
               "=01b%%%%%-0000-%%%%-0000-%%%%%%%%%%%%;user=email;warehouse=wh;stats.bytes_scanned"
               "={n:1-999},{n:100-999},{n:100-999},{n:100-999};stats.rows=n:1-500000;"
               "started_at=ts;status=SUCCESS|SUCCESS|FAILED|RUNNING",), "queries"),
         Tool("dbt_docs", "Read dbt documentation for models.", "select=tag:{finance|revenue}",
              "yaml", ("model={fct|dim|stg|int}_{mrr|accounts|churn|invoices|seats}_{monthly|"
                       "daily|v2};owner=email;materialized=table|incremental|view;depends_on="
                       "source('{rawtbl}')|ref('stg_billing_events');last_run=ts",), "dbt docs"),
         Tool("airflow_runs", "List recent Airflow DAG runs.", "limit=n:10-60", "json",
              ("dag_id={load|transform|export}_{billing|crm|usage|finance}_{hourly|daily};"
               "batch_id=b-{n:100000-999999};state=success|success|failed|running;start_date=ts;"
               "duration_s=n:30-9000;cost_center=CC-####-^^",), "dag_runs"),
         Tool("read_dashboard", "Read the tiles of a Looker dashboard.", "dashboard_id=n:100-999",
              "md", ("tile={Net|Gross} {retention|expansion|churn} {NA|EMEA|APAC|Global} {Q2|Q3}"
                     ";value=f:1000-900000;filter=is_test = {false|any};refreshed=ts",),
              "Revenue Health")),
        ("acct-mrr run_sql mrr_usd account_id :: What was {s} paying us per month in that result?"
         " :: How much monthly revenue did {s} bring in?",
         "churn-date run_sql churned_at account_id :: When did {s} leave us? :: On what day did "
         "{s} cancel?",
         "cohort-kept run_cell retained - :: How many customers from the {s} cohort were still "
         "around? :: Of the {s} signups, how many stayed?",
         "query-id query_history query_id - :: Give me the warehouse's handle for the {s} run so "
         "I can cancel it. :: How do I look up the {s} run in Snowflake?",
         "scan-bytes query_history stats.bytes_scanned - :: How much data did the {s} run chew "
         "through? :: What volume did {s} read?",
         "model-owner dbt_docs owner - :: Who looks after {s}? :: Who should I ask about {s}?",
         "batch-id airflow_runs batch_id - :: What was the load handle for the latest {s} run? "
         ":: Which load did {s} produce?",
         "tile-value read_dashboard value - :: What number did the {s} tile show? :: What was on "
         "the {s} tile?"),
        ("cost-centre user CC-####-^^ :: Charge any warehouse spend to cost centre {a}. | Use {a}"
         " as the cost centre on query tags. :: What should compute spend be billed against? :: "
         "Which budget line did I give you for compute?",
         "deck-nrr user 11#.## :: For reference, the deck quotes NRR of {a} percent. | The "
         "number in the board slides is {a}. :: What retention figure did the slides quote? :: "
         "What did the board deck say for retention?",
         "signoff user email :: Sign-off on metric definitions comes from {a}. | If you need a "
         "reviewer, {a} owns the revenue metrics. :: Who was going to review definition changes?"
         " :: Who approves metric changes?",
         "pii-table constraint rawtbl :: Never query {a} directly, it is unmasked PII. | {a} is "
         "off limits; compliance would kill us. :: Which source am I not letting you read from? "
         ":: Is there a table you must avoid?",
         "warehouse constraint wh :: Only run queries on {a}; the others bill to another team. |"
         " Use {a} and nothing else for compute. :: Which compute am I letting you use? :: Where"
         " are you allowed to run queries?")),
    Dom("travel", "halvorsenpike.com|halvorsenpike.com|gmail.com",
        "You are Wayfarer, the corporate travel agent for Halvorsen & Pike. You can search flights"
        " and hotels through the company's GDS connection, read bookings, look up fare rules and "
        "loyalty profiles, and read the traveller's travel inbox. Policy: economy under 6 hours, "
        "premium economy above; hotels within the city cap unless the traveller approves; always"
        " hold and confirm with the traveller before ticketing. Present options as short "
        "comparisons with total price, stops and change conditions.",
        "I need to get to our Lisbon offsite, flying out of Chicago on {date} and back {n:4-6} "
        "days later. Find something sensible with at most one stop, and a hotel near Parque das "
        "Nacoes. Hold, don't ticket.",
        "Rates include breakfast and city tax unless stated otherwise.|Changes are permitted "
        "before departure subject to fare difference.|The property is a short walk from the "
        "Oriente metro station.|Seat selection is chargeable on this fare.",
        (Tool("search_flights", "Search flight offers.", "origin=ORD|MDW;destination=LIS;date="
              "date;cabin=economy|premium_economy", "json",
              ("flight=flight;offer_id=off_%%%%%%%%%%%%;depart=ts;arrive=ts;via=airport|none;"
               "fare_basis=fbasis;price.total=f:380-4200;price.currency=USD;seats_left=n:1-9;"
               "baggage=0PC|1PC|2PC",), "offers"),
         Tool("get_booking", "Read a booking by record locator.", "pnr=^^^^^^", "json",
              ("flight=flight;segment=seg-{n:1-9};from=airport;to=airport;depart=ts;"
               "airline_locator=^^^^^^;ticket_number={n:125-220}-{n:1000000000-9999999999};"
               "seat={n:1-45}{A|C|D|F};status=HK|HK|HL|UN",), "segments"),
         Tool("search_hotels", "Search hotels near a location.", "city=Lisbon;checkin=date;"
              "nights=n:3-6;near=Parque das Nacoes|Alfama|Baixa", "md",
              ("hotel=hotel;nightly=f:110-690;rate_code=^^^#{FLX|NRF|BB};cancel=free until {24|"
               "48|72}h|non-refundable;distance_km={n:0-9}.{n:1-9};rating={n:6-9}.{n:0-9}",),
              "Hotels in Lisbon"),
         Tool("fare_rules", "Read the fare rules of an offer.", "offer_id=off_%%%%%%%%%%%%",
              "kv", ("fare_basis=fbasis;change_fee=f:75-450;refund=non-refundable|credit only;"
                     "min_stay=SU|3 days|none;advance_purchase={n:3-21} days",), "Fare rules"),
         Tool("read_inbox", "Search the traveller's travel inbox.", "query=newer_than:{n:2-30}d",
              "email", ("from=noreply@{flytap.com|united.com|booking.com|pestana.com};to=email;"
                        "date=ts;subject={Reservation confirmed|Itinerary update|Receipt} {n:1000"
                        "0-99999};property=hotel;confirmation=^^{n:10000000-99999999};check_in="
                        "date;total=f:300-5000;expense_ref=PRJ-####-^",)),
         Tool("loyalty_lookup", "Loyalty profiles of travellers on a trip.", "trip=TRP-#####",
              "kv", ("traveller=person;program=TAP Miles&Go|Flying Blue|MileagePlus|Miles & More|"
                     "Avios;member_no={n:100000000-999999999};tier=Silver|Gold|Base;points=n:0-"
                     "400000",), "Loyalty profiles")),
        ("offer-fare search_flights price.total - :: How much was the {s} option going to cost "
         "all-in? :: What would {s} have come to in total?",
         "fare-basis search_flights fare_basis - :: Which fare code was {s} priced under? :: "
         "Under what fare class was {s} quoted?",
         "ticket-no get_booking ticket_number - :: Which e-document was issued for the {s} leg? "
         ":: What's the document number on {s}?",
         "carrier-locator get_booking airline_locator - :: Under what airline reference is the "
         "{s} leg held? :: What code does the carrier itself use for {s}?",
         "hotel-rate search_hotels nightly - :: How much per night was {s}? :: What would a "
         "night at {s} cost?",
         "rate-plan search_hotels rate_code - :: Which tariff did {s} quote us? :: What plan code"
         " came with {s}?",
         "change-fee fare_rules change_fee - :: What would it cost to change the {s} fare? :: "
         "What's the penalty for moving a {s} ticket?",
         "hotel-conf read_inbox confirmation property :: Which confirmation came through for the "
         "stay at {s}? :: What reference did {s} send us?",
         "loyalty-no loyalty_lookup member_no - :: What's {s}'s frequent-flyer number? :: Which "
         "membership do we have on file for {s}?"),
        ("passport-expiry user later :: My passport expires {a}, in case that matters. | My "
         "passport is valid until {a}. :: When does my travel document run out? :: Until when "
         "can I still travel on my current passport?",
         "project-code user PRJ-####-^ :: Bill the whole trip to project {a}. | Charge it to {a},"
         " that's the offsite budget. :: Which project is this trip charged to? :: What did I "
         "say to bill this against?",
         "legal-surname user last :: Book under my legal surname {a}; my passport doesn't have my"
         " married name. :: What family name should the tickets be in? :: Which last name goes "
         "on the booking?",
         "hotel-cap constraint f:900-2400 :: Don't go over {a} USD for the hotel in total. | The "
         "hotel total must stay under {a} USD. :: What ceiling did I give you for lodging? :: How"
         " much can the stay cost at most?",
         "cc-assistant constraint email :: Always copy {a} on every confirmation. :: Who did I say"
         " has to see every confirmation? :: Who must be copied on anything you confirm?")),
    Dom("contracts", "meridian-robotics.com|meridian-robotics.com|haldenlaw.co.uk",
        "You are Clause, a contract-review assistant for legal operations at Meridian Robotics. "
        "You can search the contract repository, open documents clause by clause, compare "
        "versions, look up counterparty entities, list tracked obligations and read the matter "
        "mailbox. Review against the Meridian playbook: flag uncapped indemnities, liability caps"
        " below 12 months of fees, auto-renewals over 12 months and governing law outside England"
        " or Delaware. You write internal notes only; never contact a counterparty.",
        "Northwind sent back their markup of the MSA renewal. Review it against our playbook, "
        "list every deviation with its clause reference, and tell me what changed since the "
        "version we sent on {date}.",
        "Neither party shall be liable for indirect or consequential loss.|Aggregate liability "
        "shall not exceed the fees paid in the preceding twelve months.|This Agreement renews "
        "automatically unless either party gives written notice.|Each party shall comply with "
        "applicable data protection law.",
        (Tool("search_clm", "Search the contract repository.", "query=counterparty:{company}",
              "json", ("doc_id=DOC-######;title={MSA|DPA|SOW|NDA} {company} {2022|2023|2024} {v1|"
                       "v2|renewal};status=executed|in negotiation|expired;effective=date;"
                       "total_value=f:12000-2400000;owner=email;internal_ref=LGL-####-##",),
              "results"),
         Tool("get_clauses", "Open a document's clauses.", "doc_id=DOC-######", "md",
              ("clause={n:1-24}.{n:1-9};heading=heading;cap=f:50000-5000000;notice_days=n:30-"
               "180;governing_law=England and Wales|Delaware|New York|Singapore",), "Clauses"),
         Tool("compare_versions", "Redline two versions of a document.", "doc_id=DOC-######;"
              "from=v{n:1-3};to=v{n:4-6}", "diff",
              ("section={n:1-24}.{n:1-9} {heading};termination_fee=f:5000-900000;cap_multiplier="
               "{1|1.5|2|3}x fees;auto_renew_months=n:12-36;notice_days=n:30-180",),
              "msa_northwind.docx"),
         Tool("lookup_entity", "Look up a company in the registry service.", "name={company}",
              "kv", ("legal_name={company} {Ltd|GmbH|B.V.|Inc.};registration={HRB|CRN|KVK} "
                     "{n:100000-99999999};signatory=person;jurisdiction=England|Germany|"
                     "Netherlands|Delaware;address={n:1-200} {Harbour|Mill|King} Street",),
              "Registry matches"),
         Tool("list_obligations", "List tracked contractual obligations.", "status=open",
              "csv", ("obligation_id=OBL-#####;document=DOC-######;party=Meridian|{company};"
                      "type=notice|payment|report|audit;due=date;amount=f:500-200000",)),
         Tool("read_thread", "Read the matter mailbox.", "matter=northwind-msa", "email",
              ("from=email;to=email;date=ts;subject=Re: MSA renewal {company};firm={Halden|"
               "Farrow|Quince|Okoro} {LLP|& Partners};matter_no=M-{n:100000-999999}",))),
        ("doc-id search_clm doc_id title :: Under what repository reference is '{s}' filed? :: "
         "Where would I find '{s}' in the system?",
         "contract-value search_clm total_value title :: What is '{s}' worth over its term? :: "
         "How big is '{s}' in money terms?",
         "liability-cap get_clauses cap - :: What ceiling does clause {s} put on damages? :: How "
         "far can exposure go under clause {s}?",
         "exit-fee compare_versions termination_fee - :: What exit payment did the redline add "
         "in {s}? :: In the markup, what does leaving early cost under {s}?",
         "reg-number lookup_entity registration - :: Under which registry number is {s} "
         "incorporated? :: How is {s} identified at the companies registry?",
         "signatory lookup_entity signatory - :: Who can sign on behalf of {s}? :: Who has "
         "authority to execute for {s}?",
         "obligation-due list_obligations due - :: When do we have to have {s} done? :: What's the"
         " deadline for {s}?",
         "counsel-matter read_thread matter_no firm :: Which file number is {s} using for this? "
         ":: What reference does {s} put on their letters?"),
        ("matter user LGL-####-## :: Our internal matter number is {a}. | Tag the memo with "
         "matter {a}. :: Which internal file should the memo be tagged with? :: What did I say "
         "our own file reference is?",
         "comments-due user later :: Northwind want our comments back by {a}. :: When do they "
         "expect our markup back? :: By when do we owe them a response?",
         "gc-email user email :: Send the final summary to the GC at {a}. :: Where should the "
         "final summary go? :: Who receives the finished summary?",
         "cap-floor constraint f:250000-3000000 :: Never accept a liability cap below {a} USD. "
         ":: What's the lowest limit I said we'd tolerate? :: Below what figure do we refuse?",
         "external-cc constraint email :: Always cc {a} on anything that goes outside. :: Who has"
         " to be on copy for external messages? :: Who must see outbound mail?")),
    Dom("finance", "ledgerly.eu|ledgerly.eu|kpmg.nl",
        "You are Tally, the month-end close assistant for the Ledgerly finance team. You can pull"
        " bank statements, query the general ledger read-only, list payment-processor payouts, "
        "open vendor invoices and vendor records, look up FX rates and read the AP mailbox. "
        "Match every bank line to a ledger entry or payout, explain each unmatched item and "
        "propose journal entries as drafts for a human to post. Show amounts with two decimals "
        "and currency; never round when matching.",
        "Please reconcile the operating account (EUR, ending {n:1000-9999}) against the GL and "
        "our Stripe and Adyen payouts for last month. Bank and ledger are off and I need the "
        "period closed by {date}.",
        "Payouts settle T+2 and are netted of processing fees.|Card settlement files post the "
        "next business day.|Intercompany transfers must be matched on both entities.|FX "
        "differences below one euro are written off automatically.",
        (Tool("bank_statement", "Download bank statement lines as CSV.", "account=NL{n:10-99}"
              "INGB0{n:100000000-999999999};from=day;to=day", "csv",
              ("booking_date=day;value_date=day;description={SEPA CT|CARD|DD} {company}|Payout "
               "{STRIPE|ADYEN}|Bank charges;reference=FT{n:10000000-99999999};amount=f:1-90000|"
               "-{f:1-90000};balance=f:10000-900000",)),
         Tool("query_ledger", "Run a read-only query on the general ledger.", "sql=select * "
              "from gl_lines where period = '{n:1-12}' and account >= '{n:1000-8999}'", "table",
              ("je_id=JE-######;account=glacct;memo={Accrual|Reversal|Payout|Fee|Reclass} "
               "{company};amount=f:10-250000;currency=EUR|USD|GBP;posted=ts;preparer=email",)),
         Tool("list_payouts", "List processor payouts.", "processor=stripe|adyen;since=day",
              "json", ("payout_id=po_%%%%%%%%%%%%%%;amount=f:500-400000;fee=f:3-900;arrival_date"
                       "=day;status=paid|paid|in_transit|failed;bank_ref={ST|AD}{n:1000000000-"
                       "9999999999};balance_transactions=n:10-3000",), "payouts"),
         Tool("get_invoices", "Open vendor invoices.", "vendor={company};status=open|all", "kv",
              ("invoice_no=INV-{2023|2024}-#####;vendor={company};total=f:90-180000;currency=EUR"
               "|USD;due_date=date;po_number=PO-######;audit_tag=AUD-{2024|2025}-####|none",),
              "Invoices"),
         Tool("get_vendor", "Read vendor master records.", "query={company}", "yaml",
              ("vendor={company};vendor_id=V-#####;iban={NL|DE|BE|FR}{n:10-99} {INGB|RABO|DEUT}"
               " {n:1000-9999} {n:1000-9999} {n:10-99};remit_to=email;terms=NET30|NET45|NET60",),
              "vendor master"),
         Tool("fx_rates", "Look up FX rates for a date.", "date=day;base=EUR", "json",
              ("pair={EUR|GBP|CHF|SEK}{USD|JPY|PLN|NOK|DKK|CAD};rate={0|1|2}.#####;source=ECB|"
               "Reuters;as_of=ts",), "rates"),
         Tool("read_mail", "Search the AP mailbox.", "query=remittance newer_than:30d", "email",
              ("from=email;to=email;date=ts;subject=Remittance advice {company};vendor={company};"
               "po_number=PO-######;paid=f:90-180000",))),
        ("running-balance bank_statement balance reference :: What was the running balance right"
         " after {s} cleared? :: Where did the account stand once {s} went through?",
         "je-amount query_ledger amount je_id :: How much was {s} booked for? :: What value did "
         "entry {s} carry?",
         "payout-ref list_payouts bank_ref - :: What reference did {s} land with at the bank? :: "
         "How does {s} show up on the statement?",
         "payout-fee list_payouts fee - :: How much did the processor keep from {s}? :: What was "
         "skimmed off {s}?",
         "invoice-total get_invoices total - :: What's the grand total on {s}? :: How much is {s}"
         " for altogether?",
         "vendor-iban get_vendor iban - :: Which account does {s} get paid into? :: Where do "
         "payments to {s} go?",
         "fx-rate fx_rates rate - :: At what rate did {s} convert that day? :: What conversion did"
         " we get for {s}?",
         "remit-po read_mail po_number vendor :: Which purchase order did {s} quote in their "
         "note? :: What order did {s} say they were paying?"),
        ("audit-sample user AUD-{2024|2025}-#### :: The auditors' sample for this account is "
         "{a}. :: Which of the auditors' selections are we working through? :: What did the "
         "auditors call the selection we're testing?",
         "variance user f:1000-90000 :: The controller flagged an unexplained difference of {a} "
         "EUR. | Bank and GL are off by exactly {a} EUR. :: How big was the gap the controller "
         "spotted? :: By how much are bank and books apart, per my note?",
         "journal-approver user email :: Send journal proposals to {a} for approval. :: Who gets "
         "the proposed entries? :: Where do the draft journals go?",
         "locked-account constraint glacct :: Never post anything to {a}; it is locked for the "
         "audit. :: Is there anywhere in the chart I told you not to book to? :: Which ledger "
         "line is locked?",
         "approval-threshold constraint f:5000-50000 :: Anything above {a} EUR needs my sign-off "
         "first. :: Above what size do entries need my approval? :: What's my sign-off limit?")),
    Dom("recruiting", "brightwell.health|brightwell.health|gmail.com|proton.me",
        "You are the recruiting coordinator assistant for the talent team at Brightwell Health. "
        "You can search the applicant tracking system, open candidate profiles and scorecards, "
        "check interviewer calendars, look up compensation bands and read the recruiting inbox. "
        "Be accurate with candidate details and respectful in tone; candidate data is "
        "confidential and must not leave these tools. You draft emails and offers; a human "
        "recruiter sends them.",
        "We're hiring a Senior Data Engineer for the platform team. Go through the pipeline, "
        "shortlist the strongest candidates, check who can sit a panel next week, and draft offer"
        " numbers for the top pick within band.",
        "Strong systems design, a bit light on streaming.|Would need visa sponsorship for the "
        "Berlin office.|Asked good questions about on-call.|Prefers a hybrid setup, two days in "
        "the office.|Previously at {company}.",
        (Tool("search_candidates", "Search the ATS.", "requisition=REQ-#####;stage=any", "json",
              ("name=person;candidate_id=CAN-######;stage=applied|screen|onsite|offer|rejected;"
               "source=referral|LinkedIn|careers site|agency;applied_at=ts;location=Berlin|Lisbon"
               "|London|Remote EU;requisition=REQ-#####",), "candidates"),
         Tool("get_profiles", "Open candidate profiles.", "candidate_ids=CAN-######", "kv",
              ("name=person;current_employer={company};email=email;phone=+{44|49|351|31} "
               "{n:100-999} {n:1000000-9999999};expected_salary=f:70000-160000;notice={n:2-12} "
               "weeks;summary=prose",), "Profiles"),
         Tool("calendar_freebusy", "Interviewer availability for a week.", "week=day", "cols",
              ("interviewer=email;start=ts;status=free|busy|tentative;room=Berlin {n:1-4}F-"
               "{n:10-40}|remote;link=https://meet.brightwell.health/{n:100000000-999999999}",)),
         Tool("comp_bands", "Compensation bands as CSV.", "family=engineering", "csv",
              ("band={DE|PT|NL|UK}-{IC|M}{n:3-7}-{n:10-99};min=f:50000-90000;mid=f:80000-130000;"
               "max=f:110000-190000;currency=EUR|GBP",)),
         Tool("read_inbox", "Search the recruiting inbox.", "query=newer_than:14d", "email",
              ("from=email;to=email;date=ts;subject=Re: {Interview availability|Offer questions|"
               "Next steps};candidate=person;available_from=date;notice={n:2-12} weeks",)),
         Tool("get_scorecards", "Read interview scorecards.", "candidate_id=CAN-######", "yaml",
              ("scorecard=SC-#####;candidate=person;interviewer=email;rating=n:1-4;"
               "recommendation=hire|no hire|strong hire;submitted_at=ts;notes=prose",),
              "scorecards")),
        ("cand-id search_candidates candidate_id - :: Under what record number is {s} in the "
         "system? :: How do I pull up {s} directly?",
         "salary-ask get_profiles expected_salary - :: What pay is {s} hoping for? :: What's {s} "
         "asking for, money-wise?",
         "cand-email get_profiles email - :: Where should the invite to {s} go? :: How do I reach"
         " {s} in writing?",
         "cand-phone get_profiles phone - :: What number do we have for {s}? :: How can I call "
         "{s}?",
         "video-link calendar_freebusy link - :: Which call link is {s} using for the slot? :: "
         "Where does {s} host the remote interview?",
         "band-mid comp_bands mid - :: What's the centre of the {s} range? :: Where does {s} sit "
         "in the middle?",
         "band-max comp_bands max - :: What's the ceiling of {s}? :: How high can {s} go?",
         "start-date read_inbox available_from candidate :: When could {s} start? :: From what "
         "day is {s} free to join?"),
        ("req-id user REQ-##### :: The requisition for this role is {a}. :: What's the opening's "
         "reference again? :: Which opening are we attaching candidates to?",
         "hiring-manager user person :: The hiring manager is {a}; they want a shortlist by "
         "Friday. :: Whose team does this hire join? :: Who are we hiring for?",
         "offer-budget user f:90000-150000 :: Finance approved up to {a} EUR base for this hire. "
         ":: How much room did I say we have for the offer? :: What's the most we can offer?",
         "no-poach constraint company :: Do not approach anyone currently at {a}; we have a "
         "no-poach agreement. :: Which employer's people are off limits? :: Who did I say we "
         "can't recruit from?",
         "skip-interviewer constraint email :: Never put {a} on a panel this month, they're "
         "on leave. :: Who should be left off the panels? :: Is there an interviewer to avoid?")),
)

WRAPS = ("{q}", "Before you go on, {lq} Keep it short.", "Quick one: {lq}", "{q} I need it for "
         "my notes.", "Sorry to interrupt. {q}")
SAYS = ("{st}", "Heads up: {st}", "Noting this for later. {st}", "Before I forget. {st} Carry on.")
REPLIES = ("Let me check the earlier output.", "I'll look back through what we gathered and "
           "answer that.", "Good question, let me find it in the earlier results.",
           "Checking my notes from earlier in this session.")
UPDATES = ("Quick update: {n} lookups in, nothing conclusive yet. Next I'm checking {t}.",
           "Status: still narrowing it down; {t} is next on my list.", "Progress note: partial "
           "picture after {n} calls. I'll keep going unless you want a summary now.",
           "So far the evidence is mixed. I'll dig into {t} before drawing conclusions.")
INTERJ = ("Ok, keep going.", "Approved, but read-only for now; nothing that changes state.",
          "Can you speed up a bit? I have a call in twenty minutes.", "Also flag anything odd "
          "from the last two weeks, even if it looks unrelated.", "Thanks. Don't summarise yet, "
          "finish the analysis first.", "Someone else is on this too; focus on what they won't "
          "see.", "Fine. Prioritise whatever affects the most people.")
THOUGHTS = ("Let me pull {t} next.", "Cross-checking with {t}.", "{t} should narrow this down.",
            "I'll look at {t} for the same window.", "Checking {t} before going further.")
FMT_K = {"json": 1.85, "table": 1.05, "csv": 1.0, "cols": 1.25, "log": 0.9, "kv": 1.6,
         "yaml": 1.15, "md": 1.3, "email": 2.3, "diff": 1.5}  # rendered size / estimated size
Plant = tuple[str, str, str, str]  # field, subject field, subject, answer


def _nest(r: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in r.items():
        x: Any = int(v) if v.isdigit() and len(v) < 12 and (v == "0" or v[0] != "0") else v
        a, _, b = k.partition(".")
        if b:
            out.setdefault(a, {})[b] = x
        else:
            out[a] = x
    return out


def _render(c: Ctx, t: Tool, recs: list[dict[str, str]], spec: dict[str, str],
            hot: tuple[int, str]) -> str:
    keys, rows, f = list(recs[0]), [list(r.values()) for r in recs], t.fmt
    title = c.val(t.title) if t.title else ""
    lab = [k.replace("_", " ").replace(".", " ").capitalize() for k in keys]
    if f == "json":
        meta = {"count": len(recs), "request_id": c.val("%" * 24),
                "next_cursor": c.val("~" * 16) if c.rng.random() < 0.5 else None}
        body = {title or "items": [_nest(r) for r in recs], "meta": meta}
        return json.dumps(body, indent=2 if c.rng.random() < 0.6 else None)
    if f == "csv":
        out = [",".join(f'"{v}"' if "," in v else v for v in row) for row in [keys, *rows]]
    elif f == "table":
        out = [" | ".join(row) for row in [keys, *rows]] + [f"({len(rows)} rows)"]
        out[1:1] = ["-+-".join("-" * len(k) for k in keys)]
    elif f == "cols":
        w = [max(map(len, col)) for col in zip(keys, *rows, strict=True)]
        out = ["   ".join(v.ljust(n) for v, n in zip(row, w, strict=True)).rstrip()
               for row in [keys, *rows]]
    elif f == "log":
        out = [" ".join(r[:3] + [f'{k}="{v}"' if " " in v else f"{k}={v}"
                                 for k, v in zip(keys[3:], r[3:], strict=True)]) for r in rows]
    elif f == "kv":
        out = ["\n".join(f"{n + ':':<22}{v}" for n, v in zip(lab, r, strict=True)) + "\n"
               for r in rows]
    elif f == "yaml":
        out = ["- " + "\n  ".join(f"{k}: {v}" for k, v in zip(keys, r, strict=True)) for r in rows]
        title = "# " + title
    elif f == "md":
        out, i = ["# " + title, "", c.val("prose"), ""], 0
        while i < len(rows):
            n = c.rng.randint(4, 9)
            out += ["| " + " | ".join(lab) + " |", "|" + "---|" * len(keys)]
            out += ["| " + " | ".join(r) + " |" for r in rows[i:i + n]] + ["", c.val("prose"), ""]
            i += n
        return "\n".join(out)
    elif f == "email":
        return "\n\n-----Original Message-----\n".join(
            f"From: {r['from']}\nTo: {r['to']}\nDate: {r['date']}\nSubject: {r['subject']}\n\n"
            f"Hello,\n\n{c.val('prose')}\n\n"
            + "\n".join(f"{n}: {v}" for n, v in zip(lab[4:], list(r.values())[4:], strict=True))
            + f"\n\nBest regards,\n{c.val('first')}" for r in recs)
    else:  # diff
        out, ln = [f"diff --git a/{title} b/{title}", f"--- a/{title}", f"+++ b/{title}"], 7
        for i, r in enumerate(rows):
            out.append(f"@@ -{ln},{len(r)} +{ln},{len(r) + 1} @@ {r[0]}")
            for k, v in zip(keys[1:], r[1:], strict=True):
                old = c.val(spec[k])
                if (i, k) == hot or (c.rng.random() < 0.25 and old != v):
                    out += [f"-  {k}: {old}", f"+  {k}: {v}"]
                else:
                    out.append(f"   {k}: {v}")
            ln += len(r) + c.rng.randint(3, 30)
        return "\n".join(out)
    return "\n".join(([title] if title else []) + out)


def _plant_schema(t: Tool, field: str) -> tuple[tuple[str, str], ...]:
    return next(_fields(s) for s in t.schemas if field in dict(_fields(s)))


def _output(c: Ctx, t: Tool, size: int, plant: Plant | None) -> str:
    """A tool output of about `size` characters; `plant` puts the answer mid-way among peers."""
    fields = _plant_schema(t, plant[0]) if plant else _fields(c.rng.choice(t.schemas))
    keyed = t.fmt not in ("table", "csv", "cols")
    recs: list[dict[str, str]] = []
    est, goal = 0, size / FMT_K[t.fmt]
    while est < goal or len(recs) < (6 if plant else 2):
        recs.append({k: c.val(s) for k, s in fields})
        est += sum(len(v) + 3 + len(k) * keyed for k, v in recs[-1].items())
    first = fields[0][0]
    if t.fmt == "log":  # lines in time order
        recs.sort(key=lambda r: r[first])
    hot = (-1, "")
    if plant:
        fld, sf, subj, ans = plant
        at = c.rng.randint(len(recs) // 4 + 1, 3 * len(recs) // 4)
        r = {k: c.val(s) for k, s in fields} | {sf: subj, fld: ans}
        if t.fmt == "log" and first not in (sf, fld):
            r[first] = recs[at][first]
        hot = (at, fld)
        recs.insert(at, r)
    return _render(c, t, recs, dict(fields), hot)


def _make(c: Ctx, build: Callable[[], Message], own: str = "") -> Message:
    """Build a message holding no planted answer but its own (`own`), redrawing if need be."""
    for _ in range(50):
        m = build()
        s = json.dumps(m, ensure_ascii=False)
        if all((a in s) == (a == own) for a in c.answers):
            return m
    raise RuntimeError("cannot keep planted answers unique")


def _text(role: str, text: str) -> Message:
    return {"role": role, "content": text}


def _call_msg(c: Ctx, names: list[Tool]) -> Message:
    calls = [{"id": f"call_{c.rng.getrandbits(72):018x}", "type": "function", "function": {
        "name": t.name, "arguments": json.dumps(
            {k: int(v) if s.startswith("n:") else v for k, s in _fields(t.args)
             for v in (c.val(s),)})}} for t in names]
    thought = c.rng.choice(THOUGHTS).format(t=names[0].name) if c.rng.random() < 0.4 else None
    return {"role": "assistant", "content": thought, "tool_calls": calls}


def _tool_msg(c: Ctx, cid: str, t: Tool, size: int, plant: Plant | None) -> Message:
    return {"role": "tool", "tool_call_id": cid, "content": _output(c, t, size, plant)}


def _schema(t: Tool) -> dict[str, Any]:
    props = {k: {"type": "integer" if s.startswith("n:") else "string",
                 "description": k.replace("_", " ")} for k, s in _fields(t.args)}
    return {"type": "function", "function": {"name": t.name, "description": t.desc, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}


def _sizes(rng: random.Random) -> list[int]:
    k = 1 if rng.random() < 0.8 else rng.choice((2, 2, 3))
    return [min(20000, max(320, round(rng.lognormvariate(math.log(2800), 0.9)))) for _ in range(k)]


def _session(dom: Dom, seed: int, window: int, i: int) -> Session:
    rng = random.Random(f"{seed}:{dom.kind}:{i}")
    c, tools = Ctx(rng, dom), {t.name: t for t in dom.tools}
    blob = " ".join([dom.system, dom.task, *dom.tfacts, *dom.ufacts, *tools, *WRAPS, *SAYS,
                     *REPLIES, *UPDATES, *INTERJ, *THOUGHTS])

    def fresh(spec: str) -> str:
        for _ in range(300):
            a = c.val(spec)
            if len(a) >= 4 and a not in blob and not any(a in x for x in [*c.subjects, *c.answers]):
                c.answers.append(a)
                return a
        raise RuntimeError(f"no distinctive answer for {spec!r}")

    def ask(qs: list[str], subj: str) -> str:
        q = rng.choice(qs).replace("{s}", subj)
        return rng.choice(WRAPS).format(q=q, lq=q[0].lower() + q[1:])

    facts: list[Fact] = []
    tplants: list[tuple[Tool, Plant]] = []
    says: list[str] = []
    for line in rng.sample(dom.tfacts, 3):
        head, *qs = line.split(" :: ")
        slug, tname, fld, sf = head.split()
        spec = dict(_plant_schema(tools[tname], fld))
        sf = next(iter(spec)) if sf == "-" else sf
        subj = c.val(spec[sf])
        c.subjects.add(subj)
        facts.append(Fact("tool", slug, fresh(spec[fld]), ask(qs, subj)))
        tplants.append((tools[tname], (fld, sf, subj, facts[-1].answer)))
    users = [u for u in dom.ufacts if u.split()[1] == "user"]
    for line in [*rng.sample(users, 2), rng.choice([u for u in dom.ufacts if u not in users])]:
        head, st, *qs = line.split(" :: ")
        slug, kind, spec_ = head.split()
        facts.append(Fact(kind, slug, fresh(spec_), ask(qs, "")))
        st = rng.choice(st.split(" | ")).replace("{a}", facts[-1].answer)
        says.append(rng.choice(SAYS).format(st=st))

    # Plan the steps (parallel calls and output sizes), then scale them to the drawn length.
    target, fixed = rng.uniform(3.3, 8.3) * window * 4, len(dom.system) + len(dom.task) + 3000
    steps: list[list[int]] = []
    used = fixed
    while used < target or len(steps) < 20:
        steps.append(_sizes(rng))
        used += sum(steps[-1]) + 300 * len(steps[-1]) + 150
    total = sum(map(sum, steps))
    scale = min(1.0, (target - used + total) / total)
    steps = [[max(320, round(s * scale)) for s in ss] for ss in steps]
    n = len(steps)
    slots = rng.sample(range(1, int(0.7 * n)), 6)
    plant_at = {s: k for k, s in enumerate(slots[:3])}
    say_at = {s: k for k, s in enumerate(slots[3:], 3)}
    asks: dict[int, list[int]] = {}
    for k, s in enumerate(slots):
        asks.setdefault(rng.randint(s + (5 if k < 3 else 4), n - 1), []).append(k)
    chats, b = set(), rng.randint(5, 9)
    while b < 3 * n:
        chats.add(b)
        b += rng.randint(6, 10)

    msgs: list[Message] = []
    tokens = 0.0

    def add(m: Message) -> int:
        nonlocal tokens
        msgs.append(m)
        tokens += len(json.dumps(m)) / 4
        return len(msgs) - 1

    add(_text("system", dom.system))
    add(_make(c, lambda: _text("user", c.val(dom.task))))
    st_i, calls = 0, 0
    while st_i < n or tokens < 3.05 * window:
        for k in asks.get(st_i, []):
            facts[k].asked = add(_make(c, partial(_text, "user", facts[k].question)))
            add(_make(c, partial(_text, "assistant", rng.choice(REPLIES))))
        if st_i in say_at or st_i in chats:
            t = rng.choice(dom.tools).name
            add(_make(c, partial(_text, "assistant", rng.choice(UPDATES).format(n=calls, t=t))))
            k = say_at.get(st_i, -1)
            text = says[k - 3] if k >= 0 else rng.choice(INTERJ)
            idx = add(_make(c, partial(_text, "user", text), facts[k].answer if k >= 0 else ""))
            if k >= 0:
                facts[k].planted = idx
        sizes = steps[st_i] if st_i < n else _sizes(rng)
        names = [rng.choice(dom.tools) for _ in sizes]
        pk, j = plant_at.get(st_i, -1), rng.randrange(len(sizes))
        if pk >= 0:
            names[j] = tplants[pk][0]
        call_msg = msgs[add(_make(c, partial(_call_msg, c, names)))]
        for q, (tool, size, call) in enumerate(
                zip(names, sizes, call_msg["tool_calls"], strict=True)):
            mine = pk >= 0 and q == j
            build = partial(_tool_msg, c, call["id"], tool, size, tplants[pk][1] if mine else None)
            idx = add(_make(c, build, facts[pk].answer if mine else ""))
            if mine:
                facts[pk].planted = idx
        st_i, calls = st_i + 1, calls + len(sizes)
    used_tools = {call["function"]["name"] for m in msgs for call in m.get("tool_calls", [])}
    return Session(dom.kind, msgs, [_schema(t) for t in dom.tools if t.name in used_tools], facts)


def sessions(seed: int, window: int = 8000, per_kind: int = 1) -> list[Session]:
    """`per_kind` sessions for each of the six domains; deterministic for a seed."""
    if window < 2000:
        raise ValueError("held-out sessions need a window of at least 2,000 tokens")
    return [_session(d, seed, window, i) for d in DOMAINS for i in range(per_kind)]


def validate(s: Session, window: int) -> int:
    """Assert the workload invariants of one session; return its estimated tokens."""
    msgs, ids, pending = s.messages, set[str](), list[str]()
    assert msgs[0]["role"] == "system" and 300 <= len(msgs[0]["content"]) <= 1200
    assert msgs[1]["role"] == "user"
    for m in msgs[1:]:
        if m["role"] == "tool":
            assert pending and m["tool_call_id"] == pending.pop(0), "tool reply out of order"
            continue
        assert not pending, "unanswered tool call"
        for call in m.get("tool_calls", []):
            assert call["id"] not in ids and json.loads(call["function"]["arguments"]) is not None
            ids.add(call["id"])
            pending.append(call["id"])
    assert not pending, "unanswered tool call at the end"
    outs = [m["content"] for m in msgs if m["role"] == "tool"]
    assert len(set(outs)) == len(outs), "repeated tool output"
    texts = [json.dumps(m, ensure_ascii=False) for m in msgs]
    for f in s.facts:
        assert [i for i, t in enumerate(texts) if f.answer in t] == [f.planted], f
        assert f.answer not in f.question and 1 < f.planted < f.asked, f
        assert msgs[f.asked] == {"role": "user", "content": f.question}, f
        assert msgs[f.planted]["role"] == ("tool" if f.kind == "tool" else "user"), f
        assert sum("tool_calls" in m for m in msgs[f.planted + 1:f.asked]) >= 4, f
    tokens = int(sum(len(json.dumps(m)) for m in msgs) / 4)
    assert 3 * window <= tokens <= 9 * window, tokens
    return tokens


if __name__ == "__main__":
    t0 = time.perf_counter()
    out = sessions(0)
    took = time.perf_counter() - t0
    for s in out:
        tok = validate(s, 8000)
        n_out = sum(m["role"] == "tool" for m in s.messages)
        print(f"{s.kind}: {len(s.messages)} messages, {n_out} tool outputs, ~{tok} tokens")
        for f in s.facts:
            print(f"  {f.kind:<10} {f.name:<18} {f.answer!r:<32} planted={f.planted:<3} "
                  f"asked={f.asked:<3} {f.question}")
    assert [s.messages for s in sessions(0)] == [s.messages for s in out], "not deterministic"
    print(f"generated {len(out)} sessions in {took:.2f}s")
    assert took < 2.0
