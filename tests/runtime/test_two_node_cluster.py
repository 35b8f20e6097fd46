"""Two nodes on one machine (slurm/two_node_cluster.sh: two network namespaces, one slurmd each, the controller on
their bridge): `sbatch --nodes=2` runs the tiny crawler PPO through slurm/job_env.sh as slurm/crawler_ppo.sbatch
does (`papers prepare`, then srun + torchrun on both nodes, c10d rendezvous at node1 over the veth addresses, gloo
on cluster.socket_ifname=eth0), for a per-session estimator (paper_mc) and a critic-free one (grpo). Without
socket_ifname the same job stops at start-up in one line, because each node's hostname resolves to loopback
(the multi-node trap: gloo would advertise 127.0.1.1 and the first collective hang)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.ppo import tiny_overrides
from tests.fixtures.slurm import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOB_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=3G
#SBATCH --time=00:10:00
source "$SCHOLAR_REPO/slurm/job_env.sh"
scholar_single papers prepare "$@"
scholar_torchrun train crawler_ppo "$@" papers.prebuilt=true
"""
STEPS = 2
LOOPBACK_REFUSAL = "resolves to 127.0.1.1 (loopback)"


def _job_env(cluster, outputs: Path) -> dict[str, str]:
    """This checkout and venv in the job; nothing of this shell's distributed or network settings."""
    stale = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TORCHELASTIC_RUN_ID")
    env = cluster.env(SCHOLAR_OUTPUTS=str(outputs), SCHOLAR_REPO=str(REPO), PYTHONPATH=str(REPO),
                      SCHOLAR_VENV=str(Path(sys.executable).parents[1]), OMP_NUM_THREADS="1",
                      SCHOLAR_SHUTDOWN_GRACE_S="30")
    return {k: v for k, v in env.items() if k not in stale and not k.startswith("SLURM_") or k == "SLURM_CONF"}


@pytest.fixture(scope="module")
def two_node_jobs(two_node_cluster, tiny_model_dir, ppo_papers, tmp_path_factory):
    """Three `sbatch --nodes=2` jobs submitted at once (each takes one CPU of each node, so two run side by side):
    name -> (exit code, log text, run dir, seconds from submission to the end)."""
    tmp = tmp_path_factory.mktemp("two_nodes")
    script = tmp / "ppo_two_nodes.sbatch"
    script.write_text(JOB_SCRIPT)
    base = [o for o in tiny_overrides(tiny_model_dir, ppo_papers, "unused", total_steps=STEPS, policy_freeze_steps=0,
                                      expand_sessions="[]", queries_per_step=2)
            if not o.startswith("paths.output_dir=")]
    jobs = {"paper_mc": [*base, "cluster.socket_ifname=eth0"],
            "grpo": [*base, "ppo.estimator=grpo", "ppo.group_size=2", "cluster.socket_ifname=eth0"],
            "loopback": base}
    procs = {}
    for name, overrides in jobs.items():
        log = tmp / f"{name}.out"
        cmd = ["sbatch", "--wait", "--parsable", f"--job-name=two_{name}", f"--output={log}",
               f"--partition={two_node_cluster.partition}", str(script), *overrides]
        procs[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=_job_env(two_node_cluster, tmp / name), cwd=tmp), log, time.time())
    results = {}
    for name, (proc, log, t0) in procs.items():
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            subprocess.run(["scancel", f"--name=two_{name}"], env=two_node_cluster.env(), check=False)
            out, err = proc.communicate()
        job = out.strip().splitlines()[0] if out.strip() else "?"
        results[name] = (proc.returncode, log.read_text(errors="replace") + err if log.exists() else err,
                         tmp / name / "slurm" / f"two_{name}" / job, time.time() - t0)
    return results


@pytest.mark.parametrize("estimator", ["paper_mc", "grpo"])
def test_tiny_ppo_trains_across_two_nodes(two_node_jobs, estimator):
    code, log, run_dir, _ = two_node_jobs[estimator]
    assert code == 0, log[-6000:]
    # job_env.sh: the allocation's first node hosts the rendezvous, by the name its namespace's hosts file resolves
    assert "on node[1-2]: 2 node(s) x 1 proc(s), rendezvous node1:" in log, log[-4000:]
    # one worker per node (local rank 0 of each), one world of 2 over gloo on each node's eth0
    for rank in (0, 1):
        line = next((x for x in log.splitlines() if f"(torchrun): rank {rank} of 2, local rank 0" in x), "")
        assert "rendezvous node1:" in line and "GLOO_SOCKET_IFNAME=eth0" in line, log[-4000:]
        assert f"PPO: rank {rank}/2 on cpu" in log, log[-4000:]
    assert log.count("process group: backend gloo, world 2") == 2 and LOOPBACK_REFUSAL not in log
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), rows
    assert all(math.isfinite(r["actor/pg_loss"]) and r["actor/frozen"] == 0.0 for r in rows), rows
    # grpo's whole-crawl groups (group_size 2 crawls of each query) and no value model
    assert ("group/return_std" in rows[0]) == (estimator == "grpo"), sorted(rows[0])
    assert (rows[0]["critic/lr"] > 0) == (estimator == "paper_mc"), rows[0]


def test_without_socket_ifname_the_two_node_job_refuses_in_one_line_instead_of_hanging(two_node_jobs):
    code, log, _, seconds = two_node_jobs["loopback"]
    assert code != 0, log[-4000:]
    lines = [line for line in log.splitlines() if LOOPBACK_REFUSAL in line]
    # each node's worker refuses before any process group exists, in one line naming the switch
    assert sorted(line.split("the hostname ")[1].split()[0] for line in lines) == ["node1", "node2"], log[-4000:]
    assert all(line.startswith("scholar train crawler_ppo: error: this world spans 2 nodes")
               and "cluster.socket_ifname" in line for line in lines), lines
    assert "process group: backend" not in log
    assert seconds < 300, f"the refusal took {seconds:.0f} s"
