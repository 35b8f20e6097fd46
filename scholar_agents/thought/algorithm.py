"""Algorithm 1 (Thought-Retriever inference): sequential by default, batched as a named fast path.

For a step of queries: retrieve top-K from chunks ∪ thoughts and pack them into the token budget (line 3),
generate the answers (line 4), generate thought + binary confidence with the Figure 3 prompt (line 6), then
merge the memory updates **in query order** (lines 7-8): a thought is stored only when it is confident and its
maximum cosine to every item already in memory — including thoughts stored earlier in the same step — is
below ε. ``batch_size = 1`` (the paper) is Algorithm 1 exactly: a step holds one query, or several consecutive
queries whose scopes are pairwise disjoint (none can read or write what another one touches, so batching their
LLM calls changes nothing). ``batch_size > 1`` (``thought=fast``, ours) lets queries of one step not see each
other's thoughts, which is what makes the LLM calls batchable (vLLM, data parallel) while the resulting memory
stays a deterministic function of the query order.

The merge step takes only ``StepResult`` records, so shards that answered against a frozen memory snapshot
(other GPUs, other Slurm tasks) are merged by the same code (``commit``).

Variants (``filter_mode``): ``insertion`` (the paper), ``retrieval`` (the official code: confident thoughts
always stored, near-duplicates dropped at retrieval among K x factor candidates), ``none`` (w/o Filter, §4.5:
no confidence is generated — Figure 3 without Step 1 — and every generated thought is stored, unchecked).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np

from scholar_agents.llm import Completion, Generation, SamplingParams
from scholar_agents.runtime.progress import progress_bar
from scholar_agents.thought.config import ThoughtConfig, thought_config
from scholar_agents.thought.memory import KINDS, Memory
from scholar_agents.thought.packing import PackedContext, pack, pack_full_context
from scholar_agents.thought.prompts import answer_prompt, thought_format, thought_prompt
from scholar_agents.thought.retrievers import Retriever, build_retriever
from scholar_agents.thought.thought_parser import parse_passage, parse_thought

log = logging.getLogger(__name__)


@dataclass
class Query:
    """One user query. Its thought goes to ``scope``; retrieval and the redundancy check cover ``scope`` and
    ``extra_scopes`` (e.g. a shared, global scope)."""

    id: str
    text: str
    scope: str = "default"
    extra_scopes: tuple[str, ...] = ()
    task: str = "qa"  # qa | abstract | related (prompts.answer_prompt)
    retrieval_text: str | None = None  # what is embedded for retrieval, when it differs from the question
    fields: dict = field(default_factory=dict)  # task inputs, e.g. {"abstract": ...} for related

    @property
    def scopes(self) -> list[str]:
        return list(dict.fromkeys([self.scope, *self.extra_scopes]))


@dataclass
class StepResult:
    """Everything Algorithm 1 produced for one query — enough to replay its memory update elsewhere."""

    query_id: str
    query: str
    scope: str
    scopes: list[str]
    answer: str
    context_ids: list[int]
    context_tokens: int
    answer_finish: str = "stop"
    thought: str = ""
    confidence: int | None = None
    parse_status: str = ""
    decision: str = "not_updated"  # stored | redundant | not_confident | malformed | already_stored | not_updated
    thought_id: int | None = None
    max_sim: float | None = None
    nearest_id: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepResult":
        return cls(**d)


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def llm_replicas(llm_cfg) -> int:
    """Engine replicas that serve one ``generate`` call in parallel: ``llm.data_parallel_size`` on the vLLM
    backend (each call is split across them), else 1."""
    if llm_cfg is None or getattr(llm_cfg, "backend", None) != "vllm":
        return 1
    return max(1, int(getattr(llm_cfg, "data_parallel_size", 1) or 1))


def queries_per_step(cfg: ThoughtConfig, llm_cfg) -> int:
    """``thought.batch_size = 1`` is Algorithm 1: one query per step, however many replicas the engine has.
    Above 1 (the fast path) it is per replica: a step advances ``batch_size x replicas`` queries, so 8 vLLM
    replicas each get ``batch_size`` prompts per call."""
    if cfg.batch_size == 1:
        return 1
    return cfg.batch_size * llm_replicas(llm_cfg)


# Queries per engine replica in one call when the memory is frozen (phase=answer shards): the answers do not depend
# on it; it sets how often a shard writes its results (resume granularity).
FROZEN_STEP_PER_REPLICA = 8


def sequential_steps(queries: Sequence[Query]) -> list[list[Query]]:
    """Algorithm 1's order in as few LLM calls as it allows: consecutive queries share a step while their scope
    sets are pairwise disjoint (retrieval, the redundancy check and the insertion of a query touch only its own
    scopes, so no query of the step could have seen another one's thought); a query that shares a scope with the
    step starts the next one."""
    steps: list[list[Query]] = []
    touched: set[str] = set()
    for q in queries:
        scopes = set(q.scopes)
        if not steps or touched & scopes:
            steps.append([])
            touched = set()
        steps[-1].append(q)
        touched |= scopes
    return steps


class ThoughtRetriever:
    """The memory-augmented LLM of §2.3 over one ``Memory``."""

    def __init__(self, llm, embedder, memory: Memory, cfg: ThoughtConfig | dict | None = None):
        self.llm = llm
        self.embedder = embedder
        self.memory = memory
        self.cfg = thought_config(cfg if cfg is not None else ThoughtConfig())
        self._retrievers: dict[str, Retriever] = {}
        self.retriever = self.retriever_for(self.cfg.retriever)
        self.stats: Counter = Counter()
        # queries advanced together per step (thought.batch_size per engine replica)
        self.batch_size = queries_per_step(self.cfg, getattr(llm, "cfg", None))

    def retriever_for(self, kind: str) -> Retriever:
        if kind not in self._retrievers:
            self._retrievers[kind] = build_retriever(kind, self.memory, self.embedder)
        return self._retrievers[kind]

    # ------------------------------------------------------------- line 3: retrieval + packing

    def retrieve(self, queries: Sequence[Query], include_thoughts: bool | None = None,
                 retriever: str | None = None) -> list[PackedContext]:
        cfg = self.cfg
        include = cfg.include_thoughts if include_thoughts is None else include_thoughts
        kinds = KINDS if include else ("chunk",)
        dedupe = cfg.filter_mode == "retrieval" and include
        k = cfg.top_k * cfg.retrieval_candidates_factor if dedupe else cfg.top_k
        hits = self.retriever_for(retriever or cfg.retriever).retrieve(
            [q.retrieval_text or q.text for q in queries], [q.scopes for q in queries], k, kinds)
        out = []
        for h in hits:
            ids = [i for i, _ in h]
            ids = self._dedupe_at_retrieval(ids, cfg.top_k) if dedupe else ids[: cfg.top_k]
            out.append(pack(self.memory.get(ids), self.llm.tokenizer, cfg.token_budget, cfg.truncate_last))
        return out

    def _dedupe_at_retrieval(self, ids: list[int], k: int) -> list[int]:
        """The official code's filter: walk candidates best first, drop any whose cosine to an already kept item
        exceeds ε, stop at K."""
        if not ids:
            return []
        vecs = self.memory.embeddings(ids)
        kept: list[int] = []
        for j in range(len(ids)):
            if kept and float(np.max(vecs[kept] @ vecs[j])) > self.cfg.epsilon:
                continue
            kept.append(j)
            if len(kept) == k:
                break
        return [ids[j] for j in kept]

    # ------------------------------------------------------------- line 4: answers

    def _fit(self, q: Query, ctx: PackedContext) -> tuple[PackedContext, list[dict[str, str]] | None]:
        """The answer prompt for ``q``; the context is re-packed smaller when the prompt plus the answer would
        not fit the model's window (small CPU models: SmolLM2 runs with 2,048 tokens). ``None`` when even an
        empty context does not fit."""
        prompt = _chat(answer_prompt(q.task, q.text, ctx.text, q.fields))
        limit = getattr(getattr(self.llm, "cfg", None), "max_model_len", None)
        if limit is None:
            return ctx, prompt
        over = self.llm.count_tokens(self.llm.render(prompt)) + self.cfg.answer_max_new_tokens - limit
        if over > 0:
            budget = ctx.n_tokens - over - 8  # a little slack: the chat template re-tokenises at the seams
            if budget < 1:
                log.warning("query %s: the prompt alone exceeds llm.max_model_len=%d; not answered", q.id, limit)
                self.stats["prompt_too_long"] += 1
                return PackedContext(), None
            items = [p.item for p in ctx.items]
            ctx = (pack_full_context(items, self.llm.tokenizer, budget, keep="last") if ctx.keep == "last"
                   else pack(items, self.llm.tokenizer, budget, self.cfg.truncate_last))
            prompt = _chat(answer_prompt(q.task, q.text, ctx.text, q.fields))
            self.stats["context_shrunk_to_fit"] += 1
        return ctx, prompt

    def answer(self, queries: Sequence[Query], contexts: Sequence[PackedContext]):
        """Answers (line 4); returns the generations and the contexts actually shown (fitted to the window).
        A query whose prompt cannot fit gets an empty answer with finish reason ``prompt_too_long``."""
        fitted = [self._fit(q, c) for q, c in zip(queries, contexts)]
        params = SamplingParams(max_new_tokens=self.cfg.answer_max_new_tokens, temperature=self.cfg.temperature)
        ok = [i for i, (_, p) in enumerate(fitted) if p is not None]
        gens = dict(zip(ok, self.llm.generate([fitted[i][1] for i in ok], params) if ok else []))
        empty = Generation("", [], [Completion("", [], finish_reason="prompt_too_long")])
        return [gens.get(i, empty) for i in range(len(fitted))], [c for c, _ in fitted]

    def answer_only(self, queries: Sequence[Query], include_thoughts: bool | None = None,
                    retriever: str | None = None, contexts: Sequence[PackedContext] | None = None) -> list[StepResult]:
        """Retrieval (or the given ``contexts``) + answer; no thought, no memory update (baselines, checkpoints)."""
        if contexts is None:
            contexts = self.retrieve(queries, include_thoughts, retriever)
        gens, contexts = self.answer(queries, contexts)
        return [self._result(q, c, g) for q, c, g in zip(queries, contexts, gens)]

    @staticmethod
    def _result(q: Query, c: PackedContext, g) -> StepResult:
        comp = g.completions[0]
        return StepResult(query_id=q.id, query=q.text, scope=q.scope, scopes=q.scopes, answer=comp.text.strip(),
                          context_ids=c.ids, context_tokens=c.n_tokens, answer_finish=comp.finish_reason)

    # ------------------------------------------------------------- line 6: thought + confidence

    def think(self, results: Sequence[StepResult]) -> None:
        for r in results:
            if r.answer_finish == "prompt_too_long":
                r.parse_status = "not_answered"
        results = [r for r in results if r.answer_finish != "prompt_too_long"]
        # w/o Filter (§4.5) removes the confidence generation: no verdict is asked for, every passage is a thought
        confidence = self.cfg.filter_mode != "none"
        prompts = [_chat(thought_prompt(r.query, r.answer, self.cfg.thought_prompt, confidence)) for r in results]
        # thought.constrained: decode the verdict in the prompt's layout, so every thought is judged (see prompts.py)
        constraint = thought_format(self.cfg.thought_prompt, confidence) if self.cfg.constrained else None
        params = SamplingParams(max_new_tokens=self.cfg.thought_max_new_tokens, temperature=self.cfg.temperature,
                                constraint=constraint)
        for r, g in zip(results, self.llm.generate(prompts, params)):
            parsed = parse_thought(g.text) if confidence else parse_passage(g.text)
            r.thought, r.confidence, r.parse_status = parsed.thought, parsed.confidence, parsed.status
            self.stats[f"parse_{parsed.status}"] += 1
            if parsed.status == "malformed":
                log.debug("unparseable thought reply for %s: %r", r.query_id, g.text[:200])

    # ------------------------------------------------------------- lines 7-8: merge + update

    def _accepts(self, r: StepResult) -> tuple[bool, str]:
        if not r.thought:
            return False, "not_confident" if r.confidence == 0 else "malformed"
        if self.cfg.filter_mode == "none":  # w/o Filter: no confidence check (whatever verdict a reply carried)
            return True, ""
        if r.confidence == 1:
            return True, ""
        if r.confidence is None and self.cfg.unmarked_thoughts == "accept":
            return True, ""
        return False, "not_confident" if r.confidence == 0 else "malformed"

    def commit(self, results: Sequence[StepResult]) -> None:
        """Apply the memory updates of ``results`` in their order (deterministic merge)."""
        accepted = []
        for r in results:
            ok, why = self._accepts(r)
            if ok:
                accepted.append(r)
            else:
                r.decision = why
        if accepted:
            vecs = self.embedder.encode([r.thought for r in accepted], kind="doc")
            for r, v in zip(accepted, vecs):
                self._insert(r, v)
        for r in results:
            self.stats[f"decision_{r.decision}"] += 1

    def _insert(self, r: StepResult, vec: np.ndarray) -> None:
        existing = self.memory.find_origin(r.scope, r.query_id)
        if existing is not None:
            r.decision, r.thought_id = "already_stored", existing
            return
        if not r.context_ids:  # nothing was retrieved: the thought has no source to be grounded in
            r.decision = "malformed"
            return
        if self.cfg.filter_mode == "insertion":
            nearest_id, sim = self.memory.nearest(vec[None, :], r.scopes)[0]
            r.nearest_id, r.max_sim = nearest_id, (None if nearest_id is None else sim)
            if nearest_id is not None and sim >= self.cfg.epsilon:
                r.decision = "redundant"
                return
        r.thought_id = self.memory.insert_thought(
            r.thought, vec, r.context_ids, scope=r.scope, query=r.query, answer=r.answer,
            confidence=r.confidence, origin=r.query_id, n_tokens=self.llm.count_tokens(r.thought))
        r.decision = "stored"

    # ------------------------------------------------------------- Algorithm 1

    def step(self, queries: Sequence[Query], update: bool = True) -> list[StepResult]:
        """Lines 3-8 for one batch. ``update=False`` leaves the memory untouched (sharded runs, to be merged)."""
        results = self.answer_only(queries)
        self.think(results)
        if update:
            self.commit(results)
        return results

    def steps(self, queries: Sequence[Query], update: bool = True) -> list[list[Query]]:
        """How ``queries`` are split into steps: Algorithm 1's order (``sequential_steps``) when ``batch_size``
        is 1 and the memory is updated as we go, else fixed chunks of ``queries_per_step`` (the fast path).
        Without updates (sharded answers against a frozen memory) no query can see another's thought whatever
        the chunks, so they take at least ``FROZEN_STEP_PER_REPLICA`` queries per engine replica."""
        queries = list(queries)
        if self.batch_size == 1 and update:
            return sequential_steps(queries)
        n = self.batch_size
        if not update:
            replicas = llm_replicas(getattr(self.llm, "cfg", None))
            n = max(n, FROZEN_STEP_PER_REPLICA * replicas)
        return [queries[i:i + n] for i in range(0, len(queries), n)]

    def run(self, queries: Iterable[Query], update: bool = True, progress: bool = True) -> list[StepResult]:
        out: list[StepResult] = []
        for step in progress_bar(self.steps(list(queries), update), desc="thought-retriever", disable=not progress,
                                 unit="step"):
            out.extend(self.step(step, update=update))
        self.memory.save()
        return out
