"""Labelled Selector pairs from AutoScholarQuery against a closed corpus, split BY QUERY — no teacher LLM.

For each query (PaSa format) whose gold papers have an abstract in the store:
- positives: up to ``--pos-per-query`` gold papers (AutoScholarQuery's answer: the papers the source paper cited
  for this question);
- negatives: the top retrieved papers that are NOT gold, with an abstract, from our own search (BM25 by default)
  with the query's before-date filter (``--negatives before``, default): the papers that existed when the source
  paper was written — PaSa searches only before the query's date (§5.1), so these are the non-gold papers its
  Selector meets. ``any`` drops the filter and ``mixed`` alternates the two; measured on the train part of the
  first build (MiniLM cosine, AUC gold vs negative): 0.67 against date-filtered negatives but 0.50 against
  unfiltered ones — a 2025 paper on the query's topic is relevant, merely too recent to be cited, so the unfiltered
  negatives are mostly label noise. Retrieved non-gold papers can still be relevant (AutoScholarQuery's answers
  are a subset of the true ones, PaSa §4.2): some label noise remains.
``--teacher minilm`` filters the TRAIN labels the way PaSa App. B filters its GPT-4o data, with the offline
embedder as the teacher: a gold paper is kept as a positive only if the teacher accepts it (cosine(query, title +
abstract) >= ``--teacher-threshold``), a retrieved non-gold paper is a negative only if the teacher rejects it
(the next rejected candidate of the top ``--k`` takes an accepted one's place). The held-out labels are never
filtered: they stay gold vs retrieved non-gold, so base and fine-tuned models are compared on the same pairs.
Queries are shuffled (``--seed``) and the first ``--test-fraction`` of them form the held-out part, so no query
appears on both sides. Abstracts are cut to ``--max-abstract-chars`` at a word boundary (the Table 15 prompt then
fits SmolLM2's CPU budget); score with the same cut (``selector.max_abstract_chars``).

Writes to ``--out-dir``: ``pairs_train.jsonl`` / ``pairs_test.jsonl`` (``{qid, paper_id, query, title, abstract,
label, source, found_by}``, what ``scholar eval selector`` reads; ``found_by`` = ``--search``), ``sft_train.jsonl``
(Table 15 chats whose answer is the
decision token alone: there is no teacher rationale offline, and P("True") reads only that token; balanced 1:1
and alternating labels, so any prefix is balanced) and ``stats.json``.

    python scripts/build_selector_eval_pairs.py --out-dir outputs/selector_learning/pairs
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections import Counter
from pathlib import Path

from scholar_agents.hydra_app import compose
from scholar_agents.papers.corpus import build_store, to_papers_config
from scholar_agents.papers.index import load_or_build_search, to_search_config
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.prompts import SELECTOR_FALSE, SELECTOR_TRUE, selector_messages
from scholar_agents.pasa.queries import load_pasa_queries, read_qid_file
from scholar_agents.pasa.selectors.llm import truncate_abstract

log = logging.getLogger("build_selector_eval_pairs")


def interleave(*lists):
    out, seen = [], set()
    for i in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if i < len(x) and x[i] not in seen:
                seen.add(x[i])
                out.append(x[i])
    return out


def teacher_accepts(embedder, query: str, papers: list, abstract_chars: int, threshold: float) -> list[bool]:
    """The offline teacher's decision per paper: cosine(query, title + abstract as the Selector reads it) >= threshold."""
    if not papers:
        return []
    docs = [f"{p.title}. {truncate_abstract(p.abstract, abstract_chars) if abstract_chars else ''}".strip()
            for p in papers]
    q = embedder.encode([query], kind="query")
    d = embedder.encode(docs, kind="doc")
    return [bool(x >= threshold) for x in (d @ q[0])]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", default="shared_corpus", help="conf/papers preset: shared_corpus | sample")
    ap.add_argument("--search", default="bm25", help="conf/search preset: bm25 (no embedder) | dense | hybrid")
    ap.add_argument("--queries", default=None,
                    help="PaSa-format queries (default: the shared dev split if present, else the bundled sample)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--max-queries", type=int, default=400)
    ap.add_argument("--pos-per-query", type=int, default=2)
    ap.add_argument("--neg-per-query", type=int, default=3)
    ap.add_argument("--k", type=int, default=20, help="hits per search")
    ap.add_argument("--test-fraction", type=float, default=0.3)
    ap.add_argument("--max-abstract-chars", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--negatives", default="before", choices=["before", "any", "mixed"],
                    help="search with the query's before-date (default), without it, or alternate the two")
    ap.add_argument("--title-only", action="store_true",
                    help="pairs without abstracts (title only, both labels): every query whose gold papers are in the "
                         "store is usable, also those whose gold papers are title-only stubs (~5x the positives on "
                         "AutoScholarQuery dev); a deviation from Table 15's prompt, for data-starved CPU runs")
    ap.add_argument("--teacher", default="none", choices=["none", "minilm"],
                    help="filter the TRAIN labels with a teacher as in PaSa App. B (GPT-4o there; the offline "
                         "embedder here): positives = gold the teacher accepts, negatives = non-gold it rejects")
    ap.add_argument("--teacher-threshold", type=float, default=0.2,
                    help="the teacher accepts a pair when cosine(query, title + abstract) >= this")
    ap.add_argument("--rebuild-index", action="store_true", help="rebuild the search index instead of loading it")
    ap.add_argument("--no-balance-train", dest="balance_train", action="store_false",
                    help="write every train pair to sft_train.jsonl (default: positives + as many negatives)")
    ap.add_argument("--exclude-qids", nargs="*", default=[], metavar="FILE",
                    help="drop these queries before the split: files of one qid a line, or pairs JSONL (their qids), "
                         "e.g. another pair set's pairs_test.jsonl, so a training set never holds its held-out queries")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")

    overrides = [f"papers={args.papers}", f"search={args.search}"] + (["search.rebuild=true"] if args.rebuild_index
                                                                       else [])
    cfg = compose("papers_build", overrides)
    pcfg = to_papers_config(cfg.papers)
    scfg = to_search_config(cfg.search)
    if scfg.kind == "online":
        raise SystemExit("negatives are mined from the local corpus: use --search bm25 | dense | hybrid")
    embedder = None
    if args.teacher == "minilm" or scfg.kind == "dense" or (scfg.kind == "hybrid" and
                                                            "dense" in scfg.hybrid_components):
        from scholar_agents.llm.embedder import build_embedder

        embedder = build_embedder(cfg.embedder)
    queries_path = Path(args.queries) if args.queries else Path(str(cfg.paths.shared_data_dir)) / "queries" / \
        "autoscholarquery_dev.jsonl"
    if not queries_path.is_file():
        queries_path = Path(str(cfg.paths.sample_dir)) / "autoscholarquery_dev.jsonl"
    build = build_store(pcfg, progress=True)
    log.info("store %s: %s papers (%s)", build["store"], build.get("papers"), build["status"])

    with PaperStore(pcfg.store, readonly=True) as store:
        search = load_or_build_search(scfg, store, embedder, pcfg.index_dir, progress=True)
        queries = load_pasa_queries(queries_path)
        excluded = {qid for path in args.exclude_qids for qid in read_qid_file(path)}
        n_excluded = sum(q.qid in excluded for q in queries)
        queries = [q for q in queries if q.qid not in excluded]
        if excluded:
            log.info("excluded %d queries listed in %s", n_excluded, ", ".join(args.exclude_qids))
        rng = random.Random(args.seed)
        usable = []
        for q in queries:
            gold = store.get_many(q.gold_ids, with_sections=False)
            pos = [gold[g] for g in q.gold_ids if g in gold and (gold[g].abstract or args.title_only)]
            if pos:
                usable.append((q, pos))
        rng.shuffle(usable)
        usable = usable[:args.max_queries]
        qs = [q for q, _ in usable]
        hits_before = search.search_batch([q.question for q in qs], k=args.k, before=[q.before for q in qs])
        hits_any = search.search_batch([q.question for q in qs], k=args.k)
        if qs and not any(hits_any) and not any(hits_before):
            raise SystemExit(f"the {scfg.kind} search returned no hit for any of {len(qs)} queries: a broken or stale "
                             f"index in {pcfg.index_dir}? Re-run with --rebuild-index")
        n_test = round(len(usable) * args.test_fraction)
        rows: dict[str, list[dict]] = {"train": [], "test": []}
        stats = Counter()
        if excluded:
            stats["excluded_queries"] = n_excluded
        for i, ((q, pos), hb, ha) in enumerate(zip(usable, hits_before, hits_any)):
            split = "test" if i < n_test else "train"
            gold_ids = set(q.gold_ids)
            candidates = {"before": [h.paper_id for h in hb], "any": [h.paper_id for h in ha],
                          "mixed": interleave([h.paper_id for h in hb], [h.paper_id for h in ha])}[args.negatives]
            cand = store.get_many([c for c in candidates if c not in gold_ids], with_sections=False)
            before_ids = {h.paper_id for h in hb}
            negs = [cand[c] for c in candidates if c in cand and (cand[c].abstract or args.title_only)]
            chosen_pos = rng.sample(pos, min(args.pos_per_query, len(pos)))
            if split == "train" and args.teacher != "none":
                abstract_chars = 0 if args.title_only else args.max_abstract_chars
                accepted = teacher_accepts(embedder, q.question, chosen_pos + negs, abstract_chars,
                                           args.teacher_threshold)
                stats["train_teacher_rejected_gold"] += sum(not a for a in accepted[:len(chosen_pos)])
                stats["train_teacher_accepted_non_gold"] += sum(accepted[len(chosen_pos):])
                chosen_pos = [p for p, a in zip(chosen_pos, accepted) if a]
                negs = [p for p, a in zip(negs, accepted[len(accepted) - len(negs):]) if not a]
            negs = negs[:args.neg_per_query]
            for paper, label in [(p, True) for p in chosen_pos] + [(p, False) for p in negs]:
                source = "gold" if label else ("search_before" if paper.paper_id in before_ids else "search")
                rows[split].append({
                    "qid": q.qid, "paper_id": paper.paper_id, "query": q.question, "title": paper.title,
                    "abstract": "" if args.title_only else truncate_abstract(paper.abstract, args.max_abstract_chars),
                    "label": label,
                    "source": source,
                    # the retriever the set stands for, on every row (gold too): a crawl's Selector judges the
                    # papers that search returned, and selector=provenance routes on it
                    "found_by": args.search,
                })
                stats[f"{split}_{source}"] += 1
            stats[f"{split}_queries"] += 1
            if len(negs) < args.neg_per_query:
                stats["queries_short_of_negatives"] += 1

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, split_rows in rows.items():
        with (out / f"pairs_{split}.jsonl").open("w") as f:
            for r in split_rows:
                f.write(json.dumps(r) + "\n")
    # The SFT file: every train positive and (--balance-train) as many negatives, shuffled, so that the model's
    # prior is 1:1 and P("True") >= 0.5 means evidence, not the base rate; --max-train-samples N on the trainer
    # then takes a balanced prefix. pairs_train.jsonl keeps every pair.
    train_rows = list(rows["train"])
    if args.balance_train:
        positives = [r for r in train_rows if r["label"]]
        negatives = [r for r in train_rows if not r["label"]]
        rng_sft = random.Random(args.seed + 1)
        rng_sft.shuffle(positives)
        rng_sft.shuffle(negatives)
        n = min(len(positives), len(negatives))
        train_rows = [r for pos_neg in zip(positives[:n], negatives[:n]) for r in pos_neg]
    with (out / "sft_train.jsonl").open("w") as f:
        for r in train_rows:
            answer = SELECTOR_TRUE if r["label"] else SELECTOR_FALSE
            messages = selector_messages(r["query"], r["title"], r["abstract"]) + [{"role": "assistant",
                                                                                     "content": answer}]
            f.write(json.dumps({"messages": messages, "qid": r["qid"], "paper_id": r["paper_id"]}) + "\n")
    summary = {
        "queries_file": str(queries_path), "papers": pcfg.name, "store": str(pcfg.store), "search": scfg.kind,
        "negatives": {"before": "search with the query's before-date filter", "any": "search without date filter",
                      "mixed": "alternating searches with and without the before-date"}[args.negatives],
        "args": vars(args), "usable_queries": len(usable), "counts": dict(sorted(stats.items())),
        "train_pairs": len(rows["train"]), "test_pairs": len(rows["test"]), "sft_train_examples": len(train_rows),
        "train_positive": sum(r["label"] for r in rows["train"]),
        "test_positive": sum(r["label"] for r in rows["test"]),
        "train_qids_overlap_test": len({r["qid"] for r in rows["train"]} & {r["qid"] for r in rows["test"]}),
    }
    (out / "stats.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "args"}, indent=2))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
