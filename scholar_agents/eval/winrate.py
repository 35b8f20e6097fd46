"""Pairwise LLM-judge win rate, asked in both orders (Thought-Retriever §4.1, Figure 14).

For each item the judge sees (reference, A, B) and (reference, B, A). Each verdict is mapped to the method it
prefers; the item's score for A is the mean over the two orders (A preferred = 1, tie = 0.5, B = 0). Items are
counted as consistent wins / losses, ties, **position-inconsistent** (each order prefers whichever answer came
first — or second — so the judge followed the position, not the content), one-order-unreadable, or unreadable
(excluded from the rate). The win rate of A is the mean score over readable items, with a bootstrap
percentile confidence interval. The paper reports a single win-rate number per method and does not say it
controlled for position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from scholar_agents.llm import SamplingParams
from scholar_agents.llm.constraints import OutputConstraint

FIRST, SECOND, TIE = 1, 2, 0
# Figure 14's two allowed answers, as a choice constraint (judge.constrained, mode=generate): parse_verdict reads
# both, so a constrained judge always gives a verdict (and never a tie, which Figure 14 does not offer either).
VERDICTS = ("Abstract 1 is better", "Abstract 2 is better")

_BETTER = re.compile(r"(?:abstract|answer|response|generated abstract)?\s*([12])\s*(?:is|was)?\s*(?:the\s+)?better",
                     re.I)
_NAMED = re.compile(r"\b(?:abstract|answer|response)\s*([12])\b", re.I)
_PREFER = re.compile(r"prefer|closer|best|choose|chose|select|winner", re.I)
_TIE = re.compile(r"\b(tie|equal(?:ly)?|both (?:are|is) (?:equally )?(?:good|close|similar)|same)\b", re.I)


def parse_verdict(text: str | None) -> int | None:
    """1 / 2 for the preferred position, 0 for a tie, None when the reply names neither."""
    t = (text or "").strip()
    if not t:
        return None
    m = _BETTER.search(t)
    if m:
        return int(m.group(1))
    named = {int(x) for x in _NAMED.findall(t)}
    # "I prefer Abstract 1" is a verdict; a bare "Generated Abstract 1: ..." is not
    if len(named) == 1 and _PREFER.search(t):
        return named.pop()
    if _TIE.search(t):
        return TIE
    if re.fullmatch(r"\W*([12])\W*", t):
        return int(re.fullmatch(r"\W*([12])\W*", t).group(1))
    return None


@dataclass
class PairOutcome:
    """One item judged twice: ``a_first`` = verdict with A shown as answer 1, ``b_first`` = with B shown first."""

    a_first: int | None
    b_first: int | None

    def _pref(self, verdict: int | None, a_position: int) -> float | None:
        if verdict is None:
            return None
        if verdict == TIE:
            return 0.5
        return 1.0 if verdict == a_position else 0.0

    @property
    def score(self) -> float | None:
        prefs = [p for p in (self._pref(self.a_first, FIRST), self._pref(self.b_first, SECOND)) if p is not None]
        return sum(prefs) / len(prefs) if prefs else None

    @property
    def category(self) -> str:
        p1, p2 = self._pref(self.a_first, FIRST), self._pref(self.b_first, SECOND)
        if p1 is None and p2 is None:
            return "invalid"
        if p1 is None or p2 is None:
            return "one_invalid"
        if p1 == p2 == 1.0:
            return "win"
        if p1 == p2 == 0.0:
            return "loss"
        if {p1, p2} == {0.0, 1.0}:
            return "inconsistent"
        return "tie"


_PROBS = re.compile(r"P\(1\)=([0-9.eE+-]+) P\(2\)=([0-9.eE+-]+)")


def soft_scores(raw_pairs: Sequence[tuple[str, str]]) -> list[float]:
    """Position-debiased preference for A from forced-choice replies ("P(1)=… P(2)=…" in both orders): the mean of
    P(A | A shown first) and P(A | A shown second), each renormalised over the two verdicts. A judge that always
    prefers one position scores 0.5 unless its preference moves with the content (ours; not in the paper)."""
    out = []
    for first, second in raw_pairs:
        m1, m2 = _PROBS.search(first or ""), _PROBS.search(second or "")
        if not (m1 and m2):
            continue
        a1, b1 = float(m1.group(1)), float(m1.group(2))  # A is answer 1
        b2, a2 = float(m2.group(1)), float(m2.group(2))  # B is answer 1
        if a1 + b1 <= 0 or a2 + b2 <= 0:
            continue
        out.append(0.5 * (a1 / (a1 + b1) + a2 / (a2 + b2)))
    return out


def bootstrap_ci(values: Sequence[float], n_boot: int = 2000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; (nan, nan) for no values."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


def summarize(outcomes: Sequence[PairOutcome], n_boot: int = 2000, alpha: float = 0.05, seed: int = 0) -> dict:
    scores = [o.score for o in outcomes if o.score is not None]
    counts = {c: 0 for c in ("win", "loss", "tie", "inconsistent", "one_invalid", "invalid")}
    for o in outcomes:
        counts[o.category] += 1
    lo, hi = bootstrap_ci(scores, n_boot, alpha, seed)
    return {"win_rate": float(np.mean(scores)) if scores else float("nan"), "ci_low": lo, "ci_high": hi,
            "ci_level": 1 - alpha, "n_items": len(outcomes), "n_scored": len(scores), **counts}


def judge_pairs(llm, prompt_fn, references: Sequence[str], answers_a: Sequence[str], answers_b: Sequence[str],
                max_new_tokens: int = 16, mode: str = "generate",
                answer_prefix: str = "Abstract ", constrained: bool = False) -> tuple[list[PairOutcome], list[tuple[str, str]]]:
    """Ask the judge both orders for every item in one batched call; returns outcomes and the raw replies.
    ``prompt_fn(reference, first, second) -> str`` renders the judge prompt (e.g. Figure 14).

    ``mode="generate"`` reads the verdict from the judge's text (the paper). ``mode="forced_choice"`` (ours, for
    small judges that do not follow the output format) appends ``answer_prefix`` to the assistant turn and
    compares the next-token probabilities of "1" and "2": a verdict every time, still asked in both orders so
    that a position preference shows up as inconsistency. ``constrained`` (generate mode) decodes one of
    ``VERDICTS``; forced_choice needs no constraint (it scores the two candidate tokens, it generates nothing)."""
    n = len(references)
    if not len(answers_a) == len(answers_b) == n:
        raise ValueError("references, answers_a and answers_b must have the same length")
    chats = [[{"role": "user", "content": prompt_fn(r, a, b)}] for r, a, b in zip(references, answers_a, answers_b)]
    chats += [[{"role": "user", "content": prompt_fn(r, b, a)}] for r, a, b in zip(references, answers_a, answers_b)]
    if not n:
        return [], []
    if mode == "generate":
        constraint = OutputConstraint(choices=VERDICTS) if constrained else None
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, constraint=constraint)
        texts = [g.text for g in llm.generate(chats, params)]
        verdicts = [parse_verdict(t) for t in texts]
    elif mode == "forced_choice":
        probs = llm.next_token_probs([llm.render(c) + answer_prefix for c in chats], ["1", "2"])
        verdicts = [FIRST if p1 >= p2 else SECOND for p1, p2 in probs]
        texts = [f"P(1)={p1:.4f} P(2)={p2:.4f}" for p1, p2 in probs]
    else:
        raise ValueError(f"judge mode must be generate | forced_choice, got {mode!r}")
    outcomes = [PairOutcome(verdicts[i], verdicts[n + i]) for i in range(n)]
    return outcomes, [(texts[i], texts[n + i]) for i in range(n)]
