"""Judge-output parsing, Table 2 percentages and pairwise win-rate counting (eval/ideas.py)."""

import pytest

from scholar_agents.eval.ideas import (
    WinTable,
    combine_orders,
    parse_preferences,
    parse_ratings,
    summarize_ratings,
    table_markdown,
)


def test_parse_ratings_json_and_fallbacks():
    r = parse_ratings('Sure! ```json\n{"Novelty": 4, "clarity": "3", "feasibility": 2.0, "relevance": 5, "helpfulness": "Yes"}\n```')
    assert r == {"novelty": 4, "clarity": 3, "feasibility": 2, "relevance": 5, "helpfulness": True}
    r = parse_ratings("Novelty: 1\nClarity: 2\nFeasibility: 3\nRelevance: 4\nHelpfulness: no")
    assert r == {"novelty": 1, "clarity": 2, "feasibility": 3, "relevance": 4, "helpfulness": False}
    assert parse_ratings("{'novelty': 3, 'clarity': 3, 'feasibility': 3, 'relevance': 3, 'helpful': true}")["helpfulness"] is True


@pytest.mark.parametrize("bad", [
    "",
    "I think it is a great idea.",
    '{"novelty": 7, "clarity": 3, "feasibility": 3, "relevance": 3, "helpfulness": "yes"}',  # out of range
    '{"novelty": 3, "clarity": 3, "feasibility": 3, "helpfulness": "yes"}',  # missing relevance
    '{"novelty": 3, "clarity": 3, "feasibility": 3, "relevance": 3, "helpfulness": "maybe"}',
    '{"novelty": true, "clarity": 3, "feasibility": 3, "relevance": 3, "helpfulness": "yes"}',
    '{"novelty": 3, "clarity": ',
])
def test_parse_ratings_rejects_malformed(bad):
    assert parse_ratings(bad) is None


def test_parse_preferences():
    assert parse_preferences('{"novelty": 1, "clarity": "2", "feasibility": "Idea 1", "relevance": 2, "helpfulness": 1}') == {
        "novelty": 1, "clarity": 2, "feasibility": 1, "relevance": 2, "helpfulness": 1}
    assert parse_preferences('{"novelty": 3, "clarity": 1, "feasibility": 1, "relevance": 1, "helpfulness": 1}') is None
    assert parse_preferences("Idea 1 is better") is None


def test_summarize_ratings_percent_ge_4():
    ratings = [
        {"novelty": 4, "clarity": 5, "feasibility": 1, "relevance": 4, "helpfulness": True},
        {"novelty": 3, "clarity": 4, "feasibility": 2, "relevance": 0, "helpfulness": False},
        None,
        {"novelty": 5, "clarity": 1, "feasibility": 4, "relevance": 4, "helpfulness": True},
        {"novelty": 0, "clarity": 0, "feasibility": 0, "relevance": 0, "helpfulness": False},
    ]
    row = summarize_ratings(ratings, threshold=4)
    assert row["ideas"] == 5 and row["judged"] == 4 and row["parse_failures"] == 1
    assert row["novelty_pct_ge4"] == 50.0 and row["clarity_pct_ge4"] == 50.0
    assert row["feasibility_pct_ge4"] == 25.0 and row["relevance_pct_ge4"] == 50.0
    assert row["helpful_pct"] == 50.0 and row["novelty_mean"] == 3.0
    empty = summarize_ratings([None], threshold=4)
    assert empty["novelty_pct_ge4"] is None and empty["helpful_pct"] is None


def test_combine_orders_and_win_rates():
    all1 = {m: 1 for m in ("novelty", "clarity", "feasibility", "relevance", "helpfulness")}
    all2 = {m: 2 for m in all1}
    # (A,B) -> 1 and (B,A) -> 2: both orders prefer A
    assert set(combine_orders(all1, all2).values()) == {"A"}
    # (A,B) -> 2 and (B,A) -> 1: both prefer B
    assert set(combine_orders(all2, all1).values()) == {"B"}
    # always "1": position bias -> tie
    assert set(combine_orders(all1, all1).values()) == {"tie"}
    assert combine_orders(None, all1) is None

    wins = WinTable()
    wins.add("scipip", "direct", combine_orders(all1, all2))  # scipip wins
    wins.add("scipip", "direct", combine_orders(all1, all1))  # tie
    wins.add("scipip", "direct", combine_orders(all2, all1))  # direct wins
    wins.add("scipip", "direct", combine_orders(all1, all2))  # scipip wins
    wins.add("scipip", "direct", None)
    assert wins.win_rate("scipip", "direct", "novelty") == pytest.approx((2 + 0.5) / 4)
    assert wins.win_rate("direct", "scipip", "novelty") == pytest.approx((1 + 0.5) / 4)
    assert wins.win_rate("scipip", "brainstorm", "novelty") is None
    assert wins.failures[("scipip", "direct")] == 1
    rows = wins.to_rows()
    assert {r["metric"] for r in rows} == set(all1) and rows[0]["a_wins"] == 2 and rows[0]["ties"] == 1


def test_table_markdown_names_judge():
    row = summarize_ratings([{"novelty": 4, "clarity": 4, "feasibility": 4, "relevance": 4, "helpfulness": True}])
    row["backgrounds"] = 1
    md = table_markdown({"judge_mode": "score", "table": {"scipip": row}, "pairwise": []}, "SmolLM2-135M")
    assert "Judge: SmolLM2-135M" in md and "| scipip | 1 / 1 | 1 | 100.00%" in md
