"""Running a task function as a Hydra app: resolvers, the ConfigStore schemas, and the run itself.

Every entry point is ``scholar <group> <command> [hydra overrides]``; the command's root config is
``conf/<group>_<command>.yaml`` and its task function takes the composed ``DictConfig``.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from scholar_agents.runtime.cuda_check import cuda_refusal
from scholar_agents.runtime.library_bars import library_bars_off_unless_terminal
from scholar_agents.runtime.preemption import (
    NETWORK_VARS,
    TORCH_DIST_VARS,
    export_network_env,
    export_torch_distributed_env,
)
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"
log = logging.getLogger(__name__)


def _register_resolvers() -> None:
    if not OmegaConf.has_resolver("sa_pkg"):
        OmegaConf.register_new_resolver("sa_pkg", lambda: str(PACKAGE_DIR))
    if not OmegaConf.has_resolver("sa_repo"):
        # The checkout root for editable installs (where outputs/ and data/ live), else the working directory.
        repo = PACKAGE_DIR.parent
        OmegaConf.register_new_resolver("sa_repo", lambda: str(repo if (repo / "pyproject.toml").exists() else Path.cwd()))
    if not OmegaConf.has_resolver("sa_job_dir"):
        OmegaConf.register_new_resolver("sa_job_dir", job_dir)


def job_dir(single_run_dir: str, subdir: str = "checkpoints") -> str:
    """``${sa_job_dir:<dir>}``: where a run keeps what it resumes from. A single run: ``<dir>`` as given (stable:
    re-running the command, or a requeued sbatch job, continues there). A job of a multirun (``-m``):
    ``<this job's sweep subdir>/<subdir>``, so jobs never share checkpoints; a requeued array task reruns in the
    same sweep subdir and resumes from its own. Outside a Hydra run (``compose`` in tests): ``<dir>``."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
    except ValueError:  # not inside a Hydra job
        return single_run_dir
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return str(Path(hydra_cfg.runtime.output_dir) / subdir)
    return single_run_dir


def register_configs() -> None:
    """Register every structured-config schema (``base_<group>``) so YAML presets are type-checked."""
    from hydra.core.config_store import ConfigStore

    # lazy: config_schemas imports tqdm, which must load after library_bars_off_unless_terminal() (cli.main, _main)
    from scholar_agents.config_schemas import SCHEMAS

    cs = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        cs.store(group=group, name=name, node=node)


def setup_environment(cfg: DictConfig | None = None) -> None:
    """Offline-by-default hub access: nothing may download at run time unless the user opts in. (The wandb mode
    is decided by the composed config: :func:`apply_wandb_mode`.)"""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def apply_wandb_mode(cfg: DictConfig) -> str:
    """Export ``WANDB_MODE`` from the composed ``logging.wandb`` (``disabled`` when ``enabled: false``).

    Precedence, highest first: ``logging.wandb.mode=...`` on the command line (or in an experiment preset), then a
    ``WANDB_MODE`` exported in the shell (``conf/logging/default.yaml`` reads it: ``${oc.env:WANDB_MODE,offline}``),
    then ``offline``. The loggers (SFT's HF callback, PPO's RunLog) are handed this mode, never a stale one."""
    wandb_cfg = (cfg.get("logging") or {}).get("wandb") if isinstance(cfg, DictConfig) else None
    if wandb_cfg is not None:
        mode = "disabled" if not wandb_cfg.get("enabled", True) else wandb_cfg.get("mode")
        if mode:
            os.environ["WANDB_MODE"] = str(mode)
    os.environ.setdefault("WANDB_MODE", "offline")  # a command without a logging group: never online by surprise
    return os.environ["WANDB_MODE"]


@contextmanager
def task_environment(cfg: DictConfig):
    """The process environment a task runs in, set in ONE place for every entry point: first the CUDA check
    (``cuda_check.cuda_refusal``: a config that asks for GPUs whose torch sees no CUDA is refused here, before the
    task loads anything, instead of running on the CPU), then the distributed variables
    (``preemption.export_torch_distributed_env``: Slurm task, torchrun, or a world of one), the network interface
    and NCCL's log level (``preemption.export_network_env``: ``cluster.socket_ifname`` as NCCL_SOCKET_IFNAME /
    GLOO_SOCKET_IFNAME, NCCL_DEBUG=WARN; never over what the user exported) and the wandb mode. Everything is
    restored afterwards, so in-process callers (tests, notebooks) do not leak RANK / WANDB_MODE into later work (a
    Slurm job submitted later inherits the environment). Here rather than in each command: every training and
    generation command passes through it, and the check reads only the composed config."""
    refusal = cuda_refusal(cfg)
    if refusal:
        raise UsageError(refusal)
    check_schemas(cfg)
    keys = (*TORCH_DIST_VARS, *NETWORK_VARS, "WANDB_MODE")
    saved = {k: os.environ.get(k) for k in keys}
    try:
        how = export_torch_distributed_env()
        cluster = cfg.get("cluster") if isinstance(cfg, DictConfig) else None
        export_network_env(cluster.get("socket_ifname") if cluster is not None else None)
        log.info("distributed environment (%s): rank %s of %s, local rank %s, rendezvous %s:%s, network %s; "
                 "wandb %s", how, os.environ.get("RANK"), os.environ.get("WORLD_SIZE"), os.environ.get("LOCAL_RANK"),
                 os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"),
                 " ".join(f"{k}={os.environ[k]}" for k in NETWORK_VARS if os.environ.get(k)), apply_wandb_mode(cfg))
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_schemas(cfg: DictConfig) -> None:
    """Every config group of the composed config that has one schema (config_schemas.SCHEMAS), converted to its
    dataclass before the task starts: a value its ``__post_init__`` refuses (``ppo.estimator=foo``,
    ``crawler.env.max_actions=-1``) ends the command in one line before any model, index or crawl is loaded, not
    when the task reaches that group. What the conversion cannot judge on its own is left to the task."""
    # lazy: config_schemas imports tqdm, which must load after library_bars_off_unless_terminal() (cli.main, _main)
    from scholar_agents.config_schemas import SCHEMAS

    by_group: dict[str, list] = {}
    for group, _, cls in SCHEMAS:
        by_group.setdefault(group, []).append(cls)
    for group, classes in by_group.items():
        node = cfg.get(group) if isinstance(cfg, DictConfig) and len(classes) == 1 else None
        if not isinstance(node, DictConfig):
            continue
        try:
            typed(classes[0], node, group)
        except UsageError as e:
            raise UsageError(f"{group}: {e}" if not str(e).startswith(f"{group}.") else str(e)) from e
        except Exception as e:  # an interpolation only the task's context resolves: the task converts it itself
            log.debug("schema check of %s skipped (%s: %s)", group, type(e).__name__, e)


@contextmanager
def usage_errors_in_one_line(prog: str):
    """A :class:`~scholar_agents.validation.UsageError` (bad input) raised inside ends the command with ONE line on
    stderr and exit status 2. Caught inside the Hydra task, because Hydra turns a task's exception into a stripped
    traceback and exit status 1; SystemExit passes through it. ``HYDRA_FULL_ERROR=1`` (Hydra's own switch) re-raises
    instead, so Hydra prints the full trace."""
    try:
        yield
    except UsageError as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def run_task(task: Callable[[DictConfig], object], config_name: str, argv: list[str], prog: str) -> object:
    """Compose ``conf/<config_name>.yaml`` with ``argv`` overrides (Hydra CLI syntax, incl. ``-m``, ``--help``,
    ``--cfg job``) and call ``task(cfg)`` in :func:`task_environment`; a UsageError of either is one line on stderr
    (``<prog>: error: ...``) and exit status 2."""
    import hydra

    _register_resolvers()
    register_configs()
    setup_environment()
    result: dict[str, object] = {}

    def _main(cfg: DictConfig) -> object:
        # Runs where the task runs: this process, or a submitit launcher's job (one srun task per rank).
        _register_resolvers()  # (a submitit job is a fresh process that only unpickled this function)
        set_run_dir(cfg)
        # again where the task runs (a submitit job's stderr is its Slurm file; an in-process caller skipped the CLI)
        library_bars_off_unless_terminal()
        with usage_errors_in_one_line(prog), task_environment(cfg):
            result["value"] = task(cfg)
        return result["value"]

    _main.__module__ = task.__module__
    _main.__name__ = task.__name__
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(_main)()
    finally:
        sys.argv = saved
    return result.get("value")


def compose(config_name: str, overrides: list[str] | None = None) -> DictConfig:
    """Compose a root config without running it (tests and notebooks use the *real* configs this way)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _register_resolvers()
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return hydra_compose(config_name=config_name, overrides=overrides or [], return_hydra_config=False)


def set_run_dir(cfg: DictConfig) -> None:
    """Put Hydra's run directory into ``cfg.paths.output_dir``: the one place a task learns where it runs
    (``scholar_agents.runtime.run_dir.run_dir(cfg)`` reads it). A value given on the command line wins."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    if "paths" not in cfg or cfg.paths.get("output_dir"):
        return
    with open_dict(cfg):
        cfg.paths.output_dir = str(HydraConfig.get().runtime.output_dir)
