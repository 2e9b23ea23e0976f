"""A question asking for a quantity prefers the passage that states one, and a question
about the asker's own words what the user wrote (proxy/answers.py)."""

from __future__ import annotations

from proxy.answers import (
    BOOST,
    asks_own_words,
    asks_quantity,
    asks_when,
    dated_passages,
    echoed_passages,
    stated_passages,
    states_value,
    users_passages,
)
from proxy.recall import ChunkMeta, select
from store.relevance import Hit, RelevanceIndex

# Research notes as an agent reads them: the survey is talked about again and again,
# its size is stated once; years and "14 percent" recur, so they are not an answer.
TALK = [
    "Survey respondents in Lyon were more positive about urban cycling than the national "
    "average. Survey methods differ by up to 14 percent depending on the 2018 panel.",
    "A Pew Research survey found that urban cycling rose steadily since 2018, "
    "mostly in urban areas; the survey was repeated in 2018.",
    "Critics of the survey argue the figures overstate the trend because of how the "
    "survey samples; estimates differ by up to 14 percent.",
    "Survey respondents in Gdansk said the same; the 2018 survey wave was the largest.",
    # the rest of a session: the question's other words occur, elsewhere
    "The platform people reviewed the on-call handbook before the release.",
    "Deploys took longer on Friday because of the change freeze.",
    "Part of the cache was rebuilt overnight after the migration.",
]
FACT = f"c{len(TALK)}"  # the passage stating the size, added last
STATES = ("Policy support, not price, was the main driver.\n"
          "The survey was fielded online among 6,098 adults in fourteen countries.\n"
          "Adoption varies widely between regions.")


def ranked(question: str) -> list[str]:
    """What recall would bring back, best first, every passage evicted."""
    idx = RelevanceIndex()
    for i, text in enumerate([*TALK, STATES]):
        idx.add(f"c{i}", text)
    own = idx.query_terms(question)
    hits = idx.search(own)
    keys = stated_passages(idx, hits, set(own)) if asks_quantity(question) else frozenset()
    meta = {h.chunk_id: ChunkMeta(1, "tool", "TRANSIENT") for h in hits}
    got = select(hits, set(meta), meta, query=question, min_relevance=0.0, min_relative=0.0,
                 top_k=len(hits), budget=10_000, count=lambda t: len(t) // 4, stated=keys)
    return [r.hit.chunk_id for r in got]


def test_a_how_many_question_prefers_the_passage_stating_a_number() -> None:
    before = RelevanceIndex()
    for i, text in enumerate([*TALK, STATES]):
        before.add(f"c{i}", text)
    q = "How many people took part in that survey?"
    hits = before.search(q)
    talk = {f"c{i}" for i, t in enumerate(TALK) if "urvey" in t}
    bm25 = [h.chunk_id for h in hits]
    assert bm25.index(FACT) > min(map(bm25.index, talk))  # BM25 alone: the talk wins
    assert stated_passages(before, hits, set(before.query_terms(q))) == {(FACT, 0)}
    order = ranked(q)  # recall's choice: the fact ahead of all the talk
    assert all(order.index(FACT) < order.index(c) for c in talk), order
    order = ranked("Which people took part in that survey?")  # no quantity asked
    assert order.index(FACT) > min(map(order.index, talk))


def test_only_a_question_for_a_quantity_is_reranked() -> None:
    for q in ("How many people took part?", "What was the total?", "how much did it cost",
              "What's the ticket number?", "How large was the group?"):
        assert asks_quantity(q), q
    for q in ("Which survey was that?", "Who led the study?", "Where does it run?"):
        assert not asks_quantity(q), q
    assert ranked("Which survey was that?")[0] != FACT  # no reordering


def test_a_value_every_passage_repeats_is_not_an_answer() -> None:
    """2018 and 14 recur across the talk: a passage holding only those is not boosted."""
    idx = RelevanceIndex()
    for i, text in enumerate(TALK):
        idx.add(f"c{i}", text)
    own = idx.query_terms("How many people answered the survey in 2018?")
    assert stated_passages(idx, idx.search(own), set(own)) == frozenset()


def test_an_amount_of_money_is_a_value_whatever_its_digits() -> None:
    """ "$4.2 million" has two digits, fewer than a count's three, but says an amount; a
    year beside it ("in 2022") recurs and says none."""
    draft = [f"[{n}] The board met in 2022 and the district said the claims were settled."
             for n in range(4)]
    fact = "[6] Records show the district agreed in 2022 to pay $4.2 million to settle."
    idx = RelevanceIndex()
    for i, text in enumerate([*draft, fact, "Budget: €12.5m over 3 years for the plan.",
                              "The plan was reviewed by the board twice."]):
        idx.add(f"c{i}", text)
    q = "How big is the settlement figure the draft cites?"
    own = idx.query_terms(q)
    hits = idx.search({**own, **idx.query_terms("settle")})
    assert ("c4", 0) in stated_passages(idx, hits, set(own) | {"settl"})
    assert not any(k[0] in {"c0", "c1", "c2", "c3"}
                   for k in stated_passages(idx, hits, set(own) | {"settl"}))
    assert states_value(idx, idx.text("c5"), {"plan"})  # "€12.5m": the same
    assert not states_value(idx, idx.text("c6"), {"plan"})


def test_the_boost_reorders_recall_without_raising_the_bar_for_the_others() -> None:
    """A stated passage ranks first, and one that clears `min_relative` of the best
    unboosted score still comes back: the bar is not raised by the boost (when it was,
    a paced question's passage found by its words and its vector fell under it)."""
    talk = Hit("talk", 0, "Survey respondents in Lyon were more positive.", 3.0, 0.20)
    fact = Hit("fact", 0, "The survey was fielded among 6,098 adults.", 4.0, 0.25)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ("talk", "fact")}

    def chosen(keys: frozenset[tuple[str, int]]) -> list[tuple[str, float]]:
        got = select([fact, talk], {"talk", "fact"}, meta, query="How many took the survey?",
                     min_relevance=0.10, min_relative=0.5, top_k=8, budget=1000,
                     count=lambda t: len(t) // 4, stated=keys)
        return [(r.hit.chunk_id, round(r.hit.strength, 6)) for r in got]

    # 3.0 clears half the best unboosted score (4.0), not half the boosted one (12.0)
    assert chosen(frozenset({("fact", 0)})) == [("fact", 0.25 * (1 + BOOST)), ("talk", 0.2)]
    assert chosen(frozenset()) == [("fact", 0.25), ("talk", 0.2)]


def test_a_value_three_lines_below_the_name_is_stated() -> None:
    """A record's fields: the phone sits three lines below the name it belongs to."""
    record = ("Name:      Yuki Lindqvist\nEmployer:  Northwind Logistics\n"
              "Email:     mateo.szabo@proton.me\nPhone:     +49 791 2956018")
    roster = "Interviewers: yuki.kowalczyk, hana.lindqvist; rooms 4F and 2F."
    idx = RelevanceIndex()
    idx.add("rec", record)
    idx.add("roster", roster)
    q = "What number do we have for Yuki Lindqvist?"
    own = idx.query_terms(q)
    assert asks_quantity(q)
    assert stated_passages(idx, idx.search(own), set(own)) == {("rec", 0)}


# A travel session: the listings say "hotel" again and again; the user's limit once.
LISTINGS = [f"# Hotels in Lisbon, page {i}\n| Hotel Oriente {i} | 31{i}.10 | non-refundable |\n"
            f"The hotel is a short walk from the metro; the hotel has a gym." for i in range(5)]
LIMIT = "The hotel total must stay under 1,080.48 USD."
TRIP = [f"Flight TP{120 + i} Lisbon-Oslo departs 0{i}:40, seat {i}C, fare class Y, "
        f"baggage 23 kg, waiting room B{i}." for i in range(12)]


def recalled_for(question: str) -> list[str]:
    """What recall brings back for `question`, every passage evicted, the user's limit
    (c5) written by the user and the listings by a tool, through the pipeline's choice
    of boosted passages (proxy/recalling.py)."""
    idx = RelevanceIndex()
    for i, text in enumerate([*LISTINGS, LIMIT, *TRIP]):
        idx.add(f"c{i}", text)
    hits = idx.search(idx.query_terms(question))
    meta = {f"c{i}": ChunkMeta(1, "tool", "TRANSIENT") for i in range(len(LISTINGS))}
    meta.update({f"c{i}": ChunkMeta(1, "tool", "TRANSIENT") for i in range(6, 6 + len(TRIP))})
    meta["c5"] = ChunkMeta(1, "user", "STRUCTURAL")
    keys = users_passages(hits, lambda c: meta[c].role) if asks_own_words(question) else (
        frozenset())
    got = select(hits, set(meta), meta, query=question, min_relevance=0.0, min_relative=0.0,
                 top_k=2, budget=10_000, count=lambda t: len(t) // 4, stated=keys)
    return [r.hit.chunk_id for r in got]


def test_a_question_about_the_askers_own_words_prefers_what_the_user_wrote() -> None:
    for q in ("What ceiling did I give you for a hotel room?", "Which host did I say to leave "
              "alone?", "Remind me what I told you about the budget", "what was my limit?"):
        assert asks_own_words(q), q
    for q in ("What did the hotel cost?", "Which host did you pick?", "Did it fail?"):
        assert not asks_own_words(q), q
    idx = RelevanceIndex()
    for i, text in enumerate([*LISTINGS, LIMIT, *TRIP]):
        idx.add(f"c{i}", text)
    bm25 = [h.chunk_id for h in idx.search("What ceiling did I give you for a hotel room?")]
    assert bm25.index("c5") >= 2  # the listings' many "hotel"s outrank the limit
    assert recalled_for("What ceiling did I give you for a hotel room?")[0] == "c5"
    assert "c5" not in recalled_for("What ceiling does a hotel room have?")  # not the user's


# An on-call session: the deploy history a tool printed (evicted), and what the agent said
# of it in its own words and one value (in context)
HEAD = "TIME (UTC)        SERVICE       VERSION        SHA      BY          RESULT\n"
DEPLOYS = HEAD + "\n".join(
    f"2024-11-{18 - i // 3:02d} {(14 - i) % 24:02d}:{(2 + 17 * i) % 60:02d}  payments-api  "
    f"v2024.11.{18 - i // 3:02d}-{i}  {0xabc123 + 977 * i:x}  {who}  succeeded"
    for i, who in enumerate(["j.ferreira"] + ["r.castillo", "deploy-bot", "m.okafor"] * 6))
SAID = ("A payments-api deploy finished at 14:02, three minutes before the errors started. "
        "That's the prime suspect.")
NOISE = [f"ledger-svc pod ledger-svc-{i} restarted after its deploy; checks green"
         for i in range(6)]


def echo_session(question: str) -> tuple[list[str], frozenset[tuple[str, int]]]:
    """What recall brings back for `question` (the deploys and the noise evicted, the
    agent's message in context) and the passages echoed."""
    idx = RelevanceIndex()
    idx.add("deploys", DEPLOYS)
    idx.add("said", SAID)
    for i, text in enumerate(NOISE):
        idx.add(f"n{i}", text)
    meta = {c: ChunkMeta(1, "tool", "TRANSIENT") for c in ["deploys"] + [f"n{i}"
                                                                          for i in range(6)]}
    meta["said"] = ChunkMeta(2, "assistant", "TRANSIENT")
    evicted = set(meta) - {"said"}
    hits = idx.search(idx.query_terms(question))
    keys = echoed_passages(hits, lambda c: meta[c].role, evicted, question)
    got = select(hits, evicted, meta, query=question, min_relevance=0.0, min_relative=0.0,
                 top_k=2, budget=10_000, count=lambda t: len(t) // 4, stated=keys)
    return [r.hit.text for r in got], keys


def test_a_value_the_agent_named_beside_the_questions_words_finds_its_record() -> None:
    """The agent's message matches the question's words and names a value ("14:02"); the
    evicted passage holding that value is the record asked about (the deploy's row: who
    shipped it), boosted as a stated value is. Not a value the question itself names."""
    question = "Who shipped the payments-api deploy that landed right before the errors began?"
    texts, keys = echo_session(question)
    assert len(DEPLOYS) > 800 and keys  # the history spans passages; one holds 14:02
    assert all(c == "deploys" for c, _ in keys)
    assert "j.ferreira" in texts[0]
    assert echo_session("Who shipped the deploy at 14:02?")[1] == frozenset()


# an employer's notice as the agent read it: the claim talked about again and again, the
# date an answer is due written out once; a log's ISO stamps are no such date
NOTICE = [
    "The Employment Security Department has received a claim for unemployment benefits "
    "from a former employee of yours.",
    "Questions about this claim notice: call the Employer Hotline, Monday through Friday.",
    "2025-10-02T09:14:00Z claim-sync unemployment notice fetched for state review",
    "Response required by October 17, 2025. If we do not receive a timely response, a "
    "decision will be made based on the information available.",
]


def test_a_when_question_prefers_the_passage_with_a_date_written_out_near_its_words() -> None:
    idx = RelevanceIndex()
    for i, text in enumerate(NOTICE):
        idx.add(f"n{i}", text)
    q = "When does the state need our response on that unemployment claim notice?"
    assert asks_when(q) and not asks_when("Which state sent the notice?")
    hits = idx.search(q)
    assert [h.chunk_id for h in hits].index("n3") > 0  # BM25 alone: the talk first
    assert dated_passages(hits, set(idx.query_terms(q))) == {("n3", 0)}


def test_a_date_with_its_month_named_between_hyphens_is_written_out() -> None:
    """FlexLM, Oracle and certificate tools print `31-jan-2025`: a date a when-question
    asks for, as much as "January 31, 2025"; a log's ISO stamp still is not one."""
    lmstat = ["MATLAB jobs die with License checkout failed; the license server is up.",
              "Users of MATLAB:  (Total of 250 licenses issued;  Total of 221 in use)\n"
              '  "MATLAB" v44, vendor: MLM, expiry: 31-jan-2025\n  floating license',
              "2025-01-31T00:00:00Z license check MATLAB ok, license server reachable",
              "CPU Efficiency: 91.99% of 00:53:28 core-walltime, the run used 11.8 GB"]
    idx = RelevanceIndex()
    for i, text in enumerate(lmstat):
        idx.add(f"l{i}", text)
    q = "When does the core MATLAB license run out?"
    hits = idx.search(q)
    assert dated_passages(hits, set(idx.query_terms(q))) == {("l1", 0)}
