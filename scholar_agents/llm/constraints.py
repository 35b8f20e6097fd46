"""Output constraints: what shape a completion must have (a JSON schema, a regex, a choice list or an EBNF grammar).

A constraint rides on ``SamplingParams`` and every backend hands it to a library that masks the logits at each
step — xgrammar's matcher on ``hf``, vLLM's structured outputs on ``vllm`` and on an OpenAI-compatible vLLM
server (``response_format`` / ``structured_outputs``). We write no grammar engine here: this file only names
the constraint, keeps it hashable (it is part of the response cache's key) and translates it.

Constraining fixes the *format*, not the content: a string field can still say nothing useful. Schemas should
cap string and list lengths (``maxLength`` / ``maxItems``) so that a weak model cannot run to ``max_new_tokens``
inside one value. A backend that cannot constrain a request logs that once (``warn_unconstrained``) and the
caller's tolerant parser takes over, exactly as without a constraint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Sequence

log = logging.getLogger(__name__)

KINDS = ("json_schema", "regex", "choices", "grammar")


@dataclass(frozen=True)
class OutputConstraint:
    """Exactly one of the fields. ``json_schema`` is the schema's JSON text (so the dataclass stays hashable;
    build it with ``OutputConstraint.json(dict)``); ``grammar`` is EBNF in the GBNF dialect that xgrammar and
    vLLM's ``grammar`` field both read (``root ::= ...``)."""

    json_schema: str | None = None
    regex: str | None = None
    choices: tuple[str, ...] | None = None
    grammar: str | None = None

    def __post_init__(self) -> None:
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))  # lists from YAML; keep it hashable
            if not self.choices:
                raise ValueError("OutputConstraint(choices=...) needs at least one choice")
        set_ = [k for k in KINDS if getattr(self, k) is not None]
        if len(set_) != 1:
            raise ValueError(f"an OutputConstraint takes exactly one of {list(KINDS)}, got {set_ or 'none'}")
        if self.json_schema is not None:
            try:
                json.loads(self.json_schema)
            except json.JSONDecodeError as e:
                raise ValueError(f"OutputConstraint.json_schema is not valid JSON: {e}") from e

    @classmethod
    def json(cls, schema: dict[str, Any]) -> "OutputConstraint":
        # Key order is kept, not sorted: xgrammar and vLLM emit properties in the schema's declared order.
        return cls(json_schema=json.dumps(schema, ensure_ascii=False))

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    @property
    def schema(self) -> dict[str, Any] | None:
        return None if self.json_schema is None else json.loads(self.json_schema)

    def cache_key(self) -> dict[str, Any]:
        """What the response cache hashes: the kind and its exact spec."""
        value = getattr(self, self.kind)
        return {"kind": self.kind, "spec": list(value) if isinstance(value, tuple) else value}

    # ---- translations, one per library ----

    def choices_as_ebnf(self) -> str:
        """A choice list as an EBNF alternation (xgrammar has no choice compiler; vLLM does the same inside)."""
        assert self.choices is not None
        return "root ::= " + " | ".join(ebnf_literal(c) for c in self.choices)

    def json_ebnf(self) -> str:
        """The JSON schema as xgrammar's EBNF, with no whitespace between tokens beyond ", " and ": "."""
        import xgrammar as xgr

        return str(xgr.Grammar.from_json_schema(self.json_schema, any_whitespace=False))

    def vllm_structured_outputs(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.sampling_params.StructuredOutputsParams`` (vLLM 0.32), also the body of
        the OpenAI server's ``structured_outputs`` extension."""
        if self.json_schema is not None:
            # As xgrammar's EBNF without free whitespace between JSON tokens (a weak model otherwise fills
            # max_new_tokens with blank lines): vLLM 0.32's xgrammar backend ignores the per-request
            # `disable_any_whitespace` (only the engine-wide setting counts), so the schema goes as a grammar.
            try:
                return {"grammar": self.json_ebnf()}
            except ImportError:  # an openai-backend client without xgrammar: the server's own whitespace rule
                return {"json": self.schema}
        if self.regex is not None:
            return {"regex": self.regex}
        if self.choices is not None:
            return {"choice": list(self.choices)}
        return {"grammar": self.grammar}


def json_text(min_chars: int = 0, max_chars: int = 200) -> dict[str, Any]:
    """A JSON-schema string of ``min_chars..max_chars`` plain characters. Written as a ``pattern`` rather than
    ``minLength``/``maxLength``: xgrammar 0.2.8 (also inside vLLM) compiles a length-capped string to a character
    class that lets raw control characters through, which ``json.loads`` then rejects (measured on the tiny model).
    Its regex compiler also fails on a bounded repeat above ~128, so long caps are nested blocks of 100."""
    if not 0 <= min_chars <= max_chars:
        raise ValueError(f"need 0 <= min_chars <= max_chars, got {min_chars}, {max_chars}")
    return {"type": "string", "pattern": "^" + bounded_repeat('[^"\\\\\\x00-\\x1f]', min_chars, max_chars) + "$"}


def bounded_repeat(char_class: str, min_n: int, max_n: int, block: int = 100) -> str:
    """``char_class{min_n,max_n}`` as a regex xgrammar compiles: repeats of at most ``block``, nested so that
    there is one way only to match a string (``C{0,99}|C{100}(...)``); chained optional repeats would be
    ambiguous, and an ambiguous grammar makes each decoding step slow."""
    if max_n <= block:
        return f"{char_class}{{{min_n},{max_n}}}"
    inner = bounded_repeat(char_class, max(0, min_n - block), max_n - block, block)
    if min_n >= block:
        return f"{char_class}{{{block}}}{inner}"
    return f"({char_class}{{{min_n},{block - 1}}}|{char_class}{{{block}}}{inner})"


def ebnf_literal(text: str) -> str:
    """``text`` as a double-quoted EBNF string literal (xgrammar / GBNF escapes)."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def ebnf_alternatives(texts: Sequence[str]) -> str:
    """``"a" | "b" | ...`` for use inside a larger grammar."""
    if not texts:
        raise ValueError("an EBNF alternation needs at least one alternative")
    return " | ".join(ebnf_literal(t) for t in texts)


_warned: set[tuple[str, str]] = set()


def warn_unconstrained(backend: str, kind: str, why: str) -> None:
    """Say once per (backend, kind) that a constraint is not applied; generation goes on unconstrained."""
    if (backend, kind) in _warned:
        return
    _warned.add((backend, kind))
    log.warning("%s backend cannot apply %s output constraints (%s); generating unconstrained, the tolerant "
                "parser takes over", backend, kind, why)
