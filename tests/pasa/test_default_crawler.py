"""The embedded default Crawler: the shipped LoRA adapter, its loading switch
(``crawler.policy.adapter``, ``llm.adapter``), the search backend that follows the index (``search=auto``) and the
line `pasa search` prints when a crawl yields no valid action."""

import json
from pathlib import Path

import pytest

from scholar_agents.hydra_app import PACKAGE_DIR, compose

ADAPTER = PACKAGE_DIR / "assets" / "crawler_adapter"
SMOLLM2_MODULES = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def _tiny_adapter(model_dir: Path, out: Path) -> Path:
    """A LoRA adapter on the tiny Qwen2 with non-zero B (PEFT initialises B to zero: a no-op adapter)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    torch.manual_seed(0)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    peft.save_pretrained(str(out), safe_serialization=True)
    return out


def test_the_adapter_ships_small_with_a_smollm2_lora_config_and_a_model_card():
    cfg = json.loads((ADAPTER / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["base_model_name_or_path"] == "embedded:smollm2"
    assert set(cfg["target_modules"]) <= SMOLLM2_MODULES
    assert all(0 <= layer < 30 for layer in cfg.get("layers_to_transform") or [])  # SmolLM2-135M: 30 layers
    weights = ADAPTER / "adapter_model.safetensors"
    assert 100_000 < weights.stat().st_size < 10_000_000  # a few MB
    assert not (ADAPTER / "adapter_model.bin").exists()  # safetensors only
    # trained on the ~900 AutoScholarQuery dev queries not kept for evaluation; the 100 it never saw
    # (docs/pasa.md figures, scripts/crawler_phrasings.sh) are listed beside it
    held = (ADAPTER / "heldout_qids.txt").read_text().split()
    train = (ADAPTER / "train_qids.txt").read_text().split()
    assert len(held) == 100 and len(train) == 900 and not set(held) & set(train)
    assert all(q.startswith("AutoScholarQuery_dev_") for q in held + train)
    card = (ADAPTER / "README.md").read_text()
    for needle in ("scripts/train_default_crawler.sh", "teacher=verified", "topic_candidate=true", "request forms",
                   "one search per session", "s on 2 CPU cores"):
        assert needle in card, needle


def test_the_cpu_preset_switch_names_the_shipped_adapter_and_null_is_the_base():
    from scholar_agents.pasa.resources import crawler_adapter_for, pasa_setup

    for root in ("pasa_search", "eval_pasa"):
        cfg = compose(root, [])
        setup = pasa_setup(cfg)
        assert Path(cfg.crawler.policy.adapter) == ADAPTER
        assert crawler_adapter_for(setup.llm, setup.crawler_policy) == (str(ADAPTER), "crawler.policy.adapter")
        # an eval row's own fine-tuned checkpoint (or any other model) runs as it is
        assert crawler_adapter_for(setup.llm, setup.crawler_policy, "/some/fine_tuned/final")[0] is None
        base = pasa_setup(compose(root, ["crawler.policy.adapter=null"]))
        assert crawler_adapter_for(base.llm, base.crawler_policy)[0] is None
        # the grammar for the adapter too (no empty [Search]), with room for a copied question
        assert cfg.crawler.policy.constrained is True and cfg.crawler.policy.max_query_chars == 200
    # PPO starts from its own configured policy, never the shipped adapter on top
    assert compose("train_crawler_ppo", []).crawler.policy.adapter is None


def test_the_agent_searches_one_page_of_20_and_training_keeps_the_presets_10():
    # the agent's one results page competes with search-only's recall@20 (docs/pasa.md)
    for root in ("pasa_search", "pasa_serve", "eval_pasa"):
        assert compose(root, []).crawler.env.search_k == 20, root
        assert compose(root, ["crawler.env.search_k=10"]).crawler.env.search_k == 10, root
    # the verified teacher's data and PPO's environment stay at the presets' value (the shipped adapter's recipe)
    for root in ("train_crawler_ppo", "data_gen_crawler_sessions"):
        assert compose(root, []).crawler.env.search_k == 10, root


def test_a_peft_adapter_changes_the_hf_models_logits_and_is_merged(tmp_path, tiny_model_dir, torch_one_thread):
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    adapter = _tiny_adapter(tiny_model_dir, tmp_path / "adapter")
    base_cfg = dict(backend="hf", model=str(tiny_model_dir), dtype="float32", device="cpu", max_model_len=256)
    base = build_llm(LLMConfig(**base_cfg))
    tuned = build_llm(LLMConfig(**base_cfg, adapter=str(adapter)))
    prompt = [{"role": "user", "content": "graph neural networks"}]
    p_base = base.next_token_probs([prompt], ["a", "b", "c"])
    p_tuned = tuned.next_token_probs([prompt], ["a", "b", "c"])
    assert abs(p_base - p_tuned).max() > 1e-4
    assert not hasattr(tuned.model, "peft_config")  # merged: a plain transformers model
    assert tuned.model_id != base.model_id  # the response cache keys on the adapter
    again = build_llm(LLMConfig(**base_cfg, adapter=None))  # null = the base model
    assert abs(again.next_token_probs([prompt], ["a", "b", "c"]) - p_base).max() == 0


def test_adapters_load_from_safetensors_only_and_openai_refuses(tmp_path, tiny_model_dir):
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    adapter = _tiny_adapter(tiny_model_dir, tmp_path / "adapter")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "adapter_config.json").write_text((adapter / "adapter_config.json").read_text())
    (pickled / "adapter_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="safetensors only"):
        build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), adapter=str(pickled)))
    with pytest.raises(ValueError, match="server holds the weights"):
        build_llm(LLMConfig(backend="openai", model=str(tiny_model_dir), adapter=str(adapter)))


def test_the_vllm_path_merges_the_adapter_once_into_a_cached_checkpoint(tmp_path, tiny_model_dir, torch_one_thread):
    import torch
    from transformers import AutoModelForCausalLM

    from scholar_agents.llm.adapters import apply_adapter, merged_checkpoint

    adapter = _tiny_adapter(tiny_model_dir, tmp_path / "adapter")
    merged = merged_checkpoint(str(tiny_model_dir), adapter, tmp_path / "cache")
    assert merged_checkpoint(str(tiny_model_dir), adapter, tmp_path / "cache") == merged  # once
    assert (merged / "tokenizer_config.json").is_file() and not (merged / "adapter_config.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(str(merged), dtype=torch.float32)
    ref = apply_adapter(AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32), adapter)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.allclose(plain(ids).logits, ref(ids).logits, atol=1e-5)


def test_the_search_backend_follows_the_index(tmp_path):
    from scholar_agents.papers.index import resolve_kind

    auto = {"kind": "auto", "auto_dense_max_papers": 100}
    assert resolve_kind(auto, 5000, tmp_path)[0] == "bm25"  # big store, no dense index
    assert resolve_kind(auto, 50, tmp_path)[0] == "hybrid"  # small: the dense index is built
    (tmp_path / "embeddings").mkdir()
    (tmp_path / "embeddings" / "manifest.json").write_text(json.dumps({"n_docs": 5000}))
    kind, why = resolve_kind(auto, 5000, tmp_path)
    assert kind == "hybrid" and "dense index exists" in why
    assert resolve_kind({"kind": "bm25"}, 50, tmp_path)[0] == "bm25"  # an explicit kind is kept
    # the agent (pasa search, eval pasa) and its training data (data_gen crawler_sessions) resolve it alike
    for root in ("pasa_search", "eval_pasa", "data_gen_crawler_sessions"):
        assert compose(root, []).search.kind == "auto"


def test_a_crawl_without_a_valid_action_says_so():
    from scholar_agents.pasa.agent import AgentResult, results_table
    from scholar_agents.pasa.trajectory import QueryTrajectory, SessionRecord

    session = SessionRecord("q#0/0", "q", "which papers?", None, "S_q", None, 0, None, None, [], [], "blah", [],
                            None, "length", grammar_errors=[{"code": "no_action"}])
    traj = QueryTrajectory("q", "which papers?", None, sessions=[session], grammar_errors={"no_action": 1})
    result = AgentResult("q", "which papers?", None, [], [traj])
    assert result.no_valid_action and result.to_dict()["no_valid_action"] is True
    note = result.crawl_note()
    assert note.startswith("the Crawler wrote no valid action for this query (1 session; grammar errors: no_action x1")
    assert note in results_table(result)


@pytest.mark.slow
def test_the_shipped_adapter_loads_on_smollm2_and_changes_its_logits(torch_one_thread):
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    cfg = dict(backend="hf", model="embedded:smollm2", dtype="float32", device="cpu", max_model_len=512)
    base = build_llm(LLMConfig(**cfg))
    tuned = build_llm(LLMConfig(**cfg, adapter=str(ADAPTER)))
    from scholar_agents.pasa.prompts import crawler_search_messages

    prompt = crawler_search_messages("Which papers study graph neural networks for molecules?")
    p_base = base.next_token_probs([prompt], ["[", "I", "The"])
    p_tuned = tuned.next_token_probs([prompt], ["[", "I", "The"])
    assert abs(p_base - p_tuned).max() > 1e-3
    assert p_tuned[0, 0] > p_base[0, 0]  # the SFT Crawler starts its answer with an action ("[Search] ...")
