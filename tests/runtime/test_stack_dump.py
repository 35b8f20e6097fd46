"""kill -QUIT prints a running command's stacks and the command goes on (runtime/stack_dump.py)."""

import signal
import subprocess
import sys
import time

import pytest

from tests.fixtures.script_loader import load_script

WORKER = """
import sys, time
from scholar_agents.runtime import stack_dump
assert stack_dump.install()
def waiting_in_a_named_frame():
    print("ready", flush=True)
    for _ in range(100):
        time.sleep(0.05)
waiting_in_a_named_frame()
print("went on", flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGQUIT"), reason="no SIGQUIT on this platform")
def test_sigquit_dumps_every_threads_stack_and_the_process_goes_on():
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGQUIT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "went on" in out  # not killed by it (SIGQUIT's default would have been a core dump)
    assert "most recent call first" in err and "waiting_in_a_named_frame" in err


def test_the_cli_installs_it_before_running_a_command():
    import inspect

    from scholar_agents import cli

    assert "stack_dump.install()" in inspect.getsource(cli.main)


def test_gpu_check_sends_it_to_a_runs_workers_before_the_kill(tmp_path):
    """scripts/gpu_check.py's torchrun() at its plan: the log holds the worker's stack, then the kill."""
    gpu_check = load_script("gpu_check")
    script = tmp_path / "scholar_agents_hang.py"  # the name the dump looks for in a worker's command line
    script.write_text(WORKER.replace("range(100)", "range(100000)"))
    log = tmp_path / "run.log"
    t0 = time.perf_counter()
    rc, _ = gpu_check.torchrun([str(script)], log, timeout=20)
    assert rc == 124 and time.perf_counter() - t0 < 90
    text = log.read_text()
    assert "the workers' stacks (SIGQUIT)" in text and "waiting_in_a_named_frame" in text, text[-3000:]
