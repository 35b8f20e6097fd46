"""Reading the thought + binary confidence out of an LLM's reply to the Figure 3 prompt.

The prompt asks for '0' (the answer only says the question cannot be answered) or '1' followed by a
summarising passage. Replies come in many shapes: "1\\n<passage>", "Step 1: 1\\nStep 2: <passage>",
"Confidence: 1 / Thought: ...", JSON, the early draft's 'idk', echoes of the prompt, or nothing usable.
``parse_thought`` never raises: it returns a status that the caller counts and logs.

Statuses: ``ok`` (confidence 1 and a passage), ``invalid`` (the model said 0 / idk: not meaningful),
``malformed`` (no confidence marker, or confidence 1 with no passage). What happens to an unmarked passage
is the caller's switch: the official code stored any reply without 'idk' / 'Step 1' in it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_TRUE = {"1", "yes", "true", "valid"}
_FALSE = {"0", "no", "false", "invalid", "idk"}

_CONF_LINE = re.compile(r"^\s*\**\s*confidence\s*\**\s*[:=]\s*\**\s*([A-Za-z0-9]+)", re.I | re.M)
_THOUGHT_LABEL = re.compile(r"^\s*\**\s*(?:thought|knowledge point|step\s*2)\s*\**\s*[:.\-]\s*\**", re.I | re.M)
_STEP1 = re.compile(r"step\s*1\s*[:.\-]?\s*(?:output\s*)?['\"]?\s*([01])\b", re.I)
_LEADING = re.compile(r"^\s*['\"*(\[]?([01])['\"*)\]]?(?:\s*$|[\s.:)\-,]+)")
_IDK = re.compile(r"\bidk\b|cannot be answered|can't be answered|insufficient information|not enough information", re.I)
_PROMPT_ECHO = re.compile(r"determine if the answer is an actual answer|perform the following steps", re.I)


@dataclass
class ParsedThought:
    confidence: int | None  # 1 meaningful, 0 not, None when the reply carries no readable verdict
    thought: str
    status: str  # ok | invalid | malformed


def _clean(text: str) -> str:
    text = _THOUGHT_LABEL.sub("", text, count=1) if _THOUGHT_LABEL.match(text) else text
    text = text.strip().strip('"').strip("'").strip()
    # a bare digit or a lone label is not a passage
    return "" if re.fullmatch(r"[\s01.:*\-]*", text) else text


def _verdict(word: str) -> int | None:
    w = word.strip().lower()
    if w in _TRUE:
        return 1
    if w in _FALSE:
        return 0
    return None


def _finish(conf: int | None, thought: str) -> ParsedThought:
    if conf == 0:
        return ParsedThought(0, "", "invalid")
    if conf == 1:
        return ParsedThought(1, thought, "ok" if thought else "malformed")
    return ParsedThought(None, thought, "malformed")


def parse_passage(reply: str | None) -> ParsedThought:
    """A reply to the w/o-Filter prompt (no verdict asked): the whole reply, labels stripped, is the thought
    (``ok``); only an empty reply or a bare digit is ``malformed``."""
    thought = _clean((reply or "").strip())
    return ParsedThought(None, thought, "ok" if thought else "malformed")


def parse_thought(reply: str | None) -> ParsedThought:
    text = (reply or "").strip()
    if not text:
        return ParsedThought(None, "", "malformed")

    # JSON {"confidence": 1, "thought": "..."} (models that answer in JSON unprompted)
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            conf = _verdict(str(obj.get("confidence", "")))
            return _finish(conf, _clean(str(obj.get("thought", "") or obj.get("knowledge_point", "") or "")))

    # "Confidence: 1\nThought: ..." (the structured layout)
    m = _CONF_LINE.search(text)
    if m:
        conf = _verdict(m.group(1))
        rest = (text[: m.start()] + text[m.end():]).strip()
        label = _THOUGHT_LABEL.search(rest)
        return _finish(conf, _clean(rest[label.end():] if label else rest))

    # "Step 1: 1 ... Step 2: <passage>"
    m = _STEP1.search(text)
    if m:
        conf = int(m.group(1))
        step2 = re.search(r"step\s*2\s*[:.\-]?", text[m.end():], re.I)
        passage = text[m.end() + step2.end():] if step2 else text[m.end():]
        return _finish(conf, _clean(passage))

    # "1\n<passage>" / "0" — the literal Figure 3 layout
    m = _LEADING.match(text)
    if m:
        return _finish(int(m.group(1)), _clean(text[m.end():]))

    if _PROMPT_ECHO.search(text):
        return ParsedThought(None, "", "malformed")
    if _IDK.search(text) and len(text.split()) < 40:
        return ParsedThought(0, "", "invalid")
    return ParsedThought(None, _clean(text), "malformed")
