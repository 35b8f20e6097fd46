"""Dual-path idea generation (SciPIP §3.3, Fig. 3, Tables 8–12), batched across backgrounds.

Per user background: keywords (τ2) → background transformation (Table 8) → brainstorm (Table 9) → keywords of
the brainstorm merged with the background's (§3.3.1) → SKC retrieval (§3.2) → one inspiration per retrieved
paper from its concise method, papers answering "None" dropped → ideas from the inspirations (Table 10) →
integration of both paths (Table 11) → expansion of each integrated idea with a retrieved concise method as
the demonstration (Table 12). The direct-prompting baseline runs alongside. Every step is one batched
``llm.generate`` call over all backgrounds, and every parse failure is counted in ``failures``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scholar_agents.llm.base import LLM, SamplingParams
from scholar_agents.llm.constraints import OutputConstraint
from scholar_agents.papers.store import PaperStore
from scholar_agents.scipip import prompts
from scholar_agents.scipip.config import SciPIPConfig
from scholar_agents.scipip.literature_db import LiteratureDB, LiteratureIndex
from scholar_agents.scipip.output_parsers import clean_free_text, parse_ideas, parse_inspiration, parse_keywords
from scholar_agents.scipip.skc import skc_retrieve
from scholar_agents.validation import read_jsonl

log = logging.getLogger(__name__)

VARIANTS = ("scipip", "brainstorm", "retrieval", "direct")


def load_backgrounds(path: str | Path, n: int | None = None, offset: int = 0) -> list[dict[str, Any]]:
    """SciPIP's test inputs: JSONL ``{hash_id, background, entities}`` (acl2024_backgrounds.jsonl) or a JSON list
    of ``{background}`` (example_backgrounds.json)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"backgrounds file {path} does not exist")
    rows = read_jsonl(path) if path.suffix == ".jsonl" else json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i in range(offset, len(rows) if n is None else min(len(rows), offset + n)):
        r = rows[i]
        if not isinstance(r, dict) or not isinstance(r.get("background"), str) or not r["background"].strip():
            raise ValueError(f"{path}: record {i} has no 'background' text")
        out.append({"id": str(r.get("hash_id", i)), "background": r["background"].strip(), "entities": list(r.get("entities") or [])})
    return out


@dataclass
class IdeaRun:
    """Everything one background produced (the JSON output; same spirit as SciPIP's released traces)."""

    id: str
    background: str
    given_keywords: list[str] = field(default_factory=list)
    keywords_bg: list[str] = field(default_factory=list)
    transformed_background: str = ""
    brainstorm_raw: str = ""
    brainstorm_ideas: list[str] = field(default_factory=list)
    keywords_bs: list[str] = field(default_factory=list)
    retrieval: dict[str, Any] = field(default_factory=dict)
    related_papers: list[dict[str, Any]] = field(default_factory=list)  # id, title, summary, inspiration | None
    retrieval_raw: str = ""
    retrieval_ideas: list[str] = field(default_factory=list)
    integrated_raw: str = ""
    integrated_ideas: list[str] = field(default_factory=list)
    expanded_ideas: list[dict[str, str]] = field(default_factory=list)
    direct_raw: str = ""
    direct_ideas: list[str] = field(default_factory=list)
    failures: Counter = field(default_factory=Counter)

    def variants(self) -> dict[str, list[str]]:
        """The four systems compared in Table 2 (+ direct prompting), as brief idea texts."""
        return {
            "scipip": self.integrated_ideas,
            "brainstorm": self.brainstorm_ideas,
            "retrieval": self.retrieval_ideas,
            "direct": self.direct_ideas,
        }

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "failures"}
        d["failures"] = dict(self.failures)
        d["variants"] = self.variants()
        return d


class IdeaPipeline:
    def __init__(self, llm: LLM, embedder, index: LiteratureIndex, db: LiteratureDB, store: PaperStore | None, cfg: SciPIPConfig):
        self.llm, self.embedder, self.index, self.db, self.store, self.cfg = llm, embedder, index, db, store, cfg
        self.icfg = cfg.ideas

    def _gen(self, chats: Sequence[Any], max_new_tokens: int, step: str,
             constraint: OutputConstraint | None = None) -> list[str]:
        if not chats:
            return []
        log.info("ideas: %s (%d prompts, <= %d new tokens)", step, len(chats), max_new_tokens)
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=self.icfg.temperature, seed=self.icfg.seed,
                                constraint=constraint if self.icfg.constrained else None)
        return [g.text for g in self.llm.generate(list(chats), params)]

    def _cut(self, text: str) -> str:
        return text[: self.icfg.max_context_chars]

    def _items(self, texts: Sequence[str]) -> list[str]:
        return [t[: self.icfg.max_item_chars] for t in texts[: self.icfg.max_list_items]]

    def _keywords(self, texts: Sequence[str], runs: Sequence[IdeaRun], what: str) -> list[list[str]]:
        outs = self._gen(
            [prompts.tau2_keywords(self._cut(t), self.cfg.db.max_keywords) for t in texts],
            self.cfg.db.max_new_tokens_keywords,
            f"keywords ({what})",
            prompts.keywords_format(self.cfg.db.max_keywords),
        )
        result = []
        for run, text in zip(runs, outs):
            parsed = parse_keywords(text, max_num=self.cfg.db.max_keywords)
            if not parsed.ok:
                run.failures[f"keywords_{what}"] += 1
            result.append(parsed.keywords)
        return result

    def run(self, backgrounds: Sequence[dict[str, Any]], exclude_ids: Sequence[str] = ()) -> list[IdeaRun]:
        runs = [IdeaRun(id=b["id"], background=b["background"], given_keywords=list(b.get("entities") or [])) for b in backgrounds]
        if not runs:
            return []
        # 1. keywords of the user's background (τ2), or the ones shipped with it.
        if self.cfg.skc.query_keywords == "given":
            for r in runs:
                r.keywords_bg = [k for k in r.given_keywords]
        elif self.cfg.skc.query_keywords == "llm":
            for r, kws in zip(runs, self._keywords([r.background for r in runs], runs, "background")):
                r.keywords_bg = kws
        else:
            raise ValueError(f"skc.query_keywords must be 'llm' or 'given', got {self.cfg.skc.query_keywords!r}")

        # 2. background transformation (Table 8) — the brainstorm is sensitive to terse queries (§3.3.1).
        outs = self._gen(
            [prompts.transform_background(self._cut(r.background), r.keywords_bg) for r in runs],
            self.icfg.max_new_tokens_transform,
            "background transformation (Table 8)",
        )
        for r, text in zip(runs, outs):
            r.transformed_background = clean_free_text(text)
            if len(r.transformed_background.split()) < 10:
                r.failures["transform"] += 1
                r.transformed_background = r.background  # fall back to the user's own words

        # 3. brainstorm (Table 9), then its keywords merged with the background's (§3.3.1).
        outs = self._gen(
            [prompts.brainstorm(self._cut(r.transformed_background)) for r in runs],
            self.icfg.max_new_tokens_brainstorm,
            "brainstorm (Table 9)",
            constraint=prompts.ideas_format(4, 6),
        )
        for r, text in zip(runs, outs):
            r.brainstorm_raw = text
            r.brainstorm_ideas = parse_ideas(text)
            if not r.brainstorm_ideas:
                r.failures["brainstorm_ideas"] += 1
        for r, kws in zip(runs, self._keywords([r.brainstorm_raw or r.background for r in runs], runs, "brainstorm")):
            r.keywords_bs = kws

        # 4. SKC retrieval on the user's background (Eq. 3 embeds the user's query) and the merged keywords.
        qvecs = self.embedder.encode([r.background for r in runs], kind="doc")  # symmetric text matching (§3.1)
        for r, q in zip(runs, qvecs):
            keywords = list(dict.fromkeys(r.keywords_bg + r.keywords_bs))
            res = skc_retrieve(q, keywords, self.index, self.cfg.skc, exclude=exclude_ids)
            r.retrieval = res.to_dict()
            summaries = self.db.get_many(res.papers)
            titles = self.store.get_many(res.papers, with_sections=False) if self.store is not None else {}
            r.related_papers = [
                {
                    "paper_id": p,
                    "title": titles[p].title if p in titles else "",
                    "summary": summaries[p].summary if p in summaries else "",
                    "concise_method": summaries[p].concise_method if p in summaries else "",
                    "score": round(res.scores[p], 4),
                }
                for p in res.papers
            ]

        # 5. retrieval path: inspirations from concise methods; "None" drops the paper (§3.3.2).
        pairs = [(r, rp) for r in runs for rp in r.related_papers if rp["concise_method"]]
        outs = self._gen(
            [prompts.inspiration(self._cut(r.transformed_background), self._cut(rp["concise_method"])) for r, rp in pairs],
            self.icfg.max_new_tokens_inspiration,
            "inspirations",
        )
        for (r, rp), text in zip(pairs, outs):
            rp["inspiration"] = parse_inspiration(text)
            if rp["inspiration"] is None:
                r.failures["papers_dropped_no_inspiration"] += 1
        with_insp = [r for r in runs if any(rp.get("inspiration") for rp in r.related_papers)]
        for r in runs:
            if r not in with_insp:
                r.failures["retrieval_path_empty"] += 1
        outs = self._gen(
            [
                prompts.ideas_from_inspirations(
                    self._cut(r.transformed_background), self._items([rp["inspiration"] for rp in r.related_papers if rp.get("inspiration")])
                )
                for r in with_insp
            ],
            self.icfg.max_new_tokens_ideas,
            "ideas from inspirations (Table 10)",
            constraint=prompts.ideas_format(3, 4),
        )
        for r, text in zip(with_insp, outs):
            r.retrieval_raw = text
            r.retrieval_ideas = parse_ideas(text)
            if not r.retrieval_ideas:
                r.failures["retrieval_ideas"] += 1

        # 6. integration of both paths (Table 11).
        todo = [r for r in runs if r.brainstorm_ideas or r.retrieval_ideas]
        outs = self._gen(
            [prompts.integrate(self._items(r.brainstorm_ideas[:5] + r.retrieval_ideas[:5]), self._cut(r.background)) for r in todo],
            self.icfg.max_new_tokens_integrate,
            "integration (Table 11)",
            constraint=prompts.ideas_format(5, 6),
        )
        for r, text in zip(todo, outs):
            r.integrated_raw = text
            r.integrated_ideas = parse_ideas(text)
            if not r.integrated_ideas:
                r.failures["integration"] += 1
                r.integrated_ideas = (r.brainstorm_ideas + r.retrieval_ideas)[: self.icfg.max_ideas_to_expand]

        # 7. expansion with a retrieved concise method as demonstration (Table 12).
        jobs = []
        for r in runs:
            ideas = r.integrated_ideas[: self.icfg.max_ideas_to_expand]
            demos = self._demonstrations(r, ideas)
            for idea, demo in zip(ideas, demos):
                jobs.append((r, idea, demo))
        outs = self._gen(
            [
                prompts.expand(
                    self._cut(r.background), idea[: self.icfg.max_item_chars], demo["summary"][: self.icfg.max_item_chars], self._cut(demo["concise_method"])
                )
                for r, idea, demo in jobs
            ],
            self.icfg.max_new_tokens_expand,
            "expansion (Table 12)",
        )
        for (r, idea, demo), text in zip(jobs, outs):
            detailed = clean_free_text(text)
            if len(detailed.split()) < 10:
                r.failures["expansion"] += 1
            r.expanded_ideas.append({"brief": idea, "detailed": detailed, "demonstration": demo["paper_id"]})

        # 8. direct prompting baseline (Table 2, "GPT-4o" row).
        outs = self._gen(
            [prompts.direct_ideas(self._cut(r.background)) for r in runs], self.icfg.max_new_tokens_direct, "direct prompting",
            prompts.ideas_format(3, 4)
        )
        for r, text in zip(runs, outs):
            r.direct_raw = text
            r.direct_ideas = parse_ideas(text)
            if not r.direct_ideas:
                r.failures["direct_ideas"] += 1
        return runs

    def _demonstrations(self, run: IdeaRun, ideas: list[str]) -> list[dict[str, str]]:
        """For each idea, the retrieved paper (with a concise method) whose summary is closest to the idea; the
        paper says only that "a concise method section from an existing paper" is retrieved (§3.3.2)."""
        pool = [rp for rp in run.related_papers if rp["concise_method"] and rp["summary"]]
        if not pool:
            pool = [
                {"paper_id": p, "summary": s.summary, "concise_method": s.concise_method}
                for p, s in self.db.get_many(self.index.ids[:50]).items()
                if s.concise_method and s.summary
            ]
        if not pool or not ideas:
            return []
        mat = self.index.vectors.get("summary")
        if mat is None:
            return [pool[0]] * len(ideas)
        vecs = mat[self.index.rows([rp["paper_id"] for rp in pool])]
        q = self.embedder.encode(ideas, kind="doc")
        best = np.argmax(q @ vecs.T, axis=1)
        return [pool[int(b)] for b in best]


def runs_to_markdown(runs: Sequence[IdeaRun], title: str = "SciPIP ideas") -> str:
    lines = [f"# {title}", ""]
    for r in runs:
        lines += [f"## Background {r.id}", "", r.background, ""]
        lines += [f"- keywords (background): {', '.join(r.keywords_bg) or '—'}", f"- keywords (brainstorm): {', '.join(r.keywords_bs) or '—'}"]
        st = r.retrieval.get("stages", {})
        lines.append("- retrieval stages: " + ", ".join(f"{k}={v}" for k, v in st.items()))
        if r.failures:
            lines.append("- parse failures: " + ", ".join(f"{k}={v}" for k, v in sorted(r.failures.items())))
        lines += ["", "### Retrieved papers", ""]
        for rp in r.related_papers:
            insp = rp.get("inspiration")
            lines.append(f"- `{rp['paper_id']}` {rp['title']} (cos {rp['score']}) — inspiration: {insp if insp else 'none (dropped)'}")
        for name, ideas in r.variants().items():
            lines += ["", f"### {name} ideas", ""]
            lines += [f"{i + 1}. {idea}" for i, idea in enumerate(ideas)] or ["(none parsed)"]
        lines += ["", "### Expanded SciPIP ideas", ""]
        for i, e in enumerate(r.expanded_ideas):
            lines += [f"**Idea {i + 1}** (demonstration `{e['demonstration']}`): {e['brief']}", "", e["detailed"], ""]
        lines.append("")
    return "\n".join(lines)
