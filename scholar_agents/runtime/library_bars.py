"""Other libraries' progress bars, switched off where nobody sees them redrawn (a log file, a pipe, Slurm).

Each library reads its switch once: tqdm when it is imported (``TQDM_DISABLE``, the default of every bar whose caller
passes no ``disable=``: transformers' Trainer, vLLM's loader), datasets and the hub likewise. So the CLI calls
:func:`library_bars_off_unless_terminal` first thing, before anything imports tqdm, and this module imports nothing
that does; a library already imported (an in-process caller of the runner) gets its own switch function instead.
The package's own bars (``runtime/progress.py``) pass ``disable=`` and become log lines instead."""

from __future__ import annotations

import importlib
import os
import sys

SWITCHES = ("TQDM_DISABLE",  # every tqdm bar whose caller does not pass disable=
            "HF_DATASETS_DISABLE_PROGRESS_BARS",  # datasets' map / filter / load bars
            "HF_HUB_DISABLE_PROGRESS_BARS")  # the hub's downloads, and transformers' own bars (it asks the hub's)

# where an already imported library keeps the same switch: (package, variable, module, function)
_IMPORTED = (("datasets", "HF_DATASETS_DISABLE_PROGRESS_BARS", "datasets.utils.tqdm", "disable_progress_bars"),
             ("huggingface_hub", "HF_HUB_DISABLE_PROGRESS_BARS", "huggingface_hub.utils", "disable_progress_bars"),
             ("transformers", "HF_HUB_DISABLE_PROGRESS_BARS", "transformers.utils.logging", "disable_progress_bar"))


def is_terminal(stream=None) -> bool:
    """Whether ``stream`` (stderr by default) is a terminal."""
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # a stream without isatty, or a closed one
        return False


def library_bars_off_unless_terminal() -> bool:
    """Off a terminal, switch off the progress bars of the libraries the package calls (``SWITCHES``); a value the
    user exported wins. True when it switched them off."""
    if is_terminal():
        return False
    for var in SWITCHES:
        os.environ.setdefault(var, "1")
    for package, var, module, switch in _IMPORTED:
        if package in sys.modules and os.environ[var] == "1":
            getattr(importlib.import_module(module), switch)()
    return True
