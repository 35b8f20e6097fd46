"""The stats report of ``data_gen autoscholarquery`` (``stats.md``): :func:`stats_markdown` renders the queries per
split and per source, answers per query beside PaSa Table 11 (:data:`TABLE_11`), the parsing of the LLM outputs
(:func:`parsing_stats`: strict JSON, repairs, failures by kind) and the citation resolution rate by method.
"""

from __future__ import annotations

from collections import Counter

from scholar_agents.data_gen.citation_resolution import METHODS


# PaSa Table 11 (answers per query), for the stats report.
TABLE_11 = {
    "ICLR 2023": {"papers": 888, "queries": 5204, "ans_mean": 2.46, "ans_p50": 2.0, "ans_p90": 5.0},
    "ICML 2023": {"papers": 981, "queries": 5743, "ans_mean": 2.37, "ans_p50": 2.0, "ans_p90": 5.0},
    "NeurIPS 2023": {"papers": 1948, "queries": 11761, "ans_mean": 2.59, "ans_p50": 2.0, "ans_p90": 5.0},
    "CVPR 2024": {"papers": 1336, "queries": 9528, "ans_mean": 2.94, "ans_p50": 2.0, "ans_p90": 6.0},
    "ACL 2024": {"papers": 485, "queries": 3315, "ans_mean": 2.16, "ans_p50": 2.0, "ans_p90": 4.0},
}


def stats_markdown(stats: dict) -> str:
    q, a = stats["queries"], stats["answers_per_query"]
    lines = [
        "# AutoScholarQuery synthesis",
        "",
        f"- model: `{stats['model']}`; inputs: {stats['sources']}",
        f"- passages: {stats['passages']['total']} from {stats['passages']['source_papers']} source papers; "
        f"LLM prompts this run: {stats['llm_prompts_this_run']} (shards resumed: {stats['shards']['resumed']}, "
        f"computed: {stats['shards']['computed']})",
        f"- queries: train {q['train']}, dev {q['dev']}, test {q['test']} (total {q['total']}); "
        f"source papers per split: {stats['source_papers_with_queries']}",
        f"- queries per source paper: mean {stats['queries_per_source_paper']['mean']:.2f}, "
        f"p50 {stats['queries_per_source_paper']['p50']:.1f}, max {stats['queries_per_source_paper']['max']}",
        "",
        "## Queries per source",
        "",
        "| source | papers with passages | passages | questions parsed | queries kept | papers with queries |",
        "|---|---|---|---|---|---|",
    ]
    for fmt, c in stats["queries_by_source_format"].items():
        lines.append(f"| {fmt} | {c['source_papers']} | {c['passages']} | {c['questions_parsed']} | "
                     f"{c['queries_kept']} | {c['source_papers_with_queries']} |")
    lines += [
        "",
        "| source paper | format | split | passages | questions parsed | queries kept |",
        "|---|---|---|---|---|---|",
    ]
    for r in stats["per_source_paper"]:
        lines.append(f"| {r['source_id']} {r['title'][:60]} | {r['format']} | {r['split'] or '-'} | {r['passages']} | "
                     f"{r['questions_parsed']} | {r['queries_kept']} |")
    lines += [
        "",
        "## Answers per query vs PaSa Table 11",
        "",
        "| set | papers | queries | Ans(/Q) | Ans-50 | Ans-90 |",
        "|---|---|---|---|---|---|",
        f"| ours | {stats['source_papers_with_queries_total']} | {q['total']} | {a['mean']:.2f} | {a['p50']:.1f} | "
        f"{a['p90']:.1f} |",
    ]
    for name, t in TABLE_11.items():
        lines.append(f"| PaSa {name} | {t['papers']} | {t['queries']} | {t['ans_mean']:.2f} | {t['ans_p50']:.1f} | "
                     f"{t['ans_p90']:.1f} |")
    p = stats["parsing"]
    lines += [
        "",
        "## Parsing the LLM outputs",
        "",
        f"- outputs: {p['outputs']}; strict JSON: {p['strict_json']}; usable after repair: {p['usable']}; "
        f"unusable: {p['unusable']}; hit max_new_tokens: {p['truncated_generations']}",
        "",
        "| kind | count |",
        "|---|---|",
    ]
    lines += [f"| failure: {k} | {v} |" for k, v in sorted(p["failures"].items())]
    lines += [f"| repair: {k} | {v} |" for k, v in sorted(p["repairs"].items())]
    lines += [f"| dropped item: {k} | {v} |" for k, v in sorted(p["item_failures"].items())]
    lines += [f"| dropped question: {k} | {v} |" for k, v in sorted(stats["dropped_questions"].items())]
    lines += ["", "## Citation resolution (bibliography id first, then title through the paper store)", "",
              "| method | answer citations | all passage citations |", "|---|---|---|"]
    ra, rp = stats["resolution_of_answer_citations"], stats["resolution_of_all_passage_citations"]
    for m in METHODS:
        lines.append(f"| {m} | {ra['by_method'][m]} | {rp['by_method'][m]} |")
    lines.append(f"| **resolved rate** | {ra['rate']:.1%} | {rp['rate']:.1%} |")
    lines += ["", f"Paper store: `{stats['store']}` ({stats['store_papers']} papers); "
              f"require_in_store={stats['require_in_store']}.", ""]
    return "\n".join(lines)


def parsing_stats(records: list[dict]) -> dict:
    out = [r for r in records if r.get("raw_output") is not None]
    failures = Counter(r["failure"] for r in out if r.get("failure"))
    repairs = Counter(k for r in out if not r.get("failure") for k in r.get("repairs", []))
    items = Counter()
    for r in out:
        items.update(r.get("item_failures", {}))
    return {
        "outputs": len(out),
        "strict_json": sum(1 for r in out if r.get("strict_json")),
        "usable": sum(1 for r in out if not r.get("failure")),
        "unusable": sum(failures.values()),
        "truncated_generations": sum(1 for r in out if r.get("finish_reason") == "length"),
        "failures": dict(failures),
        "repairs": dict(repairs),
        "item_failures": dict(items),
        "prompt_too_long": sum(1 for r in records if r.get("failure") == "prompt_too_long"),
    }
