"""Embedder presets compose to the encoders the papers used (no weights are loaded: these are cluster presets)."""

import pytest

from omegaconf import OmegaConf

from scholar_agents.hydra_app import compose
from scholar_agents.llm.config import EmbedderConfig
from scholar_agents.typed_config import typed


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
    cfg = typed(EmbedderConfig, e, "embedder")  # what build_embedder receives
    assert cfg.trust_remote_code and cfg.normalize
    # the other presets keep the library defaults
    assert compose("scipip_build_db", ["embedder=minilm"]).embedder.trust_remote_code is False


def test_a_wrong_typed_embedder_setting_is_one_line_naming_it():
    """Refused while the config is read, before sentence-transformers loads a model."""
    from scholar_agents.llm.embedder import build_embedder
    from scholar_agents.validation import UsageError

    with pytest.raises(UsageError) as e:
        build_embedder(OmegaConf.create({"batch_size": "many"}))
    assert str(e.value) == "embedder.batch_size: Value 'many' of type 'str' could not be converted to Integer"
