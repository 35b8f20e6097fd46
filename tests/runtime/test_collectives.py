"""NCCL-safe collectives: one module holds every torch.distributed collective, and it puts tensors where
the process group takes them.

- No other file of the package calls a collective directly (an AST walk).
- The device choice: the CPU under gloo or a group with a ``cpu:`` backend, ``cuda:LOCAL_RANK`` under NCCL.
- Two real processes on a group that REJECTS CPU tensors the way NCCL does: ``init_process_group("cuda:gloo")`` maps
  only CUDA tensors to a backend, so a CPU tensor fails with NCCL's own error ("No backend type associated with
  device type cpu"). On a CUDA host the module's collectives succeed there (their tensors go to ``cuda:LOCAL_RANK``);
  on this CPU host they stop with the module's one-line error naming the CUDA device it needs, not NCCL's. Then the
  same two processes under plain gloo: every function's result, and the evaluation's shard + gather.
- The Slurm probe's placement (GPU + DDP ``device_ids`` under NCCL, CPU under gloo), and a 2-process torchrun probe
  whose process group really got ``cluster.dist_timeout_minutes``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scholar_agents.runtime import collectives
from tests.paths import REPO

PACKAGE = REPO / "scholar_agents"
MODULE = PACKAGE / "runtime" / "collectives.py"
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "all_to_all",
               "all_to_all_single", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "reduce",
               "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list"}
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
       "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


# ---------------------------------------------------------------------------------------------------------------
# nothing but the module calls torch.distributed collectives


def direct_collective_calls(path: Path, root: Path = REPO) -> list[str]:
    """``file:line name`` of each collective called on torch.distributed (under any alias) or imported from it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases = {"torch.distributed"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "torch.distributed" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            aliases |= {a.asname or a.name for a in node.names if a.name == "distributed"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.distributed"):
            found += [f"{path.relative_to(root)}:{node.lineno} import {a.name}" for a in node.names
                      if a.name in COLLECTIVES]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in COLLECTIVES:
            if ast.unparse(node.func.value) in aliases:
                found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node.func)}")
    return found


def test_no_direct_collectives_outside_the_module():
    calls = [c for f in sorted(PACKAGE.rglob("*.py")) if f != MODULE for c in direct_collective_calls(f)]
    assert not calls, "call scholar_agents.runtime.collectives instead (NCCL takes CUDA tensors only):\n" + \
        "\n".join(calls)
    assert direct_collective_calls(MODULE)  # the walker does see calls (the module's own)


def test_the_walker_sees_every_spelling(tmp_path):
    f = tmp_path / "spellings.py"
    f.write_text("import torch\nimport torch.distributed as dist\nfrom torch import distributed as d2\n"
                 "from torch.distributed import barrier\n"
                 "dist.all_reduce(t)\nd2.all_gather(o, t)\ntorch.distributed.broadcast(t, 0)\ndist.get_rank()\n")
    found = direct_collective_calls(f, root=tmp_path)
    assert [x.split(" ", 1)[1] for x in found] == ["import barrier", "dist.all_reduce", "d2.all_gather",
                                                   "torch.distributed.broadcast"]


# ---------------------------------------------------------------------------------------------------------------
# the device choice


def test_collective_device_follows_the_backend(monkeypatch):
    assert collectives.backend_device_types("nccl") == ["cuda"]
    assert collectives.backend_device_types("cpu:gloo,cuda:nccl") == ["cpu", "cuda"]
    assert collectives.collective_device("gloo") == torch.device("cpu")
    assert collectives.collective_device("cpu:gloo,cuda:nccl") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert collectives.collective_device("nccl") == torch.device("cuda", 3)
    assert collectives.collective_device("cuda:gloo") == torch.device("cuda", 3)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # a Slurm task bound to its one GPU
    assert collectives.collective_device("nccl") == torch.device("cuda", 0)


def test_no_group_means_one_process_and_no_communication():
    assert not collectives.is_distributed() and collectives.world_size() == 1 and collectives.rank() == 0
    t = torch.tensor([2.0])
    assert collectives.all_reduce(t) is t and collectives.all_gather_int(4) == [4]
    assert collectives.mean_over_processes({"a": 1.5}) == {"a": 1.5} and collectives.any_process(True)
    assert collectives.all_gather_object({"x": 1}) == [{"x": 1}] and collectives.broadcast_object(3) == 3
    collectives.barrier()
    assert collectives.describe() == "no process group (one process)"
    with pytest.raises(ValueError, match="dist_timeout_minutes must be > 0"):
        collectives.timeout(0)


def test_cluster_timeout_is_a_config_switch():
    from scholar_agents.hydra_app import compose
    from scholar_agents.runtime.cluster import ClusterConfig

    assert compose("train_crawler_ppo", []).cluster.dist_timeout_minutes == 120.0  # the PPO default: long
    assert compose("slurm_probe", ["cluster.dist_timeout_minutes=7"]).cluster.dist_timeout_minutes == 7.0
    with pytest.raises(ValueError, match="cluster.dist_timeout_minutes must be > 0"):
        ClusterConfig(dist_timeout_minutes=0)


# ---------------------------------------------------------------------------------------------------------------
# two real processes


def _worker(store_dir: str, out: str) -> None:
    """One rank (RANK / WORLD_SIZE from the environment): the NCCL-like group, then gloo."""
    import torch.distributed as dist

    from scholar_agents.train.ppo.tensors import gather_in_rank_order, gather_to_main, split_even

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    res: dict = {}

    # 1. a group that takes CUDA tensors only, like NCCL
    dist.init_process_group("cuda:gloo", init_method=f"file://{store_dir}/cuda_gloo", rank=rank, world_size=world,
                            timeout=collectives.timeout(2))
    try:
        dist.all_reduce(torch.ones(1))  # what the trainer did before: a CPU tensor
        res["raw_cpu"] = "accepted"
    except RuntimeError as e:
        res["raw_cpu"] = str(e)
    try:
        t = collectives.all_reduce(torch.tensor([float(rank + 1)]))
        res["module"] = {"sum": t.item(), "device": str(t.device), "ints": collectives.all_gather_int(rank + 5),
                         "collective_device": str(collectives.collective_device())}
        collectives.barrier()
    except RuntimeError as e:
        res["module"] = str(e)
    dist.destroy_process_group()

    # 2. plain gloo: every function's result
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/gloo", rank=rank, world_size=world,
                            timeout=collectives.timeout(3))
    t = torch.tensor([float(rank + 1)])
    same = collectives.all_reduce(t) is t
    grid = collectives.all_reduce(torch.full((2, 2), float(rank), dtype=torch.float64))
    queries = [f"q{i}" for i in range(5)]
    res["gloo"] = {
        "sum": t.item(), "in_place": same, "grid": grid.tolist(),
        "max": collectives.all_reduce(torch.tensor([rank * 10]), op="max").item(),
        "ints": collectives.all_gather_int(rank * 10 + 1),
        "mean": collectives.mean_over_processes({"a": float(rank), "b": 2.0 * rank}),
        # rank 1's step measured no loss (no session) and its return is NaN: the same tensor shape on both ranks
        "ragged": collectives.mean_over_processes({"a": float(rank), **({"loss": 4.0} if rank == 0 else {}),
                                                   "ret": float("nan") if rank == 1 else 2.0}),
        "any_one": collectives.any_process(rank == 1), "any_none": collectives.any_process(False),
        "objects": collectives.all_gather_object({"r": rank}),
        "broadcast": collectives.broadcast_object("from rank 0" if rank == 0 else None),
        "eval_rows": gather_in_rank_order([{"q": q} for q in split_even(queries, world)[rank]]),
        "main_rows": gather_to_main([{"q": q} for q in split_even(queries, world)[rank]]),  # rank 0 only
        "describe": collectives.describe(3.0),
    }
    collectives.close_before_exit()  # what `scholar` does after a job: both ranks meet, then the group goes
    res["gloo"]["closed"] = not dist.is_initialized()
    collectives.close_before_exit()  # and again is a no-op (a job that destroyed its own group, e.g. slurm probe)
    Path(out).write_text(json.dumps(res))


def _run_ranks(tmp_path: Path, world: int = 2) -> list[dict]:
    procs = []
    for r in range(world):
        env = {**ENV, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world)}
        procs.append(subprocess.Popen([sys.executable, __file__, "worker", str(tmp_path), str(tmp_path / f"r{r}.json")],
                                      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, o in zip(procs, outs):
        assert p.returncode == 0, o[-3000:]
    return [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(world)]


def test_two_processes_nccl_like_group_then_gloo(tmp_path):
    ranks = _run_ranks(tmp_path)
    for r, res in enumerate(ranks):
        # the failure the module exists for: NCCL's error on a CPU tensor
        assert "No backend type associated with device type cpu" in res["raw_cpu"]
        if torch.cuda.is_available():  # the module moved its tensors to the rank's GPU, and got the right answers
            index = r % torch.cuda.device_count()
            assert res["module"] == {"sum": 3.0, "device": "cpu", "ints": [5, 6],
                                     "collective_device": f"cuda:{index}"}
        else:  # it asked for CUDA (the only device this group serves) and said so in one line, not NCCL's error
            assert "takes cuda tensors only" in res["module"] and "no CUDA device" in res["module"], res["module"]
        g = res["gloo"]
        assert g["sum"] == 3.0 and g["in_place"] and g["grid"] == [[1.0, 1.0], [1.0, 1.0]] and g["max"] == 10
        assert g["ints"] == [1, 11] and g["mean"] == {"a": 0.5, "b": 1.0}
        assert g["ragged"] == {"a": 0.5, "loss": 4.0, "loss/ranks": 1.0, "ret": 2.0, "ret/ranks": 1.0}
        assert g["any_one"] is True and g["any_none"] is False
        assert g["objects"] == [{"r": 0}, {"r": 1}] and g["broadcast"] == "from rank 0"
        # evaluate(): each rank crawls its consecutive share; the gathered rows are the queries in their order
        assert [x["q"] for x in g["eval_rows"]] == ["q0", "q1", "q2", "q3", "q4"]
        assert [x["q"] for x in g["main_rows"]] == (["q0", "q1", "q2", "q3", "q4"] if r == 0 else [])
        assert g["describe"] == "backend gloo, world 2, timeout 3 min, collectives on cpu"
        assert g["closed"]


# ---------------------------------------------------------------------------------------------------------------
# the Slurm probe


def test_probe_placement_follows_the_backend(monkeypatch):
    from scholar_agents.runtime.slurm_probe import _placement

    assert _placement(None) == (torch.device("cpu"), {})
    assert _placement("gloo") == (torch.device("cpu"), {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert _placement("nccl") == (torch.device("cuda", 2), {"device_ids": [2], "output_device": 2})


def test_probe_two_processes_under_torchrun_get_the_configured_timeout(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "scholar_agents", "slurm", "probe", "probe.steps=3", "cluster.dist_timeout_minutes=7",
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["world_size"] == 2 and m["allreduce_ok"] and m["backend"] == "gloo" and m["device"] == "cpu"
    assert m["dist_timeout_minutes"] == 7.0
    log = proc.stdout + proc.stderr + "".join(p.read_text() for p in run_dir.rglob("*.log"))
    assert "backend gloo, world 2, timeout 7 min, collectives on cpu" in log


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker(sys.argv[2], sys.argv[3])
