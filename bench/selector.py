"""Selector throughput: single-forward P("True") vs generating the decision + rationale and parsing it.

PaSa puts the decision token first (§4.3) so that one forward pass per <query, paper> decides and ranks, which is
what makes the Selector usable as the Crawler's PPO reward model. The official inference style generates the
decision and the rationale and parses the text. Both run here on the same model, the same pairs, in the same
process, alternating chunk by chunk (warm-up first, no response cache), and the ratio of papers scored per second is
printed with the absolute numbers, the tokens generated per pair and how often the two paths agree.

Pairs: a labelled pair file (``--pairs``, e.g. from scripts/build_selector_eval_pairs.py) or, by default, the
bundled sample: each query's gold papers with an abstract (positives) and another query's (negatives).

    nice -n 10 python bench/selector.py --pairs 32 --max-new-tokens 128 --out bench_selector.json > bench_selector.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from scholar_agents.hydra_app import PACKAGE_DIR
from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.llm.config import LLMConfig
from scholar_agents.papers.loaders import load_gold_stubs
from scholar_agents.pasa.queries import load_pasa_queries
from scholar_agents.pasa.selectors.llm import Selector, SelectorPair, parse_judgement

SAMPLE = PACKAGE_DIR / "assets" / "sample"


def sample_pairs(n: int, seed: int = 0) -> list[SelectorPair]:
    """Half positives (a query's gold paper), half negatives (another query's gold paper), from the bundled sample."""
    gold = {p.paper_id: p for p in load_gold_stubs(SAMPLE / "autoscholarquery_dev_gold_papers.jsonl")}
    queries = [q for q in load_pasa_queries(SAMPLE / "autoscholarquery_dev.jsonl")
               if any(gold.get(g) and gold[g].abstract for g in q.gold_ids)]
    rng = random.Random(seed)
    pairs: list[SelectorPair] = []
    for i, q in enumerate(queries):
        pos = next(gold[g] for g in q.gold_ids if gold.get(g) and gold[g].abstract)
        other = queries[(i + 1 + rng.randrange(len(queries) - 1)) % len(queries)]
        neg = next(gold[g] for g in other.gold_ids if gold.get(g) and gold[g].abstract)
        pairs += [SelectorPair.of(q.question, pos, True, q.qid), SelectorPair.of(q.question, neg, False, q.qid)]
        if len(pairs) >= n:
            break
    return pairs[:n]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded:smollm2", help="HF dir or embedded:smollm2")
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm", "openai"])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai backend")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batch-size", type=int, default=16, help="prompts per forward / generate batch (hf)")
    ap.add_argument("--pairs", type=int, default=32, help="number of pairs")
    ap.add_argument("--pairs-file", default=None, help="labelled pair JSONL (default: the bundled sample)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="rationale budget of the generation path")
    ap.add_argument("--chunk", type=int, default=8, help="pairs per alternating timing chunk (= one batch)")
    ap.add_argument("--max-abstract-chars", type=int, default=600)
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    args = ap.parse_args(argv)

    if args.pairs_file:
        from scholar_agents.eval.selector import load_labelled_pairs

        pairs = load_labelled_pairs(args.pairs_file, limit=args.pairs)
    else:
        pairs = sample_pairs(args.pairs)
    llm = build_llm(LLMConfig(backend=args.backend, model=args.model, dtype=args.dtype, batch_size=args.batch_size,
                              base_url=args.base_url, enforce_eager=True, cache_path=None))
    sel = Selector(llm, max_abstract_chars=args.max_abstract_chars, memo_size=0, batch_size=len(pairs),
                   rationale_max_new_tokens=args.max_new_tokens)
    prompt_tokens = [len(llm.prompt_token_ids(sel.messages(p))) for p in pairs]

    # Warm-up both paths (allocator, kernels, lazy imports) outside the timed region.
    sel.probs(pairs[:2])
    llm.generate([sel.messages(p) for p in pairs[:2]], SamplingParams(max_new_tokens=8))

    # The two paths alternate chunk by chunk (and which goes first alternates too), so that a load change on a
    # shared machine hits both alike; each path's time is the sum over its chunks.
    t_forward = t_generate = 0.0
    scores = np.zeros(len(pairs))
    gens = []
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    for c, start in enumerate(range(0, len(pairs), args.chunk)):
        chunk = pairs[start:start + args.chunk]
        for path in (("forward", "generate") if c % 2 == 0 else ("generate", "forward")):
            t0 = time.perf_counter()
            if path == "forward":
                scores[start:start + len(chunk)] = sel.score(chunk)
                t_forward += time.perf_counter() - t0
            else:
                # The official style: generate decision + rationale (greedy), then parse the text.
                out = llm.generate([sel.messages(p) for p in chunk], params)
                judged_chunk = [parse_judgement(g.text) for g in out]  # parsing is part of this path's cost
                t_generate += time.perf_counter() - t0
                gens += list(zip(out, judged_chunk))
    judged = [j for _, j in gens]
    gens = [g for g, _ in gens]
    llm.close()

    gen_tokens = [len(g.completions[0].token_ids) for g in gens]
    parsed = [j.decision is not None for j in judged]
    forward_dec = scores >= sel.threshold
    agree = [bool(forward_dec[i]) == j.decision for i, j in enumerate(judged) if j.decision is not None]
    labels = np.array([bool(p.label) for p in pairs])
    res = {
        "model": args.model, "backend": args.backend, "pairs": len(pairs),
        "mean_prompt_tokens": float(np.mean(prompt_tokens)),
        "forward_seconds": t_forward, "forward_pairs_per_s": len(pairs) / t_forward,
        "generate_seconds": t_generate, "generate_pairs_per_s": len(pairs) / t_generate,
        "speedup": t_generate / t_forward,
        "max_new_tokens": args.max_new_tokens, "mean_generated_tokens": float(np.mean(gen_tokens)),
        "generated_parsed": int(sum(parsed)), "decision_agreement": float(np.mean(agree)) if agree else float("nan"),
        "forward_accuracy": float(np.mean(forward_dec == labels)),
        "generated_examples": [g.text[:200] for g in gens[:3]],
        "generate_accuracy_parsed": float(np.mean([j.decision == bool(p.label) for p, j in zip(pairs, judged)
                                                   if j.decision is not None])) if any(parsed) else float("nan"),
    }
    print(f"selector throughput, {res['pairs']} pairs, model {args.model} ({args.backend}), "
          f"mean prompt {res['mean_prompt_tokens']:.0f} tokens")
    print(f"  single forward P(True):        {res['forward_pairs_per_s']:8.2f} pairs/s  ({t_forward:.1f} s)")
    print(f"  generate decision + rationale: {res['generate_pairs_per_s']:8.2f} pairs/s  ({t_generate:.1f} s, "
          f"{res['mean_generated_tokens']:.0f} tokens/pair of max {args.max_new_tokens}, "
          f"{res['generated_parsed']}/{res['pairs']} parsed)")
    print(f"  ratio: single forward is {res['speedup']:.1f}x faster; decisions agree on "
          f"{res['decision_agreement']:.0%} of parsed answers")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":  # the vllm backend spawns worker processes
    main(sys.argv[1:])
