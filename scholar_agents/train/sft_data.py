"""SFT data: chat JSONL rows (``{"messages": [...]}``, as ``data_gen`` writes them) read and checked, turned into the
prompt / completion examples TRL trains on (loss on the answer only), and examples longer than ``max_length`` dropped
(never cut: a cut answer teaches a cut answer)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from scholar_agents.validation import jsonl_records

log = logging.getLogger(__name__)

# what the loss is taken on (sft.loss_on): the completion (TRL prompt/completion), the assistant turns, every token, or
# only the Selector's decision token
LOSS_ON = ("completion", "assistant", "all", "decision")


def read_chat_jsonl(path: str | Path, limit: Optional[int] = None) -> list[dict]:
    """Examples from a JSONL file in the ``messages`` or ``prompt``/``completion`` format, validated line by line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT data file not found: {path}")
    rows: list[dict] = []
    for lineno, row in jsonl_records(path):
        if "messages" in row:
            _check_messages(row["messages"], f"{path}:{lineno}")
            rows.append({"messages": row["messages"]})
        elif "prompt" in row and "completion" in row:
            _check_messages(row["prompt"], f"{path}:{lineno} prompt")
            _check_messages(row["completion"], f"{path}:{lineno} completion")
            rows.append({"prompt": row["prompt"], "completion": row["completion"]})
        else:
            raise ValueError(f"{path}:{lineno}: expected a 'messages' list or 'prompt'/'completion' lists, "
                             f"got keys {sorted(row)}")
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise ValueError(f"{path}: no examples")
    return rows


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: messages must be a non-empty list")
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"{where}: each message needs 'role' and 'content', got {m!r}")


def to_prompt_completion(example: dict) -> dict:
    """``messages`` -> prompt (everything before the last assistant turn) + completion (that turn)."""
    if "prompt" in example:
        return {"prompt": example["prompt"], "completion": example["completion"]}
    messages = example["messages"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None or last == 0:
        raise ValueError(f"a chat needs a prompt and an assistant answer, got roles {[m['role'] for m in messages]}")
    return {"prompt": messages[:last], "completion": messages[last:last + 1]}


def to_messages(example: dict) -> dict:
    if "messages" in example:
        return {"messages": example["messages"]}
    return {"messages": list(example["prompt"]) + list(example["completion"])}


def prepare_examples(rows: list[dict], loss_on: str) -> list[dict]:
    """Put examples in the format the ``loss_on`` mode needs (see the module docstring)."""
    if loss_on not in LOSS_ON:
        raise ValueError(f"loss_on must be one of {LOSS_ON}, got {loss_on!r}")
    convert = to_prompt_completion if loss_on in ("completion", "decision") else to_messages
    return [convert(r) for r in rows]


def sequence_length(tokenizer, example: dict) -> int:
    """Tokens of the full rendered chat (what TRL will tokenize)."""
    messages = to_messages(example)["messages"]
    return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])


def drop_overlong(tokenizer, examples: list[dict], max_length: int, what: str) -> list[dict]:
    kept = [e for e in examples if sequence_length(tokenizer, e) <= max_length]
    if len(kept) < len(examples):
        log.warning("%s: dropped %d of %d examples longer than max_length=%d tokens (overlong=drop)",
                    what, len(examples) - len(kept), len(examples), max_length)
    if not kept:
        raise ValueError(f"{what}: every example is longer than max_length={max_length}")
    return kept
