"""The embedding Selector's encoder fine-tune (``train.encoder.steps``): LoRA over the embedded MiniLM with
the in-batch contrastive loss. Proven on the partner task, where the zero-shot cosine is wrong by construction and
the query adapter is switched off, so only the fine-tuned encoder can find the answer; resumed exactly."""

from __future__ import annotations

import numpy as np
import pytest

from scholar_agents.eval.metrics import roc_auc
from scholar_agents.hydra_app import compose
from scholar_agents.llm.lora_delta import LORA_FILE, merge_delta
from scholar_agents.pasa.selectors.embedding import EmbeddingSelector
from scholar_agents.train.selector.embedding import EmbeddingSelectorTrainConfig, train_embedding_selector
from scholar_agents.train.selector.encoder_lora import CHECKPOINT_FILE, EncoderLoraConfig, batch_at, finetune_encoder
from scholar_agents.train.selector.pair_fitting import split_by_query
from tests.fixtures.partner_task import TEMPLATES, partner_pairs

ENCODER = {"steps": 40, "batch_queries": 6, "negatives": 2, "eval_every": 10, "learning_rate": 1e-3,
           "max_length": 32, "rank": 4, "alpha": 8.0}


@pytest.fixture(scope="module")
def embedder():
    from scholar_agents.llm.embedder import build_embedder

    return build_embedder()


def test_fine_tuned_encoder_learns_the_partner_map_the_cosine_gets_wrong(tmp_path, embedder, torch_one_thread):
    train = partner_pairs(TEMPLATES[:4], "train")
    test = partner_pairs(TEMPLATES[4:], "test")  # phrasings never fitted on
    y = np.array([p.label for p in test])
    before = embedder.encode(["papers on protein folding"])
    cfg = EmbeddingSelectorTrainConfig(l2_grid=[], include_identity=True, steps=100, dev_fraction=0.25,
                                       encoder=ENCODER)  # W = I: only the encoder can move
    meta = train_embedding_selector(train, tmp_path / "m", cfg, embedder=embedder)
    rec = meta["encoder_lora"]
    assert rec["kept_step"] > 0 and rec["dev_auc"] > rec["dev_auc_zero_shot"] + 0.3
    assert [h["step"] for h in rec["history"]] == [0, 10, 20, 30, 40]
    assert (tmp_path / "m" / LORA_FILE).stat().st_size < 1_000_000  # rank 4: 0.66 MB; rank 16: 2.7 MB
    assert not (tmp_path / "m" / CHECKPOINT_FILE).exists()  # finished: the resume state is gone
    sel = EmbeddingSelector.load(tmp_path / "m", embedder=embedder)
    assert sel.embedder is not embedder and "+lora" in sel.embedder.model_id
    np.testing.assert_array_equal(embedder.encode(["papers on protein folding"]), before)  # the shared one untouched
    assert roc_auc(y, sel.score(test)) > 0.9 > 0.3 > roc_auc(y, EmbeddingSelector(embedder).score(test))


def test_an_interrupted_fine_tune_resumes_exactly(tmp_path, torch_one_thread):
    from scholar_agents.llm.embedder import build_embedder

    train, dev = split_by_query(partner_pairs(TEMPLATES[:4], "r"), 0.25, 0)
    whole = EncoderLoraConfig(**{**ENCODER, "steps": 20})
    ref = finetune_encoder(build_embedder(), train, dev, whole, None, tmp_path / "whole")
    finetune_encoder(build_embedder(), train, dev, EncoderLoraConfig(**{**ENCODER, "steps": 10}), None,
                     tmp_path / "cut")  # "stopped" at step 10: its checkpoint stays
    assert (tmp_path / "cut" / CHECKPOINT_FILE).is_file()
    resumed = finetune_encoder(build_embedder(), train, dev, whole, None, tmp_path / "cut")
    assert [h["step"] for h in resumed["history"]] == [0, 10, 20]
    assert resumed["kept_step"] == ref["kept_step"] > 0
    for k, v in ref["delta"].items():
        np.testing.assert_allclose(resumed["delta"][k].numpy(), v.numpy(), atol=1e-6, err_msg=k)
    with pytest.raises(ValueError, match="another fine-tune"):
        finetune_encoder(build_embedder(), train, dev, EncoderLoraConfig(**{**ENCODER, "rank": 2}), None,
                         tmp_path / "cut")


def test_batches_are_a_function_of_the_step_and_each_query_brings_its_positive():
    groups = [(f"q{i}", [f"pos{i}"], [f"neg{i}.{j}" for j in range(5)]) for i in range(10)]
    cfg = EncoderLoraConfig(batch_queries=4, negatives=3)
    queries, papers, positive = batch_at(groups, 7, cfg)
    assert (queries, papers, positive) == batch_at(groups, 7, cfg) != batch_at(groups, 8, cfg)
    assert len(queries) == 4 and len(papers) == 16 and positive == [0, 4, 8, 12]
    assert all(papers[i] == "pos" + q[1:] for q, i in zip(queries, positive))


def test_a_delta_for_another_encoder_is_refused(embedder):
    import torch

    bad = {"encoder.layer.0.attention.self.query.lora_A": torch.zeros(4, 10),
           "encoder.layer.0.attention.self.query.lora_B": torch.zeros(384, 4),
           "encoder.layer.0.attention.self.query.scaling": torch.tensor([2.0])}
    with pytest.raises(ValueError, match="another embedder"):
        merge_delta(embedder.sentence_transformer[0].auto_model, bad)
    with pytest.raises(ValueError, match="no linear layer"):
        merge_delta(embedder.sentence_transformer[0].auto_model, {"nope.lora_A": torch.zeros(1, 1)})


def test_the_switch_composes_off_by_default():
    cfg = compose("train_selector_embedding", ["train.train_file=x.jsonl", "train.encoder.steps=600"])
    assert cfg.train.encoder.steps == 600 and cfg.train.encoder.rank == 16 and cfg.train.resume
    assert compose("train_selector_embedding", ["train.train_file=x.jsonl"]).train.encoder.steps == 0
