"""Working words: what a question calls a thing where an agent's tools print another.

The related-words table (store/related.py) is distributional: built from MiniLM's input
embeddings, it joins "big" to "large" and "grew" to "growth", but in plain English. It
does not know the shop talk that joins a user's words to what a tool prints: a test run
that "went red" prints FAILED, the address to "point the browser at" is a URL with a
port, "rate-limited" is a 429, a "machine" is an instance, a "label" a tag, a "ceiling"
a cap or a limit, a "bad gateway" a 502, Japanese `ja` in a list of languages. A
compound is listed joined ("ratelimited" for "rate-limited", "secondline" for "second
line": proxy/step.py `_words`; an open one also stands for its parts among the
question's own words, `compounds_joined`). Each
line here is one such idiom of software, operations, data, research and contracts: the
question's words, then what a tool's output or a document says for them. They join the
table's own related words (`RelatedWords.of`) at `WEIGHT`, a middling cosine, so they
count as a related word does (cosine x idf, outside the strength yardstick, never as
much as the question's own word), and only for a question (proxy/step.py
`related_of`).

Kept short and general on purpose: every entry is a usage a reader in the trade would
name without seeing any workload, not a phrase lifted from a benchmark's questions
(docs/design-notes.md says what each measured set gained).
"""

from __future__ import annotations

from functools import lru_cache

from store.regions import regions

WEIGHT = 0.5

# A word with an everyday sense the trade's does not share stays out: "charge" ("who is
# in charge of billing?" asks for no amount), "open", "run", "down".
_IDIOMS = """
red reds: fail failed failing failure failures error errors
green: pass passed passing success succeeded
broke broken break breaks breaking: fail failed failing failure error errors regression
crash crashed crashes crashing: error errors exception traceback panic fatal killed
browser browsers url urls link links website: http https localhost port url
machine machines box boxes server servers vm vms: instance instances host hosts node nodes
label labels labelled labeled labelling labeling: tag tags tagged untagged
unlabeled unlabelled: untagged
ceiling ceilings: cap caps capped limit limits maximum max exceed
deal deals: agreement contract
extend extends extended extension extensions: renew renews renewal renewed
advance beforehand ahead: prior notice
people persons: participants respondents adults subjects
slow slower slowest sluggish laggy: latency took duration elapsed timeout p95 p99
memory ram: mem heap rss oom
outage outages: unavailable unreachable degraded incident error
stuck hung hang hangs frozen: timeout timed deadlock blocked
owner owners owns: maintainer maintainers assignee author
endpoint endpoints: url http https route path
charged bill billed: amount total fee fees invoice billed charged
rejected refused: failed failure denied declined error
signin signins logon logons: login logins auth authentication
ratelimited throttled throttling: 429 throttle throttled ratelimit
badgateway: 502
gatewaytimeout: 504
serviceunavailable: 503 unavailable
unauthorized unauthorised: 401 unauthenticated
forbidden: 403 denied
servererror: 500
japanese: ja
chinese mandarin cantonese: zh
korean: ko
vietnamese: vi
swedish: sv
greek: el
ukrainian: uk
czech: cs
danish: da
arabic: ar
hindi: hi
cancelled canceled: void voided
crew crews headcount staffing manpower: workers worker staff
candidate candidates prerelease: rc beta alpha preview
secondline secondlevel: tier escalated escalation l2
samplesize: participants respondents adults subjects surveyed
login logon: signin auth authentication
timedout: timeout timeouts deadline
preproduction preprod: staging stage stg
postgres postgresql: pg psql
pay paid paying: charged amount total
altogether overall: total
originally original: origin
readonly: ro replica replicas reader standby
retry retries retried retrying: backoff
year yearly: annual annually annualized
worth: value valuation
connecting connection connections: transfer transfers
bag bags baggage: pieces pcs
respondents respondent: participants adults subjects surveyed sample
"""


def _parse(text: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for line in text.strip().splitlines():
        asked, _, said = line.partition(":")
        targets = tuple(said.split())
        for word in asked.split():
            out[word] = tuple(dict.fromkeys((*out.get(word, ()), *targets)))
    return out


@lru_cache(maxsize=1)
def idioms() -> dict[str, tuple[str, ...]]:
    """question word -> the words a tool or a document uses for it (a place or a country:
    its cloud regions', ISO and currency codes, store/regions.py)."""
    out = _parse(_IDIOMS)
    for place, codes in regions().items():
        out[place] = tuple(dict.fromkeys((*out.get(place, ()), *codes)))
    return out
