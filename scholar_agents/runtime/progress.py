"""Progress: a redrawn tqdm bar on a terminal, a plain log line every ~10 % or 30 s anywhere else.

A tqdm bar redraws itself with ``\\r``; in a log file, a pipe or a Slurm output file every redraw stays, so one
``scholar papers build`` left over a hundred bars on one line. Every bar the package makes goes through
:func:`progress_bar`: where its stream (stderr) is a terminal (or a notebook) it is tqdm's own bar, elsewhere a
:class:`LogLines` that draws nothing and writes one line when another tenth of the total is done, or when 30 s have
passed (a bar without a total), and a last line when it closes. The lines go to this module's logger where logging
is configured at INFO (a command's Hydra log: console and ``<task>.log``), else straight to the stream.

Bars made inside other libraries (HF datasets' map, transformers' Trainer, the hub's downloads) are switched off
off the terminal by ``library_bars.library_bars_off_unless_terminal``; where the package asks a library for its bar
(sentence-transformers' "Batches", bm25s' "Tokenize texts", vLLM's "Processed prompts") it asks
:func:`bars_on_terminal` first, or hands vLLM :func:`progress_bar` as its bar factory.
"""

from __future__ import annotations

import logging
import math
import time

from tqdm.auto import tqdm as auto_tqdm
from tqdm.std import tqdm as std_tqdm

from scholar_agents.runtime.library_bars import is_terminal

log = logging.getLogger(__name__)

LINE_EVERY_FRACTION = 0.1  # of the total: ~10 lines for a bar with a total
LINE_EVERY_S = 30.0  # at most this long without a line while work is done (and the only rule without a total)


def bars_on_terminal(file=None) -> bool:
    """Whether a bar written to ``file`` (stderr by default) is seen redrawn: a terminal, or a notebook (tqdm.auto
    draws a widget there, whatever the stream)."""
    return "notebook" in auto_tqdm.__module__ or is_terminal(file)


def progress_bar(iterable=None, **kwargs) -> std_tqdm:
    """``tqdm(iterable, **kwargs)`` on a terminal; a :class:`LogLines` with the same arguments anywhere else.
    ``disable=None`` (tqdm: "off when not a terminal") counts as ``False``: off the terminal is where the lines are
    wanted. Also usable as a bar factory (vLLM's ``use_tqdm``)."""
    if kwargs.get("disable") is None:
        kwargs["disable"] = False  # explicit, so an exported TQDM_DISABLE never silences the package's own bars
    if bars_on_terminal(kwargs.get("file")):
        return auto_tqdm(iterable, **kwargs)
    return LogLines(iterable, **kwargs)


class LogLines(std_tqdm):
    """A tqdm that never redraws: a plain line when another ``LINE_EVERY_FRACTION`` of the total is done or
    ``LINE_EVERY_S`` have passed with work done since the last line, and one at the end. A transient bar
    (``leave=False``: a batch loop inside a bigger step) stays silent unless it runs longer than ``LINE_EVERY_S``."""

    def __init__(self, *args, **kwargs):
        # set before tqdm's __init__, which already displays once
        self._last_line_t = time.monotonic()
        self._last_line_n = None
        self._next_fraction = LINE_EVERY_FRACTION
        self._quiet_until = self._last_line_t + (LINE_EVERY_S if kwargs.get("leave") is False else 0.0)
        super().__init__(*args, **kwargs)

    def line(self) -> str:
        """``desc: 40% 400/1000 [00:12<00:18, 33.1it/s, postfix]`` (without a total: ``desc: 400 [00:12, ...]``);
        the rate is the average since the start, not tqdm's smoothed one: lines are far apart."""
        fmt = ("{percentage:.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]" if self.total
               else "{n_fmt}{unit} [{elapsed}, {rate_fmt}{postfix}]")
        stats = self.format_meter(**{**self.format_dict, "bar_format": fmt, "rate": None, "ncols": None, "prefix": ""})
        return f"{self.desc.removesuffix(': ')}: {stats}" if self.desc else stats

    def _write(self) -> None:
        text = self.line()
        if log.isEnabledFor(logging.INFO) and log.hasHandlers():
            log.info("%s", text)
        else:
            self.fp.write(text + "\n")
            self.fp.flush()
        self._last_line_t, self._last_line_n = time.monotonic(), self.n

    def display(self, msg=None, pos=None):
        now = time.monotonic()
        if msg is not None or now < self._quiet_until or self.n == self._last_line_n:
            return True  # msg: tqdm clearing its line; nothing to say
        due = now - self._last_line_t >= LINE_EVERY_S
        if self.total:
            done = self.n / self.total
            if done >= self._next_fraction - 1e-9:
                due = True
            if due:  # the next tenth still ahead (a jump of several tenths writes one line)
                self._next_fraction = (math.floor(done / LINE_EVERY_FRACTION + 1e-9) + 1) * LINE_EVERY_FRACTION
        if due:
            self._write()
        return True

    def clear(self, nolock=False):
        pass  # nothing drawn, nothing to erase (tqdm.write() clears every bar before it prints)

    def moveto(self, n):
        pass  # no cursor moves in a log

    def close(self):
        """The last line (unless the last one written already says it), then tqdm's own bookkeeping, without the
        newline and carriage return tqdm's close writes after a bar."""
        if self.disable:
            return
        if self.n != self._last_line_n and time.monotonic() >= self._quiet_until:
            self._write()
        self.disable = True
        self._decr_instances(self)
