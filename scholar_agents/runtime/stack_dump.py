"""``kill -QUIT <pid>`` (Ctrl-\\ in a terminal) prints every thread's Python stack to stderr and the command goes on,
as ``kill -3`` does for a JVM: where a hung job is stuck (a collective, a generate loop, a lock) without a debugger.
SIGQUIT because SIGTERM / SIGUSR1 / SIGUSR2 already mean "checkpoint and requeue" (runtime/preemption.py); its
default (quit with a core dump) is no loss for a training job. ``scripts/gpu_check.py`` sends it to a run's
workers before killing the run at its plan."""

from __future__ import annotations

import faulthandler
import signal
import sys

SIGNAL_NAME = "SIGQUIT"


def install() -> bool:
    """Register the dump (idempotent). False where the platform has no SIGQUIT (Windows)."""
    sig = getattr(signal, SIGNAL_NAME, None)
    if sig is None:
        return False
    faulthandler.register(sig, file=sys.stderr, all_threads=True, chain=False)
    return True
