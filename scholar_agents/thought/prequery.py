"""Pre-queries: questions asked before evaluation to grow the thought memory (Appendix D, Figure 13).

Template-based: Figure 13's general templates with the paper's title (and a sentence of the paper for the two
sentence templates). LLM-based: Figure 13's prompt, the numbered list parsed line by line; replies that yield
no question are counted, never fatal.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from typing import Sequence

from scholar_agents.llm import SamplingParams
from scholar_agents.thought.prompts import FIGURE13_LLM, FIGURE13_LLM_EXCERPT, FIGURE13_TEMPLATES

log = logging.getLogger(__name__)

_NUMBERED = re.compile(r"^\s*(?:\*\*)?(?:Q(?:uestion)?\s*)?(\d{1,2})\s*[.):\-]\s*(?:\*\*)?\s*(.+?)\s*$", re.I)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")


@dataclass
class PreQuerySource:
    """What a document offers to query generation: its title, a description shown to the LLM (the abstract for
    Related-multi; a main-content excerpt where the abstract is the label) and sentences for the templates."""

    title: str
    description: str = ""
    sentences: list[str] = field(default_factory=list)
    description_is_abstract: bool = True


def sentences_of(text: str, min_words: int = 6, max_words: int = 40) -> list[str]:
    """Plain sentences usable in a template: no placeholders ({{formula:..}}), not too short or long."""
    out = []
    for s in _SENTENCE_SPLIT.split(text):
        s = " ".join(s.split())
        if "{{" in s or not min_words <= len(s.split()) <= max_words:
            continue
        out.append(s.rstrip("."))
    return out


def template_queries(src: PreQuerySource, n: int, rng: random.Random) -> list[str]:
    """``n`` distinct Figure 13 template queries: title templates first in a seeded order, then sentence ones."""
    if n <= 0:
        return []
    title_t = [t for t in FIGURE13_TEMPLATES if "{sentence}" not in t]
    sent_t = [t for t in FIGURE13_TEMPLATES if "{sentence}" in t]
    rng.shuffle(title_t)
    out = [t.format(title=src.title) for t in title_t]
    sentences = list(src.sentences)
    rng.shuffle(sentences)
    for i, s in enumerate(sentences):
        if len(out) >= n:
            break
        out.append(sent_t[i % len(sent_t)].format(title=src.title, sentence=s))
    return out[:n]


def llm_query_prompt(src: PreQuerySource, n: int) -> str:
    template = FIGURE13_LLM if src.description_is_abstract else FIGURE13_LLM_EXCERPT
    return template.format(title=src.title, abstract=src.description, n=n)


def parse_numbered_questions(text: str, limit: int | None = None) -> list[str]:
    """Questions from a numbered list ("1. ...", "2) ...", "Q3: ..."); unnumbered lines ending in '?' count too.
    Placeholders copied from the prompt ("<Put Your Question Here>") are dropped; duplicates removed."""
    out: list[str] = []
    for line in (text or "").splitlines():
        m = _NUMBERED.match(line)
        q = m.group(2) if m else (line.strip() if line.strip().endswith("?") else "")
        q = q.strip().strip('"').strip()
        if not q or ("<" in q and ">" in q) or len(q.split()) < 3:
            continue
        if q not in out:
            out.append(q)
    return out[:limit] if limit is not None else out


def llm_queries(llm, sources: Sequence[PreQuerySource], n: int, max_new_tokens: int = 256,
                temperature: float = 0.0, seed: int = 0) -> tuple[list[list[str]], int]:
    """LLM-based pre-queries per source (one batched call) and the number of replies that gave none."""
    if n <= 0 or not sources:
        return [[] for _ in sources], 0
    prompts = [[{"role": "user", "content": llm_query_prompt(s, n)}] for s in sources]
    gens = llm.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed))
    out, failed = [], 0
    for g in gens:
        qs = parse_numbered_questions(g.text, limit=n)
        if not qs:
            failed += 1
            log.warning("LLM pre-query reply had no question: %r", g.text[:200])
        out.append(qs)
    return out, failed


def make_prequeries(llm, sources: Sequence[PreQuerySource], cfg, seed_offset: int = 0) -> tuple[list[list[str]], dict]:
    """Pre-queries per source under a ``PreQueryConfig``: template ones then LLM ones (Appendix D uses both)."""
    per_source: list[list[str]] = [[] for _ in sources]
    stats = {"template": 0, "llm": 0, "llm_failed_replies": 0}
    if cfg.method in {"template", "both"}:
        for i, src in enumerate(sources):
            qs = template_queries(src, cfg.n_template, random.Random(cfg.seed + seed_offset + i))
            per_source[i].extend(qs)
            stats["template"] += len(qs)
    if cfg.method in {"llm", "both"}:
        lists, failed = llm_queries(llm, sources, cfg.n_llm, cfg.max_new_tokens, cfg.temperature, cfg.seed)
        stats["llm_failed_replies"] = failed
        for i, qs in enumerate(lists):
            new = [q for q in qs if q not in per_source[i]]
            per_source[i].extend(new)
            stats["llm"] += len(new)
    return per_source, stats
