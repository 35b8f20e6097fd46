"""The Selector on real models: batched scoring equals one-by-one, the threshold, reward-model mode, rationales.

Tiny random Qwen2 (fast), the embedded SmolLM2 (slow), and the vLLM server vs in-process backends (vllm)."""

from pathlib import Path

import numpy as np
import pytest

from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.selectors.llm import Selector, SelectorPair

PAIRS = [
    SelectorPair("Which papers learn 3D scene features from CLIP?", "OpenScene: 3D Scene Understanding with Open "
                 "Vocabularies", "We propose OpenScene, an alternative approach where a model predicts dense "
                 "features for 3D scene points that are co-embedded with text and image pixels in CLIP feature space."),
    SelectorPair("Which papers learn 3D scene features from CLIP?", "Three Mechanisms of Weight Decay Regularization",
                 "Weight decay is one of the standard tricks in the neural network toolbox."),
    SelectorPair("Any works about weight decay in deep learning?", "Three Mechanisms of Weight Decay Regularization",
                 "Weight decay is one of the standard tricks in the neural network toolbox, but the reasons for its "
                 "regularization effect are poorly understood."),
    SelectorPair("Any works about weight decay in deep learning?", "A representer theorem for deep kernel learning",
                 ""),
    SelectorPair("q", "t", "a"),
]


def test_batched_scores_equal_one_by_one(tiny_llm):
    sel = Selector(tiny_llm, batch_size=3, memo_size=0)
    batched = sel.score(PAIRS)
    single = np.array([sel.score([p])[0] for p in PAIRS])
    assert batched.shape == (len(PAIRS),)
    np.testing.assert_allclose(batched, single, rtol=1e-4, atol=1e-6)
    assert np.all((batched >= 0) & (batched <= 1))


def test_scores_are_the_llms_next_token_probs_of_the_chat_prompt(tiny_llm):
    """One forward pass over the chat-rendered Table 15 prompt; normalisation is over the two decisions."""
    sel = Selector(tiny_llm, normalize=False)
    raw = tiny_llm.next_token_probs([sel.messages(p) for p in PAIRS], ["True", "False"])
    np.testing.assert_allclose(sel.probs(PAIRS), raw, rtol=1e-6)
    np.testing.assert_allclose(sel.score(PAIRS), raw[:, 0], rtol=1e-6)
    normalized = Selector(tiny_llm).score(PAIRS)
    np.testing.assert_allclose(normalized, raw[:, 0] / raw.sum(axis=1), rtol=1e-6)


def test_threshold_decides(tiny_llm):
    scores = Selector(tiny_llm).score(PAIRS)
    mid = float(np.median(scores))
    decided = Selector(tiny_llm, threshold=mid).decide(PAIRS)
    np.testing.assert_array_equal(decided, scores >= mid)
    assert decided.sum() >= len(PAIRS) // 2  # the median itself is selected (>=)
    assert Selector(tiny_llm, threshold=0.0).decide(PAIRS).all()
    np.testing.assert_array_equal(Selector(tiny_llm, threshold=1.0).decide(PAIRS), scores >= 1.0)
    with pytest.raises(ValueError):
        Selector(tiny_llm, threshold=1.5)


def test_accept_rank_and_memo(tiny_llm):
    sel = Selector(tiny_llm, threshold=0.5, memo_size=2)
    papers = [Paper(paper_id=f"p{i}", title=p.title, abstract=p.abstract) for i, p in enumerate(PAIRS[:4])]
    query = PAIRS[0].query
    accepted = sel.accept(query, papers)
    assert accepted == [bool(s >= 0.5) for s in sel.score([SelectorPair.of(query, p) for p in papers])]
    assert sel.accept(query, []) == []
    many = sel.accept_many([(query, papers[:2]), ("other query", []), (query, papers[2:])])
    assert many == [accepted[:2], [], accepted[2:]]
    ranked = sel.rank(query, papers)
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    assert len(sel._memo) <= 2  # bounded memo


def test_abstract_truncation_is_applied_to_the_prompt(tiny_llm):
    content = Selector(tiny_llm, max_abstract_chars=21).messages(PAIRS[0])[0]["content"]
    assert "Abstract: We propose OpenScene,\n" in content
    content = Selector(tiny_llm, max_abstract_chars=20).messages(PAIRS[0])[0]["content"]
    assert "Abstract: We propose\n" in content


def test_judge_generates_and_counts_unparsed(tiny_llm):
    sel = Selector(tiny_llm, rationale_max_new_tokens=8)
    judged = sel.judge(PAIRS[:2], decision_first=False)
    assert len(judged) == 2
    # A random tiny model does not follow the format: every such answer is counted, none raises.
    assert sel.unparsed == sum(j.decision is None for j in judged)


def test_why_shows_the_decision_the_ranking_used(tiny_llm):
    """The decision is P("True") >= threshold from the scoring pass, written first; the model only
    writes the reason after it, so even a random model's "why?" cannot contradict "selected"."""
    sel = Selector(tiny_llm, rationale_max_new_tokens=8)
    scores = sel.score(PAIRS[:4])
    sel.threshold = float(np.median(scores))
    judged = sel.judge(PAIRS[:4])
    assert [j.decision for j in judged] == [bool(s >= sel.threshold) for s in scores]
    assert [j.score for j in judged] == pytest.approx(list(scores))
    assert all(j.text.startswith("True\nReason:" if j.decision else "False\nReason:") for j in judged)
    assert sel.unparsed == 0


def test_a_reason_that_argues_the_other_way_is_flagged():
    from scholar_agents.pasa.selectors.llm import reason_disagrees

    assert reason_disagrees(True, "False. The paper studies bread.")
    assert reason_disagrees(True, "The paper is not about graph learning.")
    assert reason_disagrees(True, "not relevant to the query")
    assert not reason_disagrees(True, "The paper proposes a graph network, as asked.")
    assert reason_disagrees(False, "True, it matches the query.")
    assert not reason_disagrees(False, "The paper studies a different task.")


@pytest.mark.slow
def test_smollm2_scores_and_rationales(smollm2_llm):
    sel = Selector(smollm2_llm, max_abstract_chars=400, rationale_max_new_tokens=24)
    probs = sel.probs(PAIRS[:4])
    # Base SmolLM2 (not fine-tuned) puts a few % of its mass on "True"/"False" (measured 2-15%), so scores are
    # renormalised over the two (selector.normalize=true); both raw and normalised stay probabilities.
    assert np.all(probs > 0) and np.all(probs.sum(axis=1) < 1)
    scores = sel.scores_from_probs(probs)
    np.testing.assert_allclose(scores, probs[:, 0] / probs.sum(axis=1))
    # bf16 with and without padding: batched and one-at-a-time agree to rounding.
    np.testing.assert_allclose(scores, np.array([sel.score([p])[0] for p in PAIRS[:4]]), atol=2e-2)
    judged = sel.judge(PAIRS[:2])
    assert judged[0].decision is not None  # measured: "True"
    assert sel.unparsed == sum(j.decision is None for j in judged)


@pytest.mark.vllm
def test_server_and_in_process_backends_agree(vllm_server, smollm2_llm):
    """The Selector served by a real vLLM OpenAI server (openai backend, prompt logprobs) gives the same P("True")
    as in-process transformers, on the same chat-rendered prompts."""
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    server = build_llm(LLMConfig(backend="openai", model="embedded:smollm2", base_url=vllm_server.base_url,
                                 served_model_name=vllm_server.model))
    try:
        served = Selector(server, max_abstract_chars=400).probs(PAIRS)
    finally:
        server.close()
    local = Selector(smollm2_llm, max_abstract_chars=400).probs(PAIRS)
    # bf16 on both sides, different kernels: probabilities agree to a few points, decisions exactly.
    np.testing.assert_allclose(served, local, atol=0.05)
    sel = Selector(smollm2_llm)
    np.testing.assert_array_equal(sel.scores_from_probs(served) >= 0.5, sel.scores_from_probs(local) >= 0.5)


@pytest.mark.vllm
def test_vllm_engine_and_hf_agree(smollm2_llm):
    """In-process vLLM offline engine vs in-process transformers on the same Selector prompts."""
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    engine = build_llm(LLMConfig(backend="vllm", model="embedded:smollm2", dtype="bfloat16", enforce_eager=True,
                                 max_model_len=2048))
    try:
        in_engine = Selector(engine, max_abstract_chars=400).probs(PAIRS)
    finally:
        engine.close()
    local = Selector(smollm2_llm, max_abstract_chars=400).probs(PAIRS)
    np.testing.assert_allclose(in_engine, local, atol=0.05)


@pytest.mark.vllm
@pytest.mark.parametrize("recipe", [
    [],  # the paper's: LM loss on the answer, every layer
    # the LP-FT recipe of scripts/selector_learning.sh: depth-pruned, decision rows fitted, head untied
    ["sft.keep_layers=1", "sft.loss_on=decision", "sft.head_init=probe"],
], ids=["paper", "lpft"])
def test_a_fine_tuned_selector_dir_is_served_by_vllm_as_is(tiny_model_dir, tmp_path, recipe):
    """`train selector_sft` -> final/ -> `vllm serve final/` with no conversion; the served P("True") equals the
    in-process one (fp32 on both sides, so to 1e-3) — also for a pruned checkpoint with its own (untied) head."""
    import json

    from scholar_agents.hydra_app import compose
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.pasa.prompts import selector_messages, selector_target
    from scholar_agents.train.selector.sft import selector_sft
    from tests.fixtures.vllm_server import running_vllm_server

    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": selector_messages(p.query, p.title, p.abstract) + [
        {"role": "assistant", "content": selector_target(i % 2 == 0, "because")}]}) + "\n"
        for i, p in enumerate(PAIRS)))
    cfg = compose("train_selector_sft", [f"sft.model={tiny_model_dir}", f"sft.train_file={data}",
                                         f"sft.output_dir={tmp_path / 'ckpt'}", "sft.max_steps=2",
                                         "sft.learning_rate=1e-3", "sft.bf16=false", "logging.wandb.enabled=false",
                                         *recipe])
    cfg.paths.output_dir = str(tmp_path / "run")
    summary = selector_sft(cfg)
    final = summary["final_dir"]
    if recipe:
        config = json.loads((Path(final) / "config.json").read_text())
        assert config["num_hidden_layers"] == 1 and config["tie_word_embeddings"] is False
        assert summary["head_fit"]["examples"] == len(PAIRS)

    local = build_llm(LLMConfig(backend="hf", model=final, dtype="float32", device="cpu", max_model_len=1024))
    try:
        expected = Selector(local).probs(PAIRS)
    finally:
        local.close()
    with running_vllm_server(final, "tiny-selector", tmp_path, dtype="float32", max_model_len=1024) as server:
        served = build_llm(LLMConfig(backend="openai", model=final, base_url=server.base_url,
                                     served_model_name=server.model, max_model_len=1024))
        try:
            got = Selector(served).probs(PAIRS)
        finally:
            served.close()
    np.testing.assert_allclose(got, expected, atol=1e-3)


def test_the_base_llm_selector_ranks_but_marks_nothing_selected(tiny_llm):
    """The `cpu` preset (base SmolLM2, no card) does not mark "selected"; the output says so; the
    paper's preset keeps PaSa's P(True) >= 0.5."""
    from scholar_agents.hydra_app import compose
    from scholar_agents.pasa.selectors.factory import describe_selector

    cpu = compose("pasa_search", ["selector=cpu"]).selector
    assert Selector.from_config(tiny_llm, cpu).marks_selected is False
    assert "marks nothing selected" in describe_selector(cpu, "embedded:smollm2")
    paper = compose("pasa_search", ["selector=pasa"]).selector
    assert Selector.from_config(tiny_llm, paper).marks_selected is True
    assert "P(True) >= 0.5" in describe_selector(paper, "pasa-7b-selector")
