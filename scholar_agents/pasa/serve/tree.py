"""A crawl as a tree: query -> [Search] q -> papers -> [Expand] section -> papers ... (PaSa Figure 1), from one
trajectory record (``pasa.trajectory.QueryTrajectory``, as ``pasa search`` / ``eval pasa`` write them)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from scholar_agents.papers.ids import norm_id

# paper ids -> {paper_id: {"title", "date"}} (the paper store's get_many, or nothing)
PaperInfo = Callable[[list[str]], dict[str, dict]]


def end_reason(traj: dict) -> str:
    """Why the crawl ended, in words that agree with its counters: a budget spent; else every
    queued paper was visited or could not be (no sections in this store: ``sessions_skipped``, which the page's
    last "papers to visit" count still held); else the queue ran out."""
    if traj.get("stopped_by"):
        return f"stopped by {traj['stopped_by']} (a per-query budget was spent)"
    skipped = int(traj.get("sessions_skipped") or 0)
    if skipped:
        return (f"nothing left to expand: {skipped} queued paper{'s' if skipped != 1 else ''} "
                f"{'have' if skipped != 1 else 'has'} no sections in this store")
    return "queue exhausted: every queued paper was expanded"


def build_tree(traj: dict, paper_info: Optional[PaperInfo] = None, gold: Iterable[str] = ()) -> dict:
    """The tree of one crawl (one ensemble run): nested dict nodes ``{kind: query|search|expand|paper, label,
    children, ...}``; paper nodes carry ``gold``; a session's grammar errors sit on the node it started from
    (the query for S_q, the paper for S_q+p); ``stopped_by`` and the gold papers never found are on the root."""
    gold_set = {norm_id(g) for g in gold}
    sessions = traj.get("sessions") or []
    queued = [e["paper_id"] for e in traj.get("queue") or []]
    info = paper_info(sorted(set(queued))) if paper_info and queued else {}
    expand_of = {s["paper_id"]: s for s in sessions if s.get("start_state") == "S_q+p" and s.get("paper_id")}
    depth_of = {e["paper_id"]: e.get("depth") for e in traj.get("queue") or []}
    seen: set[str] = set()

    def paper_node(pid: str) -> dict:
        p = info.get(pid) or {}
        node = {"kind": "paper", "id": pid, "label": p.get("title") or pid, "date": p.get("date") or "",
                "depth": depth_of.get(pid), "gold": norm_id(pid) in gold_set, "children": []}
        sess = expand_of.get(pid)
        if sess is not None and pid not in seen:  # a paper's own S_q+p session (once: the queue de-duplicates)
            seen.add(pid)
            _session_into(node, sess)
        return node

    def _session_into(node: dict, sess: dict) -> None:
        node["session"] = sess.get("session_id")
        node["response"] = sess.get("response_text", "")
        if sess.get("grammar_errors"):
            node["grammar_errors"] = [e.get("code", "?") for e in sess["grammar_errors"]]
        for a in sess.get("actions") or []:
            if a.get("kind") == "stop":
                continue
            child = {"kind": a["kind"], "label": a.get("argument", ""), "status": a.get("status", "executed"),
                     "fallback": bool(a.get("fallback")), "candidates": a.get("candidates", 0),
                     "duplicates": a.get("duplicates", 0), "dropped_by_date": a.get("dropped_by_date", 0),
                     "children": [paper_node(p) for p in a.get("added") or []]}
            node["children"].append(child)

    root = {"kind": "query", "label": traj.get("user_query", ""), "qid": traj.get("qid"), "before": traj.get("before"),
            "run": traj.get("run", 0), "stopped_by": traj.get("stopped_by"), "end": end_reason(traj), "children": [],
            "queue": len(queued), "sessions": len(sessions),
            "grammar_error_counts": traj.get("grammar_errors") or {}}
    for s in sessions:
        if s.get("start_state") == "S_q":
            _session_into(root, s)
    found = {norm_id(p) for p in queued}
    root["gold_total"] = len(gold_set)
    root["gold_found"] = len(gold_set & found)
    root["gold_missed"] = sorted(gold_set - found)
    return root

