"""Lenient JSON for LLM outputs: parse what a model *meant*, say what was repaired, and name what could not be.

Teacher models (GPT-4o in PaSa, SmolLM2 here) wrap JSON in code fences, add prose before and after, use single
or curly quotes, leave trailing commas, write LaTeX (``"\\cite{3}"``) inside strings, and stop mid-array when
they hit the token limit. A strict ``json.loads`` throws all of that away. This module is a small recursive-descent
parser that accepts those deviations, records each repair by kind, and drops only the part that is really lost
(an element cut off by truncation). Callers count ``repairs`` and ``failure`` kinds in their stats, so a data run
says how much of its data needed repair instead of silently crashing or silently skipping.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Failure kinds (the whole output is unusable).
EMPTY = "empty"
NO_JSON = "no_json"
UNREPAIRABLE = "unrepairable"
WRONG_TYPE = "wrong_type"
TRUNCATED_EMPTY = "truncated_before_first_item"

# Repair kinds (the output was used after a repair).
CODE_FENCE = "code_fence"
LEADING_TEXT = "leading_text"
TRAILING_TEXT = "trailing_text"
SINGLE_QUOTES = "single_quotes"
SMART_QUOTES = "smart_quotes"
TRAILING_COMMA = "trailing_comma"
MISSING_COMMA = "missing_comma"
INVALID_ESCAPE = "invalid_escape"
PYTHON_LITERAL = "python_literal"
UNQUOTED_KEY = "unquoted_key"
UNESCAPED_QUOTE = "unescaped_quote"
TRUNCATED = "truncated"  # the model stopped inside an element: that element is dropped
UNCLOSED = "unclosed"  # every element is complete but the closing bracket is missing
DROPPED_AFTER_ERROR = "dropped_after_error"  # the elements after a syntax error are dropped, those before kept
CONCATENATED_ARRAYS = "concatenated_arrays"  # `[{..}]\n\n[{..}]`: one array per item
BARE_SEQUENCE = "bare_sequence"  # `{..}, {..}` or one object per line without the enclosing [ ]
SINGLE_OBJECT = "single_object"  # one object where an array was asked for
WRAPPED_ARRAY = "wrapped_array"  # {"questions": [...]} where an array was asked for
OBJECT_CLOSED_EARLY = "object_closed_early"  # `{"question": ".."}, "answer": [..]}`: the pair joins its object

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_OPEN_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
# Where a new value may start (used to detect a missing comma between two values).
_VALUE_START = set('{["\'\u201c\u2018-0123456789tfnTFN')
# How many '[' / '{' positions to try as the start of the JSON before giving up on an output.
_MAX_START_CANDIDATES = 64


@dataclass
class ParseResult:
    """``value`` is the parsed JSON (``None`` when ``failure`` is set); ``repairs`` lists what was fixed."""

    value: Any = None
    repairs: list[str] = field(default_factory=list)
    failure: str | None = None
    detail: str = ""  # where/why it failed, for the log

    @property
    def ok(self) -> bool:
        return self.failure is None


class _EOF(Exception):
    """The text ended inside a value (the model hit its token limit)."""


class _Bad(Exception):
    """Something that no repair here can make sense of."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.repairs: set[str] = set()

    # ---- lexing helpers ----
    def ws(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif s.startswith("//", self.i):  # a comment some models add to "explain" an item
                end = s.find("\n", self.i)
                self.i = n if end < 0 else end + 1
            else:
                return

    def peek(self) -> str:
        if self.i >= len(self.s):
            raise _EOF()
        return self.s[self.i]

    # ---- grammar ----
    def value(self) -> Any:
        self.ws()
        c = self.peek()
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in _OPEN_QUOTES:
            return self.string()
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            txt = m.group()
            return float(txt) if any(ch in txt for ch in ".eE") else int(txt)
        m = _IDENT.match(self.s, self.i)
        if m and m.group() in _LITERALS:
            if m.group() not in ("true", "false", "null"):
                self.repairs.add(PYTHON_LITERAL)
            self.i = m.end()
            return _LITERALS[m.group()]
        if m and m.end() == len(self.s):  # a literal cut off by truncation ("tr")
            raise _EOF()
        raise _Bad(f"unexpected {c!r} at {self.i}")

    def string(self) -> str:
        open_q = self.s[self.i]
        close_q = _OPEN_QUOTES[open_q]
        if open_q == "'":
            self.repairs.add(SINGLE_QUOTES)
        elif open_q != '"':
            self.repairs.add(SMART_QUOTES)
        self.i += 1
        out: list[str] = []
        s, n = self.s, len(self.s)
        while True:
            if self.i >= n:
                raise _EOF()
            c = s[self.i]
            if c == close_q:
                if not self._closes(open_q):
                    self.repairs.add(UNESCAPED_QUOTE)
                    out.append(c)
                    self.i += 1
                    continue
                self.i += 1
                return "".join(out)
            if c == "\\":
                if self.i + 1 >= n:
                    raise _EOF()
                e = s[self.i + 1]
                if e in _JSON_ESCAPES:
                    out.append(_JSON_ESCAPES[e])
                    self.i += 2
                elif e == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[self.i + 2 : self.i + 6] or ""):
                    out.append(chr(int(s[self.i + 2 : self.i + 6], 16)))
                    self.i += 6
                elif e == "'":
                    out.append("'")
                    self.i += 2
                else:  # LaTeX in a JSON string: "\cite{3}" is the commonest case
                    self.repairs.add(INVALID_ESCAPE)
                    out.append("\\")
                    self.i += 1
                continue
            out.append(c)
            self.i += 1

    def _closes(self, open_q: str) -> bool:
        """Whether the quote at ``self.i`` ends the string. Models write apostrophes inside single-quoted
        strings ('the model's') and unescaped quotes inside double-quoted ones ("the "attention" term"): a quote
        that is followed (on the same line) by anything but a delimiter is text, not the end of the string."""
        s, n = self.s, len(self.s)
        j = self.i + 1
        if open_q == "'" and j < n and s[j].isalnum():
            return False
        while j < n and s[j] in " \t":
            j += 1
        return j >= n or s[j] in ",:}]\r\n"

    def key(self) -> str:
        self.ws()
        c = self.peek()
        if c in _OPEN_QUOTES:
            return self.string()
        m = _IDENT.match(self.s, self.i)
        if m:
            if m.end() == len(self.s):
                raise _EOF()
            self.repairs.add(UNQUOTED_KEY)
            self.i = m.end()
            return m.group()
        raise _Bad(f"expected a key at {self.i}, got {c!r}")

    def obj(self) -> dict:
        self.i += 1  # {
        out: dict[str, Any] = {}
        while True:
            self.ws()
            c = self.peek()
            if c == "}":
                self.i += 1
                return out
            if c == ",":  # {, "a": 1} or a doubled comma
                self.repairs.add(TRAILING_COMMA)
                self.i += 1
                continue
            k = self.key()
            self.ws()
            if self.peek() != ":":
                raise _Bad(f"expected ':' at {self.i}")
            self.i += 1
            out[k] = self.value()
            self.ws()
            c = self.peek()
            if c == ",":
                self.i += 1
                self.ws()
                if self.peek() == "}":
                    self.repairs.add(TRAILING_COMMA)
            elif c == "}":
                continue
            elif c in _OPEN_QUOTES or _IDENT.match(self.s, self.i):
                self.repairs.add(MISSING_COMMA)
            else:
                raise _Bad(f"expected ',' or '}}' at {self.i}, got {c!r}")

    def arr(self, top: bool = False) -> list:
        self.i += 1  # [
        out: list[Any] = []
        while True:
            self.ws()
            try:
                c = self.peek()
            except _EOF:
                if top:  # every element finished, only the closing bracket is missing
                    self.repairs.add(UNCLOSED)
                    return out
                raise
            if c == "]":
                self.i += 1
                return out
            if c == ",":
                self.repairs.add(TRAILING_COMMA)
                self.i += 1
                continue
            before = set(self.repairs)
            try:
                v = self.value()
            except _EOF:
                if top:  # drop the element the model did not finish; keep the finished ones
                    self.repairs = before | {TRUNCATED}
                    self.i = len(self.s)
                    return out
                raise
            except _Bad:
                if top and out:  # the same for an element the model broke: keep the ones before it
                    self.repairs = before | {DROPPED_AFTER_ERROR}  # repairs inside the dropped element do not count
                    self.i = len(self.s)
                    return out
                raise
            out.append(v)
            self.ws()
            try:
                c = self.peek()
            except _EOF:
                if top:
                    self.repairs.add(UNCLOSED)
                    return out
                raise
            if c == ",":
                self.i += 1
                self.ws()
                if self.i < len(self.s) and self.s[self.i] == "]":
                    self.repairs.add(TRAILING_COMMA)
            elif c == "]":
                continue
            elif c in _VALUE_START:
                self.repairs.add(MISSING_COMMA)
            elif top:  # e.g. `{...}, "output": [...]`: a key inside the array
                if c == ":" and isinstance(out[-1], str) and len(out) >= 2 and isinstance(out[-2], dict):
                    state = (self.i, set(self.repairs))
                    try:
                        rejoined = self._rejoin_pair(out)
                    except (_Bad, _EOF):
                        rejoined = False  # not that pattern after all: read on as before
                    if rejoined:
                        continue
                    self.i, self.repairs = state
                if c == ":" and isinstance(out[-1], str):
                    out.pop()  # the key is not an element
                self.repairs.add(DROPPED_AFTER_ERROR)
                self.i = len(self.s)
                return out
            else:
                raise _Bad(f"expected ',' or ']' at {self.i}, got {c!r}")


    def _rejoin_pair(self, out: list) -> bool:
        """``{"question": ".."}, "answer": [..]}`` (SmolLM2 closes the object one pair too early): at the ``:``
        after the string ``out[-1]``, read the value and the stray ``}`` and put the pair into the object before.
        Leaves ``self.i`` after the ``}`` and its separator; False (nothing consumed for good) when the text does
        not have that shape."""
        key = out[-1]
        if key in out[-2]:
            return False
        self.i += 1  # :
        val = self.value()
        self.ws()
        if self.peek() != "}":
            return False
        self.i += 1
        out.pop()
        out[-1][key] = val
        self.repairs.add(OBJECT_CLOSED_EARLY)
        self.ws()
        if self.i < len(self.s) and self.s[self.i] == ",":
            self.i += 1
        return True


def _strip_fence(text: str) -> tuple[str, bool]:
    """The content of the first code fence that holds a JSON container, if there is a fence."""
    for m in _FENCE.finditer(text):
        body = m.group(1)
        if "[" in body or "{" in body:
            return body, True
    return text, False


def _parse_at(text: str, start: int, expect: str) -> tuple[Any, set[str], int]:
    """Parse one value starting at ``start``; with ``expect == "array"`` a top-level array tolerates truncation."""
    p = _Parser(text)
    p.i = start
    if text[start] == "[" and expect == "array":
        v = p.arr(top=True)
    else:
        v = p.value()
    return v, p.repairs, p.i


def _bare_sequence(text: str, start: int) -> tuple[list, set[str], int] | None:
    """Objects one after another with no enclosing array (``{..}, {..}`` or JSON lines)."""
    wrapped = "[" + text[start:]
    try:
        v, repairs, end = _parse_at(wrapped, 0, "array")
    except (_Bad, _EOF):
        return None
    # One object followed by a cut-off second one is a (truncated) sequence too.
    if not v or not all(isinstance(x, dict) for x in v) or (len(v) < 2 and TRUNCATED not in repairs):
        return None
    # JSON lines have neither commas nor a closing bracket by definition: not repairs of their own.
    return v, (repairs - {MISSING_COMMA, UNCLOSED}) | {BARE_SEQUENCE}, end - 1 + start


_ITEM_TYPES = {"object": dict, "string": str}


def _following_arrays(body: str, end: int, value: list, items: str | None) -> tuple[list, int, set[str]]:
    """Arrays that follow the first one with only whitespace between (a model writing one array per question):
    concatenated, as long as they hold the expected items."""
    repairs: set[str] = set()
    while True:
        j = end
        while j < len(body) and body[j] in " \t\r\n":
            j += 1
        if j >= len(body) or body[j] != "[":
            return value, end, repairs
        try:
            more, found, new_end = _parse_at(body, j, "array")
        except (_Bad, _EOF):
            return value, end, repairs
        if not more or (items is not None and not all(isinstance(x, _ITEM_TYPES[items]) for x in more)):
            return value, end, repairs
        value = value + more
        repairs |= found | {CONCATENATED_ARRAYS}
        end = new_end


def parse_llm_json(text: str | None, expect: str = "array", items: str | None = None) -> ParseResult:
    """Parse an LLM's JSON leniently. ``expect`` is ``"array"`` (unwraps ``{"x": [...]}``, wraps one object,
    accepts bare object sequences, keeps the finished elements of a truncated array) or ``"any"``.

    ``items`` (``"object"`` or ``"string"``) rejects candidate arrays with no item of that type, so that a
    bracket in the prose ("see [1]", "[OUTPUT]:") is not mistaken for the answer."""
    if expect not in ("array", "any"):
        raise ValueError(f"expect must be 'array' or 'any', got {expect!r}")
    if items is not None and items not in _ITEM_TYPES:
        raise ValueError(f"items must be one of {sorted(_ITEM_TYPES)} or None, got {items!r}")
    if text is None or not text.strip():
        return ParseResult(failure=EMPTY)
    body, fenced = _strip_fence(text)
    repairs: set[str] = {CODE_FENCE} if fenced else set()
    starts = [m.start() for m in re.finditer(r"[\[{]", body)][:_MAX_START_CANDIDATES]
    if not starts:
        return ParseResult(failure=NO_JSON, repairs=sorted(repairs), detail="no '[' or '{' in the output")
    last_error = ""
    saw_truncated_empty = False
    for start in starts:
        try:
            value, found, end = _parse_at(body, start, expect)
        except _Bad as e:
            last_error = str(e)
            continue
        except _EOF:
            last_error = f"ends inside the value starting at {start}"
            if expect == "array" and body[start] == "{":
                seq = _bare_sequence(body, start)
                if seq is not None:
                    value, found, end = seq
                else:
                    continue
            else:
                continue
        if expect == "array" and isinstance(value, dict):
            seq = _bare_sequence(body, start)
            if seq is not None:
                value, found, end = seq
        if not isinstance(value, (list, dict)):
            continue  # a number or word that happens to follow a bracket
        if expect == "array" and isinstance(value, list) and not value and TRUNCATED in found:
            saw_truncated_empty = True
            continue
        if items is not None and isinstance(value, list) and value:
            if not any(isinstance(x, _ITEM_TYPES[items]) for x in value):
                last_error = f"the array at {start} holds no {items}"
                continue
        if expect == "array" and isinstance(value, list):
            value, end, more = _following_arrays(body, end, value, items)
            found |= more
        repairs |= found
        if body[:start].strip():
            repairs.add(LEADING_TEXT)
        if body[end:].strip():
            repairs.add(TRAILING_TEXT)
        if expect == "array" and isinstance(value, dict):
            want = _ITEM_TYPES.get(items or "", object)
            lists = [v for v in value.values() if isinstance(v, list) and any(isinstance(x, want) for x in v)]
            if len(lists) == 1:
                value = lists[0]
                repairs.add(WRAPPED_ARRAY)
            else:
                value = [value]
                repairs.add(SINGLE_OBJECT)
        return ParseResult(value=value, repairs=sorted(repairs))
    if saw_truncated_empty:
        return ParseResult(failure=TRUNCATED_EMPTY, repairs=sorted(repairs), detail="cut off inside the first item")
    return ParseResult(failure=UNREPAIRABLE, repairs=sorted(repairs), detail=last_error)


def strict_json_ok(text: str) -> bool:
    """Whether ``json.loads`` alone accepts the output (what the stats call "clean")."""
    try:
        json.loads(text)
        return True
    except (json.JSONDecodeError, TypeError):
        return False
