"""The shared SFT recipe (train/sft.py) through `train selector_sft`, on the tiny random Qwen2: answer-only labels,
a short run that writes a loadable HF directory, resume from the last checkpoint, LoRA merge, the presets."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from scholar_agents.hydra_app import CONF_DIR, compose
from scholar_agents.pasa.prompts import selector_messages, selector_target
from scholar_agents.pasa.selectors.llm import Selector, SelectorPair
from scholar_agents.train.selector.sft import selector_sft
from scholar_agents.train.sft import SFTRecipeConfig, build_trainer
from scholar_agents.train.sft_data import read_chat_jsonl, to_prompt_completion

QUERIES = ["Which papers learn 3D features from CLIP?", "Any works about weight decay?",
           "Which studies propose neural optimal transport solvers?"]


def _selector_rows(n: int = 6) -> list[dict]:
    rows = []
    for i in range(n):
        decision = i % 2 == 0
        messages = selector_messages(QUERIES[i % 3], f"Paper number {i}", f"An abstract about topic {i}. " * 3)
        rows.append({"messages": messages + [{"role": "assistant",
                                              "content": selector_target(decision, f"reason {i}")}]})
    return rows


@pytest.fixture
def sft_file(tmp_path) -> Path:
    path = tmp_path / "selector_sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _selector_rows()))
    return path


def _cfg(tmp_path, model_dir, train_file, *overrides):
    cfg = compose("train_selector_sft", [
        f"sft.model={model_dir}", f"sft.train_file={train_file}", f"sft.output_dir={tmp_path / 'ckpt'}",
        "sft.per_device_train_batch_size=2", "sft.logging_steps=1", "sft.save_steps=1", "sft.learning_rate=1e-3",
        "sft.bf16=false", "logging.wandb.enabled=false", *overrides,
    ])
    cfg.paths.output_dir = str(tmp_path / "run")
    return cfg


def test_messages_become_prompt_and_completion():
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"},
            {"role": "assistant", "content": "a2"}]
    pc = to_prompt_completion({"messages": chat})
    assert pc["prompt"] == chat[:4] and pc["completion"] == chat[4:]
    with pytest.raises(ValueError, match="assistant answer"):
        to_prompt_completion({"messages": chat[:2]})


def test_read_chat_jsonl_names_the_bad_line(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "u"}]}) + "\n" + json.dumps({"text": "t"}) + "\n")
    with pytest.raises(ValueError, match=r"x.jsonl:2: expected a 'messages' list"):
        read_chat_jsonl(f)
    with pytest.raises(FileNotFoundError):
        read_chat_jsonl(tmp_path / "missing.jsonl")


def test_prompt_tokens_get_label_minus_100_and_scoring_sees_the_same_prompt(tiny_model_dir, tiny_llm, sft_file,
                                                                             tmp_path):
    """Loss only on the answer; the supervised sequence starts exactly where the Selector's scoring prompt (the
    same chat template, rendered by the LLM interface) ends, with the decision token."""
    trainer, info = build_trainer(SFTRecipeConfig(model=str(tiny_model_dir), train_file=str(sft_file),
                                                  output_dir=str(tmp_path / "o"), use_cpu=True, bf16=False))
    assert info["loss_on"] == "completion"
    rows = _selector_rows()
    true_id, false_id = tiny_llm.candidate_token_ids(["True", "False"])
    for i, row in enumerate(trainer.train_dataset):
        prompt_ids = tiny_llm.prompt_token_ids(rows[i]["messages"][:1])
        labels, ids = row["labels"], row["input_ids"]
        assert ids[:len(prompt_ids)] == prompt_ids
        assert all(lab == -100 for lab in labels[:len(prompt_ids)])
        answer = labels[len(prompt_ids):]
        assert answer == ids[len(prompt_ids):] and -100 not in answer
        assert answer[0] == (true_id if i % 2 == 0 else false_id)
        assert tiny_llm.tokenizer.eos_token_id in answer  # the model learns to stop


def test_assistant_mode_needs_generation_markers(tiny_model_dir, sft_file, tmp_path):
    with pytest.raises(ValueError, match="loss_on=completion"):
        build_trainer(SFTRecipeConfig(model=str(tiny_model_dir), train_file=str(sft_file),
                                      output_dir=str(tmp_path / "o"), use_cpu=True, loss_on="assistant"))


def test_overlong_examples_are_dropped_not_cut(tiny_model_dir, sft_file, tmp_path):
    rows = _selector_rows()
    rows[0]["messages"][0]["content"] += " padding" * 400
    f = tmp_path / "long.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer, info = build_trainer(SFTRecipeConfig(model=str(tiny_model_dir), train_file=str(f), max_length=300,
                                                  output_dir=str(tmp_path / "o"), use_cpu=True, bf16=False))
    assert info["train_examples_dropped_overlong"] == 1 and len(trainer.train_dataset) == len(rows) - 1


def test_selector_sft_two_steps_writes_a_loadable_hf_dir(tiny_model_dir, sft_file, tmp_path, monkeypatch):
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    monkeypatch.delenv("WANDB_DIR", raising=False)
    cfg = _cfg(tmp_path, tiny_model_dir, sft_file, "sft.max_steps=2", "logging.wandb.enabled=true",
               "logging.wandb.mode=offline")
    summary = selector_sft(cfg)
    final = Path(summary["final_dir"])
    assert summary["global_step"] == 2 and summary["resumed_from"] is None
    assert {"checkpoint-1", "checkpoint-2", "final"} <= {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert (final / "SFT_DONE.json").is_file() and (final / "model.safetensors").is_file()
    assert (final / "chat_template.jinja").is_file() or "chat_template" in json.loads(
        (final / "tokenizer_config.json").read_text())
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*")), "wandb should log offline by default"
    assert json.loads((tmp_path / "run" / "sft_summary.json").read_text())["global_step"] == 2

    tuned = build_llm(LLMConfig(backend="hf", model=str(final), dtype="float32", device="cpu"))
    base = build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), dtype="float32", device="cpu"))
    pairs = [SelectorPair(QUERIES[0], "Paper number 0", "An abstract about topic 0.")]
    # The weights moved (lr 1e-3 on a random model) and the tokenizer/template came along.
    assert not np.allclose(Selector(tuned).probs(pairs), Selector(base).probs(pairs))
    assert tuned.render(selector_messages("q", "t", "a")) == base.render(selector_messages("q", "t", "a"))

    again = selector_sft(cfg)  # finished run + resume=true: nothing retrained
    assert again["skipped"] is True


def test_resume_continues_from_the_last_checkpoint(tiny_model_dir, sft_file, tmp_path):
    cfg = _cfg(tmp_path, tiny_model_dir, sft_file, "sft.max_steps=3")
    selector_sft(cfg)
    # Simulate a job killed after checkpoint-2 was written: no checkpoint-3, no final/.
    shutil.rmtree(tmp_path / "ckpt" / "checkpoint-3")
    shutil.rmtree(tmp_path / "ckpt" / "final")
    summary = selector_sft(cfg)
    assert summary["resumed_from"].endswith("checkpoint-2")
    assert summary["global_step"] == 3
    steps = [h["step"] for h in summary["log_history"] if "loss" in h]
    assert steps[-1] == 3 and (tmp_path / "ckpt" / "final" / "SFT_DONE.json").is_file()
    with pytest.raises(ValueError, match="resume=true"):
        selector_sft(_cfg(tmp_path, tiny_model_dir, sft_file, "sft.max_steps=3", "sft.resume=false"))


def test_lora_on_top_layers_saves_a_merged_plain_model(tiny_model_dir, sft_file, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = _cfg(tmp_path, tiny_model_dir, sft_file, "sft.max_steps=2", "sft.lora.enabled=true", "sft.lora.r=4",
               "sft.lora.layers_to_transform=[1]", "sft.lora.target_modules=[q_proj,k_proj,v_proj,o_proj]")
    summary = selector_sft(cfg)
    final = Path(summary["final_dir"])
    assert summary["lora"] and (final / "adapter" / "adapter_config.json").is_file()
    assert not (final / "adapter_config.json").exists()  # the top level is a plain, merged model
    tuned = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert not any("lora" in name for name, _ in tuned.named_parameters())
    w = lambda m, i: m.model.layers[i].self_attn.q_proj.weight  # noqa: E731
    assert torch.equal(w(tuned, 0), w(base, 0))  # layer 0 was not adapted
    assert not torch.allclose(w(tuned, 1), w(base, 1))  # layer 1's adapter was merged in


def test_lora_continues_from_a_saved_adapter(tiny_model_dir, sft_file, tmp_path):
    """sft.lora.init_adapter: the second run starts from the first run's adapter (its own r and layers, whatever
    sft.lora.r says) and moves it further; a directory without an adapter is refused in one line."""
    from safetensors.torch import load_file

    from scholar_agents.validation import UsageError

    first = selector_sft(_cfg(tmp_path / "a", tiny_model_dir, sft_file, "sft.max_steps=2", "sft.lora.enabled=true",
                              "sft.lora.r=4", "sft.lora.layers_to_transform=[1]",
                              "sft.lora.target_modules=[q_proj,v_proj]", "sft.learning_rate=1e-2"))
    start = Path(first["final_dir"]) / "adapter"
    second = selector_sft(_cfg(tmp_path / "b", tiny_model_dir, sft_file, "sft.max_steps=2", "sft.lora.enabled=true",
                               "sft.lora.r=8", f"sft.lora.init_adapter={start}", "sft.learning_rate=1e-2"))
    a = load_file(str(start / "adapter_model.safetensors"))
    b = load_file(str(Path(second["final_dir"]) / "adapter" / "adapter_model.safetensors"))
    assert sorted(a) == sorted(b)  # the same modules (layer 1's q/v only): the saved adapter's config, not r=8
    assert all(b[k].shape == a[k].shape for k in a)
    assert {b[k].shape[0] for k in b if "lora_A" in k} == {4}  # rank 4, as saved
    lora_b = [k for k in a if "lora_B" in k]
    assert lora_b and any(not torch_allclose(a[k], b[k]) for k in lora_b)  # trained further from it
    with pytest.raises(UsageError, match="no adapter_config.json"):
        selector_sft(_cfg(tmp_path / "c", tiny_model_dir, sft_file, "sft.max_steps=1", "sft.lora.enabled=true",
                          f"sft.lora.init_adapter={tmp_path}"))


def torch_allclose(x, y) -> bool:
    import torch

    return torch.allclose(x.float(), y.float())


def test_depth_pruned_head_only_run_changes_only_the_untied_head(tiny_model_dir, sft_file, tmp_path):
    """sft.keep_layers=1 sft.trainable=head: a 1-layer checkpoint whose decoder equals the base's first layer, whose
    input embeddings are untouched and whose (now untied) output head moved; it reloads and scores."""
    import torch
    from transformers import AutoModelForCausalLM

    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    summary = selector_sft(_cfg(tmp_path, tiny_model_dir, sft_file, "sft.max_steps=3", "sft.keep_layers=1",
                                "sft.trainable=head", "sft.weight_decay=0"))
    assert summary["keep_layers"] == 1 and summary["trainable"] == "head"
    tuned = AutoModelForCausalLM.from_pretrained(summary["final_dir"], dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert tuned.config.num_hidden_layers == 1 and len(tuned.model.layers) == 1
    assert not tuned.config.tie_word_embeddings
    assert torch.equal(tuned.model.embed_tokens.weight, base.model.embed_tokens.weight)
    for name, p in base.model.layers[0].named_parameters():
        assert torch.equal(p, tuned.model.layers[0].get_parameter(name)), name
    assert torch.equal(tuned.model.norm.weight, base.model.norm.weight)
    assert not torch.equal(tuned.lm_head.weight, base.lm_head.weight)
    llm = build_llm(LLMConfig(backend="hf", model=summary["final_dir"], dtype="float32", device="cpu"))
    p = Selector(llm).score([SelectorPair(QUERIES[0], "Paper number 0", "An abstract about topic 0.")])
    assert 0.0 <= float(p[0]) <= 1.0
    with pytest.raises(ValueError, match="decoder layers"):
        selector_sft(_cfg(tmp_path / "bad", tiny_model_dir, sft_file, "sft.max_steps=1", "sft.keep_layers=99"))


def test_decision_loss_is_the_two_way_cross_entropy_the_selector_reads(tiny_model_dir, tiny_llm, tmp_path):
    """sft.loss_on=decision: the loss equals -log of the Selector's normalized P(decision) on the same model, and an
    answer that does not start with a decision word is refused before training."""
    import torch

    from scholar_agents.train.sft import build_trainer

    pairs = [SelectorPair(QUERIES[i % 3], f"Paper number {i}", f"An abstract about topic {i}.") for i in range(4)]
    labels = [i % 2 == 0 for i in range(4)]
    rows = [{"messages": selector_messages(p.query, p.title, p.abstract) +
             [{"role": "assistant", "content": selector_target(y, "because")}]} for p, y in zip(pairs, labels)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer, _ = build_trainer(SFTRecipeConfig(model=str(tiny_model_dir), train_file=str(data), use_cpu=True,
                                               output_dir=str(tmp_path / "o"), loss_on="decision", bf16=False))
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    with torch.no_grad():
        loss = float(trainer.compute_loss(trainer.model, batch))
    p_true = Selector(tiny_llm).score(pairs)  # the same tiny model, scored through the LLM interface
    expected = -np.mean([np.log(p if y else 1 - p) for p, y in zip(p_true, labels)])
    assert loss == pytest.approx(expected, rel=1e-4)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": rows[0]["messages"][:1] + [{"role": "assistant", "content": "Maybe"}]})
                   + "\n")
    with pytest.raises(ValueError, match="does not start its answer"):
        build_trainer(SFTRecipeConfig(model=str(tiny_model_dir), train_file=str(bad), use_cpu=True,
                                      output_dir=str(tmp_path / "b"), loss_on="decision", bf16=False))


def test_probe_head_init_alone_makes_the_selector_separate_its_training_pairs(tiny_model_dir, tmp_path):
    """sft.head_init=probe with num_train_epochs=0 (linear probing only): the decision rows are fitted by L-BFGS,
    saved, and the reloaded Selector's P(True) puts every training pair on its label's side of 0.5; the input
    embeddings (untied) and every other head row are unchanged."""
    import torch
    from transformers import AutoModelForCausalLM

    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    pairs = [SelectorPair(QUERIES[i % 3], f"Paper number {i}", f"An abstract about topic {i}.") for i in range(8)]
    labels = [i % 2 == 0 for i in range(8)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"messages": selector_messages(p.query, p.title, p.abstract) + [
        {"role": "assistant", "content": selector_target(y, "because")}]}) + "\n" for p, y in zip(pairs, labels)))
    summary = selector_sft(_cfg(tmp_path, tiny_model_dir, data, "sft.loss_on=decision", "sft.head_init=probe",
                                "sft.head_init_l2=1e-4", "sft.num_train_epochs=0"))
    assert summary["global_step"] == 0 and summary["head_fit"]["train_accuracy"] == 1.0
    llm = build_llm(LLMConfig(backend="hf", model=summary["final_dir"], dtype="float32", device="cpu"))
    p_true = Selector(llm).score(pairs)
    assert [bool(p >= 0.5) for p in p_true] == labels, p_true
    # the rows were lifted: the two words carry ~all the mass, so the raw P(True) decides the same
    assert summary["head_fit"]["lift"] > 0 and summary["head_fit"]["train_decision_mass_min"] > 0.99
    mass = Selector(llm).probs(pairs).sum(axis=1)
    assert (mass > 0.99).all(), mass
    raw = Selector(llm, normalize=False).score(pairs)
    assert [bool(p >= 0.5) for p in raw] == labels, raw
    tuned = AutoModelForCausalLM.from_pretrained(summary["final_dir"], dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert torch.equal(tuned.model.embed_tokens.weight, base.model.embed_tokens.weight)
    changed = (tuned.lm_head.weight != base.lm_head.weight).any(dim=1).nonzero().flatten().tolist()
    assert sorted(changed) == sorted(llm.candidate_token_ids(["True", "False"]))
    with pytest.raises(ValueError, match="loss_on=decision"):
        selector_sft(_cfg(tmp_path / "x", tiny_model_dir, data, "sft.head_init=probe", "sft.num_train_epochs=0"))
    probe = ["sft.loss_on=decision", "sft.head_init=probe", "sft.num_train_epochs=0"]
    with pytest.raises(ValueError, match="LoRA"):
        selector_sft(_cfg(tmp_path / "y", tiny_model_dir, data, *probe, "sft.lora.enabled=true"))
    with pytest.raises(ValueError, match="ZeRO-3"):
        selector_sft(_cfg(tmp_path / "z", tiny_model_dir, data, *probe,
                          f"sft.deepspeed={CONF_DIR / 'deepspeed' / 'zero3.json'}"))


@pytest.mark.parametrize("preset", ["pasa_7b", "cpu_smollm2"])
def test_presets_compose(preset):
    cfg = compose("train_selector_sft", [f"sft={preset}", "sft.train_file=x.jsonl"])
    OmegaConf.resolve(cfg)
    if preset == "pasa_7b":
        # PaSa §5.1: Qwen2.5-7B, lr 1e-5, 1 epoch, batch 4/device on 8 GPUs, bf16, ZeRO-3.
        assert cfg.sft.model == "Qwen/Qwen2.5-7B-Instruct" and cfg.sft.learning_rate == 1e-5
        assert (cfg.sft.num_train_epochs, cfg.sft.per_device_train_batch_size, cfg.sft.expected_world_size) == (1, 4, 8)
        assert cfg.sft.bf16 is True and not cfg.sft.use_cpu
        assert json.loads(Path(cfg.sft.deepspeed).read_text())["zero_optimization"]["stage"] == 3
    else:
        assert cfg.sft.use_cpu and cfg.sft.model == "embedded:smollm2" and cfg.sft.deepspeed is None
    assert cfg.sft.output_dir.endswith("checkpoints/selector_sft")
    assert json.loads((CONF_DIR / "deepspeed" / "zero2.json").read_text())["zero_optimization"]["stage"] == 2
