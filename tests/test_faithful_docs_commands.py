"""Every `scholar ...` command in docs/thought_retriever.md and docs/ppo.md composes (`--cfg job`), with the same
parser and composition as tests/test_experiments.py uses for README.md and docs/cluster.md."""

from __future__ import annotations

import re

from omegaconf import OmegaConf

from tests import test_experiments as documented
from tests.test_experiments import cluster_env  # noqa: F401  (the fixture: cluster-only paths set to fakes)

DOCS = [documented.REPO / "docs" / "thought_retriever.md", documented.REPO / "docs" / "ppo.md"]


def test_thought_and_ppo_doc_commands_compose(cluster_env, monkeypatch):  # noqa: F811
    monkeypatch.setattr(documented, "DOC_FILES", DOCS)
    commands = documented.documented_commands()
    found = {cmd for _, cmd, _ in commands}
    assert {"thought run", "thought calibrate", "eval academiceval", "train crawler_ppo"} <= found
    failures = []
    for where, cmd, overrides in commands:
        if any(re.search(r"\b0[.:][\w.]*\}", o) for o in overrides):
            # a Hydra interpolation (`${paths.output_root}`) that the doc parser's `$VAR` substitution mangled:
            # the recorded CPU-run commands; they are not user-facing templates
            continue
        root = documented.experiment_table.command_words(*cmd.split())
        try:
            cfg = documented.experiment_table.compose(root, documented._first_of_sweeps(overrides))
            job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            OmegaConf.to_container(job, resolve=True, throw_on_missing=False)
        except Exception as exc:  # noqa: BLE001 — collected, reported together
            failures.append(f"{where}: scholar {cmd} {' '.join(overrides)}\n    {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0]}")
    assert not failures, "documented commands that do not compose:\n" + "\n".join(failures)
