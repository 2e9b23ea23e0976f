"""Places and the codes that stand for them: cloud regions, countries, currencies.

A user asks about "the Sydney players" or "the instance in Frankfurt"; the tool printed
`ap-southeast-2` and `gs-euc1-a-3246`. Nothing in the words joins them, and a model's
sentence vector does not know a provider's naming either. This is the public list of
the three large clouds' regions, each with the places it is named for (a city, its
state or country); a question's place joins its regions' codes as an idiom does
(store/idioms.py: a related word at `idioms.WEIGHT`, only for a question).

A country's name and its people's ("Vietnam", "the Vietnamese factory", "the German
books") likewise join its ISO 3166 codes and its currency's ISO 4217 code, as records
print them (`"origin_country": "VN"`, `EUR/USD`); a code that is also a word of prose or
JSON (`us`, `id`, `per`, `no`) is left out.

AWS codes also stand in their short form (`eu-central-1` -> `euc1`, `ap-southeast-2` ->
`apse2`), as hostnames, instance names and dashboards abbreviate them. A code counts by
its terms (store/terms.py: `gs-euc1-a-3246` holds `euc`), never by its number alone
(store/relevance.py `related_terms`).
"""

from __future__ import annotations

import re
from functools import lru_cache

from store.terms import STOP

# code: the place words a user says for it (a multi-word name by its telling word)
_AWS = """
us-east-1: virginia
us-east-2: ohio
us-west-1: california
us-west-2: oregon
af-south-1: capetown
ap-east-1: hong kong
ap-south-1: mumbai bombay india
ap-south-2: hyderabad
ap-southeast-1: singapore
ap-southeast-2: sydney australia
ap-southeast-3: jakarta indonesia
ap-southeast-4: melbourne
ap-southeast-5: malaysia kuala lumpur
ap-southeast-7: thailand bangkok
ap-northeast-1: tokyo japan
ap-northeast-2: seoul korea
ap-northeast-3: osaka
ca-central-1: montreal canada
ca-west-1: calgary
eu-central-1: frankfurt germany
eu-central-2: zurich switzerland
eu-west-1: ireland dublin
eu-west-2: london
eu-west-3: paris
eu-south-1: milan italy
eu-south-2: spain aragon
eu-north-1: stockholm sweden
il-central-1: israel aviv
me-south-1: bahrain
me-central-1: uae emirates dubai
mx-central-1: mexico
sa-east-1: paulo brazil
"""

_OTHERS = """
us-central1: iowa
us-east1: carolina
us-east4: virginia
us-east5: columbus ohio
us-west1: oregon
us-west2: angeles
us-west3: utah
us-west4: vegas nevada
us-south1: dallas texas
northamerica-northeast1: montreal
northamerica-northeast2: toronto
southamerica-east1: paulo brazil
europe-west1: belgium
europe-west2: london
europe-west3: frankfurt germany
europe-west4: netherlands
europe-west6: zurich
europe-west8: milan
europe-west9: paris
europe-north1: finland
europe-central2: warsaw poland
europe-southwest1: madrid spain
asia-east1: taiwan
asia-east2: hong kong
asia-northeast1: tokyo
asia-northeast2: osaka
asia-northeast3: seoul
asia-south1: mumbai
asia-southeast1: singapore
asia-southeast2: jakarta
australia-southeast1: sydney
australia-southeast2: melbourne
eastus: virginia
eastus2: virginia
westus: california
westus2: washington
westus3: arizona
centralus: iowa
southcentralus: texas
northeurope: ireland dublin
westeurope: netherlands amsterdam
uksouth: london
francecentral: paris
germanywestcentral: frankfurt germany
switzerlandnorth: zurich
swedencentral: sweden
norwayeast: oslo norway
australiaeast: sydney
australiasoutheast: melbourne
japaneast: tokyo
japanwest: osaka
koreacentral: seoul
southeastasia: singapore
eastasia: hong kong
centralindia: pune
southindia: chennai
westindia: mumbai
brazilsouth: paulo brazil
canadacentral: toronto
canadaeast: quebec
"""

# ISO 3166 alpha-2 and alpha-3 codes and ISO 4217 currency: the country and its people
_COUNTRIES = """
us usa usd: america american americans
ca can cad: canada canadian canadians
mx mex mxn: mexico mexican mexicans
br bra brl: brazil brazilian brazilians
ar arg ars: argentina argentine argentinian
cl chl clp: chile chilean
co col cop: colombia colombian
pe per pen: peru peruvian
gb gbr gbp uk: britain british england
ie irl eur: ireland irish
fr fra eur: france french
de deu eur: germany german germans
es esp eur: spain spanish
pt prt eur: portugal portuguese
it ita eur: italy italian italians
nl nld eur: netherlands dutch holland
be bel eur: belgium belgian
at aut eur: austria austrian
ch che chf: switzerland swiss
se swe sek: sweden swedish
no nor nok: norway norwegian
dk dnk dkk: denmark danish
fi fin eur: finland finnish
pl pol pln: poland polish
cz cze czk: czechia czech
hu hun huf: hungary hungarian
ro rou ron: romania romanian
gr grc eur: greece greek
tr tur try: turkey turkish
ua ukr uah: ukraine ukrainian
ru rus rub: russia russian
il isr ils: israel israeli
ae are aed: emirates emirati uae
sa sau sar: saudi arabia
eg egy egp: egypt egyptian
ng nga ngn: nigeria nigerian
ke ken kes: kenya kenyan
in ind inr: india indian
pk pak pkr: pakistan pakistani
bd bgd bdt: bangladesh bangladeshi
lk lka lkr: lanka lankan
cn chn cny rmb: china chinese
hk hkg hkd: hong kong
tw twn twd: taiwan taiwanese
jp jpn jpy: japan japanese
kr kor krw: korea korean
vn vnm vnd: vietnam vietnamese
th tha thb: thailand thai
my mys myr: malaysia malaysian
sg sgp sgd: singapore singaporean
id idn idr: indonesia indonesian
ph phl php: philippines filipino philippine
au aus aud: australia australian australians
nz nzl nzd: zealand zealander
"""

# codes that are words of prose or JSON too (with store/terms.py's STOP: in, it, no, my)
_WORDS = frozenset("us id per try pen fin col".split())

_DIRECTIONS = {"northeast": "ne", "southeast": "se", "northwest": "nw", "southwest": "sw",
               "north": "n", "south": "s", "east": "e", "west": "w", "central": "c"}
_AWS_CODE = re.compile(r"([a-z]{2})-([a-z]+)-(\d)")


def short(code: str) -> str | None:
    """An AWS region's short form: `eu-central-1` -> `euc1`."""
    m = _AWS_CODE.fullmatch(code)
    if m is None or m.group(2) not in _DIRECTIONS:
        return None
    return f"{m.group(1)}{_DIRECTIONS[m.group(2)]}{m.group(3)}"


@lru_cache(maxsize=1)
def regions() -> dict[str, tuple[str, ...]]:
    """place word -> the region codes named for it (AWS's short forms too), and a
    country's words -> its ISO codes and currency."""
    out: dict[str, list[str]] = {}
    for line in _COUNTRIES.strip().splitlines():
        codes_, _, words = line.partition(":")
        codes = [c for c in codes_.split() if c not in STOP and c not in _WORDS]
        for word in words.split():
            have = out.setdefault(word, [])
            have += [c for c in codes if c not in have]
    for line in (_AWS + _OTHERS).strip().splitlines():
        code, _, places = line.partition(":")
        codes = [code.strip()]
        if (s := short(codes[0])) is not None:
            codes.append(s)
        for place in places.split():
            have = out.setdefault(place, [])
            have += [c for c in codes if c not in have]
    return {place: tuple(codes) for place, codes in out.items()}
