"""``pasa/resources.py``: the config typed once at a command's entry, and the paper store and search index as the
ranks of a multi-process job open them. Built once before the ranks start (``scholar papers prepare``), they are
opened writing nothing and taking no file lock, so they work on a read-only mount and where locks are per node
(Lustre ``localflock``)."""

import os
import shutil
import stat

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.pasa.commands import prepare
from scholar_agents.pasa.crawl_env import CrawlConfig
from scholar_agents.pasa.resources import Resources, pasa_setup
from scholar_agents.validation import UsageError


def test_a_pasa_command_types_its_config_at_the_entry_and_a_bad_value_is_one_line():
    setup = pasa_setup(compose("pasa_search", ["crawler.env.search_k=7", "selector.threshold=0.3"]))
    assert isinstance(setup.crawler_env, CrawlConfig) and setup.crawler_env.search_k == 7
    assert setup.selector.threshold == 0.3 and setup.scoring_llm is setup.selector_llm
    assert setup.expand is not None and setup.row_search_kinds == ()
    rows = pasa_setup(compose("eval_pasa", []))
    assert {"bm25", "dense", "hybrid"} <= set(rows.row_search_kinds)  # eval pasa's rows may search their own way
    with pytest.raises(UsageError, match="search_k must be >= 1"):  # before any store or model loads
        pasa_setup(compose("pasa_search", ["crawler.env.search_k=0"]))


def test_the_agent_and_its_description_run_the_rule_of_the_backend_it_wraps():
    """pasa search's crawler.env.dense_search_k: the bundled sample resolves search=auto to hybrid, so its Crawler
    searches at 10 and the user's words at 20; over BM25 both at 20. The description states what runs."""
    hybrid = Resources(compose("pasa_search", []))
    assert hybrid.resolved_search_kind() == "hybrid"
    desc = hybrid.describe()
    assert (desc["crawler env"]["search_k"], desc["crawler env"]["user_query_k"]) == (10, 20)
    assert desc["search"].startswith("hybrid (k=10 per [Search], 20 for the user's words (crawler.env.dense_search_k)")
    bm25 = Resources(compose("pasa_search", ["search=bm25"])).describe()
    assert (bm25["crawler env"]["search_k"], bm25["crawler env"]["user_query_k"]) == (20, None)
    assert bm25["search"].startswith("bm25 (k=20 per [Search]; ")
    off = Resources(compose("pasa_search", ["crawler.env.dense_search_k=null"])).describe()
    assert off["crawler env"]["search_k"] == 20


def _tree(root):
    """Every entry under ``root`` with its size, mtime and mode: what a write (or a lock file) would change."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.stat(os.path.join(d, name))
            out[os.path.relpath(os.path.join(d, name), root)] = (st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out


def _read_only(root):
    for d, dirs, files in os.walk(root):
        for name in files:
            os.chmod(os.path.join(d, name), 0o444)
    for d, dirs, _ in sorted(os.walk(root), key=lambda t: -len(t[0])):  # deepest first
        os.chmod(d, 0o555)


def test_ranks_open_the_prepared_store_and_index_writing_nothing_on_a_read_only_copy(sample_store, sample_papers_cfg,
                                                                                    tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(sample_papers_cfg.papers.store, shared / "sample.sqlite")  # what `scholar papers build` wrote
    overrides = ["papers=sample", f"papers.store={shared}/sample.sqlite", f"papers.index_dir={shared}/index",
                 "search=bm25", f"paths.output_dir={tmp_path}/run"]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    report = prepare(compose("papers_prepare", overrides))  # the job's first step: one process builds
    assert report["store"]["status"] == "reused" and report["index"]["bm25"]["status"] == "built"
    _read_only(shared)
    before = _tree(shared)
    try:
        monkeypatch.setenv("WORLD_SIZE", "2")  # a rank of a 2-process job: papers.prebuilt=null decides
        res = Resources(compose("train_crawler_ppo", overrides))
        assert res.prebuilt and res.build_info["status"] == "prebuilt"
        hits = res.search().search("graph neural networks for molecules", k=5)
        assert len(hits) == 5 and res.store.get(hits[0].paper_id) is not None
        res.store.close()
        assert _tree(shared) == before  # no lock file, no -wal / -shm, no search_config.json, no mtime moved
        # papers.prebuilt=true where nothing was prepared: one line naming the step that builds it
        monkeypatch.setenv("WORLD_SIZE", "1")
        with pytest.raises(UsageError, match=r"build it before the ranks start \(`scholar papers prepare"):
            res = Resources(compose("train_crawler_ppo", [*overrides[:2], f"papers.index_dir={tmp_path}/none",
                                                          *overrides[3:], "papers.prebuilt=true"]))
            res.search()
        assert _tree(shared) == before
    finally:
        for d, dirs, files in os.walk(shared):
            os.chmod(d, 0o755)
