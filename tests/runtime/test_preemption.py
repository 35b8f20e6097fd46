"""The preemption window in ``runtime/preemption.py``: the Slurm signal lead and torchrun's shutdown window as the
launchers export them, and the one-line warnings of the start-up check. (The signal handler and the batch-shell
glue: tests/runtime/test_slurm_glue.py; on a real cluster: tests/runtime/test_slurm_cluster.py.)"""

from __future__ import annotations

import pytest

from scholar_agents.runtime import preemption

WINDOW_VARS = ("SCHOLAR_SIGNAL_LEAD_S", "SCHOLAR_SHUTDOWN_GRACE_S", "SCHOLAR_SHUTDOWN_GRACE_FIXED",
               "TORCHELASTIC_RUN_ID", "PET_SHUTDOWN_TIMEOUT",
               "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "RANK", "SLURM_PROCID")


@pytest.fixture
def env(monkeypatch):
    for var in WINDOW_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_lead_and_torchrun_window_from_the_environment(env):
    assert preemption.signal_lead_s() is None and preemption.torchrun_shutdown_s() is None
    env.setenv("SCHOLAR_SIGNAL_LEAD_S", "300")
    assert preemption.signal_lead_s() == 300
    env.setenv("TORCHELASTIC_RUN_ID", "4242")  # started by torchrun: torch 2.13's default window
    assert preemption.torchrun_shutdown_s() == preemption.TORCHRUN_DEFAULT_SHUTDOWN_S == 30
    env.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "90")  # torch's own variable
    assert preemption.torchrun_shutdown_s() == 90
    env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "600")  # what slurm/job_env.sh passed as --shutdown-timeout
    assert preemption.torchrun_shutdown_s() == 600
    env.setenv("SCHOLAR_SIGNAL_LEAD_S", "soon")
    assert preemption.signal_lead_s() is None  # logged, not raised


def test_window_warnings_are_one_line_each_naming_both_figures():
    lead_short, torchrun_short = preemption.preemption_window_warnings(300, 412.4, "one PPO step + checkpoint", 30)
    for line in (lead_short, torchrun_short):
        assert "\n" not in line and line.startswith("preemption window: ")
    assert "300 s before its time limit" in lead_short and "one PPO step + checkpoint needs ~412 s" in lead_short
    assert "SIGKILLs its workers 30 s after" in torchrun_short and "Slurm's 300 s signal lead" in torchrun_short
    assert "cluster.shutdown_grace_s=300 or more" in torchrun_short
    assert preemption.preemption_window_warnings(600, 412, "x", 600) == []  # covered
    assert preemption.preemption_window_warnings(None, 412, "x", 30) == []  # lead unknown: nothing to compare
    assert preemption.preemption_window_warnings(300, None, "x", None) == []  # no estimate, not under torchrun


def test_a_torchrun_without_shutdown_timeout_is_not_told_to_raise_cluster_shutdown_grace_s(env):
    """torch 2.10's torchrun has no --shutdown-timeout: scholar_torchrun exports its fixed 30 s and says so; the
    warning then names the 30 s a step + checkpoint must fit in, not a setting that cannot apply."""
    env.setenv("SCHOLAR_SIGNAL_LEAD_S", "300")
    env.setenv("TORCHELASTIC_RUN_ID", "4242")
    env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "30")
    env.setenv("SCHOLAR_SHUTDOWN_GRACE_FIXED", "1")
    (line,) = preemption.check_preemption_window()
    assert "has no --shutdown-timeout" in line and "within 30 s" in line and "set cluster.shutdown_grace_s" not in line
    env.delenv("SCHOLAR_SHUTDOWN_GRACE_FIXED")
    (line,) = preemption.check_preemption_window()
    assert "set cluster.shutdown_grace_s=300 or more" in line


def test_check_logs_on_rank_0_only(env, caplog):
    env.setenv("SCHOLAR_SIGNAL_LEAD_S", "120")
    env.setenv("TORCHELASTIC_RUN_ID", "4242")
    env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "5")
    with caplog.at_level("INFO", logger="scholar_agents.runtime.preemption"):
        (line,) = preemption.check_preemption_window(10.0, "one probe step")
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [line]
    caplog.clear()
    env.setenv("RANK", "1")
    with caplog.at_level("INFO", logger="scholar_agents.runtime.preemption"):
        assert len(preemption.check_preemption_window(10.0, "one probe step")) == 1
    assert not caplog.records  # the other ranks say nothing
    env.setenv("RANK", "0")
    env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "120")
    with caplog.at_level("INFO", logger="scholar_agents.runtime.preemption"):
        assert preemption.check_preemption_window(10.0, "one probe step") == []
    assert "Slurm signal lead 120 s, torchrun shutdown window 120 s, one probe step ~10 s" in caplog.text


def test_a_multi_node_world_whose_hostname_is_loopback_is_refused_without_an_interface(monkeypatch):
    """The loopback trap: a world over 2 nodes, no gloo interface, the hostname resolving to 127.x -> refused in one
    line before any process group; a world on one node, a named interface or a routable address -> allowed.
    (On the two-node cluster, for real: tests/runtime/test_two_node_cluster.py.)"""
    import socket

    from scholar_agents.validation import UsageError

    addr = {"node1": "127.0.1.1"}
    monkeypatch.setattr(socket, "gethostname", lambda: "node1")
    monkeypatch.setattr(socket, "gethostbyname", lambda host: addr[host])  # /etc/hosts, as Debian writes it
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    refusal = preemption.loopback_refusal()
    assert refusal is not None and "\n" not in refusal
    assert "spans 2 nodes" in refusal and "node1 resolves to 127.0.1.1" in refusal
    assert "cluster.socket_ifname" in refusal
    with pytest.raises(UsageError, match="loopback"):
        preemption.export_network_env(None)
    with pytest.raises(UsageError, match="loopback"):  # NCCL's syntax names no interface for gloo
        preemption.export_network_env("^docker0")
    monkeypatch.delenv("NCCL_SOCKET_IFNAME")
    assert preemption.export_network_env("eth0")["GLOO_SOCKET_IFNAME"] == "eth0"
    assert preemption.loopback_refusal() is None
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # one node: loopback is where the ranks meet
    assert preemption.loopback_refusal() is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    addr["node1"] = "10.77.0.11"
    assert preemption.loopback_refusal() is None
