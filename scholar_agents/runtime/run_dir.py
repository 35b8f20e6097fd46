"""This run's directory, as a config value: ``cfg.paths.output_dir``.

The runner (``hydra_app.run_task``) sets it once, from Hydra's ``runtime.output_dir``, before the task starts, so a
task reads its run directory from the config it was given and never asks Hydra (the lightning-hydra-template's
``paths.output_dir``). A task called directly on a composed config (tests, notebooks) gets the value the caller put
there, else ``outputs/adhoc``."""

from __future__ import annotations

from pathlib import Path


def run_dir(cfg=None) -> Path:
    """``cfg.paths.output_dir``, created; ``outputs/adhoc`` where the config has none."""
    paths = cfg.get("paths") if cfg is not None and hasattr(cfg, "get") else None
    value = paths.get("output_dir") if paths is not None else None
    d = Path(str(value)) if value else Path("outputs") / "adhoc"
    d.mkdir(parents=True, exist_ok=True)
    return d
