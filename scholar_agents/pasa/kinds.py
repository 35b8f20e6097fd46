"""The names that pick an implementation, checked before anything is built (:func:`check_kinds`).

It lives here, not in ``validation.py`` (floor 0), because the lists of valid names belong to the modules that build
each part: the LLM factory, the search index, the ranking and the Selector (floors 1-2).
"""

from __future__ import annotations

from typing import Any, Sequence

from scholar_agents.llm.factory import BACKENDS
from scholar_agents.papers.index import KINDS
from scholar_agents.pasa.ranking import RANKINGS
from scholar_agents.pasa.selectors.factory import SELECTOR_KINDS
from scholar_agents.pasa.selectors.llm import MARK_SOURCES
from scholar_agents.validation import one_of


def check_kinds(cfg: Any, llm_groups: Sequence[str] = ("llm", "selector_llm")) -> None:
    """The names that pick an implementation: ``search.kind``, ``selector.kind`` (and its ``mark``), each model
    group's ``backend`` and ``agent.ranking``, for the groups the composed config has (``expand.kind`` is its
    schema's own check, run for every command by ``hydra_app.check_schemas``). The
    builders refuse an unknown one too, but only when they run: after the store is opened, the index built or the
    first model loaded (and as a ValueError's traceback). Called at the top of the commands that build these."""
    def node(name: str) -> Any:
        n = cfg.get(name) if hasattr(cfg, "get") else None
        return n if hasattr(n, "get") else None

    if node("search") is not None:
        one_of(node("search").get("kind", "hybrid"), "search.kind", KINDS)
    if node("selector") is not None:
        one_of(node("selector").get("kind", "llm"), "selector.kind", SELECTOR_KINDS)
        one_of(node("selector").get("mark", "threshold"), "selector.mark", MARK_SOURCES)
    for group in llm_groups:
        if node(group) is not None:
            one_of(node(group).get("backend", "hf"), f"{group}.backend", BACKENDS)
    if node("agent") is not None and node("agent").get("ranking") is not None:
        one_of(node("agent").get("ranking"), "agent.ranking", RANKINGS)
