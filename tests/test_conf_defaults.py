"""One default per fact: a location more than one config reads is defined once, in ``conf/paths/default.yaml``, and
every preset that uses it resolves to that one value (a preset with its own copy drifts, as the SFT headers'
dataset paths did)."""

from __future__ import annotations

import pytest

from scholar_agents.hydra_app import compose


@pytest.mark.parametrize("search", ["hybrid", "auto", "dense", "cluster_hnsw"])
def test_every_dense_search_preset_shares_the_one_embedding_pool(search):
    cfg = compose("papers_search", [f"search={search}", "paths.cache_dir=/cache"])
    assert cfg.search.embedding_pool == cfg.paths.embedding_pool == "/cache/embedding_pool"


@pytest.mark.parametrize("group,kind", [("search", "online"), ("search", "semantic_scholar"),
                                        ("search", "arxiv_api"), ("expand", "ar5iv"), ("expand", "semantic_scholar")])
def test_a_live_backends_cache_follows_the_http_cache_rule(group, kind):
    """The preset's cache and Resources' default for the kind named by override (``search.kind=arxiv_api``, an eval
    row: no preset sets it) are the same file."""
    from scholar_agents.pasa.resources import _default_cache, pasa_setup

    preset = compose("pasa_search", [f"{group}={kind}", "paths.cache_dir=/cache"])[group][kind].http.cache_path
    setup = pasa_setup(compose("pasa_search", [f"{group}.kind={kind}", "paths.cache_dir=/cache"]))
    overridden = setup.search if group == "search" else setup.expand
    assert getattr(overridden, kind).http.cache_path is None
    defaulted = _default_cache(overridden, kind, setup.http_cache_dir)
    assert getattr(defaulted, kind).http.cache_path == preset == f"/cache/http/{kind}.sqlite"
    assert getattr(overridden, kind).http.cache_path is None  # a copy: the shared config is not changed


@pytest.mark.parametrize("data_gen,sft", [("data_gen_selector_pairs", "train_selector_sft"),
                                          ("data_gen_crawler_sessions", "train_crawler_sft")])
def test_the_sft_headers_dataset_is_where_data_gen_writes_it(data_gen, sft):
    """The header's example ``sft.train_file='${paths.datasets_dir}/<name>/train.jsonl'`` is data_gen's out_dir."""
    written = compose(data_gen, ["paths.output_root=/out"]).out_dir
    name = data_gen.removeprefix("data_gen_")
    read = compose(sft, [f"sft.train_file=${{paths.datasets_dir}}/{name}/train.jsonl", "paths.output_root=/out"])
    assert read.sft.train_file == f"{written}/train.jsonl" == f"/out/datasets/{name}/train.jsonl"


def test_eval_academiceval_reads_where_data_gen_academiceval_writes(monkeypatch):
    written = compose("data_gen_academiceval", ["paths.output_root=/out"]).out_dir
    assert {d.path.rsplit("/", 1)[0] for d in compose("eval_academiceval", ["paths.output_root=/out"]).datasets} \
        == {written}
    monkeypatch.setenv("ACADEMICEVAL_DIR", "/cluster/academiceval")  # the paper run reads the release's folder
    paper = compose("eval_academiceval", ["experiment=thought_academiceval"])
    assert {d.path.rsplit("/", 1)[0] for d in paper.datasets} == {"/cluster/academiceval"}
