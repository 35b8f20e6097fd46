"""Progress off a terminal is a plain line every ~10 % or 30 s; on a terminal the bar stays (runtime/progress.py).

The log-file and terminal cases run a real loop in a child process whose stderr is a file or a pseudo-terminal; the
line rules are checked in-process on a fake clock."""

from __future__ import annotations

import errno
import fcntl
import io
import logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import types

import pytest

from scholar_agents.runtime import progress as progress_mod
from scholar_agents.runtime.library_bars import SWITCHES, library_bars_off_unless_terminal
from scholar_agents.runtime.progress import LogLines, bars_on_terminal, progress_bar
from tests.paths import REPO

LOOP = """
import logging, sys, time
if sys.argv[1] == "logging":  # a command's logging (Hydra's console handler, here on stderr)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="[%(name)s] %(message)s")
from scholar_agents.runtime.progress import progress_bar
for _ in progress_bar(range(1000), desc="loop", unit="step"):
    time.sleep(0.001)
print("finished", flush=True)
"""


def _run_loop(how: str, stderr) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOOP, how], cwd=REPO, stdout=subprocess.PIPE, stderr=stderr,
                          timeout=120, check=True)


@pytest.mark.parametrize("how", ["plain", "logging"])
def test_a_log_file_gets_a_line_every_tenth_and_no_redrawn_bar(tmp_path, how):
    """1000 steps (~1.2 s) with stderr redirected to a file: about ten lines, the last one at 100 %, no ``\\r``.
    With logging configured at INFO the lines are log records of the progress logger (a command's Hydra log)."""
    err = tmp_path / "stderr.log"
    with err.open("wb") as f:
        assert _run_loop(how, f).stdout.decode().strip() == "finished"
    text = err.read_text()
    lines = [line for line in text.splitlines() if "loop:" in line]
    assert "\r" not in text and "|" not in text  # no redraws, no bar
    assert 5 <= len(lines) <= 12, text
    assert "100% 1000/1000" in lines[-1] and "step/s" in lines[-1]
    if how == "logging":
        assert all(line.startswith("[scholar_agents.runtime.progress] loop: ") for line in lines), text


def test_a_terminal_keeps_the_redrawn_bar():
    """The same loop with stderr on a pseudo-terminal: tqdm's bar, redrawn in place."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.Popen([sys.executable, "-c", LOOP, "plain"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=slave)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError as e:  # the child closed the terminal (Linux: EIO)
            if e.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    drawn = b"".join(chunks).decode(errors="replace")
    assert drawn.count("\r") >= 3 and "%|" in drawn, drawn
    assert "1000/1000" in drawn


class Clock:
    def __init__(self):
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch, caplog):
    """A fake clock for the line rules, and the lines as log records."""
    c = Clock()
    monkeypatch.setattr(progress_mod, "time", types.SimpleNamespace(monotonic=c.monotonic))
    caplog.set_level(logging.INFO, logger=progress_mod.log.name)
    return c


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == progress_mod.log.name]


def test_a_bar_without_a_total_writes_a_line_after_30_s_with_work_done_and_one_at_the_end(clock, caplog):
    bar = LogLines(desc="store papers.sqlite", unit=" papers", mininterval=0, miniters=1)

    def at(t, n=None):
        clock.t = t
        bar.update(n) if n else bar.refresh()
        return [line.split(" [")[0].removeprefix("store papers.sqlite: ") for line in _lines(caplog)]

    assert at(1, 5) == at(10, 5) == []
    assert at(31, 5) == ["15 papers"]
    assert at(40, 1) == ["15 papers"]
    assert at(75) == ["15 papers", "16 papers"]  # tqdm's monitor refreshes a bar that waits: work done since
    assert at(120) == ["15 papers", "16 papers"]  # no work since the last line: nothing to say
    assert at(125, 4) == ["15 papers", "16 papers", "20 papers"]
    at(130, 2)
    bar.close()
    assert at(130) == ["15 papers", "16 papers", "20 papers", "22 papers"]


def test_a_bar_with_a_total_writes_a_line_per_tenth_and_one_for_a_jump_over_several(clock, caplog):
    bar = LogLines(total=1000, desc="encode papers", mininterval=0, miniters=1)
    for n in (50, 300, 10, 50, 590):  # 5 %, 35 % (a jump over three tenths), 36 %, 41 %, 100 %
        bar.update(n)
    bar.close()  # the 100 % line was written: no second one
    assert [line.split(" [")[0] for line in _lines(caplog)] == ["encode papers: 35% 350/1000",
                                                                 "encode papers: 41% 410/1000",
                                                                 "encode papers: 100% 1000/1000"]


def test_a_transient_bar_is_silent_unless_it_runs_longer_than_30_s(clock, caplog):
    quick = LogLines(total=4, desc="hf generate", leave=False, mininterval=0, miniters=1)
    for _ in range(4):
        clock.t += 1
        quick.update(1)
    quick.close()
    assert _lines(caplog) == []
    slow = LogLines(total=4, desc="hf generate", leave=False, mininterval=0, miniters=1)
    for _ in range(4):
        clock.t += 20
        slow.update(1)
    slow.close()
    assert [line.split(" [")[0] for line in _lines(caplog)] == ["hf generate: 50% 2/4", "hf generate: 75% 3/4",
                                                                 "hf generate: 100% 4/4"]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_chosen_by_its_stream():
    term = FakeTerminal()
    assert bars_on_terminal(term) and not bars_on_terminal(open(os.devnull, "w"))
    bar = progress_bar(range(3), desc="x", file=term)
    assert not isinstance(bar, LogLines)
    list(bar)
    assert "\r" in term.getvalue()
    assert isinstance(progress_bar(range(3), file=open(os.devnull, "w")), LogLines)
    # tqdm's disable=None means "off where not a terminal": there the lines are what is wanted
    assert not progress_bar(range(3), disable=None, file=open(os.devnull, "w")).disable


CLI_ORDER = """
import os
from scholar_agents.runtime.library_bars import library_bars_off_unless_terminal
print(library_bars_off_unless_terminal())  # first, as cli.main does: nothing has imported tqdm yet
from tqdm import tqdm
list(tqdm(range(50), desc="third-party"))  # a library's bar: no disable= of its own
import huggingface_hub.utils
from transformers.utils import logging as tl
print(os.environ.get("TQDM_DISABLE"), os.environ.get("HF_DATASETS_DISABLE_PROGRESS_BARS"),
      huggingface_hub.utils.are_progress_bars_disabled(), tl.is_progress_bar_enabled())
"""

IMPORTED_FIRST = """
import huggingface_hub.utils
from transformers.utils import logging as tl  # imported before the switch (an in-process caller of the runner)
from scholar_agents.runtime.library_bars import library_bars_off_unless_terminal
print(library_bars_off_unless_terminal(), huggingface_hub.utils.are_progress_bars_disabled(),
      tl.is_progress_bar_enabled())
"""


def _run_off_terminal(code: str, tmp_path, **env) -> tuple[list[str], str]:
    err = tmp_path / "stderr.log"
    env = {**{k: v for k, v in os.environ.items() if k not in SWITCHES}, **env}
    with err.open("wb") as f:
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=f,
                             timeout=120, check=True).stdout.decode().split()
    return out, err.read_text()


def test_off_a_terminal_the_libraries_bars_are_switched_off_and_an_exported_choice_wins(tmp_path):
    out, err = _run_off_terminal(CLI_ORDER, tmp_path, HF_DATASETS_DISABLE_PROGRESS_BARS="0")  # the user's choice
    assert out == ["True", "1", "0", "True", "False"]
    assert "third-party" not in err


def test_a_library_imported_before_the_switch_gets_its_own_switch(tmp_path):
    out, _ = _run_off_terminal(IMPORTED_FIRST, tmp_path)
    assert out == ["True", "True", "False"]


def test_on_a_terminal_the_libraries_keep_their_bars(monkeypatch):
    for var in SWITCHES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    assert library_bars_off_unless_terminal() is False
    assert not any(var in os.environ for var in SWITCHES)


def test_a_bm25_build_off_the_terminal_draws_no_tokenize_bar(capsys):
    """bm25s' own "Tokenize texts" bar (it filled command logs with redrawn bars) is asked for only on a terminal."""
    from scholar_agents.papers.bm25 import BM25Search
    from scholar_agents.papers.dated_docs import DatedDocs
    from scholar_agents.papers.paper import Paper

    papers = [Paper(paper_id=f"p{i}", title=f"paper {i} on topic {i % 3}", abstract="words " * 5, date="2020-01-01")
              for i in range(20)]
    docs, texts = DatedDocs.from_papers(papers, ["title", "abstract"])
    BM25Search.build(docs, texts, progress=True)
    err = capsys.readouterr().err
    assert "Tokenize texts" not in err and "\r" not in err




def test_the_package_makes_its_bars_through_progress_bar():
    uses = {str(p.relative_to(REPO)) for p in (REPO / "scholar_agents").rglob("*.py")
            if p.name != "progress.py" and re.search(r"^\s*(from tqdm\b|import tqdm\b)", p.read_text(), re.M)}
    assert not uses, f"bars made with tqdm directly (use runtime.progress.progress_bar): {sorted(uses)}"
