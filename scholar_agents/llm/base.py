"""The one LLM interface every part of scholar-agents talks to.

Batch-first: every call takes a list of prompts so that backends can batch (left-padded HF forward passes,
vLLM continuous batching, concurrent HTTP requests). A prompt is either raw text or a chat (a list of
``{"role", "content"}`` messages, rendered with the model's own chat template — the same template in training
and in scoring, which the official PaSa code got wrong).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from scholar_agents.llm.constraints import OutputConstraint

ChatMessages = list[dict[str, str]]
Prompt = Union[str, ChatMessages]


@dataclass(frozen=True)
class SamplingParams:
    """How to generate. ``temperature == 0`` means greedy decoding on every backend."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1  # samples per prompt
    stop: tuple[str, ...] = ()  # stop strings; the returned text excludes them
    seed: int | None = None  # per-request seed where the backend supports it
    logprobs: bool = False  # return the log-probability of each generated token
    # The completion's required shape (JSON schema / regex / choices / EBNF), applied by masking logits on every
    # backend; None = free text. Log-probs stay the model's raw ones (see constraints.py and docs/foundation.md).
    constraint: OutputConstraint | None = None
    # Repetition control (llm/config.py): None = the llm preset's value; the neutral value (1.0 / 0 / 0.0) = off.
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    frequency_penalty: float | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        # Accept lists from Hydra/YAML but keep the dataclass hashable.
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.constraint is not None and not isinstance(self.constraint, OutputConstraint):
            raise TypeError(f"SamplingParams.constraint must be an OutputConstraint, got {type(self.constraint)}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# Each repetition switch's neutral value (off), and the switches each backend has (its own library's).
REPETITION_NEUTRAL = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "frequency_penalty": 0.0}
REPETITION_SWITCHES = {"hf": ("repetition_penalty", "no_repeat_ngram_size"),
                       "vllm": ("repetition_penalty", "frequency_penalty"),
                       "openai": ("frequency_penalty",)}
REPETITION_OFF = dict(REPETITION_NEUTRAL)  # SamplingParams(**REPETITION_OFF): a request with no repetition control


def repetition_controls(params: SamplingParams, cfg) -> dict[str, float]:
    """The repetition switches a request runs with (the request's, else the preset ``cfg``'s: an LLMConfig), only
    those that are on; a switch ``cfg.backend`` does not have is refused with its alternatives."""
    backend = getattr(cfg, "backend", "hf")
    out = {}
    for name, neutral in REPETITION_NEUTRAL.items():
        value = getattr(params, name)
        if value is None:
            value = getattr(cfg, name, neutral) if cfg is not None else neutral
        if value == neutral:
            continue
        if name not in REPETITION_SWITCHES[backend]:
            raise ValueError(f"llm.{name}={value}: the {backend} backend has no such switch; its repetition "
                             f"controls are {', '.join(REPETITION_SWITCHES[backend])}")
        if (name == "repetition_penalty" and value <= 0) or value < 0:
            raise ValueError(f"llm.{name} must be positive, got {value}")
        out[name] = value
    return out


@dataclass
class Completion:
    """One sampled continuation."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None  # one per token in ``token_ids`` when requested
    finish_reason: str = "stop"  # "stop" (EOS or stop string) or "length"


@dataclass
class Generation:
    """All samples for one prompt, with the prompt's token ids (what a trainer needs to rebuild the sequence)."""

    prompt_text: str
    prompt_token_ids: list[int]
    completions: list[Completion] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The first sample's text: the common case of n == 1."""
        return self.completions[0].text


class LLM(abc.ABC):
    """A text-generation model behind some backend (``hf``, ``vllm`` or ``openai``)."""

    #: Identity used by the response cache: model path/name plus anything that changes outputs.
    model_id: str

    @property
    @abc.abstractmethod
    def tokenizer(self):
        """The HF tokenizer of the model (used for chat templates, token counting and candidate ids)."""

    @abc.abstractmethod
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams | None = None) -> list[Generation]:
        """Generate ``params.n`` continuations for each prompt, in order."""

    @abc.abstractmethod
    def next_token_probs(self, prompts: Sequence[Prompt], candidates: Sequence[str]) -> np.ndarray:
        """P(next token = first token of each candidate) for each prompt: shape ``[len(prompts), len(candidates)]``.

        One forward pass per prompt; probabilities are over the full vocabulary (not renormalised over the
        candidates) so that a caller can see how much mass the candidates take. This is the Selector's P("True").
        """

    # ---- shared helpers, the same on every backend ----

    def render(self, prompt: Prompt) -> str:
        """Prompt text as the model sees it: chats through the tokenizer's chat template with the generation
        prompt appended, raw strings unchanged."""
        if isinstance(prompt, str):
            return prompt
        return self.tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)

    def prompt_token_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids, the same on every backend. A chat template already writes any BOS it wants,
        so rendered chats get no extra special tokens; raw strings get the tokenizer's (vLLM's default too)."""
        return self.tokenizer.encode(self.render(prompt), add_special_tokens=isinstance(prompt, str))

    def check_prompt_lengths(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int,
                             max_model_len: int) -> None:
        """The same rule on every backend: a prompt plus the tokens asked for must fit in the context."""
        for i, row in enumerate(prompt_ids):
            if not row:
                raise ValueError(f"prompt {i} is empty")
            if len(row) + max_new_tokens > max_model_len:
                raise ValueError(
                    f"prompt {i} has {len(row)} tokens; with {max_new_tokens} new token(s) it exceeds "
                    f"llm.max_model_len={max_model_len}"
                )

    def candidate_token_ids(self, candidates: Sequence[str]) -> list[int]:
        """The first token id of each candidate as it would follow the assistant header (no leading space)."""
        ids = []
        for cand in candidates:
            toks = self.tokenizer.encode(cand, add_special_tokens=False)
            if not toks:
                raise ValueError(f"candidate {cand!r} encodes to no tokens")
            ids.append(toks[0])
        if len(set(ids)) != len(ids):
            raise ValueError(f"candidates {list(candidates)} share a first token {ids}; they cannot be told apart")
        return ids

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        """Release engines, servers' sessions or GPU memory. Safe to call twice."""
