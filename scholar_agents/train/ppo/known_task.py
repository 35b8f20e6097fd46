"""What a PPO step did on a known-answer crawl task (``scholar data_gen crawl_tasks``): the rate of the
optimal action where it is known, the crawler recall of the step's rollouts, actions per query and the share of
Selector-class papers in what was collected. Logged as ``task/*`` beside the trainer's own metrics when
``ppo.known_task`` names a task's ``task.json``; the learning tests and ``scripts/ppo_known_tasks.sh`` read them."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from scholar_agents.data_gen.crawl_tasks import SELECTOR_SECTION
from scholar_agents.pasa.trajectory import S_Q, SessionRecord


class KnownTask:
    """The known answers of one generated task: per query, the hub, the gold papers, the optimal sections of every
    expandable paper and the Selector class."""

    def __init__(self, spec: dict):
        self.task = spec["config"]["task"]
        self.queries = {q["qid"]: q for split in spec["queries"].values() for q in split}

    @classmethod
    def load(cls, path: str | Path) -> "KnownTask":
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"ppo.known_task: {p} does not exist (write it with `scholar data_gen crawl_tasks`)")
        return cls(json.loads(p.read_text()))

    def metrics(self, records: Sequence[SessionRecord]) -> dict[str, float]:
        """``task/optimal_action_rate``: hub sessions whose executed [Expand]s are exactly the optimal sections (any
        order); ``task/optimal_section_rate``: hub sessions that expand the optimal sections (others too);
        ``task/optimal_share``: the optimal sections' share of the distinct sections hub sessions expand (what
        credit assignment moves: a policy that merely expands more keeps it at the start policy's);
        ``task/hub_stop_rate``: hub sessions that expand nothing; ``task/recall``: gold papers collected by the step's
        sessions per query; ``task/actions_per_query``: executed [Search] + [Expand]; ``task/selector_share``: the
        Selector class among the papers collected (the hub and search hits excluded); ``task/selector_section_rate``:
        hub sessions that expand a section citing the Selector class; ``task/selector_recall``: the Selector class's
        papers collected per query (a share of the class, what Table 6's α moves; the class's share of everything
        collected is bounded by the gold papers collected beside it). "Per query" is per crawl: the G crawls of a
        query that ppo.estimator=grpo|rloo samples (session ids ``<qid>#<member>/<n>``) count as G queries."""
        hub, exact, covered, stopped, hub_expands, optimal_expands, selector_section = 0, 0, 0, 0, 0, 0, 0
        found: dict[str, set] = defaultdict(set)
        actions: dict[str, int] = defaultdict(int)
        qid_of: dict[str, str] = {}
        collected, selector = 0, 0
        for r in records:
            q = self.queries.get(r.qid)
            if q is None:
                continue
            executed = [a for a in r.actions if a.kind in ("search", "expand") and a.status == "executed"]
            crawl = r.session_id.rsplit("/", 1)[0]  # <qid>#<run>: one crawl (all of a query's under App. A.2)
            qid_of[crawl] = r.qid
            actions[crawl] += len(executed)
            for a in executed:
                found[crawl].update(a.added)
                if a.kind == "expand":
                    collected += len(a.added)
                    selector += sum(p in q["selector_class"] for p in a.added)
            if r.start_state != S_Q and r.paper_id == q["hub"]:
                hub += 1
                expanded = {a.argument for a in executed if a.kind == "expand"}
                optimal = set(q["optimal"][q["hub"]])
                hub_expands += len(expanded)
                selector_section += bool(q["selector_class"]) and SELECTOR_SECTION in expanded
                optimal_expands += len(expanded & optimal)
                exact += expanded == optimal
                covered += optimal <= expanded
                stopped += not expanded
        qids = list(actions)  # crawls
        spec = {c: self.queries[qid_of[c]] for c in qids}
        recall = [len(found[c] & set(spec[c]["gold"])) / len(spec[c]["gold"]) for c in qids]
        classes = [len(found[c] & set(spec[c]["selector_class"])) / len(spec[c]["selector_class"])
                   for c in qids if spec[c]["selector_class"]]
        out = {"task/hub_sessions": float(hub)}
        if hub:
            out.update({"task/optimal_action_rate": exact / hub, "task/optimal_section_rate": covered / hub,
                        "task/hub_stop_rate": stopped / hub})
        if hub_expands:
            out["task/optimal_share"] = optimal_expands / hub_expands
        if hub and self.task == "selector":
            out["task/selector_section_rate"] = selector_section / hub
        if qids:
            out.update({"task/recall": sum(recall) / len(recall),
                        "task/actions_per_query": sum(actions[q] for q in qids) / len(qids)})
        if classes:
            out["task/selector_recall"] = sum(classes) / len(classes)
        if collected:
            out["task/selector_share"] = selector / collected
        return out
