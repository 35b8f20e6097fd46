"""Checks of what a user typed, at the boundary of every command.

A command validates its own inputs before doing any work and raises :class:`UsageError` with one sentence that
names the setting, the bad value and the fix. ``scholar`` (``hydra_app.run_task``) prints that sentence as one line
and exits with status 2; ``HYDRA_FULL_ERROR=1`` shows the full trace instead. Everything else (a bug, a failing
library) keeps its traceback.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional


class UsageError(ValueError):
    """Bad command-line input. A ``ValueError``, so library callers that catch those keep working."""


_COMPACT = re.compile(r"^(\d{4})(\d{2})(\d{2})$")
_PARTS = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")
DATE_FORMS = "YYYY-MM-DD, YYYYMMDD, YYYY-MM or YYYY"


def parse_date(value: Any, name: str, full: bool = False) -> Optional[str]:
    """A calendar date as the ISO string the paper store compares (``2023-02-28``, ``2023-02``, ``2023``;
    only the first with ``full``); ``None``/empty -> ``None``. ``2023-13-45`` and ``20230230`` are refused
    (PaSa's ``published_time`` is ``YYYYMMDD``)."""
    if value is None or str(value).strip() == "":
        return None
    s = str(value).strip()
    m = _COMPACT.match(s)
    if m:
        s = f"{m.group(1)}-{m.group(2)}-{m.group(3)}"
    m = _PARTS.match(s)
    if full and m and not m.group(3):
        m = None
    forms = "YYYY-MM-DD or YYYYMMDD" if full else DATE_FORMS
    if not m:
        raise UsageError(f"{name}={value!r} is not a date: use {forms}")
    year, month, day = int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1)
    try:
        _dt.date(year, month, day)
    except ValueError as e:
        raise UsageError(f"{name}={value!r} is not a calendar date ({e}): use {forms}") from None
    return s


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or value is None:
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    raise UsageError(f"{name} must be an integer, got {value!r}")


def positive_int(value: Any, name: str, why: str = "") -> int:
    """An integer >= 1 (``k``, a batch size, a limit). ``why`` says what it counts, for the message."""
    n = _integer(value, name)
    if n < 1:
        raise UsageError(f"{name} must be a positive integer{' (' + why + ')' if why else ''}, got {n}")
    return n


def optional_positive_int(value: Any, name: str, why: str = "") -> Optional[int]:
    """``None`` (no limit) or an integer >= 1."""
    return None if value is None else positive_int(value, name, why)


def non_negative_int(value: Any, name: str) -> int:
    n = _integer(value, name)
    if n < 0:
        raise UsageError(f"{name} must be >= 0, got {n}")
    return n


def positive_ints(values: Any, name: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise UsageError(f"{name} must be a list of positive integers, e.g. {name}=[20,50], got {values!r}")
    out = [positive_int(v, f"{name}[{i}]") for i, v in enumerate(values)]
    if not out:
        raise UsageError(f"{name} must list at least one positive integer, e.g. {name}=[20,50]")
    return out


def one_of(value: Any, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise UsageError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def existing_file(value: Any, name: str) -> Path:
    """A path that exists and is a file."""
    if value is None or str(value).strip() == "" or str(value) == "???":
        raise UsageError(f"{name} is required: give {name}=<path>")
    p = Path(str(value)).expanduser()
    if not p.exists():
        raise UsageError(f"{name}={str(value)!r}: no such file")
    if not p.is_file():
        raise UsageError(f"{name}={str(value)!r} is not a file")
    return p


def existing_dir(value: Any, name: str) -> Path:
    p = Path(str(value)).expanduser()
    if not p.is_dir():
        raise UsageError(f"{name}={str(value)!r}: no such directory")
    return p


@contextmanager
def reading(name: str, path: Any) -> Iterator[None]:
    """Errors from reading a user-given input file (unreadable, not UTF-8, malformed records: the readers raise
    ``ValueError("<file>:<line>: ...")``, as :func:`jsonl_records` does) become one UsageError naming the setting."""
    try:
        yield
    except UsageError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, KeyError) as e:
        raise UsageError(f"{name}={str(path)!r} cannot be read: {e}") from e


# ---------------------------------------------------------------------------------------------------------------
# JSON Lines: the one reader of the package


def jsonl_records(path: str | os.PathLike, *, name: Optional[str] = None,
                  on_bad: Optional[Callable[[int, str], None]] = None) -> Iterator[tuple[int, dict]]:
    """The records of a JSON Lines file as ``(line number, object)``, counting from 1; blank lines are skipped and
    a ``.gz`` file is read decompressed.

    A line that is not JSON, or not a JSON object, raises ONE ``ValueError("<file>:<line>: <reason>")`` (``name``:
    how the message names the file, the path by default; :func:`reading` turns it into a UsageError at a command's
    boundary). With ``on_bad``, such a line is handed to ``on_bad(line_no, reason)`` and skipped instead: the
    caller counts and logs it (``skip_bad`` inputs), forgets it (a line cut by a killed job), or raises.
    """
    path = Path(path)
    label = str(path) if name is None else name
    opened = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")
    with opened as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                reason = f"invalid JSON at column {e.colno}: {e.msg}"
            else:
                if isinstance(obj, dict):
                    yield line_no, obj
                    continue
                reason = f"expected a JSON object, got {type(obj).__name__}"
            if on_bad is None:
                raise ValueError(f"{label}:{line_no}: {reason}")
            on_bad(line_no, reason)


def read_jsonl(path: str | os.PathLike, *, name: Optional[str] = None,
               on_bad: Optional[Callable[[int, str], None]] = None) -> list[dict]:
    """The records of a JSON Lines file as a list (:func:`jsonl_records` without the line numbers)."""
    return [obj for _, obj in jsonl_records(path, name=name, on_bad=on_bad)]


def check_queries_group(qcfg: Any, name: str = "queries") -> None:
    """The PaSa ``queries`` group (``path``, ``limit``, ``offset``, ``exclude_qids_file``) of pasa search,
    eval pasa: checked before any model or index is loaded."""
    existing_file(qcfg.get("path"), f"{name}.path")
    optional_positive_int(qcfg.get("limit"), f"{name}.limit", "queries to take; null = all")
    non_negative_int(qcfg.get("offset") or 0, f"{name}.offset")
    if qcfg.get("exclude_qids_file"):
        existing_file(qcfg.get("exclude_qids_file"), f"{name}.exclude_qids_file")
