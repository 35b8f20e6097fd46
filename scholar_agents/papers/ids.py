"""Paper ids: one normal form for comparing them (gold against found, a tree's nodes, a store's keys)."""

from __future__ import annotations

import re

_VERSION = re.compile(r"v\d+$")


def norm_id(pid: object) -> str:
    """A paper id without surrounding space and without a version suffix: ``2301.00001v2`` -> ``2301.00001``,
    ``hep-th/9901001v2`` -> ``hep-th/9901001`` (old-style arXiv ids too). Any id ending in ``v<digits>`` loses it,
    as the evaluation always compared them (gold lists carry versioned and unversioned ids alike); ids of other
    sources (Semantic Scholar's hex hashes) do not end that way."""
    return _VERSION.sub("", str(pid).strip())
