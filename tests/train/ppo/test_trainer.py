"""The PPO trainer end to end on the tiny random model and the bundled sample store, through the REAL
``train crawler_ppo`` config: policy freezing, one update lowering the clipped surrogate on its own batch, exact
resume after a preemption signal (straight N steps == N/2 + SIGUSR1 checkpoint + restart + N/2), and a 2-process
torchrun step agreeing with one process holding the same global batch."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from scholar_agents.validation import UsageError
from tests.fixtures.ppo import make_trainer, tiny_overrides
from tests.paths import REPO

# Wall-clock and throughput differ between runs; everything else must match exactly on resume.
NONDETERMINISTIC = ("timing_s/", "perf/")


pytestmark = pytest.mark.usefixtures("torch_one_thread")


def snapshot(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict, module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_policy_frozen_first_then_cotrained_and_rollout_engine_synced(tiny_model_dir, ppo_papers, tmp_path):
    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path)
    try:
        policy0, value0 = snapshot(tr.engine.model.policy), snapshot(tr.engine.model.value)
        m = tr.train_step(0)  # frozen: only V̂ learns
        assert m["actor/frozen"] == 1.0 and m["actor/kl_to_sft"] == 0.0 and "actor/pg_loss" not in m
        assert not changed(policy0, tr.engine.model.policy) and changed(value0, tr.engine.model.value)
        # no Adam state while frozen
        assert all(tr.engine.optimizer.state.get(p) is None for p in tr.engine.policy_params)
        m = tr.train_step(1)  # co-training
        assert m["actor/frozen"] == 0.0 and "actor/pg_loss" in m and changed(policy0, tr.engine.model.policy)
        # the rollout engine generates with the updated weights (in place, after the update)
        for k, v in tr.engine.model.policy.state_dict().items():
            torch.testing.assert_close(tr.rollout_engine.llm.model.state_dict()[k], v)
        # π_sft stays the starting checkpoint
        assert not changed(policy0, tr.engine.ref)
    finally:
        tr.close()


def test_one_update_decreases_the_clipped_surrogate_on_its_batch(tiny_model_dir, ppo_papers, tmp_path):
    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path, policy_freeze_steps=0, ppo_epochs=4,
                      normalize_advantages="true")
    try:
        samples, _ = tr.rollout(0)
        targets, batch, _ = tr.compute_targets(samples, frozen=False)

        def surrogate() -> float:
            with torch.no_grad():
                return sum(tr.updater.micro_loss([s], [t], [lo], [v], False)[1]["actor/pg_loss"]
                           for s, t, lo, v in zip(samples, targets, batch["logp_old"], batch["values_old"]))

        before = surrogate()
        stats = tr.update(samples, targets, batch, step=0, frozen=False)
        after = surrogate()
        assert after < before - 1e-4, (before, after)
        assert stats["actor/approx_kl"] >= 0 and 0 <= stats["actor/clipfrac"] <= 1
    finally:
        tr.close()


def test_exact_resume_after_a_preemption_signal(tiny_model_dir, ppo_papers, tmp_path):
    """4 steps straight == 2 steps, SIGUSR1 (checkpoint + exit 75), restart with resume, 2 more steps."""
    straight = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "straight", eval_at_end="true", eval_every="2")
    try:
        summary = straight.train()
        final_straight = snapshot(straight.engine.model)
    finally:
        straight.close()
    assert summary["eval"]["queries"] == 2 and "crawler_recall" in summary["eval"]
    assert json.loads((tmp_path / "straight" / "metrics.json").read_text())["train"]["steps"] == 4
    # ppo.eval_every=2: the held-out figure at step 2 too (not at the last step: eval_end is that one)
    assert [e["step"] for e in summary["eval_curve"]] == [2]
    assert (tmp_path / "straight" / "trajectories_eval_step000002.jsonl").is_file()

    first = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "split", eval_at_end="true", eval_every="2")
    first.step_callbacks.append(lambda step, m: os.kill(os.getpid(), signal.SIGUSR1) if step == 2 else None)
    with pytest.raises(SystemExit) as e:
        first.train()
    first.close()
    assert e.value.code == 75
    ckpts = tmp_path / "split" / "checkpoints"
    assert (ckpts / "latest").read_text() == "step_000002" and (ckpts / "step_000002" / "COMPLETE").is_file()
    for name in ("policy/model.safetensors", "value/value_head.safetensors", "optimizer.pt", "scheduler.pt",
                 "trainer_state.json", "rng/rank0.json", "rng/rank0.safetensors"):
        assert (ckpts / "step_000002" / name).is_file(), name
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the handler was uninstalled

    second = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "split", eval_at_end="true", eval_every="2")
    try:
        assert second.start_step == 2
        second.train()
        final_split = snapshot(second.engine.model)
    finally:
        second.close()

    def rows(d):
        out = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith(NONDETERMINISTIC)} for r in out]

    a, b = rows(tmp_path / "straight"), rows(tmp_path / "split")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert a == b  # losses, returns, rewards, KL, clip fractions: identical
    for k, v in final_straight.items():
        assert torch.equal(v, final_split[k]), k


def test_lora_reference_is_the_disabled_adapter_and_the_engine_gets_merged_weights(tiny_model_dir, ppo_papers,
                                                                                  tmp_path):
    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path, policy_freeze_steps=0, total_steps=1,
                      **{"lora.enabled": "true", "lora.r": 4, "lora.alpha": 8})
    try:
        assert tr.engine.ref is None  # no second copy of the weights
        base0 = {k: v.clone() for k, v in tr.engine.policy.get_base_model().state_dict().items() if "lora_" not in k}
        m = tr.train_step(0)
        assert m["actor/frozen"] == 0.0
        # only the adapter trained; the engine samples from base + B·A, exactly what merge_and_unload gives
        for k, v in tr.engine.model.policy.get_base_model().state_dict().items():
            if "lora_" not in k:
                assert torch.equal(v, base0[k]), k
        import copy

        from safetensors.torch import load_file

        merged = copy.deepcopy(tr.engine.model.policy).merge_and_unload().state_dict()
        engine = tr.rollout_engine.llm.model.state_dict()
        for k, v in merged.items():
            torch.testing.assert_close(engine[k], v, atol=1e-6, rtol=1e-5)
        original = load_file(str(tiny_model_dir / "model.safetensors"))
        assert any(not torch.allclose(engine[k], original[k]) for k in original)  # the update reached the engine
        tr.save(1)
        assert (tr.ckpt_dir / "step_000001" / "policy" / "adapter_model.safetensors").is_file()
    finally:
        tr.close()


@pytest.mark.slow  # three interpreters starting torch + transformers: ~60 s on 2 idle cores, minutes when loaded
def test_torchrun_two_processes_match_one_process(tiny_model_dir, ppo_papers, tmp_path):
    """One PPO step (co-training) with 2 gloo processes x 2 queries == 1 process x 4 queries (same global batch,
    greedy rollouts, no expansion): same losses and the same weights, within float tolerance. The held-out
    evaluation at the end, split across the 2 ranks (one query each) and gathered, == one process crawling both."""
    ppo = {"policy_freeze_steps": 0, "total_steps": 1, "temperature": 0.0, "expand_sessions": "[]",
           "forward_batch_size": 1, "grad_accum": 4, "ppo_epochs": 1, "eval_at_end": "true"}
    common = tiny_overrides(tiny_model_dir, ppo_papers, tmp_path, **ppo)
    common = [o for o in common if not o.startswith(("paths.output_dir", "ppo.queries_per_step"))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    double = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
              "-m", "scholar_agents", "train", "crawler_ppo", *common, "ppo.queries_per_step=2",
              f"hydra.run.dir={tmp_path / 'two'}"]
    proc = subprocess.Popen(double, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    single = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "one", queries_per_step=4, **ppo)
    try:
        single.train()
    finally:
        single.close()
    out = proc.communicate(timeout=900)[0]
    assert proc.returncode == 0, out[-3000:]
    # accelerate started the group with cluster.dist_timeout_minutes (120 by default), not gloo's 30 / NCCL's 10
    assert out.count("process group: backend gloo, world 2, timeout 120 min, collectives on cpu") == 2, out[-3000:]
    one = json.loads((tmp_path / "one" / "metrics.jsonl").read_text().splitlines()[0])
    two = json.loads((tmp_path / "two" / "metrics.jsonl").read_text().splitlines()[0])
    assert one["rollout/sessions"] == 4 and two["rollout/sessions"] == 2  # per process, averaged over ranks
    for key in ("actor/pg_loss", "critic/vf_loss", "rollout/session_return", "actor/grad_norm"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    from safetensors.torch import load_file

    w1 = load_file(str(tmp_path / "one" / "checkpoints" / "step_000001" / "policy" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "checkpoints" / "step_000001" / "policy" / "model.safetensors"))
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4)
    e1, e2 = (json.loads((tmp_path / d / "metrics.json").read_text())["eval"] for d in ("one", "two"))
    assert e1["queries"] == e2["queries"] == 2
    assert {k: v for k, v in e1.items() if k != "seconds"} == {k: v for k, v in e2.items() if k != "seconds"}
    rows = [[json.loads(x) for x in (tmp_path / d / "eval_end.jsonl").read_text().splitlines()] for d in ("one", "two")]
    assert [r["qid"] for r in rows[0]] == [r["qid"] for r in rows[1]]  # gathered in query order
    # the crawls too, gathered the same way, for `pasa serve`'s trees of a PPO run
    from scholar_agents.pasa.serve.runs import load_rows, load_trajectories

    for d in ("one", "two"):
        assert "eval_end" in load_rows(tmp_path / d)
        trajs = [load_trajectories(tmp_path / d, "eval_end", r["qid"]) for r in rows[0]]
        assert all(len(t) == 1 and t[0]["sessions"] for t in trajs), d


@pytest.mark.parametrize("estimator, kl_in_return", [("grpo", "true"), ("rloo", "false")])
def test_critic_free_estimators_train_whole_crawls_without_a_value_model(tiny_model_dir, ppo_papers, tmp_path,
                                                                         estimator, kl_in_return):
    """ppo.estimator=grpo|rloo: no value model is built, trained or checkpointed; the policy_freeze_steps default
    (value warm-up) is forced to 0; every session belongs to one of group_size × queries_per_step whole crawls, each
    run to its end (crawler=cpu_smollm2's budgets); every token of a crawl gets the crawl's advantage."""
    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path, estimator=estimator, group_size=2, policy_freeze_steps=1,
                      total_steps=1, kl_in_return=kl_in_return)
    try:
        assert tr.pcfg.policy_freeze_steps == 0 and not tr.engine.model.critic
        assert tr.engine.model.value is None and tr.engine.model.value_head is None and tr.engine.value_params == []
        policy0 = snapshot(tr.engine.model.policy)
        samples, m = tr.rollout(0)
        crawls = {s.crawl for s in samples}
        assert samples and crawls <= set(range(4)) and None not in crawls
        targets, batch, m2 = tr.compute_targets(samples, frozen=False)
        assert m2["rollout/child_states_valued"] == 0 and all(t.value_mask.sum() == 0 for t in targets)
        for s, t in zip(samples, targets):  # one advantage per crawl, on every token
            same = [u for r, u in zip(samples, targets) if r.crawl == s.crawl]
            assert np.all(t.advantages == t.advantages[0]) and all(u.advantages[0] == t.advantages[0] for u in same)
        targets[0].advantages[:] = 1.0  # the tiny random policy's crawls often tie (all-invalid): force a gradient
        stats = tr.update(samples, targets, batch, step=0, frozen=False)
        assert stats["actor/frozen"] == 0.0 and changed(policy0, tr.engine.model.policy)
        path, trained = tr.save(1), snapshot(tr.engine.model.policy)
        assert (path / "policy").is_dir() and not (path / "value").exists()
    finally:
        tr.close()
    # another estimator's resume is refused in one line before any model loads (DeepSpeed's strict load would fail)
    with pytest.raises(UsageError, match=f"ppo.estimator=paper_mc but .* was trained with ppo.estimator={estimator}"):
        make_trainer(tiny_model_dir, ppo_papers, tmp_path, estimator="paper_mc", total_steps=2)
    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path, estimator=estimator, group_size=2, total_steps=2,
                      kl_in_return=kl_in_return)
    try:  # resumes from the checkpoint without a value model, and trains on
        assert tr.start_step == 1 and not tr.engine.model.critic
        torch.testing.assert_close(snapshot(tr.engine.model.policy), trained)
        assert tr.train_step(1)["actor/frozen"] == 0.0
    finally:
        tr.close()


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_critic_free_estimator_under_deepspeed_has_one_parameter_group(tiny_model_dir, ppo_papers, tmp_path, stage):
    """ppo.estimator=grpo under DeepSpeed (one process): the optimizer has the policy's group only (DeepSpeed drops an
    empty group, which would leave the LR schedule a lambda short), one step trains and checkpoints (~20 s each)."""
    from scholar_agents.hydra_app import CONF_DIR

    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path, estimator="grpo", group_size=2, total_steps=1,
                      deepspeed=str(CONF_DIR / "deepspeed" / f"{stage}.json"))
    try:
        assert len(tr.engine.scheduler.lr_lambdas) == 1 and tr.engine.value_params == []
        m = tr.train_step(0)
        assert m["actor/frozen"] == 0.0 and m["critic/lr"] == 0.0 and "actor/pg_loss" in m
        assert not (tr.save(1) / "value").exists()
    finally:
        tr.close()


def test_training_queries_in_request_forms(tiny_model_dir, ppo_papers, tmp_path):
    """queries.train.phrasings: every training query is also asked in each request form (same qid, date and gold),
    so the policy is trained on how researchers ask; a step's rollout prompts carry the rewritten questions."""
    from pathlib import Path

    from scholar_agents.data_gen.request_forms import rewrite
    from scholar_agents.hydra_app import compose
    from scholar_agents.train.ppo.trainer import PPOTrainer
    from scholar_agents.validation import UsageError

    forms = ["original", "multi_sentence"]
    cfg = compose("train_crawler_ppo", tiny_overrides(tiny_model_dir, ppo_papers, tmp_path, queries_per_step=4)
                  + ["queries.train.limit=3", f"queries.train.phrasings=[{','.join(forms)}]"])
    tr = PPOTrainer.from_config(cfg, Path(tmp_path))
    try:
        qs = tr.train_queries
        assert len(qs) == 6 and [q.qid for q in qs[::2]] == [q.qid for q in qs[1::2]]
        for plain, asked in zip(qs[::2], qs[1::2]):
            assert asked.question == rewrite(plain.question, "multi_sentence") != plain.question
            assert asked.gold_ids == plain.gold_ids and asked.before == plain.before
        seen = []
        original_generate = tr.rollout_engine.llm.generate

        def spy(prompts, *a, **k):
            seen.extend(str(p) for p in prompts)
            return original_generate(prompts, *a, **k)

        tr.rollout_engine.llm.generate = spy
        tr.train_step(0)
        assert any(any(q.question in p for p in seen) for q in qs[1::2])  # a rewritten question was crawled
    finally:
        tr.close()
    with pytest.raises(UsageError, match="unknown request form"):
        PPOTrainer.from_config(compose("train_crawler_ppo", tiny_overrides(tiny_model_dir, ppo_papers, tmp_path)
                                       + ["queries.train.phrasings=[shouting]"]), Path(tmp_path))


def test_a_warning_before_the_first_step_leaves_before_the_start_evaluation(tiny_model_dir, ppo_papers, tmp_path):
    """The handler the command's entry installed caught a warning during set-up: train() leaves (exit 75) before
    evaluating every held-out query, with nothing to save; a warning during that evaluation checkpoints it."""
    from scholar_agents.runtime.preemption import PreemptionHandler

    handler = PreemptionHandler.install()
    try:
        tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "early", eval_at_start="true")
        handler.request("SIGUSR1")  # as if it came while the models were built
        with pytest.raises(SystemExit) as e:
            tr.train()
        tr.close()
        assert e.value.code == 75
        assert not (tmp_path / "early" / "trajectories_eval_start.jsonl").exists()
        assert not (tmp_path / "early" / "checkpoints").exists() and not (tmp_path / "early" / "metrics.jsonl").exists()
        assert signal.getsignal(signal.SIGUSR1) == handler._on_signal  # the entry's handler stays theirs to remove
    finally:
        handler.uninstall()

    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "during", eval_at_start="true")
    evaluate = tr.evaluate
    tr.evaluate = lambda tag: (evaluate(tag), os.kill(os.getpid(), signal.SIGUSR1))[0]
    with pytest.raises(SystemExit) as e:
        tr.train()
    tr.close()
    assert e.value.code == 75
    ckpt = tmp_path / "during" / "checkpoints" / "step_000000"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == 0 and "crawler_recall" in state["history"]["eval_start"]
    resumed = make_trainer(tiny_model_dir, ppo_papers, tmp_path / "during", eval_at_start="true", total_steps=1)
    try:
        assert resumed.start_step == 0 and "eval_start" in resumed.history  # not evaluated again
    finally:
        resumed.close()
