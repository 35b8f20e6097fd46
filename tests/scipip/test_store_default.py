"""One default for one fact: the scipip commands read, unless told otherwise, the paper store that `scholar papers
build` writes for the same ``papers`` group."""

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.papers.corpus import to_papers_config
from scholar_agents.scipip.commands import _check_inputs, scipip_config
from scholar_agents.validation import UsageError

SCIPIP_ROOTS = ["scipip_build_db", "scipip_retrieve", "scipip_ideas", "scipip_eval_ideas"]


@pytest.mark.parametrize("papers, name", [([], "sample"), (["papers=shared_corpus"], "shared_corpus")])
def test_every_scipip_command_defaults_to_the_store_papers_build_writes(tmp_path, papers, name):
    over = [f"paths.cache_dir={tmp_path}", *papers]
    written = to_papers_config(compose("papers_build", over).papers).store
    assert written == f"{tmp_path}/stores/{name}.sqlite"
    for root in SCIPIP_ROOTS:
        assert scipip_config(compose(root, over)).store_path == written, root


def test_scipip_finds_the_store_a_fresh_papers_build_wrote(tmp_path):
    from scholar_agents.papers.commands import build

    over = [f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_dir={tmp_path / 'out'}"]
    (tmp_path / "out").mkdir()
    with pytest.raises(UsageError, match=r"no such paper store; `scholar papers build` writes it"):
        _check_inputs(scipip_config(compose("scipip_ideas", over)), backgrounds=True)
    report = build(compose("papers_build", [*over, "index=false"]))
    sc = scipip_config(compose("scipip_ideas", over))
    assert sc.store_path == report["store"]["store"]
    _check_inputs(sc, backgrounds=True)  # the store and the bundled backgrounds are there: no error


def test_the_cluster_preset_reads_the_store_of_its_corpus_unless_given_one(tmp_path, monkeypatch):
    """experiment=scipip_7b: PaSa's paper database (papers=pasa_db) as `scholar papers build papers=pasa_db` writes
    it, or the store named by $SCIPIP_STORE."""
    monkeypatch.setenv("SCIPIP_BACKGROUNDS", str(tmp_path / "bg.jsonl"))
    monkeypatch.delenv("SCIPIP_STORE", raising=False)
    over = [f"paths.cache_dir={tmp_path}"]
    written = to_papers_config(compose("papers_build", [*over, "papers=pasa_db"]).papers).store
    assert written == f"{tmp_path}/stores/pasa_db.sqlite"
    for root in ("scipip_build_db", "scipip_retrieve", "scipip_ideas"):
        assert scipip_config(compose(root, [*over, "experiment=scipip_7b"])).store_path == written, root
    monkeypatch.setenv("SCIPIP_STORE", "/cluster/stores/arxiv.sqlite")
    assert scipip_config(compose("scipip_ideas", [*over, "experiment=scipip_7b"])).store_path == \
        "/cluster/stores/arxiv.sqlite"
