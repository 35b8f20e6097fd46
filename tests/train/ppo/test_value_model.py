"""The value model V̂_φ (separate scalar-head model, and the shared-backbone head): forward shapes, save/load
round trips (safetensors), and the padding layout PPO reads values and log-probs from."""

import torch

from scholar_agents.train.ppo.tensors import pack, response_logprobs, response_values
from scholar_agents.train.ppo.value_model import PolicyAndValue, ValueModel, build_value


def test_value_model_forward_save_load(tiny_model_dir, tmp_path):
    vm = ValueModel.from_pretrained(tiny_model_dir, seed=1)
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    v = vm(ids, mask)
    assert v.shape == (1, 4) and v.dtype == torch.float32
    vm.save_pretrained(tmp_path / "value")
    again = ValueModel.from_pretrained(tmp_path / "value", seed=99)  # the saved head, not a fresh seeded one
    torch.testing.assert_close(again(ids, mask), v)
    assert not torch.allclose(ValueModel.from_pretrained(tiny_model_dir, seed=2)(ids, mask), v)


def test_shared_head_saves_only_the_head_and_detaches_when_frozen(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    m = build_value("shared", policy, str(tiny_model_dir), torch.float32, seed=0)
    assert m.shared and m.value is None
    b = pack([([5, 6, 7], [8, 9])], pad_id=0, device="cpu")
    _, values = m(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1, freeze_shared_backbone=True)
    values.sum().backward()
    assert m.value_head.weight.grad is not None
    assert all(p.grad is None for p in policy.parameters())  # frozen: only the head learns
    m.save_value(tmp_path / "v")
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == ["value_head.safetensors", "value_model.json"]
    again = build_value("shared", policy, str(tiny_model_dir), torch.float32, seed=5, saved_dir=tmp_path / "v")
    torch.testing.assert_close(again.value_head.weight, m.value_head.weight)


def test_left_padded_batch_matches_one_sequence_at_a_time(tiny_model_dir):
    """Response log-probs and values read from a padded batch equal those of each sequence alone: the
    right-aligned response grid and the position ids are right."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    m = PolicyAndValue(policy, value=ValueModel.from_pretrained(tiny_model_dir, seed=0)).eval()
    pairs = [([5, 6, 7, 8, 9], [10, 11]), ([12, 13], [14, 15, 16, 17])]

    def run(ps):
        b = pack(ps, pad_id=0, device="cpu")
        with torch.no_grad():
            logits, v = m(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1)
        lp, vals = response_logprobs(logits, b.response_ids), response_values(v, b.width)
        return [(lp[i, b.width - n:], vals[i, b.width - n:]) for i, n in enumerate(b.lengths)]

    batched = run(pairs)
    for (lp, v), single in zip(batched, [run([p])[0] for p in pairs]):
        torch.testing.assert_close(lp, single[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(v, single[1], atol=1e-5, rtol=1e-4)
    # and the log-prob of the first response token is read from the prompt's last position
    with torch.no_grad():
        full = policy(torch.tensor([pairs[0][0] + pairs[0][1]])).logits.log_softmax(-1)
    torch.testing.assert_close(batched[0][0][0], full[0, 4, 10], atol=1e-5, rtol=1e-4)
