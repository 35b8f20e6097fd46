"""The Crawler's action grammar (PaSa Table 1 and Table 8), strict and total.

A session response is a sequence of actions, each an action token followed by its argument, ending with
``[Stop]``::

    response := ws* (action ws*)* stop ws*
    action   := "[Search]" ws* text   |   "[Expand]" ws* text
    stop     := "[Stop]" | "[StopSearch]" | "[StopExpand]"
    text     := anything up to the next action token, stripped, non-empty

``[StopSearch]`` / ``[StopExpand]`` (and no space after ``[Search]``) are the official code's format, what the
released PaSa crawler writes (``[Search]q1\n[Search]q2\n[StopSearch]``); they mean ``[Stop]``.

``parse_response`` never raises: whatever an LLM writes, it returns the well-formed actions it can trust and a
list of errors (with their character spans) for everything else, so one bad generation is counted and logged and
never crashes a batch. What is dropped, and why:

- text before the first action token (``text_before_action``; ``unknown_action`` when it starts like one,
  e.g. ``[Browse] ...``);
- an action token written in the wrong case inside an argument (``miscased_action_token``: ``[search] x`` is
  not ``[Search] x``; the action holding it is dropped rather than searched with a polluted query);
- an action with an empty argument (``empty_argument``);
- anything after ``[Stop]`` (``text_after_stop``);
- no ``[Stop]`` at all (``missing_stop``): the actions are kept when the model simply ended (EOS), but when the
  generation hit its token limit the last action's argument may be cut, so it is dropped (``truncated_action``);
- nothing parseable (``no_action``).

Arguments may contain brackets (``[CLS] token pooling``): only the three exact action tokens split a response.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Sequence

from scholar_agents.llm.constraints import OutputConstraint, ebnf_alternatives, ebnf_literal
from scholar_agents.pasa.prompts import ACTION_EXPAND, ACTION_SEARCH, ACTION_STOP, ACTION_STOP_EXPAND, ACTION_STOP_SEARCH

SEARCH, EXPAND, STOP = "search", "expand", "stop"
TOKEN_OF = {SEARCH: ACTION_SEARCH, EXPAND: ACTION_EXPAND, STOP: ACTION_STOP}
# The official code's stop tokens ([StopSearch], [StopExpand]: the released crawler writes them) are read as [Stop];
# without them a released checkpoint's last section would read "2.1 Regularization[StopExpand]" and be lost.
ACTION_TOKENS = {**{t: k for k, t in TOKEN_OF.items()}, ACTION_STOP_SEARCH: STOP, ACTION_STOP_EXPAND: STOP}

_TOKEN_RE = re.compile("|".join(re.escape(t) for t in ACTION_TOKENS))
MISCASED_ACTION_RE = re.compile(r"\[(search|expand|stop|stopsearch|stopexpand)\]", re.IGNORECASE)
_BRACKET_WORD_RE = re.compile(r"^\s*\[[A-Za-z_ ]{1,30}\]")

# Every grammar error code, in one place (reports count them by code).
GRAMMAR_ERRORS = (
    "text_before_action", "unknown_action", "miscased_action_token", "empty_argument", "text_after_stop",
    "missing_stop", "truncated_action", "no_action",
)


@dataclass(frozen=True)
class Action:
    """One parsed action. ``start``/``end`` is its character span in the response (token + argument)."""

    kind: str  # search | expand | stop
    argument: str
    start: int
    end: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GrammarError:
    code: str
    start: int
    end: int
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ParsedResponse:
    """The trusted actions (``[Stop]`` included when present) and everything that was rejected."""

    actions: list[Action] = field(default_factory=list)
    errors: list[GrammarError] = field(default_factory=list)
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def moves(self) -> list[Action]:
        """The actions that do something: [Search] and [Expand] (not [Stop])."""
        return [a for a in self.actions if a.kind != STOP]

    def error_codes(self) -> list[str]:
        return [e.code for e in self.errors]


def parse_response(text: str, truncated: bool = False) -> ParsedResponse:
    """Parse one session response. ``truncated`` = the generation stopped at its token limit (finish reason
    "length"), which makes an unterminated last action untrustworthy."""
    out = ParsedResponse()
    text = text or ""
    marks = list(_TOKEN_RE.finditer(text))
    if not marks:
        if text.strip():
            code = "unknown_action" if _BRACKET_WORD_RE.match(text) else "no_action"
            out.errors.append(GrammarError(code, 0, len(text), text))
        else:
            out.errors.append(GrammarError("no_action", 0, len(text), text))
        return out
    head = text[: marks[0].start()]
    if head.strip():
        code = "unknown_action" if _BRACKET_WORD_RE.match(head) else "text_before_action"
        out.errors.append(GrammarError(code, 0, marks[0].start(), head))
    for i, m in enumerate(marks):
        kind = ACTION_TOKENS[m.group(0)]
        arg_end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        raw = text[m.end(): arg_end]
        if kind == STOP:
            out.actions.append(Action(STOP, "", m.start(), m.end()))
            out.stopped = True
            tail = text[m.end():]
            if tail.strip():
                out.errors.append(GrammarError("text_after_stop", m.end(), len(text), tail))
            return out
        arg = raw.strip()
        # The span ends where the stripped argument ends: trailing whitespace belongs to no action.
        end = m.end() + len(raw.rstrip()) if arg else m.end()
        is_last = i + 1 == len(marks)
        if not arg:
            out.errors.append(GrammarError("empty_argument", m.start(), arg_end, text[m.start(): arg_end]))
        elif MISCASED_ACTION_RE.search(arg):
            out.errors.append(GrammarError("miscased_action_token", m.start(), end, text[m.start(): end]))
        elif is_last and truncated:
            out.errors.append(GrammarError("truncated_action", m.start(), end, text[m.start(): end]))
        else:
            out.actions.append(Action(kind, arg, m.start(), end))
    out.errors.append(GrammarError("missing_stop", len(text), len(text), ""))
    return out


def render_response(kind: str, arguments: Sequence[str]) -> str:
    """The Table 8 session response: ``[Search] q1 [Search] q2 [Stop]`` (or ``[Expand] ...``). The inverse of
    :func:`parse_response`; imitation data is written with it so that training and parsing agree."""
    if kind not in (SEARCH, EXPAND):
        raise ValueError(f"a session response holds search or expand actions, got {kind!r}")
    parts = []
    for a in arguments:
        a = " ".join(str(a).split())
        if not a:
            raise ValueError(f"empty {kind} argument in {list(arguments)!r}")
        if MISCASED_ACTION_RE.search(a):
            raise ValueError(f"argument {a!r} contains an action token")
        parts.append(f"{TOKEN_OF[kind]} {a}")
    parts.append(ACTION_STOP)
    return " ".join(parts)


# ---- the same grammar as a decoding constraint (crawler.policy.constrained) ----

QUERY_MAX_CHARS = 60  # one [Search] query: a short keyword query, never an action token or a line break


def action_constraint(kind: str, sections: Sequence[str] = (), max_actions: int = 6,
                      max_query_chars: int = QUERY_MAX_CHARS, min_searches: int = 1) -> OutputConstraint:
    """Table 8's response as an EBNF grammar that :func:`parse_response` reads with no error: ``[Search] q1
    [Search] q2 [Stop]`` (``min_searches``..``max_actions`` queries of 3..``max_query_chars`` characters, never
    empty; ``min_searches`` > 1 is PPO's forced exploration, ``ppo.forced_members``) or
    ``[Expand] s1 [Expand] s2 [Stop]`` where each ``s`` is one of the paper's real section ``sections``
    (0..``max_actions`` of them; ``[Stop]`` alone when it has none). Built per session for expansions; xgrammar /
    vLLM compile it (one compilation per distinct paper)."""
    if kind not in (SEARCH, EXPAND):
        raise ValueError(f"a session response holds search or expand actions, got {kind!r}")
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    if not 1 <= min_searches <= max_actions:
        raise ValueError(f"min_searches must be in [1, max_actions={max_actions}], got {min_searches}")
    if not 3 <= max_query_chars <= 1000:
        raise ValueError(f"max_query_chars must be in [3, 1000], got {max_query_chars}")
    stop = ebnf_literal(" " + ACTION_STOP)
    if kind == SEARCH:
        # A query starts with a letter (SmolLM2 otherwise numbers its queries "1. ...").
        arg = f"arg ::= [A-Za-z] [^\\[\\]\\x00-\\x1f]{{2,{max_query_chars - 1}}}"
        first, more = ebnf_literal(ACTION_SEARCH + " "), ebnf_literal(" " + ACTION_SEARCH + " ")
        return OutputConstraint(grammar=f"root ::= {first} arg ({more} arg){{{min_searches - 1},{max_actions - 1}}} "
                                        f"{stop}\n{arg}")
    names = list(dict.fromkeys(" ".join(str(s).split()) for s in sections if str(s).strip()))
    if not names:
        return OutputConstraint(grammar=f"root ::= {ebnf_literal(ACTION_STOP)}")
    first, more = ebnf_literal(ACTION_EXPAND + " "), ebnf_literal(" " + ACTION_EXPAND + " ")
    return OutputConstraint(grammar=f"root ::= ({first} arg ({more} arg){{0,{max_actions - 1}}} {stop}) | "
                                    f"{ebnf_literal(ACTION_STOP)}\narg ::= {ebnf_alternatives(names)}")
