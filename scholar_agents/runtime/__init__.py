"""The ground floor: what every job needs from the machine it runs on, and nothing of the package above it.

``cluster`` (the hardware schema, ``conf/cluster/*.yaml``), ``run_dir`` (the run directory the runner sets),
``preemption`` (signals, checkpoint-then-requeue, the distributed environment), ``collectives`` (process groups
and the collectives the trainers share), ``cuda_memory`` (peak-memory readings) and ``slurm_probe`` (a tiny
resumable job that checks an allocation with all of them). Modules here import the standard library, torch and
the launchers' own packages (submitit, transformers' callback base), never ``scholar_agents`` outside this folder:
``scripts/import_graph.py --check`` (tests/test_layers.py) keeps it so.
"""
