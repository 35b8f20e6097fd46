"""GPU memory planning: ``scholar plan <the run's overrides>`` (commands.py), the per-GPU memory model (memory_plan.py),
exact parameter counts of meta-device models (model_sizes.py) and the hardware schema (cluster.py)."""
