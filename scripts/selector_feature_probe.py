"""Which pair features separate gold papers from each miner's negatives, and can one Selector built
from them clear both bars at once — above zero-shot MiniLM cosine on BM25-mined negatives AND above BM25 on
dense-mined ones? Fitted on the TRAINING queries only (unlike scripts/selector_fusion_ceiling.py, which fits on
held-out halves for an upper bound), scored on the held-out queries of each pair set.

Features of a <query, paper> pair (title + abstract cut as the Selector reads it; the lexical ones and length are
the lexical Selector's, ``scholar_agents/pasa/selectors/lexical.py``):
- lexical: BM25 of the query against title + abstract and against the title alone, the IDF-weighted share of the
  query's terms found in each, shared query bigrams in each, the rarest shared term's IDF (the BM25 search's
  tokenizer: lower case, English stop words; IDF over the distinct papers of all the pair files read, no labels);
- semantic: the embedding Selector's adapted cosine (``--model``, default the bundled one), the zero-shot MiniLM
  cosine against title + abstract and against the title, and MiniLM token-level MaxSim both ways (ColBERT's late
  interaction, zero-shot: each query token's best document token, and each document token's best query token);
- length: log(1 + document terms); only the rows that name it use it (its weight encodes how a pair set was built,
  not relevance).

Recipes (rows): a logistic regression, a quadratic one, gradient-boosted trees, over feature groups, fitted on one
miner's training pairs or on all miners' pooled; and a soft AND (the shipped adapter's log-probability plus a
lexical model's). Each row: AUC on every miner's held-out pairs; paired ΔAUC (whole queries resampled) against
zero-shot cosine on the BM25-mined row, against BM25 on the dense-mined row, against the adapter on the
hybrid-mined row.

    python scripts/selector_feature_probe.py /work/runs/selector [--model DIR] [--samples 1000] \
        [--forms imperative papers_that looking_for show_me multi_sentence]

``--forms``: the held-out pairs also asked in those request forms, each a table of its own. ``--augment-forms``: the
recipes fitted on the training pairs also asked in those forms (the shipped adapter's ``train.augment_forms``);
written to OUT/feature_probe_augmented.{md,json}.

Reads OUT/pairs_<miner>/pairs_{train,test}.jsonl (scripts/selector_embedding.sh); writes OUT/feature_probe.md and
.json; docs/selector.md quotes them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from scholar_agents.data_gen.request_forms import rewrite  # noqa: E402
from scholar_agents.eval.bootstrap import BootstrapConfig, auc_diff_by_query  # noqa: E402
from scholar_agents.eval.metrics import roc_auc  # noqa: E402
from scholar_agents.eval.selector import load_labelled_pairs  # noqa: E402
from scholar_agents.eval.selector_baselines import bm25_scores  # noqa: E402
from scholar_agents.llm.embedder import build_embedder  # noqa: E402
from scholar_agents.pasa.selectors.embedding import EmbeddingSelector, resolve_model_dir, unit_rows  # noqa: E402
from scholar_agents.pasa.selectors.lexical import FEATURES as PAIR_FEATURES  # noqa: E402
from scholar_agents.pasa.selectors.lexical import TermStats, pair_features  # noqa: E402
from scholar_agents.pasa.selectors.llm import truncate_abstract  # noqa: E402
from scholar_agents.pasa.selectors.pair_judge import pair_text  # noqa: E402

LEXICAL = ("bm25", "bm25_title", "idf_cover", "idf_cover_title", "bigrams", "bigrams_title", "rarest_hit")
SEMANTIC = ("adapter", "cosine", "cosine_title", "maxsim_query", "maxsim_doc")
LENGTH = ("log_length",)
assert LEXICAL + LENGTH == PAIR_FEATURES  # the lexical Selector's features (pasa/selectors/lexical.py), same order
FEATURES = LEXICAL + SEMANTIC + LENGTH
# (name, features, fitted on which miners' training pairs, model)
RECIPES = (
    ("lexical", LEXICAL, ("dense",), "logistic"),
    ("lexical + length", LEXICAL + LENGTH, ("dense",), "logistic"),
    ("lexical + MaxSim", LEXICAL + ("maxsim_query", "maxsim_doc"), ("dense",), "logistic"),
    ("every feature", FEATURES, ("dense",), "logistic"),
    ("adapter + lexical", ("adapter",) + LEXICAL, ("bm25", "dense", "hybrid"), "logistic"),
    ("adapter + lexical", ("adapter",) + LEXICAL, ("bm25", "dense", "hybrid"), "quadratic"),
    ("adapter + lexical", ("adapter",) + LEXICAL, ("bm25", "dense", "hybrid"), "trees"),
    ("every feature", FEATURES, ("bm25", "dense", "hybrid"), "trees"),
)


def token_vectors(sentence_transformer, texts: list[str]) -> list[np.ndarray]:
    """Unit-norm MiniLM token vectors of each text, [CLS] and [SEP] dropped."""
    out = sentence_transformer.encode(texts, output_value="token_embeddings", batch_size=64, convert_to_numpy=False)
    return [unit_rows(np.asarray(e.detach().cpu().numpy() if hasattr(e, "detach") else e)[1:-1]) for e in out]


def semantic_features(selector: EmbeddingSelector, zero_shot: EmbeddingSelector, pairs, docs: list[str]) -> np.ndarray:
    """The adapter's cosine, then the zero-shot encoder's cosines and MaxSim (``zero_shot``: W = I on the base
    embedder, not a fine-tuned Selector's own)."""
    queries, titles = [p.query for p in pairs], [p.title for p in pairs]
    cols = [selector.similarities(queries, docs), zero_shot.similarities(queries, docs),
            zero_shot.similarities(queries, titles)]
    st = zero_shot.embedder.sentence_transformer
    uq, ud = list(dict.fromkeys(queries)), list(dict.fromkeys(docs))
    qt, dt = dict(zip(uq, token_vectors(st, uq))), dict(zip(ud, token_vectors(st, ud)))
    sims = [qt[q] @ dt[d].T for q, d in zip(queries, docs)]
    cols += [np.array([s.max(1).mean() for s in sims]), np.array([s.max(0).mean() for s in sims])]
    return np.stack(cols, 1)


def make_model(kind: str):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    if kind == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=5000))
    if kind == "quadratic":
        return make_pipeline(StandardScaler(), PolynomialFeatures(2, include_bias=False), StandardScaler(),
                             LogisticRegression(C=0.1, class_weight="balanced", max_iter=5000))
    if kind == "trees":
        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=40,
                                              l2_regularization=1.0, random_state=0)
    raise ValueError(f"unknown model {kind!r}")


def fitted_scorer(x: dict, y: dict, feats, miners, kind: str):
    """A model fitted on ``miners``' training pairs: (scores of a feature matrix, its logistic weights)."""
    cols = [FEATURES.index(f) for f in feats]
    model = make_model(kind).fit(np.vstack([x[m, "train"][:, cols] for m in miners]),
                                 np.concatenate([y[m, "train"] for m in miners]))
    weights = {}
    if kind == "logistic":
        weights = {f: round(float(w), 2) for f, w in zip(feats, model[-1].coef_[0])}
    if kind == "trees":
        return (lambda z: model.predict_proba(z[:, cols])[:, 1]), weights
    return (lambda z: model.decision_function(z[:, cols])), weights


def main(argv=None) -> dict:
    import bm25s

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="scripts/selector_embedding.sh's OUT (its pairs_<miner>/ directories)")
    ap.add_argument("--model", default=None, help="the embedding Selector whose adapter is a feature (default bundled)")
    ap.add_argument("--miners", nargs="+", default=["bm25", "dense", "hybrid"])
    ap.add_argument("--max-abstract-chars", type=int, default=600)
    ap.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--forms", nargs="*", default=[],
                    help="also score the held-out pairs asked in these request forms (data_gen.request_forms); "
                         "the recipes stay fitted on the training queries as written")
    ap.add_argument("--augment-forms", nargs="*", default=[],
                    help="fit the recipes on the training pairs also asked in these request forms (what "
                         "train.augment_forms does for the adapter); writes feature_probe_augmented.{md,json}")
    a = ap.parse_args(argv)
    stop = frozenset(bm25s.stopwords.STOPWORDS_EN)
    selector = EmbeddingSelector.load(resolve_model_dir(a.model))
    # a Selector with a fine-tuned encoder owns it: the zero-shot features read the base MiniLM
    zero_shot = EmbeddingSelector(build_embedder() if "+lora" in selector.embedder.model_id else selector.embedder)
    phrasings = ["original"] + [f for f in a.forms if f != "original"]
    pairs = {(m, s): load_labelled_pairs(a.out / f"pairs_{m}" / f"pairs_{s}.jsonl")
             for m in a.miners for s in ("train", "test")}
    for m in a.miners:  # the adapter's own augmentation: every training pair also asked in each form
        pairs[m, "train"] += [dataclasses.replace(p, query=rewrite(p.query, form))
                              for form in a.augment_forms for p in pairs[m, "train"]]
    for form in phrasings[1:]:  # the same held-out pairs, each query rewritten: a test set of its own
        pairs.update({(m, form): [dataclasses.replace(p, query=rewrite(p.query, form)) for p in pairs[m, "test"]]
                      for m in a.miners})
    tests = {m: {"original": (m, "test"), **{f: (m, f) for f in phrasings[1:]}} for m in a.miners}
    docs = {k: [pair_text(p.title, truncate_abstract(p.abstract, a.max_abstract_chars)) for p in v]
            for k, v in pairs.items()}
    distinct = list(dict.fromkeys(d for v in docs.values() for d in v))
    stats = TermStats.of_texts(distinct, stop)
    x, y = {}, {}
    for k, v in pairs.items():
        lex = np.array([pair_features(p.query, p.title, d, stats) for p, d in zip(v, docs[k])])
        sem = semantic_features(selector, zero_shot, v, docs[k])
        x[k] = np.hstack([lex[:, :len(LEXICAL)], sem, lex[:, len(LEXICAL):]])
        y[k] = np.array([bool(p.label) for p in v])
    boot = BootstrapConfig(samples=a.samples, seed=0)
    bar_of = {"bm25": "cosine", "dense": "bm25_eval", "hybrid": "adapter"}
    result = {"phrasings": phrasings, "single": {}, "bars": {}, "recipes": []}
    for ph in phrasings:
        result["single"][ph] = {f: {m: round(roc_auc(y[tests[m][ph]], x[tests[m][ph]][:, i]), 4) for m in a.miners}
                                for i, f in enumerate(FEATURES)}
    bars, groups = {}, {}
    for m in a.miners:
        for ph, k in tests[m].items():
            f = bar_of[m]
            bars[m, ph] = bm25_scores(pairs[k]) if f == "bm25_eval" else x[k][:, FEATURES.index(f)]
            groups[m, ph] = [str(p.qid or p.query) for p in pairs[k]]
            result["bars"].setdefault(ph, {})[m] = {"scorer": f, "auc": round(roc_auc(y[k], bars[m, ph]), 4)}
    scorers = []
    for name, feats, miners, kind in RECIPES:
        miners = tuple(m for m in miners if m in a.miners)
        if miners:
            scorers.append((name, kind, miners, *fitted_scorer(x, y, feats, miners, kind)))
    if "dense" in a.miners and "bm25" in a.miners:  # soft AND: the shipped adapter AND a lexical model must agree
        lex, _ = fitted_scorer(x, y, LEXICAL, ("dense",), "logistic")
        adapter, _ = fitted_scorer(x, y, ("adapter",), ("bm25",), "logistic")
        scorers.append(("soft AND: adapter (BM25-mined) × lexical (dense-mined)", "product", ("bm25", "dense"),
                        lambda z: -np.logaddexp(0, -adapter(z)) - np.logaddexp(0, -lex(z)), {}))
    for name, kind, miners, score, weights in scorers:
        row = {"name": name, "model": kind, "fitted_on": list(miners), "weights": weights, "auc": {}, "vs_bar": {}}
        for ph in phrasings:
            s = {m: score(x[tests[m][ph]]) for m in a.miners}
            row["auc"][ph] = {m: round(roc_auc(y[tests[m][ph]], s[m]), 4) for m in a.miners}
            row["vs_bar"][ph] = {m: _diff(y[tests[m][ph]], s[m], bars[m, ph], groups[m, ph], boot)
                                 for m in a.miners}
        result["recipes"].append(row)
    result["augment_forms"] = list(a.augment_forms)
    name = "feature_probe_augmented" if a.augment_forms else "feature_probe"
    (a.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    text = render(result, a.miners)
    (a.out / f"{name}.md").write_text(text)
    print(text)
    return result


def _diff(y, a, b, groups, boot) -> list:
    d = auc_diff_by_query(y, a, b, groups, boot)
    return [round(d.diff, 4), [round(c, 4) for c in d.ci] if d.ci else None]


def render(result: dict, miners) -> str:
    ci = lambda d: f"{d[0]:+.3f} ({d[1][0]:+.3f} to {d[1][1]:+.3f})" if d[1] else f"{d[0]:+.3f}"  # noqa: E731
    bar_name = {"cosine": "zero-shot cosine", "bm25_eval": "BM25", "adapter": "the adapter"}
    lines = []
    for ph in result["phrasings"]:
        single, bars = result["single"][ph], result["bars"][ph]
        lines += [f"## {ph} phrasing", "", "Single features, held-out AUC:", "",
                  "| feature | " + " | ".join(f"{m}-mined" for m in miners) + " |", "|---|" + "---:|" * len(miners)]
        lines += [f"| {f} | " + " | ".join(f"{v[m]:.3f}" for m in miners) + " |" for f, v in single.items()]
        lines += ["", "Fitted on training queries (as written), held-out AUC; Δ against each row's bar ("
                  + ", ".join(f"{m}-mined: {bar_name[b['scorer']]} {b['auc']:.3f}" for m, b in bars.items()) + "):",
                  "", "| recipe | model | fitted on | " + " | ".join(f"{m}-mined" for m in miners) + " | "
                  + " | ".join(f"Δ vs bar, {m}-mined (95 % CI)" for m in miners) + " |",
                  "|---|---|---|" + "---:|" * len(miners) + "---|" * len(miners)]
        for r in result["recipes"]:
            lines.append(f"| {r['name']} | {r['model']} | {'+'.join(r['fitted_on'])} | "
                         + " | ".join(f"{r['auc'][ph][m]:.3f}" for m in miners) + " | "
                         + " | ".join(ci(r["vs_bar"][ph][m]) for m in miners) + " |")
        lines.append("")
    weighted = [r for r in result["recipes"] if r["weights"]]
    if weighted:
        lines += ["Logistic weights (standardised features):", ""]
        lines += [f"- {r['name']} ({'+'.join(r['fitted_on'])}): "
                  + ", ".join(f"{k} {v:+.2f}" for k, v in r["weights"].items()) for r in weighted]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
