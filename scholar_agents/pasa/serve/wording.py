"""The crawl log of the page in words: one line per session, from the action summaries the page streams
(``service.action_summary``), so a researcher reads "searched 'gnn molecules': 20 papers, 7 new" instead of
``S_q [Search] gnn molecules → +7``."""

from __future__ import annotations

from typing import Optional

# why an action was not executed (crawl_env's statuses), as a reader says it
NOT_EXECUTED = {
    "unknown_section": "no such section in this paper",
    "session_action_limit": "over the session's action limit",
    "expand_disabled": "[Expand] is switched off",
    "not_allowed": "not allowed in this session",
    "duplicate_action": "already done in this crawl",
    "over_budget": "the crawl's budget was spent",
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _found(a: dict) -> str:
    """'20 papers, 7 new' (and the date filter's share when it dropped any)."""
    out = f"{_plural(int(a.get('candidates') or 0), 'paper')}, {int(a.get('added') or 0)} new"
    dropped = int(a.get("dropped_by_date") or 0)
    return out + (f", {dropped} after the date" if dropped else "")


def _short(title: Optional[str], limit: int = 60) -> str:
    title = " ".join((title or "").split())
    return title if len(title) <= limit else title[: limit - 1] + "…"


def session_line(start: str, paper: Optional[str], actions: list[dict], grammar_errors: list[str] = (),
                 paper_title: Optional[str] = None) -> str:
    """One session as a sentence. ``start``: S_q (the question) or S_q+p (a paper, ``paper`` / ``paper_title``);
    ``actions``: its non-stop actions as ``action_summary`` writes them."""
    parts = []
    for a in actions:
        arg, kind = a.get("argument", ""), a.get("kind", "")
        ok = a.get("status", "executed") == "executed"
        if not ok:
            why = NOT_EXECUTED.get(a.get("status"), str(a.get("status")))
            verb = "search" if kind == "search" else "open"
            parts.append(f"could not {verb} \u201c{arg}\u201d ({why})")
        elif a.get("fallback"):
            parts.append(f"searched your question as written (the Crawler wrote no valid search): {_found(a)}")
        elif kind == "search":
            parts.append(f"searched \u201c{arg}\u201d: {_found(a)}")
        elif a.get("found_by") == "related":  # a sectionless paper's related search (crawler.env.related_expand)
            parts.append(f"related search \u201c{arg}\u201d: {_found(a)}")
        else:
            parts.append(f"\u201c{arg}\u201d cites {_found(a)}")
    errors = f"; its answer broke the action grammar ({', '.join(grammar_errors)})" if grammar_errors else ""
    if start == "S_q":
        body = "; ".join(parts) if parts else "read the question and searched nothing"
        return f"{body[0].upper()}{body[1:]}{errors}"
    who = f"\u201c{_short(paper_title)}\u201d ({paper})" if paper_title else str(paper)
    executed = [a for a in actions if a.get("status", "executed") == "executed"]
    if not actions:
        return f"Expanded {who}: stopped without opening a section{errors}"
    if executed and not any(int(a.get("added") or 0) for a in executed) and len(executed) == len(actions):
        read = ", ".join(f"\u201c{a.get('argument', '')}\u201d" for a in executed)
        if all(a.get("found_by") == "related" for a in executed):
            return f"Expanded {who}: no related search found anything new (searched {read}){errors}"
        return f"Expanded {who}: no section cited anything new (read {read}){errors}"
    return f"Expanded {who}: {'; '.join(parts)}{errors}"
