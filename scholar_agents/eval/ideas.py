"""Judging generated research ideas: SciPIP's Table 1 ratings, Table 2's "% ≥ 4" and pairwise win rates.

Ratings (Table 1): novelty, clarity, feasibility, relevance on 0–5 and helpfulness yes/no, per idea.
Table 2 reports, per system, the share of ideas rated ≥ 4 on each metric and the share rated helpful.
Pairwise (§4.1, Fig. 4): two ideas for the same background, the judge picks the better one per metric; we ask
in both orders and count a win only when both orders agree (disagreement = position bias = a tie).

The paper's judges were human researchers; here an LLM judges, and every report names it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scholar_agents.llm import build_llm
from scholar_agents.llm.base import LLM, SamplingParams
from scholar_agents.llm.constraints import OutputConstraint
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.scipip.config import IdeaJudgeConfig
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError

RATED = ("novelty", "clarity", "feasibility", "relevance")
METRICS = (*RATED, "helpfulness")
# Table 1's definitions, verbatim.
DEFINITIONS = {
    "novelty": "The idea is novel.",
    "clarity": "The idea is clearly explained.",
    "feasibility": "The idea will work (be effective) in my experience.",
    "relevance": "The idea is relevant to the research background.",
    "helpfulness": "The idea is helpful to researchers.",
}

JUDGE_SYSTEM = "You are an expert AI researcher reviewing research ideas. You answer precisely in the requested format."
RATE_USER = """Rate the research idea below for the given research background.

Metrics:
- novelty (0-5): {novelty}
- clarity (0-5): {clarity}
- feasibility (0-5): {feasibility}
- relevance (0-5): {relevance}
- helpfulness (yes/no): {helpfulness}

# Research background
{background}

# Idea
{idea}

Answer with a JSON object only, e.g. {{"novelty": 3, "clarity": 4, "feasibility": 2, "relevance": 5, "helpfulness": "yes"}}"""
RATE_ONE_USER = """# Research background
{background}

# Idea
{idea}

Metric: {metric} — {definition}
{question}"""
PAIR_USER = """Compare two research ideas proposed for the same research background.

# Research background
{background}

# Idea 1
{idea1}

# Idea 2
{idea2}

For each metric, which idea is better? novelty: {novelty} clarity: {clarity} feasibility: {feasibility} relevance: {relevance} helpfulness: {helpfulness}
Answer with a JSON object only, e.g. {{"novelty": 1, "clarity": 2, "feasibility": 1, "relevance": 1, "helpfulness": 2}}"""
PAIR_ONE_USER = """# Research background
{background}

# Idea 1
{idea1}

# Idea 2
{idea2}

Metric: {metric} — {definition}
Which idea is better on this metric? Answer with 1 or 2 only."""


# The answer formats of RATE_USER and PAIR_USER (applied when scipip.judge.constrained): the example objects of
# the prompts, each value limited to its range, in the order the prompts name the metrics; parse_ratings /
# parse_preferences read them as they read a free reply.
RATINGS_FORMAT = OutputConstraint.json({
    "type": "object",
    "properties": {**{m: {"type": "integer", "enum": list(range(6))} for m in RATED},
                   "helpfulness": {"type": "string", "enum": ["yes", "no"]}},
    "required": list(METRICS), "additionalProperties": False})
PREFERENCES_FORMAT = OutputConstraint.json({
    "type": "object", "properties": {m: {"type": "integer", "enum": [1, 2]} for m in METRICS},
    "required": list(METRICS), "additionalProperties": False})


def _chat(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


# ---- parsing ----


def _json_object(text: str) -> dict | None:
    """The first parseable {...} in ``text`` (models wrap JSON in prose or ```json fences)."""
    for m in re.finditer(r"\{[^{}]*\}", text or "", flags=re.DOTALL):
        chunk = m.group(0)
        for candidate in (chunk, chunk.replace("'", '"')):
            try:
                obj = json.loads(candidate)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return {str(k).strip().lower(): v for k, v in obj.items()}
    return None


def _as_rating(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)) and 0 <= v <= 5:
        return round(v)
    if isinstance(v, str):
        m = re.match(r"\s*(\d(?:\.\d+)?)\s*(?:/\s*5)?\s*$", v)
        if m and 0 <= float(m.group(1)) <= 5:
            return round(float(m.group(1)))
    return None


def _as_yes(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        s = v.strip().lower()
        if s in {"yes", "y", "true", "helpful"}:
            return True
        if s in {"no", "n", "false", "not helpful"}:
            return False
    return None


def parse_ratings(text: str) -> dict[str, Any] | None:
    """Table 1 ratings from a judge's answer: a JSON object, or "Novelty: 4"-style lines as a fallback.
    None unless every metric is present and in range (a partial rating would bias the percentages)."""
    obj = _json_object(text)
    if obj is None:
        obj = {}
        for metric in METRICS:
            m = re.search(rf"{metric}\s*[\"']?\s*[:=]\s*[\"']?([\w.]+)", text or "", flags=re.IGNORECASE)
            if m:
                obj[metric] = m.group(1)
    out: dict[str, Any] = {}
    for metric in RATED:
        r = _as_rating(obj.get(metric))
        if r is None:
            return None
        out[metric] = r
    helpful = _as_yes(obj.get("helpfulness", obj.get("helpful")))
    if helpful is None:
        return None
    out["helpfulness"] = helpful
    return out


def parse_preferences(text: str) -> dict[str, int] | None:
    """Pairwise answer {"novelty": 1|2, ...} -> {metric: 1|2}; None unless every metric has 1 or 2."""
    obj = _json_object(text)
    if obj is None:
        return None
    out = {}
    for metric in METRICS:
        v = obj.get(metric)
        if isinstance(v, str):
            s = re.sub(r"^idea\s*", "", v.strip().lower())
            v = int(s) if s in {"1", "2"} else v
        if v not in (1, 2) or isinstance(v, bool):
            return None
        out[metric] = int(v)
    return out


# ---- counting ----


def summarize_ratings(ratings: Sequence[dict[str, Any] | None], threshold: int = 4) -> dict[str, Any]:
    """Table 2 row: % of ideas rated >= threshold per metric and % helpful, over the ideas that parsed; plus
    mean ratings and the number of unparseable judgments."""
    ok = [r for r in ratings if r is not None]
    row: dict[str, Any] = {"ideas": len(ratings), "judged": len(ok), "parse_failures": len(ratings) - len(ok)}
    for metric in RATED:
        vals = [r[metric] for r in ok]
        row[f"{metric}_pct_ge{threshold}"] = round(100.0 * sum(v >= threshold for v in vals) / len(vals), 2) if vals else None
        row[f"{metric}_mean"] = round(float(np.mean(vals)), 3) if vals else None
    helpful = [r["helpfulness"] for r in ok]
    row["helpful_pct"] = round(100.0 * sum(helpful) / len(helpful), 2) if helpful else None
    return row


def combine_orders(first: dict[str, int] | None, second: dict[str, int] | None) -> dict[str, str] | None:
    """One comparison asked as (A, B) then (B, A). Per metric: "A" if both orders prefer A (1 then 2), "B" if
    both prefer B, "tie" when they disagree. None if either judgment failed to parse."""
    if first is None or second is None:
        return None
    out = {}
    for metric in METRICS:
        a_first = first[metric] == 1
        a_second = second[metric] == 2
        out[metric] = "A" if a_first and a_second else "B" if not a_first and not a_second else "tie"
    return out


@dataclass
class WinTable:
    """Counts per (system A, system B, metric)."""

    counts: dict[tuple[str, str, str], Counter] = field(default_factory=dict)
    failures: Counter = field(default_factory=Counter)

    def add(self, a: str, b: str, outcome: dict[str, str] | None) -> None:
        if outcome is None:
            self.failures[(a, b)] += 1
            return
        for metric, winner in outcome.items():
            self.counts.setdefault((a, b, metric), Counter())[winner] += 1

    def win_rate(self, a: str, b: str, metric: str) -> float | None:
        """A's win rate against B: (wins + ties / 2) / comparisons."""
        c = self.counts.get((a, b, metric))
        if c is None:
            c2 = self.counts.get((b, a, metric))
            if c2 is None:
                return None
            c = Counter({"A": c2["B"], "B": c2["A"], "tie": c2["tie"]})
        n = c["A"] + c["B"] + c["tie"]
        return (c["A"] + 0.5 * c["tie"]) / n if n else None

    def to_rows(self) -> list[dict[str, Any]]:
        rows = []
        for (a, b, metric), c in sorted(self.counts.items()):
            rows.append({"a": a, "b": b, "metric": metric, "a_wins": c["A"], "b_wins": c["B"], "ties": c["tie"],
                         "a_win_rate": round(self.win_rate(a, b, metric) or 0.0, 4)})
        return rows


# ---- the judge ----


class IdeaJudge:
    def __init__(self, llm: LLM, cfg: IdeaJudgeConfig):
        if cfg.mode not in {"generate", "score"}:
            raise ValueError(f"judge.mode must be 'generate' or 'score', got {cfg.mode!r}")
        self.llm, self.cfg = llm, cfg

    def _params(self, fmt: OutputConstraint) -> SamplingParams:
        return SamplingParams(max_new_tokens=self.cfg.max_new_tokens, temperature=0.0,
                              constraint=fmt if self.cfg.constrained else None)

    def _cut(self, s: str) -> str:
        return s[: self.cfg.max_idea_chars]

    def rate(self, items: Sequence[tuple[str, str]]) -> list[dict[str, Any] | None]:
        """Ratings for (background, idea) pairs, in order; None where the judge's answer did not parse."""
        if not items:
            return []
        if self.cfg.mode == "generate":
            chats = [_chat(RATE_USER.format(background=self._cut(b), idea=self._cut(i), **DEFINITIONS)) for b, i in items]
            gens = self.llm.generate(chats, self._params(RATINGS_FORMAT))
            return [parse_ratings(g.text) for g in gens]
        out: list[dict[str, Any]] = [{} for _ in items]
        digits = [str(d) for d in range(6)]
        for metric in RATED:
            chats = [
                _chat(RATE_ONE_USER.format(background=self._cut(b), idea=self._cut(i), metric=metric, definition=DEFINITIONS[metric],
                                           question="How much do you agree, from 0 (not at all) to 5 (fully)? Answer with one digit."))
                for b, i in items
            ]
            probs = self.llm.next_token_probs(chats, digits)
            for o, p in zip(out, probs):
                o[metric] = int(np.argmax(p))
        chats = [
            _chat(RATE_ONE_USER.format(background=self._cut(b), idea=self._cut(i), metric="helpfulness",
                                       definition=DEFINITIONS["helpfulness"], question="Answer Yes or No."))
            for b, i in items
        ]
        probs = self.llm.next_token_probs(chats, ["Yes", "No"])
        for o, p in zip(out, probs):
            o["helpfulness"] = bool(p[0] >= p[1])
        return out

    def prefer(self, items: Sequence[tuple[str, str, str]]) -> list[dict[str, int] | None]:
        """For (background, idea1, idea2): per metric, 1 or 2 (None where unparseable)."""
        if not items:
            return []
        if self.cfg.mode == "generate":
            chats = [_chat(PAIR_USER.format(background=self._cut(b), idea1=self._cut(x), idea2=self._cut(y), **DEFINITIONS)) for b, x, y in items]
            gens = self.llm.generate(chats, self._params(PREFERENCES_FORMAT))
            return [parse_preferences(g.text) for g in gens]
        out: list[dict[str, int]] = [{} for _ in items]
        for metric in METRICS:
            chats = [
                _chat(PAIR_ONE_USER.format(background=self._cut(b), idea1=self._cut(x), idea2=self._cut(y), metric=metric,
                                           definition=DEFINITIONS[metric]))
                for b, x, y in items
            ]
            probs = self.llm.next_token_probs(chats, ["1", "2"])
            for o, p in zip(out, probs):
                o[metric] = 1 if p[0] >= p[1] else 2
        return out


def evaluate_ideas(runs: Sequence[dict[str, Any]], judge: IdeaJudge, cfg: IdeaJudgeConfig) -> dict[str, Any]:
    """``runs``: one dict per background with ``background`` and ``variants: {system: [idea, ...]}`` (the JSON
    written by ``scholar scipip ideas``). Returns the Table 2 rows, pairwise win rates and raw judgments."""
    items, owners = [], []
    for r in runs:
        for system in cfg.variants:
            for k, idea in enumerate(r["variants"].get(system, [])):
                items.append((r["background"], idea))
                owners.append((r["id"], system, k))
    ratings = judge.rate(items)
    table = {system: summarize_ratings([rt for rt, (_, s, _) in zip(ratings, owners) if s == system], cfg.good_threshold) for system in cfg.variants}
    for system in cfg.variants:
        table[system]["backgrounds"] = sum(1 for r in runs if r["variants"].get(system))
    result: dict[str, Any] = {
        "judge_mode": cfg.mode,
        "table": table,
        "ratings": [{"background_id": o[0], "system": o[1], "idea_index": o[2], "rating": rt} for o, rt in zip(owners, ratings)],
    }
    if cfg.pairwise:
        wins = WinTable()
        pairs, meta = [], []
        for r in runs:
            for a, b in itertools.combinations(cfg.variants, 2):
                xa, xb = r["variants"].get(a, []), r["variants"].get(b, [])
                for i in range(min(len(xa), len(xb), cfg.pairs_per_background)):
                    pairs += [(r["background"], xa[i], xb[i]), (r["background"], xb[i], xa[i])]
                    meta.append((a, b))
        prefs = judge.prefer(pairs)
        for k, (a, b) in enumerate(meta):
            wins.add(a, b, combine_orders(prefs[2 * k], prefs[2 * k + 1]))
        result["pairwise"] = wins.to_rows()
        result["pairwise_parse_failures"] = {f"{a} vs {b}": n for (a, b), n in wins.failures.items()}
        result["pairwise_comparisons"] = len(meta)
    return result


def table_markdown(result: dict[str, Any], judge_name: str, threshold: int = 4) -> str:
    lines = [
        f"Judge: {judge_name} (mode `{result['judge_mode']}`) — an LLM stands in for the paper's human raters.",
        "",
        f"| system | #bgs / #ideas | judged | novelty ≥{threshold} | clarity ≥{threshold} | feasibility ≥{threshold} | relevance ≥{threshold} | helpful | mean nov/cla/fea/rel |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v: "–" if v is None else f"{v:.2f}%"
    for system, row in result["table"].items():
        means = "/".join("–" if row[f"{m}_mean"] is None else f"{row[f'{m}_mean']:.2f}" for m in RATED)
        lines.append(
            f"| {system} | {row['backgrounds']} / {row['ideas']} | {row['judged']} | "
            + " | ".join(fmt(row[f"{m}_pct_ge{threshold}"]) for m in RATED)
            + f" | {fmt(row['helpful_pct'])} | {means} |"
        )
    if result.get("pairwise"):
        lines += ["", "Pairwise win rates (A vs B; both orders asked, disagreement = tie; win rate = (wins + ties/2) / n):", "",
                  "| A | B | metric | A wins | B wins | ties | A win rate |", "|---|---|---|---|---|---|---|"]
        for row in result["pairwise"]:
            lines.append(f"| {row['a']} | {row['b']} | {row['metric']} | {row['a_wins']} | {row['b_wins']} | {row['ties']} | {row['a_win_rate']:.2f} |")
    if result.get("pairwise_parse_failures"):
        lines += ["", "Unparseable pairwise judgments: " + ", ".join(f"{k}: {v}" for k, v in result["pairwise_parse_failures"].items())]
    return "\n".join(lines)


def eval_ideas(cfg) -> dict:
    """``scholar eval ideas``: LLM-judge ratings (Table 1), % >= 4 (Table 2) and pairwise win rates for an ideas.json."""
    from pathlib import Path

    judge_cfg = typed(IdeaJudgeConfig, cfg.scipip.judge, "scipip.judge")
    path = Path(str(cfg.ideas_path))
    if not path.is_file():
        raise UsageError(f"ideas_path={str(path)!r}: no such file; run `scholar scipip ideas` first")
    data = json.loads(path.read_text(encoding="utf-8"))
    out = run_dir(cfg)
    llm = build_llm(cfg.llm)
    try:
        result = evaluate_ideas(data["runs"], IdeaJudge(llm, judge_cfg), judge_cfg)
    finally:
        llm.close()
    judge_name = str(cfg.llm.model)
    result.update(judge=judge_name, ideas_path=str(path), generator=data.get("llm"))
    (out / "idea_eval.json").write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "idea_eval.md").write_text(f"# Idea evaluation ({path})\n\n" + table_markdown(result, judge_name, judge_cfg.good_threshold) + "\n", encoding="utf-8")
    return {"table": result["table"], "pairwise": result.get("pairwise", [])}
