"""SciPIP end to end on the tiny random Qwen2 and the real MiniLM: literature DB build (and its resume), the
retrieval / idea / evaluation commands composed from the real configs, on the bundled sample."""

import json
from pathlib import Path

import numpy as np
import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.papers.store import PaperStore
from scholar_agents.scipip.config import LiteratureDBConfig, SciPIPConfig
from scholar_agents.scipip.db_build import build_literature_db
from scholar_agents.scipip.idea_generation import IdeaPipeline, load_backgrounds
from scholar_agents.scipip.literature_db import LiteratureDB, LiteratureIndex
from tests.fixtures.scipip import make_small_store
from tests.paths import REPO

SAMPLE = REPO / "scholar_agents" / "assets" / "sample"
BACKGROUNDS = SAMPLE / "scipip" / "acl2024_backgrounds.jsonl"

# Prompt inputs cut short: the tiny tokenizer spends ~2x SmolLM2's tokens per character and the tiny model has
# 1024 positions.
SMALL = [
    "scipip.db.max_new_tokens_summary=8", "scipip.db.max_new_tokens_details=8", "scipip.db.max_new_tokens_keywords=8",
    "scipip.db.max_new_tokens_method=8", "scipip.db.max_abstract_chars=200", "scipip.db.chunk_size=8",
    "scipip.ideas.max_new_tokens_transform=8", "scipip.ideas.max_new_tokens_brainstorm=8",
    "scipip.ideas.max_new_tokens_inspiration=8", "scipip.ideas.max_new_tokens_ideas=8",
    "scipip.ideas.max_new_tokens_integrate=8", "scipip.ideas.max_new_tokens_expand=8", "scipip.ideas.max_new_tokens_direct=8",
    "scipip.ideas.max_context_chars=200", "scipip.ideas.max_item_chars=80", "scipip.ideas.max_list_items=3",
    "scipip.ideas.max_ideas_to_expand=2", "scipip.judge.max_new_tokens=8", "scipip.judge.max_idea_chars=120",
    "scipip.num_backgrounds=2", "scipip.skc.n_papers=4", "scipip.skc.cooccur_min_papers=1",
]


@pytest.fixture(scope="module")
def minilm():
    from scholar_agents.llm.embedder import build_embedder

    return build_embedder(None)


@pytest.fixture(scope="module")
def tiny_llm_1k(tiny_model_dir):
    """The tiny model with its full 1024-token context (SciPIP's few-shot prompts exceed the shared 512 one)."""
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    llm = build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), dtype="float32", device="cpu", batch_size=8, max_model_len=1024))
    yield llm
    llm.close()


TINY_DB = LiteratureDBConfig(max_new_tokens_summary=8, max_new_tokens_details=8, max_new_tokens_keywords=8,
                             max_new_tokens_method=8, max_abstract_chars=200, chunk_size=4)




@pytest.fixture(scope="module")
def small_store(tmp_path_factory, tiny_llm_1k, minilm) -> Path:
    """The small store with its literature DB built by the tiny model."""
    path = make_small_store(tmp_path_factory.mktemp("scipip") / "store.sqlite")
    with PaperStore(path, readonly=True) as store:
        build_literature_db(store, tiny_llm_1k, minilm, TINY_DB)
    return path


def _cfg(store_path: Path, out: Path, tiny_dir: Path, extra=()):
    return compose(
        "scipip_build_db",
        [f"scipip.store_path={store_path}", f"paths.output_dir={out}", f"llm.model={tiny_dir}", "llm.dtype=float32",
         "llm.max_model_len=1024", "llm.cache_path=null", "llm.batch_size=8", *SMALL, *extra],
    )


def test_db_build_then_resume_costs_zero_llm_calls(tiny_llm_1k, minilm, tmp_path):
    cfg = LiteratureDBConfig(**TINY_DB.__dict__)
    small_store = make_small_store(tmp_path / "store.sqlite")
    with PaperStore(small_store, readonly=True) as store:
        n = sum(1 for p in store.iter_papers() if p.abstract)
        first = build_literature_db(store, tiny_llm_1k, minilm, cfg)
        assert first["papers"] == n and first["llm_prompts"] == 4 * n
        # A random model breaks every format: failures are counted, not raised, and fallbacks fill the fields.
        assert first["stages_this_run"]["summary"]["ok"] + first["stages_this_run"]["summary"]["failed"] == n
        assert first["stages_total"]["details"]["failed"] == first["stages_this_run"]["details"]["failed"]
        assert first["cocited_pairs"] > 0 and first["citing_papers"] >= 1
        second = build_literature_db(store, tiny_llm_1k, minilm, cfg)
        assert second["llm_prompts"] == 0 and second["stages_total"] == first["stages_total"]
        assert all(v == 0 for k, v in second["stages_this_run"]["embeddings"].items())
        # retry_failed asks again exactly for the failed fields
        failed = sum(s["failed"] for s in first["stages_total"].values())
        cfg.retry_failed = True
        third = build_literature_db(store, tiny_llm_1k, minilm, cfg)
        assert third["llm_prompts"] == failed
        # a parser fix is applied to the stored raw outputs without any LLM
        cfg.retry_failed, cfg.reparse = False, True
        fourth = build_literature_db(store, None, minilm, cfg)
        assert fourth["llm_prompts"] == 0 and sum(fourth["stages_this_run"]["reparse_summary"].values()) == n
    with LiteratureDB(small_store) as db:
        index = LiteratureIndex.load(db, minilm.model_id)
        summaries = db.get_many(index.ids)
    assert set(index.vectors) == {"background", "ideas", "summary", "abstract"}
    for mat in index.vectors.values():
        assert mat.shape == (n, minilm.dim) and np.allclose(np.linalg.norm(mat, axis=1), 1.0, atol=1e-4)
    assert all(s.summary and s.background and s.ideas and s.concise_method for s in summaries.values())
    assert any(index.cocite.values())


def test_commands_end_to_end_on_the_tiny_model(small_store, tiny_model_dir, tmp_path):
    from scholar_agents.eval.ideas import eval_ideas
    from scholar_agents.scipip.commands import build_db, ideas, retrieve

    out = tmp_path / "out"
    out.mkdir()
    stats = build_db(_cfg(small_store, out, tiny_model_dir))
    assert (out / "build_db.json").exists() and stats["papers"] > 0

    for mode in ("skc", "abstract"):  # all four modes are covered on hand-built data in tests/scipip/test_skc.py
        cfg = _cfg(small_store, out, tiny_model_dir, [f"scipip.skc.mode={mode}", f"scipip.backgrounds_path={BACKGROUNDS}"])
        res = retrieve(cfg)
        assert len(res["backgrounds"]) == 2
        for row in res["backgrounds"]:
            assert len(row["papers"]) <= 4 and row["stages"]["selected"] == len(row["papers"])
            if mode == "skc":
                assert row["stages"]["n1"] == 5 or row["stages"]["n1"] == stats["papers"]
    assert (out / "retrieval.md").read_text().startswith("# SKC retrieval")

    cfg = _cfg(small_store, out, tiny_model_dir, [f"scipip.backgrounds_path={BACKGROUNDS}"])
    summary = ideas(cfg)
    data = json.loads((out / "ideas.json").read_text())
    assert summary["backgrounds"] == 2 and len(data["runs"]) == 2
    for run in data["runs"]:
        assert set(run["variants"]) == {"scipip", "brainstorm", "retrieval", "direct"}
        assert run["retrieval"]["stages"]["candidates"] >= run["retrieval"]["stages"]["selected"] > 0
        assert len(run["related_papers"]) == run["retrieval"]["stages"]["selected"]
        assert run["transformed_background"]
    # every stage that could not parse the random model's output was counted
    assert summary["failures"].get("brainstorm_ideas", 0) + summary["failures"].get("direct_ideas", 0) >= 1
    assert "## Background" in (out / "ideas.md").read_text()

    judged = compose("scipip_eval_ideas", [f"ideas_path={out / 'ideas.json'}", f"paths.output_dir={out}", f"llm.model={tiny_model_dir}",
                                           "llm.dtype=float32", "llm.max_model_len=1024", "llm.cache_path=null", *SMALL,
                                           "scipip.judge.mode=score"])
    # give every variant at least one idea so that the judge has something to rate
    data = json.loads((out / "ideas.json").read_text())
    for run in data["runs"]:
        for v in run["variants"]:
            run["variants"][v] = run["variants"][v] or [f"{v} idea: use a retrieval memory for long contexts"]
    (out / "ideas.json").write_text(json.dumps(data))
    result = eval_ideas(judged)
    table = result["table"]
    assert set(table) == {"scipip", "brainstorm", "retrieval", "direct"}
    assert all(row["judged"] == row["ideas"] for row in table.values())  # score mode always parses
    assert len(result["pairwise"]) == 6 * 5  # 6 system pairs x 5 metrics
    assert "Judge:" in (out / "idea_eval.md").read_text()


def test_idea_pipeline_with_given_keywords(small_store, tiny_llm_1k, minilm):
    sc = SciPIPConfig(store_path=str(small_store))
    sc.skc.query_keywords = "given"
    sc.skc.n_papers = 3
    sc.ideas.max_context_chars, sc.ideas.max_item_chars, sc.ideas.max_list_items = 200, 80, 3
    for name in ("transform", "brainstorm", "inspiration", "ideas", "integrate", "expand", "direct"):
        setattr(sc.ideas, f"max_new_tokens_{name}", 8)
    sc.db.max_new_tokens_keywords = 8
    bgs = load_backgrounds(BACKGROUNDS, 1)
    with LiteratureDB(small_store) as db, PaperStore(small_store, readonly=True) as store:
        index = LiteratureIndex.load(db, minilm.model_id)
        runs = IdeaPipeline(tiny_llm_1k, minilm, index, db, store, sc).run(bgs, exclude_ids=[index.ids[0]])
    (run,) = runs
    assert run.keywords_bg == bgs[0]["entities"] and index.ids[0] not in [p["paper_id"] for p in run.related_papers]
    json.dumps(run.to_dict())  # the JSON output is serialisable


def test_load_backgrounds_validates_the_selected_records(tmp_path):
    path = tmp_path / "bgs.jsonl"
    path.write_text('{"hash_id": 1, "background": "1. A need.", "entities": ["a b"]}\n{"hash_id": 2, "background": null}\n')
    assert load_backgrounds(path, 1) == [{"id": "1", "background": "1. A need.", "entities": ["a b"]}]
    with pytest.raises(ValueError, match="record 1"):
        load_backgrounds(path, 2)
    path.write_text('{"hash_id": 1, "background": "x"}\nnot json\n')
    with pytest.raises(ValueError, match=":2: invalid JSON"):
        load_backgrounds(path)
    assert len(load_backgrounds(BACKGROUNDS, 2, offset=3)) == 2
