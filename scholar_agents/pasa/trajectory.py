"""Trajectory records of the crawl environment: what inference reports and what PPO trains on.

PaSa §4.2 splits a trajectory into *sessions*: each starts at S_q (the user query) or S_{q+p} (the query and one
queued paper) and ends with [Stop]. One session is one generation here, so a :class:`SessionRecord` holds exactly
what a token-level PPO step needs (Eqs. 1-8):

- the prompt token ids and generated token ids (the policy's actions are tokens), and the sampling logprobs;
- per action: its token span in the generated ids (the reward of action a_t lands on its last token), what it
  did, and the papers it **added** to the queue — the p_j of Eq. 3's cross-session bootstrap
  gamma_1 * sum_j V(S_{q+p_j}); ``CrawlEnv.state_messages(record.user_query, p_j)`` rebuilds each S_{q+p_j};
- the session's parent (the session and action that queued its paper) and children (the sessions started from
  the papers its actions added), so returns can be propagated across sessions;
- the start-state kind, ``S_q`` or ``S_q+p``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from scholar_agents.validation import jsonl_records

S_Q = "S_q"  # search session: the user query only
S_QP = "S_q+p"  # expand session: the user query and a paper (title, abstract, section outline)

# What happened to a parsed action (grammar errors are recorded separately, per session).
EXECUTED = "executed"
ACTION_STATUSES = (
    EXECUTED,
    "not_allowed",  # Table 8: [Search] belongs to S_q sessions, [Expand] to S_q+p sessions
    "expand_disabled",  # Table 5 ablation: w/o [Expand]
    "unknown_section",  # [Expand] names no section of the paper
    "duplicate_action",  # the same argument twice in one session
    "session_action_limit",  # more actions than max_actions_per_session
    "over_budget",  # the query's action budget is spent
)


@dataclass
class ActionRecord:
    kind: str  # search | expand | stop
    argument: str
    char_start: int
    char_end: int
    token_start: Optional[int] = None  # [token_start, token_end) in the session's response_token_ids
    token_end: Optional[int] = None
    status: str = EXECUTED
    candidates: int = 0  # search hits / section references before filtering
    unresolved: int = 0  # references whose paper could not be found in the store
    dropped_by_date: int = 0  # candidates published on/after the query's before-date
    duplicates: int = 0  # candidates already in the queue (or earlier in this action)
    dropped_queue_full: int = 0  # candidates over the queue budget
    added: list[str] = field(default_factory=list)  # papers appended to the queue, in order
    # crawler.env.fallback_search: the environment searched the user's query because the Crawler wrote no valid
    # [Search] (not the policy's action: no token span, never trained on)
    fallback: bool = False
    # the retriever that found ``added`` when it is not the action kind's usual one: "related" for an [Expand] of
    # a related search (crawler.env.related_expand); None = derived from ``kind`` (queue_provenance)
    found_by: Optional[str] = None
    searched: Optional[str] = None  # the text a related search ran (its section name says "Key phrase: ...")

    @property
    def executed(self) -> bool:
        return self.status == EXECUTED and self.kind != "stop"


@dataclass
class SessionRecord:
    session_id: str  # "<qid>#<run>/<n>", unique within a crawl
    qid: str
    user_query: str
    before: Optional[str]  # the query's ISO before-date (exclusive), None = no date filter
    start_state: str  # S_q | S_q+p
    paper_id: Optional[str]  # the paper of an S_q+p session
    depth: int  # 0 for S_q; the paper's depth (search hits are depth 1) for S_q+p
    parent_session_id: Optional[str]
    parent_action_index: Optional[int]  # index into the parent's ``actions``
    prompt: list[dict[str, str]]
    prompt_token_ids: list[int]
    response_text: str
    response_token_ids: list[int]
    response_logprobs: Optional[list[float]]
    finish_reason: str
    actions: list[ActionRecord] = field(default_factory=list)
    grammar_errors: list[dict] = field(default_factory=list)  # GrammarError.to_dict()
    child_session_ids: list[str] = field(default_factory=list)
    token_spans_ok: bool = True  # False when the response text could not be aligned with its token ids
    # an S_q+p session whose outline is related searches (crawler.env.related_expand on a paper without sections):
    # a session that only stopped adds no paper to show it, so the record says it
    related: bool = False

    @property
    def n_moves(self) -> int:
        """[Search]/[Expand] actions executed (the paper's "crawler actions", Table 6)."""
        return sum(a.executed for a in self.actions)

    @property
    def added(self) -> list[str]:
        return [p for a in self.actions for p in a.added]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SessionRecord":
        d = dict(d)
        d["actions"] = [ActionRecord(**a) for a in d.get("actions", [])]
        return cls(**d)


@dataclass
class QueueEntry:
    paper_id: str
    depth: int
    session_id: str  # the session whose action added it
    action_index: int


@dataclass
class QueryTrajectory:
    """One crawl of one user query: the final paper queue (in order) and every session that built it."""

    qid: str
    user_query: str
    before: Optional[str]
    run: int = 0  # ensemble member
    queue: list[QueueEntry] = field(default_factory=list)
    sessions: list[SessionRecord] = field(default_factory=list)
    grammar_errors: dict[str, int] = field(default_factory=dict)  # code -> count
    action_statuses: dict[str, int] = field(default_factory=dict)  # status -> count (all parsed actions)
    stopped_by: Optional[str] = None  # the budget that ended the crawl early, if any
    # the S_q response's first action is a [Search] with a non-empty argument, executed (None: no S_q session ran)
    first_search_valid: Optional[bool] = None
    fallback_searches: int = 0  # searches of the user's query by crawler.env.fallback_search
    user_query_searches: int = 0  # searches of the user's query by crawler.env.search_user_query
    sessions_skipped: int = 0  # queued papers given no S_q+p session (no sections to expand)
    gen_tokens: int = 0
    wall_time_s: float = 0.0

    @property
    def paper_ids(self) -> list[str]:
        return [e.paper_id for e in self.queue]

    @property
    def n_moves(self) -> int:
        return sum(s.n_moves for s in self.sessions)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "QueryTrajectory":
        d = dict(d)
        d["queue"] = [QueueEntry(**e) for e in d.get("queue", [])]
        d["sessions"] = [SessionRecord.from_dict(s) for s in d.get("sessions", [])]
        return cls(**d)


def write_trajectories(path: str | Path, trajectories: Iterable[QueryTrajectory], append: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")
    return path


def read_trajectories(path: str | Path) -> Iterator[QueryTrajectory]:
    for i, rec in jsonl_records(path):
        try:
            traj = QueryTrajectory.from_dict(rec)
        except (TypeError, KeyError) as e:
            raise ValueError(f"{path}:{i}: not a trajectory record: {e}") from e
        yield traj


def char_spans_to_token_spans(
    tokenizer, token_ids: Sequence[int], text: str, spans: Sequence[tuple[int, int]]
) -> Optional[list[tuple[int, int]]]:
    """Map character spans of ``text`` (the decoded response) to ``[start, end)`` token spans of ``token_ids``.

    Token i covers the characters added by decoding ``ids[:i+1]`` over ``ids[:i]``; a span's tokens are the ones
    overlapping it. Decoding prefixes (with a binary search per boundary) handles byte-level BPE tokens that
    split a character. Returns None when the ids do not decode to ``text`` (nothing can be aligned then).
    """
    ids = list(token_ids)
    cache: dict[int, int] = {}

    def prefix_len(n: int) -> int:
        if n not in cache:
            cache[n] = len(tokenizer.decode(ids[:n], skip_special_tokens=True))
        return cache[n]

    if prefix_len(len(ids)) != len(text) or tokenizer.decode(ids, skip_special_tokens=True) != text:
        return None

    def first_token_reaching(offset: int) -> int:
        """Smallest n with prefix_len(n) >= offset (the token holding character ``offset - 1``'s end)."""
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if prefix_len(mid) >= offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    out = []
    for start, end in spans:
        # the token containing character `start` is the first n with prefix_len(n) > start, minus one
        t_start = max(first_token_reaching(start + 1) - 1, 0)
        t_end = first_token_reaching(end)
        out.append((t_start, max(t_end, t_start + 1) if end > start else t_start))
    return out
