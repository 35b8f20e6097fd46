"""Paper ids: one normal form for comparing them (gold against found, a tree's nodes, a store's keys)."""

from __future__ import annotations

import re

# An arXiv id with a version: new style ``2301.00001v2``, old style ``hep-th/9901001v2`` / ``math.GT/0309136v1``.
_VERSIONED_ARXIV = re.compile(r"^(\d{4}\.\d{4,5}|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})v\d+$")


def norm_id(pid: object) -> str:
    """A paper id without surrounding space and, for an arXiv id, without its version suffix
    (``2301.00001v2`` -> ``2301.00001``, ``hep-th/9901001v2`` -> ``hep-th/9901001``). Other ids (Semantic Scholar
    hashes, ``rt:<n>``) are only stripped: a trailing ``v<digits>`` there is part of the id."""
    pid = str(pid).strip()
    m = _VERSIONED_ARXIV.match(pid)
    return m.group(1) if m else pid
