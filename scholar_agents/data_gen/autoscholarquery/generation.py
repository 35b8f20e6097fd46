"""The LLM side of ``data_gen autoscholarquery``: Table 16's prompt with its few-shot examples
(:class:`FewShotConfig`, :func:`render_prompt`, :func:`fit_prompt`, which drops examples until the prompt fits),
:func:`generate_shard`, one batched LLM call over a shard of passages that keeps only the raw outputs (optionally
decoded under Table 16's JSON schema), and :func:`parse_record`, which reads an output leniently into questions
whose answers are the passage's citations (run at assembly, so a better parser re-reads finished shards).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from scholar_agents.data_gen.answers import read_items
from scholar_agents.data_gen.llm_json import parse_llm_json, strict_json_ok
from scholar_agents.data_gen.passages import CitedPassage
from scholar_agents.llm import SamplingParams
from scholar_agents.llm.constraints import OutputConstraint
from scholar_agents.pasa.prompts import AUTOSCHOLARQUERY_EXAMPLE, AUTOSCHOLARQUERY_GENERATION, autoscholarquery_schema

log = logging.getLogger(__name__)


@dataclass
class FewShotExample:
    section: str = ""
    output: str = ""


@dataclass
class FewShotConfig:
    examples: list[FewShotExample] = field(default_factory=list)
    num_examples: int = 3  # Table 16 shows three; fewer are used automatically when the prompt would not fit


def render_prompt(passage: CitedPassage, examples: list[FewShotExample]) -> list[dict[str, str]]:
    """Table 16 as a one-message chat."""
    shots = "".join(AUTOSCHOLARQUERY_EXAMPLE.format(section=e.section.strip(), output=e.output.strip())
                    for e in examples)
    content = AUTOSCHOLARQUERY_GENERATION.format(examples=shots, section=passage.section_text())
    return [{"role": "user", "content": content}]


def fit_prompt(llm, passage: CitedPassage, examples: list[FewShotExample], budget: int, response_prefix: str = ""):
    """The prompt with as many few-shot examples as fit in ``budget`` tokens (examples are dropped from the end
    first); ``None`` if even the zero-shot prompt is too long. With a ``response_prefix`` the prompt is the rendered
    chat followed by the start of the answer (a raw string)."""
    for k in range(len(examples), -1, -1):
        msgs = render_prompt(passage, examples[:k])
        prompt = llm.render(msgs) + response_prefix if response_prefix else msgs
        if llm.count_tokens(llm.render(prompt)) <= budget:
            return prompt, k
    return None, 0


def _passage_record(p: CitedPassage) -> dict[str, Any]:
    return {
        "passage_id": p.passage_id,
        "source_id": p.source_id,
        "source_title": p.source_title,
        "source_date": p.source_date,
        "source_format": p.source_format,
        "heading": p.heading,
        "citations": [asdict(c) for c in p.citations],
    }


def generate_shard(llm, passages: list[CitedPassage], dg, budget: int, seed: int) -> tuple[list[dict], dict]:
    """One batched LLM call over the shard's passages. A shard keeps only what the LLM cost: the passage and the
    raw output (prefix included); parsing happens at assembly (:func:`parse_record`), so an improved parser
    re-reads finished shards without a single LLM call."""
    stats: Counter = Counter()
    examples = [FewShotExample(**dict(e)) for e in dg.fewshot.examples][: int(dg.fewshot.num_examples)]
    prompts, todo, records = [], [], []
    for p in passages:
        rec = _passage_record(p)
        msgs, k = fit_prompt(llm, p, examples, budget, str(dg.response_prefix))
        if msgs is None:
            stats["prompt_too_long"] += 1
            rec.update(raw_output=None, skipped="prompt_too_long")
            records.append(rec)
            continue
        stats[f"prompts_with_{k}_examples"] += 1
        rec["fewshot_used"] = k
        prompts.append(msgs)
        todo.append(rec)
        records.append(rec)
    if prompts:
        params = SamplingParams(max_new_tokens=int(dg.max_new_tokens), temperature=float(dg.temperature), seed=seed,
                                stop=tuple(dg.stop))
        gens = _generate(llm, prompts, [len(rec["citations"]) for rec in todo], params, dg)
        stats["llm_prompts"] += len(prompts)
        for rec, gen in zip(todo, gens):
            comp = gen.completions[0]
            rec.update(raw_output=str(dg.response_prefix) + comp.text, finish_reason=comp.finish_reason)
    return records, dict(stats)


def _generate(llm, prompts: list, n_citations: list[int], params, dg) -> list:
    """One batched call, or with ``dg.constrained`` one per distinct schema (the answer enum depends on the
    passage's number of citations), results in the prompts' order."""
    if not dg.get("constrained", False):
        return llm.generate(prompts, params)

    out: list = [None] * len(prompts)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(n_citations):
        groups[n].append(i)
    for n, idx in groups.items():
        schema = autoscholarquery_schema(n, int(dg.max_questions), int(dg.max_question_chars))
        gens = llm.generate([prompts[i] for i in idx], replace(params, constraint=OutputConstraint.json(schema)))
        for i, g in zip(idx, gens):
            out[i] = g
    return out


def parse_record(rec: dict, dg) -> dict:
    """The questions of one generated record (lenient JSON, answers mapped to the passage's citations), with the
    repairs and failures by kind. Unusable outputs are logged, never raised."""
    text = rec.get("raw_output")
    if text is None:
        return {**rec, "failure": rec.get("skipped", "no_output"), "repairs": [], "questions": [], "item_failures": {}}
    parsed = parse_llm_json(text, expect="array", items="object")
    item_failures: Counter = Counter()
    questions = []
    repairs = set(parsed.repairs)
    if parsed.ok:
        titles = [c["title"] for c in rec["citations"]]
        for q in read_items(parsed.value, titles, item_failures, float(dg.title_min_score), repairs=repairs):
            questions.append({"question": q.question, "cite_ids": q.cite_ids, "via_title": q.via_title})
    else:
        log.warning("passage %s: unusable output (%s %s): %r", rec["passage_id"], parsed.failure, parsed.detail,
                    text[:200])
    return {**rec, "failure": parsed.failure, "repairs": sorted(repairs), "strict_json": strict_json_ok(text.strip()),
            "questions": questions, "item_failures": dict(item_failures)}
