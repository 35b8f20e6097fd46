"""How many sessions one crawl may run under ``crawler.env``'s budgets, and which PPO estimators train on whole
crawls (and so need that bound). Pure rules, read by ``scholar plan`` (plan/) and by PPO's config
(train/ppo/config.py, which re-exports them): they live here, below both, so that the planner reads them without
importing the trainer's floor."""

from __future__ import annotations

from scholar_agents.validation import UsageError

ESTIMATORS = ("paper_mc", "gae", "grpo", "rloo")
# Critic-free estimators (train/ppo/estimators.py: ``uses_value = False``): no value model is built, trained or
# saved; they score WHOLE crawls of each query, ``group_size`` at a time (rollout.collect_crawls)
CRITIC_FREE = ("grpo", "rloo")


def sessions_per_crawl(max_sessions: int | None, max_queue: int | None) -> int | None:
    """The most sessions one crawl can run under ``crawler.env``'s budgets, None when nothing bounds it.
    ``max_sessions`` counts them; ``max_queue`` too: a session starts only while fewer than ``max_queue`` papers
    are queued, and each S_{q+p} session is one queued paper, so S_q plus at most ``max_queue - 1`` of them.
    ``max_actions`` and ``max_gen_tokens`` bound no session count (an [Expand] queues a section's every reference)."""
    bounds = [int(n) for n in (max_sessions, max_queue) if n is not None]
    return min(bounds) if bounds else None


def critic_free_crawl_budget(estimator: str, env) -> int | None:
    """Sessions per crawl a critic-free run (``ppo.estimator=grpo|rloo``: ``group_size`` WHOLE crawls per training
    query, each to its end) is planned for; None for the estimators with a critic (App. A.2's fixed session
    counts). ``env``: ``crawler.env`` (node or dataclass). Unbounded crawls are refused in one line: at PaSa's depth 3
    without budgets one step is 16 whole crawls per GPU, which no step window or signal lead covers."""
    if estimator not in CRITIC_FREE:
        return None
    get = env.get if hasattr(env, "get") else lambda k, d=None: getattr(env, k, d)
    bound = sessions_per_crawl(get("max_sessions", None), get("max_queue", None))
    if bound is None:
        raise UsageError(f"ppo.estimator={estimator} trains on whole crawls, and crawler.env.max_sessions and "
                         f"max_queue are null (depth {get('max_depth', '?')}): a step has no bound. Set "
                         f"crawler.env.max_sessions=<n> (experiment=pasa_crawler_grpo sets the paper run's) or use "
                         f"ppo.estimator=paper_mc")
    return bound
