"""Typed config of Thought-Retriever (the ``thought`` Hydra group, schema ``base_thought``).

Defaults are the paper's (§4.1: chunk size 500, K = 8, ε = 0.85, a 2,000-token context for every RALM).
Every place where the official code differs from the paper is a named switch; the comment says whose choice
each value is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scholar_agents.typed_config import typed

FILTER_MODES = ("insertion", "retrieval", "none")
RETRIEVERS = ("dense", "bm25", "tfidf")
THOUGHT_PROMPTS = ("figure3", "structured")
INDEX_KINDS = ("flat", "hnsw")


@dataclass
class PreQueryConfig:
    """Queries asked before evaluation to grow the thought memory (Appendix D, Figure 13)."""

    method: str = "both"  # template | llm | both | none
    n_template: int = 4  # template-based queries per document (Figure 13, top)
    n_llm: int = 4  # LLM-based queries per document (Figure 13 asks for 20; fewer on CPU)
    max_new_tokens: int = 256  # for the LLM-based question list
    temperature: float = 0.0
    seed: int = 0


@dataclass
class ThoughtConfig:
    # ---- memory (§2.1, §4.1) ----
    chunk_size: int = 500  # tokens per raw chunk (§4.1)
    chunk_overlap: int = 0  # tokens shared by consecutive chunks (the paper uses none)
    index: str = "flat"  # flat (exact inner product) | hnsw (approximate, for millions of items)
    hnsw_m: int = 32
    # ---- retrieval (Algorithm 1 line 3) ----
    # dense (the paper: Contriever; here the configured embedder) | bm25 | tfidf (the §4.5 ablation)
    retriever: str = "dense"
    top_k: int = 8  # K (§4.1)
    token_budget: int = 2000  # maximum context length of every RALM (§4.1)
    truncate_last: bool = True  # cut the item that overflows the budget instead of dropping it (ours)
    include_thoughts: bool = True  # False = a plain RALM over raw chunks (the baselines)
    # ---- thought generation and filtering (Algorithm 1 lines 6-8, §2.3, Appendix M) ----
    epsilon: float = 0.85  # ε: a thought whose max cosine to memory is >= ε is redundant (§4.1)
    # insertion: the paper (redundancy checked when a thought is inserted, confident thoughts only);
    # retrieval: the official code (every confident thought stored; near-duplicates dropped while retrieving);
    # none: the "w/o Filter" ablation of §4.5 ("we remove the confidence generation and thought merge"): the thought
    # prompt asks for no verdict (Figure 3 without Step 1) and every generated passage is stored, unchecked.
    filter_mode: str = "insertion"
    # filter_mode=retrieval: K * this many candidates are de-duplicated (the official code's `recall_coe`)
    retrieval_candidates_factor: int = 5
    # figure3: the paper's prompt verbatim; structured: Figure 3 plus a fixed "Confidence:/Thought:" answer format
    # (ours: small models follow it more reliably; the parser reads both).
    thought_prompt: str = "figure3"
    # Decode the thought reply under its prompt's layout (prompts.thought_format: Figure 3's '0' | '1' + passage),
    # masking logits with the backend's structured-output library (ours). Thought-Retriever trains nothing, so no
    # log-probs or training data depend on it; the paper's LLMs write the layout unaided, a 135M model mostly does
    # not (docs/thought_retriever.md: SmolLM2's replies were all "malformed" without it). false = generate freely.
    constrained: bool = True
    # A reply with a passage but no readable 0/1 verdict: reject (ours: not confident, counted) or accept (the
    # official code stored every reply that did not contain 'idk').
    unmarked_thoughts: str = "reject"
    answer_max_new_tokens: int = 256
    thought_max_new_tokens: int = 256
    temperature: float = 0.0  # the official code decodes greedily (tau = 0)
    # ---- batching ----
    # 1 (the paper, Algorithm 1): queries are answered one after another and each sees every thought stored by
    # the queries before it, whatever the engine's replicas; consecutive queries whose scopes are disjoint share
    # one LLM call (they cannot see each other's thoughts anyway, so the result is Algorithm 1's).
    # > 1 (the fast path, thought=fast; ours, deviates from Algorithm 1): this many queries PER ENGINE REPLICA
    # advance together (batch_size x llm.data_parallel_size per step on the vLLM backend,
    # algorithm.queries_per_step) and queries of one step do not see each other's thoughts; their memory updates
    # are merged in query order, so the memory is still a deterministic function of the query order.
    batch_size: int = 1
    prequery: PreQueryConfig = field(default_factory=PreQueryConfig)

    def __post_init__(self) -> None:
        validate(self)


def validate(cfg: ThoughtConfig) -> None:
    if cfg.filter_mode not in FILTER_MODES:
        raise ValueError(f"thought.filter_mode must be one of {FILTER_MODES}, got {cfg.filter_mode!r}")
    if cfg.retriever not in RETRIEVERS:
        raise ValueError(f"thought.retriever must be one of {RETRIEVERS}, got {cfg.retriever!r}")
    if cfg.thought_prompt not in THOUGHT_PROMPTS:
        raise ValueError(f"thought.thought_prompt must be one of {THOUGHT_PROMPTS}, got {cfg.thought_prompt!r}")
    if cfg.unmarked_thoughts not in {"reject", "accept"}:
        raise ValueError(f"thought.unmarked_thoughts must be reject | accept, got {cfg.unmarked_thoughts!r}")
    if cfg.index not in INDEX_KINDS:
        raise ValueError(f"thought.index must be one of {INDEX_KINDS}, got {cfg.index!r}")
    if cfg.chunk_size < 1 or not 0 <= cfg.chunk_overlap < cfg.chunk_size:
        raise ValueError("need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size, "
                         f"got {cfg.chunk_size}/{cfg.chunk_overlap}")
    if cfg.top_k < 1 or cfg.token_budget < 1 or cfg.batch_size < 1:
        raise ValueError("thought.top_k, thought.token_budget and thought.batch_size must be >= 1")
    if not -1.0 <= cfg.epsilon <= 1.0:
        raise ValueError(f"thought.epsilon is a cosine threshold in [-1, 1], got {cfg.epsilon}")
    if cfg.prequery.method not in {"template", "llm", "both", "none"}:
        raise ValueError(f"thought.prequery.method must be template|llm|both|none, got {cfg.prequery.method!r}")


def thought_config(cfg) -> ThoughtConfig:
    """A ``ThoughtConfig`` from a DictConfig / dict / ThoughtConfig (validated)."""
    return typed(ThoughtConfig, cfg, "thought")
