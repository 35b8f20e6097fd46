"""Structured outputs: parse rate per prompt before/after constraining, and what constraining costs in tokens/s.

For each prompt kind — PaSa's Crawler search and expand sessions (Table 8), SciPIP's τ1 summary, τ1 details and
τ2 keywords (Tables 5-6), AutoScholarQuery (Table 16) — N real prompts built from the bundled sample (queries of
autoscholarquery_dev.jsonl, unarXive papers with sections, related-work passages) are generated greedily twice
with the same model and sampling: free, then under the prompt's declared constraint. The parse rate is what the
project's own parsers accept (``parse_response`` with at least one action, ``parse_summary``,
``parse_motivations_details``, ``parse_keywords``, ``parse_llm_json`` + questions read). Throughput is generated
tokens / generation seconds over all kinds (grammar compilation included, as a user pays it once per grammar).

    PYTHONPATH=. OMP_NUM_THREADS=2 nice -n 10 python bench/structured.py --n 8 --models tiny,smollm2 \
        --backends hf,vllm > bench_structured.log 2>&1

``tiny`` is the test suite's random Qwen2 (built into a temporary directory); ``smollm2`` the embedded model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from scholar_agents.data_gen.answers import read_items
from scholar_agents.data_gen.autoscholarquery.generation import FewShotExample, render_prompt
from scholar_agents.data_gen.llm_json import parse_llm_json
from scholar_agents.data_gen.passages import DEFAULT_RELATED_WORK_HEADINGS, related_work_matcher
from scholar_agents.data_gen.unarxive_passages import passages_from_unarxive
from scholar_agents.hydra_app import PACKAGE_DIR
from scholar_agents.llm import OutputConstraint, SamplingParams, build_llm
from scholar_agents.llm.config import LLMConfig
from scholar_agents.papers.loaders import load_arxiv_jsonl, load_unarxive
from scholar_agents.pasa.actions import EXPAND, SEARCH, action_constraint, parse_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.prompts import autoscholarquery_schema
from scholar_agents.pasa.queries import load_pasa_queries
from scholar_agents.scipip import prompts as sp
from scholar_agents.scipip.output_parsers import parse_keywords, parse_motivations_details, parse_summary
from scholar_agents.validation import read_jsonl

SAMPLE = PACKAGE_DIR / "assets" / "sample"
FEWSHOT = PACKAGE_DIR / "conf" / "data_gen" / "fewshot" / "related_work.yaml"


def build_cases(n: int) -> list[dict]:
    """Per kind: prompts, the constraint of each prompt, max_new_tokens and the parse check."""
    import yaml

    queries = load_pasa_queries(SAMPLE / "autoscholarquery_dev.jsonl", limit=n)
    # The bundled unarXive sample: the papers with sections (5) are the expansion sessions' papers.
    papers = [p for p in load_unarxive(SAMPLE / "unarxive_sample.jsonl.gz") if p.sections and p.abstract][:n]
    env = CrawlEnv(None, None, CrawlConfig(expand_abstract_chars=600))  # prompts only: no store, no search
    cases = []
    cases.append(dict(kind="crawler_search", max_new_tokens=96,
                      prompts=[env.state_messages(q.question) for q in queries],
                      constraints=[action_constraint(SEARCH, max_actions=3)] * len(queries),  # the CPU preset's cap
                      check=lambda t, trunc, i: (lambda r: r.ok and bool(r.moves))(parse_response(t, trunc))))
    heads = [[s.heading for s in p.sections] for p in papers]
    cases.append(dict(kind="crawler_expand", max_new_tokens=96,
                      prompts=[env.state_messages(queries[i % len(queries)].question, p) for i, p in enumerate(papers)],
                      constraints=[action_constraint(EXPAND, h, 3) for h in heads],
                      check=lambda t, trunc, i: (lambda r: r.ok and r.stopped
                                                 and all(a.argument in heads[i] for a in r.moves))(
                          parse_response(t, trunc))))
    import itertools

    abstracts = [p for p in itertools.islice(load_arxiv_jsonl(SAMPLE / "papers.jsonl.gz"), 200) if p.abstract][:n]
    summary_chats = [sp.tau1_summary(p.title, p.abstract[:800], "(not available)") for p in abstracts]
    cases.append(dict(kind="scipip_summary", max_new_tokens=96, prompts=summary_chats,
                      constraints=[sp.SUMMARY_FORMAT] * len(abstracts),
                      check=lambda t, trunc, i: parse_summary(t)[1]))
    # τ1's second turn after a fixed first answer (the paper's first sentence), so both modes see one prompt.
    cases.append(dict(kind="scipip_details", max_new_tokens=192,
                      prompts=[sp.tau1_details(c, p.abstract.split(". ")[0] + ".") for c, p in zip(summary_chats, abstracts)],
                      constraints=[sp.DETAILS_FORMAT] * len(abstracts),
                      check=lambda t, trunc, i: parse_motivations_details(t).ok))
    cases.append(dict(kind="scipip_keywords", max_new_tokens=48,
                      prompts=[sp.tau2_keywords(f"{p.title}. {p.abstract[:800]}", 5) for p in abstracts],
                      constraints=[sp.keywords_format(5)] * len(abstracts),
                      check=lambda t, trunc, i: parse_keywords(t, 5).ok))
    headings = related_work_matcher(list(DEFAULT_RELATED_WORK_HEADINGS))
    passages = [ps for rec in read_jsonl(SAMPLE / "unarxive_sample.jsonl.gz")
                for ps in passages_from_unarxive(rec, headings=headings, max_chars=1500, min_citations=2)][:n]
    shots = [FewShotExample(**e) for e in yaml.safe_load(FEWSHOT.read_text())["examples"]][:1]

    def asq_ok(text, trunc, i):
        parsed = parse_llm_json(text, expect="array", items="object")
        if not parsed.ok:
            return False
        from collections import Counter

        return bool(read_items(parsed.value, [c.title for c in passages[i].citations], Counter()))

    cases.append(dict(kind="autoscholarquery", max_new_tokens=256,
                      prompts=[render_prompt(p, shots) for p in passages],
                      constraints=[OutputConstraint.json(autoscholarquery_schema(len(p.citations), 4, 200))
                                   for p in passages],
                      check=asq_ok))
    return cases


def run_kind(llm, case: dict, constrained: bool) -> dict:
    params = SamplingParams(max_new_tokens=case["max_new_tokens"])
    groups: dict = {}
    for i, c in enumerate(case["constraints"]):
        groups.setdefault(c if constrained else None, []).append(i)
    texts: list = [None] * len(case["prompts"])
    t0, tokens = time.perf_counter(), 0
    for c, idx in groups.items():
        gens = llm.generate([case["prompts"][i] for i in idx], replace(params, constraint=c))
        for i, g in zip(idx, gens):
            comp = g.completions[0]
            texts[i] = (comp.text, comp.finish_reason == "length")
            tokens += len(comp.token_ids)
    seconds = time.perf_counter() - t0
    ok = sum(bool(case["check"](t, trunc, i)) for i, (t, trunc) in enumerate(texts))
    return {"ok": ok, "n": len(texts), "tokens": tokens, "seconds": seconds, "example": texts[0][0][:160]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="prompts per kind")
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--backends", default="hf,vllm")
    ap.add_argument("--kinds", default="", help="comma-separated subset of kinds (default: all)")
    ap.add_argument("--out", default="", help="write the results as JSON here")
    args = ap.parse_args()
    cases = build_cases(args.n)
    if args.kinds:
        cases = [c for c in cases if c["kind"] in args.kinds.split(",")]
    tmp = tempfile.TemporaryDirectory()
    rows = []
    for model in args.models.split(","):
        if model == "tiny":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.fixtures.llm import make_tiny_qwen2

            path, dtype, ctx = str(make_tiny_qwen2(Path(tmp.name) / "tiny")), "float32", 1024
        else:
            path, dtype, ctx = "embedded:smollm2", "bfloat16", 2048
        for backend in args.backends.split(","):
            cfg = LLMConfig(backend=backend, model=path, dtype=dtype, max_model_len=ctx, batch_size=8,
                            enforce_eager=True, cpu_kvcache_space_gib=1)
            llm = build_llm(cfg)
            try:
                for case in cases:
                    if model == "tiny" and case["kind"] in ("scipip_details", "autoscholarquery"):
                        continue  # the tiny model's 1024 positions do not hold these prompts
                    fits = [p for p in case["prompts"]
                            if len(llm.prompt_token_ids(p)) + case["max_new_tokens"] <= ctx]
                    if len(fits) < len(case["prompts"]):
                        print(f"skip {model}/{backend}/{case['kind']}: prompts over {ctx} tokens", flush=True)
                        continue
                    free = run_kind(llm, case, False)
                    con = run_kind(llm, case, True)
                    row = {"model": model, "backend": backend, "kind": case["kind"], "n": free["n"],
                           "free_ok": free["ok"], "constrained_ok": con["ok"],
                           "free_tok_s": free["tokens"] / free["seconds"], "constrained_tok_s": con["tokens"] / con["seconds"],
                           "free_tokens": free["tokens"], "constrained_tokens": con["tokens"],
                           "free_example": free["example"], "constrained_example": con["example"]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                llm.close()
    print("\n| model | backend | prompt | n | parsed free | parsed constrained | tok/s free | tok/s constrained | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['backend']} | {r['kind']} | {r['n']} | {r['free_ok']}/{r['n']} | "
              f"{r['constrained_ok']}/{r['n']} | {r['free_tok_s']:.1f} | {r['constrained_tok_s']:.1f} | "
              f"{r['constrained_tok_s'] / r['free_tok_s']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
