"""One normal form for paper ids (papers/ids.py): what gold and found ids are compared by, everywhere."""

import pytest

from scholar_agents.papers.ids import norm_id


@pytest.mark.parametrize("raw,want", [
    ("2301.00001v2", "2301.00001"),          # new-style arXiv id with a version
    ("2301.00001", "2301.00001"),
    ("1905.12345v10", "1905.12345"),
    (" 2301.00001v1 \n", "2301.00001"),      # whitespace from files
    ("hep-th/9901001v2", "hep-th/9901001"),  # old style with a version (the page's copy once left it as it was)
    ("hep-th/9901001", "hep-th/9901001"),
    ("math.GT/0309136v1", "math.GT/0309136"),
    ("cs/0112017", "cs/0112017"),
    ("g1v2", "g1"),                          # any id: the evaluation's rule, kept
    ("649def34f8be52c8b66281af98ae884c09aef38b", "649def34f8be52c8b66281af98ae884c09aef38b"),  # an S2 hash
])
def test_versioned_and_old_style_arxiv_ids(raw, want):
    assert norm_id(raw) == want


def test_every_caller_uses_the_one_function():
    from scholar_agents.eval.pasa import metrics as pasa_metrics
    from scholar_agents.pasa.serve import tree
    from scholar_agents.papers import loaders

    assert pasa_metrics.norm_id is norm_id and tree.norm_id is norm_id
    assert loaders.strip_version("hep-th/9901001v2") == "hep-th/9901001"
    assert pasa_metrics.recall(["hep-th/9901001v1"], ["hep-th/9901001v2"]) == 1.0
