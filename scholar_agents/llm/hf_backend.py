"""The transformers backend: CPU or GPU, batched with left padding.

Prompts are sorted by length and cut into batches of ``cfg.batch_size`` sequences (so padding stays small), and
results are put back in the caller's order. ``next_token_probs`` is one forward pass per batch with
``logits_to_keep=1``: on 2 CPU cores that is what makes the Selector's P("True") affordable (ARCHITECTURE.md:
~5 s for 32x300 tokens in bf16).
"""

from __future__ import annotations

import gc
import logging
from typing import Sequence

import numpy as np
import torch

from scholar_agents.llm.adapters import adapter_fingerprint, apply_adapter
from scholar_agents.llm.attention import resolve_attn_implementation
from scholar_agents.llm.base import LLM, Completion, Generation, Prompt, SamplingParams, repetition_controls
from scholar_agents.llm.cache import model_identity
from scholar_agents.llm.cancel import current_event, raise_if_cancelled
from scholar_agents.llm.completions import build_completion, end_of_sequence_ids
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.constraints import OutputConstraint, warn_unconstrained
from scholar_agents.llm.model_init import load_causal_lm
from scholar_agents.llm.precision import resolve_device, resolve_torch_dtype
from scholar_agents.runtime.progress import progress_bar

log = logging.getLogger(__name__)


class GrammarLogitsProcessor:
    """transformers logits processor that masks each row with its own xgrammar matcher.

    Like ``xgrammar.contrib.hf.LogitsProcessor`` (one per ``generate`` call), but a row that has stopped — its
    grammar finished, or a stop string ended it and transformers now feeds it padding — is left alone instead
    of failing xgrammar's ``accept_token`` assertion. The grammar logic is xgrammar's; this is only the glue.
    """

    def __init__(self, compiled_grammar):
        self.compiled = compiled_grammar
        self.matchers: list | None = None
        self.done: list[bool] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        import xgrammar as xgr

        if self.matchers is None:  # first step: nothing sampled yet
            self.matchers = [xgr.GrammarMatcher(self.compiled) for _ in range(input_ids.shape[0])]
            self.done = [False] * input_ids.shape[0]
        else:
            for i, m in enumerate(self.matchers):
                if not self.done[i] and (not m.accept_token(int(input_ids[i, -1])) or m.is_terminated()):
                    self.done[i] = True
        vocab = self.compiled.tokenizer_info.vocab_size
        mask = xgr.allocate_token_bitmask(len(self.matchers), vocab)  # all allowed: finished rows stay free
        for i, m in enumerate(self.matchers):
            if not self.done[i]:
                m.fill_next_token_bitmask(mask, i)
        device = scores.device
        scores = scores.to("cpu") if device.type not in ("cpu", "cuda") else scores
        xgr.apply_token_bitmask_inplace(scores, mask.to(scores.device))
        return scores.to(device)


class CancelCriteria:
    """transformers stopping criterion: every row stops at the next token once ``event`` is set (the caller's
    cancel, llm/cancel.py), so a cancel waits one decoding step, not the whole answer."""

    def __init__(self, event):
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class HFBackend(LLM):
    def __init__(self, cfg: LLMConfig, model_path: str, tokenizer_path: str | None = None, adapter=None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if cfg.batch_size < 1:
            raise ValueError(f"llm.batch_size must be >= 1, got {cfg.batch_size}")
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        self.dtype = resolve_torch_dtype(cfg.dtype, self.device)
        tok = AutoTokenizer.from_pretrained(tokenizer_path or model_path, trust_remote_code=cfg.trust_remote_code)
        tok.padding_side = "left"  # generation continues from the last position of every row
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        self._tokenizer = tok
        # With an adapter: merged in fp32 (a small low-rank delta added to bf16 weights would be rounded away, as
        # train/sft.py's save_final notes), then cast to the serving dtype.
        attn = resolve_attn_implementation(cfg.attn_implementation, "llm.attn_implementation")
        attn_kw = {"attn_implementation": attn} if attn else {}
        if cfg.init == "random":  # llm.init=random: seeded random weights from the config (llm/model_init.py)
            # drawn where it will run: a CPU draw of a 7B-shaped model in bf16 takes tens of seconds on a GPU node
            with torch.device(self.device):
                self.model = load_causal_lm(model_path, "random", seed=cfg.seed,
                                            dtype=torch.float32 if adapter is not None else self.dtype, **attn_kw)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=torch.float32 if adapter is not None else self.dtype,
                trust_remote_code=cfg.trust_remote_code, **attn_kw
            )
        if adapter is not None:  # llm.adapter: a LoRA adapter merged into the weights (llm/adapters.py)
            self.model = apply_adapter(self.model, adapter).to(self.dtype)
        self.model = self.model.to(self.device)
        self.model.eval()
        self.eos_token_ids = end_of_sequence_ids(tok, model_path)
        device = torch.device(self.device)
        self._rng_devices = [device.index or 0] if device.type == "cuda" else []
        self.model_id = model_identity(cfg.model, model_path, "hf", str(self.dtype).removeprefix("torch."))
        if cfg.init == "random":  # never share cached responses with the checkpoint's own weights
            self.model_id += f"|random:{cfg.seed}"
        if adapter is not None:
            self.model_id += f"|adapter:{adapter_fingerprint(adapter)}"
        self.adapter = None if adapter is None else str(adapter)
        self._grammar_compiler = None  # xgrammar's, built on the first constrained request
        self._grammars: dict[OutputConstraint, object] = {}  # compiled once per constraint
        log.info("hf backend: %s%s on %s in %s", model_path, f" + adapter {adapter}" if adapter else "", self.device,
                 self.dtype)

    @property
    def tokenizer(self):
        return self._tokenizer

    # ---- generation ----

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams | None = None) -> list[Generation]:
        params = params or SamplingParams()
        texts = [self.render(p) for p in prompts]
        ids = [self.prompt_token_ids(p) for p in prompts]
        self.check_prompt_lengths(ids, params.max_new_tokens, self.cfg.max_model_len)
        # Greedy samples are identical: decode once and copy (vLLM also returns n copies).
        n_run = 1 if params.greedy else params.n
        per_batch = max(1, self.cfg.batch_size // n_run)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = [order[i : i + per_batch] for i in range(0, len(order), per_batch)]
        results: list[Generation | None] = [None] * len(ids)
        seed = self.cfg.seed if params.seed is None else params.seed
        for b, batch in enumerate(progress_bar(batches, desc="hf generate", leave=False, disable=len(batches) < 2)):
            raise_if_cancelled()
            # A private RNG stream per batch: reproducible for a given call, and the caller's global RNG is untouched.
            with torch.random.fork_rng(devices=self._rng_devices):
                torch.manual_seed(seed + b)
                rows = self._generate_batch([ids[i] for i in batch], params, n_run)
            for k, i in enumerate(batch):
                samples = rows[k * n_run : (k + 1) * n_run]
                if n_run < params.n:
                    samples = [Completion(s.text, list(s.token_ids), None if s.logprobs is None else list(s.logprobs),
                                          s.finish_reason) for s in samples * params.n]
                results[i] = Generation(prompt_text=texts[i], prompt_token_ids=ids[i], completions=samples)
        return results  # type: ignore[return-value]

    def _generate_batch(self, batch_ids: list[list[int]], params: SamplingParams, n_run: int) -> list[Completion]:
        from transformers import GenerationConfig

        enc = self._pad(batch_ids)
        width = enc["input_ids"].shape[1]
        # Neutral values set explicitly: a model's generation_config.json (e.g. Qwen2.5's top_k=20,
        # repetition_penalty=1.05) would otherwise fill the unset fields and make hf disagree with vLLM/openai.
        sampling = dict(temperature=params.temperature, top_p=params.top_p, top_k=0) if not params.greedy else {}
        rep = repetition_controls(params, self.cfg)  # llm.repetition_penalty / no_repeat_ngram_size (transformers')
        gen_cfg = GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=not params.greedy,
            **sampling,
            repetition_penalty=1.0,  # llm.repetition_penalty is the processor below (generated tokens only)
            no_repeat_ngram_size=rep.get("no_repeat_ngram_size", 0),
            num_return_sequences=n_run,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.tokenizer.pad_token_id,
            stop_strings=list(params.stop) or None,
            return_dict_in_generate=True,
            output_logits=params.logprobs,
        )
        grammar = self._compiled(params.constraint) if params.constraint is not None else None
        processors = [GrammarLogitsProcessor(grammar)] if grammar is not None else []
        if "repetition_penalty" in rep:
            from transformers import RepetitionPenaltyLogitsProcessor

            # transformers' own penalty, over the generated tokens only (prompt_ignore_length = the padded prompt):
            # an answer may reuse the context's words, it may not repeat its own
            penalty = RepetitionPenaltyLogitsProcessor(rep["repetition_penalty"], prompt_ignore_length=width)
            processors.insert(0, penalty)
        processors = processors or None
        event = current_event()
        stopping = [CancelCriteria(event)] if event is not None else None
        out = self.model.generate(**enc, generation_config=gen_cfg, tokenizer=self.tokenizer,
                                  logits_processor=processors, stopping_criteria=stopping)
        raise_if_cancelled()  # rows cut short by the cancel are not answers
        new = out.sequences[:, width:]
        logprobs = None
        if params.logprobs:
            # Raw model log-probabilities (before temperature / top-p), like vLLM's default "raw_logprobs".
            steps = [
                torch.log_softmax(step.float(), dim=-1).gather(1, new[:, t : t + 1]).squeeze(1)
                for t, step in enumerate(out.logits)
            ]
            logprobs = torch.stack(steps, dim=1).cpu().tolist()
        new = new.cpu().tolist()
        pad = self.tokenizer.pad_token_id
        if pad not in self.eos_token_ids:
            # Rows that finished early (stop string) are filled with pad up to the batch's length.
            for row in new:
                while row and row[-1] == pad:
                    row.pop()
        return [
            build_completion(self.tokenizer, row, None if logprobs is None else logprobs[r][: len(row)], params.stop,
                             self.eos_token_ids)
            for r, row in enumerate(new)
        ]

    def _compiled(self, constraint: OutputConstraint):
        """The constraint compiled by xgrammar for this tokenizer (cached); None when xgrammar is missing."""
        if constraint in self._grammars:
            return self._grammars[constraint]
        try:
            import xgrammar as xgr
        except ImportError:
            warn_unconstrained("hf", constraint.kind, "xgrammar is not installed: it comes with the vllm-cpu / gpu "
                                                      "extras")
            return None
        if self._grammar_compiler is None:
            # The mask must span the model's vocabulary (lm_head rows), which may be padded past the tokenizer's.
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size,
                                                      stop_token_ids=sorted(self.eos_token_ids))
            self._grammar_compiler = xgr.GrammarCompiler(info, max_threads=1)
        compiler = self._grammar_compiler
        if constraint.json_schema is not None:
            # No free whitespace between JSON tokens (as vLLM's disable_any_whitespace): weak models loop on it.
            compiled = compiler.compile_json_schema(constraint.json_schema, any_whitespace=False)
        elif constraint.regex is not None:
            compiled = compiler.compile_regex(constraint.regex)
        elif constraint.choices is not None:
            compiled = compiler.compile_grammar(constraint.choices_as_ebnf())
        else:
            compiled = compiler.compile_grammar(constraint.grammar)
        self._grammars[constraint] = compiled
        return compiled

    # ---- scoring ----

    @torch.inference_mode()
    def next_token_probs(self, prompts: Sequence[Prompt], candidates: Sequence[str]) -> np.ndarray:
        cand = torch.tensor(self.candidate_token_ids(candidates))
        ids = [self.prompt_token_ids(p) for p in prompts]
        self.check_prompt_lengths(ids, 1, self.cfg.max_model_len)
        out = np.zeros((len(ids), len(cand)), dtype=np.float64)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = [order[i : i + self.cfg.batch_size] for i in range(0, len(order), self.cfg.batch_size)]
        for batch in progress_bar(batches, desc="hf next-token probs", leave=False, disable=len(batches) < 2):
            raise_if_cancelled("scoring")
            enc = self._pad([ids[i] for i in batch])
            # Left padding shifts real tokens right: positions must count real tokens only, as generate() does.
            position_ids = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            logits = self.model(**enc, position_ids=position_ids, logits_to_keep=1, use_cache=False).logits[:, -1, :]
            probs = torch.softmax(logits.float(), dim=-1)[:, cand.to(logits.device)]
            out[batch] = probs.cpu().numpy()
        return out

    # ---- helpers ----

    def _pad(self, batch_ids: list[list[int]]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer.pad({"input_ids": batch_ids}, padding=True, return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}

    def close(self) -> None:
        if getattr(self, "model", None) is not None:
            self.model = None
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
