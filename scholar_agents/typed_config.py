"""One way from a config node to the dataclass it configures: :func:`typed`.

Every command and builder converts the composed ``DictConfig`` (a group such as ``cfg.ppo``) to its dataclass here,
once, where it starts: interpolations are always resolved first (``${paths...}`` needs the root config the node came
from, which a detached copy no longer has), and a key the dataclass lacks fails with its name and the valid keys
instead of OmegaConf's generic error. A value the dataclass refuses is a
:class:`~scholar_agents.validation.UsageError`: the command ends in one line, exit 2."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

from scholar_agents.validation import UsageError

T = TypeVar("T")


def typed(cls: type[T], node: Any, what: str | None = None) -> T:
    """``cls`` from ``node`` (a ``DictConfig``, a mapping, an instance of ``cls`` — returned as is — or ``None``:
    the defaults). ``what`` names the node in errors (default: the dataclass's name)."""
    from omegaconf import DictConfig, OmegaConf

    if node is None:
        return cls()
    if isinstance(node, cls):
        return node
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    elif is_dataclass(node):
        node = OmegaConf.to_container(OmegaConf.structured(node), resolve=True)
    else:
        node = dict(node)

    known = {f.name for f in fields(cls)}
    unknown = sorted(set(node) - known)
    if unknown:
        raise UsageError(f"unknown {what or cls.__name__} keys {unknown}; valid keys: {sorted(known)}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), node))  # type: ignore[return-value]
    except ValueError as e:
        # a value the dataclass refuses (its __post_init__, or OmegaConf's type check) is what the user configured:
        # one line naming it, not a traceback (OmegaConf's own message spans several lines: its first says it)
        first = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        key = getattr(e, "full_key", None) or getattr(e, "key", None)  # OmegaConf's type check knows the field
        raise UsageError(f"{what or cls.__name__}.{key}: {first}" if key else first) from e
