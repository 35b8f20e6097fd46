"""Embedder presets compose to the encoders the papers used (no weights are loaded: these are cluster presets)."""

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.llm.config import EmbedderConfig
from omegaconf import OmegaConf


@pytest.mark.parametrize("root", ["thought_run", "scipip_build_db", "papers_search"])
def test_contriever_is_the_unsupervised_one_and_msmarco_is_its_own_preset(root):
    # Thought-Retriever §4.1 / official code: unsupervised facebook/contriever (was facebook/contriever-msmarco)
    c = compose(root, ["embedder=contriever"]).embedder
    assert c.model == "facebook/contriever" and c.normalize is False
    m = compose(root, ["embedder=contriever_msmarco"]).embedder
    assert m.model == "facebook/contriever-msmarco" and m.normalize is False


def test_jina_v3_is_scipips_text_matching_encoder():
    e = compose("scipip_build_db", ["embedder=jina_v3"]).embedder
    assert e.model == "jinaai/jina-embeddings-v3" and e.trust_remote_code is True and e.task == "text-matching"
    cfg = EmbedderConfig(**OmegaConf.to_container(e, resolve=True))  # what build_embedder receives
    assert cfg.trust_remote_code and cfg.normalize
    # the other presets keep the library defaults
    assert compose("scipip_build_db", ["embedder=minilm"]).embedder.trust_remote_code is False
