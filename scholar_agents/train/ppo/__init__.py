"""Session-level PPO for the PaSa Crawler (PaSa §4.2, Eqs. 1–8, Appendix A.2, Table 9).

TRL 1.16 has no PPO, so this is our own loop on accelerate, written to be read against the paper:
``rewards.py`` (Eqs. 1–2), ``estimators.py`` (Eqs. 3–4, and GAE as the official code's alternative, behind one
interface), ``losses.py`` (Eqs. 5–8 and the usual PPO diagnostics); ``inputs.py`` and ``models.py`` build what
``trainer.py``'s loop is handed. The loop drives: ``rollout.py`` collects, ``targets.py`` computes the targets,
``update.py`` updates through ``engine.py`` (plain torch or DeepSpeed), ``run_log.py`` logs, ``checkpoint.py`` saves.
"""
