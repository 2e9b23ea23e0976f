"""Places and their codes (store/regions.py): a question that names a city or a country
reaches what a tool printed for it, a region's code long or short, a country's."""

from __future__ import annotations

import json

from store.idioms import WEIGHT, idioms
from store.regions import regions, short
from store.relevance import RelevanceIndex
from tests.support.asking import ask, without_idioms


def test_an_aws_region_has_its_short_form_and_others_have_none() -> None:
    assert short("eu-central-1") == "euc1"
    assert short("ap-southeast-2") == "apse2"
    assert short("us-east-1") == "use1"
    assert short("europe-west3") is None and short("germanywestcentral") is None


def test_a_place_names_every_clouds_region_there() -> None:
    table = regions()
    assert table["frankfurt"] == ("eu-central-1", "euc1", "europe-west3",
                                  "germanywestcentral")
    assert {"ap-southeast-2", "apse2", "australia-southeast1"} <= set(table["sydney"])
    assert set(table["virginia"]) >= {"us-east-1", "us-east4", "eastus"}
    assert set(table["frankfurt"]) <= set(idioms()["frankfurt"])  # served as idioms


REGIONS = ["use1", "usw2", "euw1", "apne1", "apse2", "sae1"]


def test_a_country_and_its_people_name_its_codes_but_never_a_word_of_prose() -> None:
    table = regions()
    assert table["vietnamese"] == table["vietnam"] == ("vn", "vnm", "vnd")
    assert table["german"] == ("de", "deu", "eur")
    assert "us" not in table["american"] and "id" not in table["indonesia"]
    assert "no" not in table["norway"] and "nok" in table["norway"]


def purchase_orders() -> str:
    """Forty orders over several passages; one from Vietnam."""
    countries = ["CN", "BD", "IN", "TR", "PK"] * 8
    countries[23] = "VN"
    return json.dumps([{"po_number": f"PO-{4923340 + k}", "origin_country": c,
                        "status": "in_transit", "units": 900 + 37 * k}
                       for k, c in enumerate(countries)], indent=2)


def test_a_question_about_the_vietnamese_factory_finds_the_order_from_vn() -> None:
    index = RelevanceIndex()
    for n in range(3):
        index.add(f"report{n}", f"Restock report {n}: purchase orders are on schedule.")
    index.add("pos", purchase_orders())
    q = "Which purchase order is bringing in the restock from the Vietnamese factory?"
    _, hits = ask(index, q)
    best = next(h for h in hits if h.chunk_id == "pos")  # of the listing's passages
    assert '"origin_country": "VN"' in best.text and "PO-4923363" in best.text
    _, alone = ask(index, q, without_idioms())  # without: not found at all
    assert alone and not any("PO-4923363" in h.text for h in alone)


def game_servers(n: int, looping: str) -> str:
    """A fleet whose one instance crash-loops, each fleet's in another region."""
    lines = [f"gs-{region}-a-{3000 + 7 * k + n} status=running restarts=0 players=41"
             for k, region in enumerate(REGIONS)]
    lines.append(f"{looping} status=CrashLoopBackOff restarts=37 players=0")
    return "\n".join(lines)


def test_a_city_finds_the_instance_named_by_its_regions_short_code() -> None:
    index = RelevanceIndex()
    for n in range(5):
        index.add(f"fleet{n}", game_servers(n, "gs-euc1-a-3246" if n == 3 else
                                            f"gs-{REGIONS[n]}-b-{4100 + n}"))
    related, found = ask(index, "Which server in Frankfurt kept restarting over and over?")
    assert related["euc1"] == ("frankfurt", WEIGHT)
    assert found[0].chunk_id == "fleet3", [(h.chunk_id, round(h.score, 2)) for h in found[:4]]
    # a code's number alone stands for nothing: "1" of euc1 reaches no other fleet
    assert "1" not in index.related_terms(related, {})
    _, alone = ask(index, "Which server in Frankfurt kept restarting over and over?",
                   without_idioms())  # without the regions: a tie
    scores = [h.score for h in alone]  # (their lengths differ by a character or two)
    assert len(scores) == 5 and max(scores) < 1.01 * min(scores)


def test_a_code_counts_whole_not_by_its_words() -> None:
    """"London" reaches `eu-west-2`, not every passage that says "west"."""
    index = RelevanceIndex()
    index.add("dc", "primary bucket in eu-west-2, replica in us-east-1")
    index.add("road", "the west entrance of the depot is closed; use the east gate")
    related, found = ask(index, "Where is the London bucket?")
    assert "eu-west-2" in index.related_terms(related, {})
    assert not {"west", "eu", "east", "us"} & set(index.related_terms(related, {}))
    assert [h.chunk_id for h in found] == ["dc"]
