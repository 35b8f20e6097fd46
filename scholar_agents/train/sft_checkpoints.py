"""SFT checkpoints a requeued job can trust: a ``checkpoint-N/`` counts only when it is complete.

The HF Trainer (transformers 5.17, ``Trainer._save_checkpoint``) writes ``<output_dir>/checkpoint-N/`` in place, one
file after another: the model (``save_model``; LoRA: ``adapter_model.safetensors``), then the optimizer and
scheduler (under DeepSpeed, the engine's ``save_checkpoint`` writes into the same folder from every rank: the
``global_stepN/`` shards and ``latest``, ending in a barrier), the scaler, each rank's RNG state, and
``trainer_state.json`` last. Then it rotates old checkpoints (``save_total_limit``) and calls the callbacks'
``on_save``. A job killed partway leaves a ``checkpoint-N`` with a truncated or missing file.
``transformers.trainer_utils.get_last_checkpoint`` takes the highest N without checking it, so every requeue
loaded that folder and died (``SafetensorError: ... incomplete metadata``).

The design is a marker, like PPO's (``train/ppo/checkpoint.py``: ``COMPLETE`` written last). We do not write to a
temporary folder and rename it. :func:`marker_callback`'s ``on_save`` runs on every rank after ``_save_checkpoint``
has returned. It waits for every rank (their RNG states, their ZeRO shards), then the process that saves writes
``checkpoint-N/COMPLETE`` atomically. A temporary folder would have to be set up inside ``_save_checkpoint``, which
fixes the folder's name itself (``_get_output_dir`` + ``checkpoint-<global_step>``). DeepSpeed writes there from
every rank, and the rotation runs there too. Moving all of that means overriding private Trainer methods, which
change between releases. The marker needs only the public callback API.

Which folder is complete (:func:`checkpoint_problem`):

- With ``COMPLETE``, it is complete.
- Without it, the folder was either written before markers existed or by a job killed between its last file and the
  marker. Then it counts as complete only when a cheap check passes:

  - ``trainer_state.json``, the Trainer's last file, is there and parses.
  - Every ``*.safetensors`` header parses and the file is as long as its header says.
  - A sharded model's ``*.index.json`` names only files that are there.
  - Every ``*.pt`` / ``*.pth`` / ``*.bin`` ends with its zip directory. These are the optimizer, scheduler, RNG and
    DeepSpeed files, which ``torch.save`` writes as zips.

  The check reads headers and zip tails, never the tensors. It is our choice because old, complete checkpoints
  still resume after an upgrade instead of training again from step 0.

Resume (:func:`checkpoint_to_resume`) takes the newest complete checkpoint. Every ``checkpoint-N`` that fails the
check is partial: one log line names it, and global rank 0 moves it aside to ``<output_dir>/partial/checkpoint-N``,
where it is kept for a look and never loaded (delete it at will). If it stayed in place, the resumed run would write
its own ``checkpoint-N`` into the broken folder, and the Trainer's rotation would count it as a checkpoint.
"""

from __future__ import annotations

import json
import logging
import re
import zipfile
from pathlib import Path
from typing import Optional

from scholar_agents.runtime.preemption import global_rank

log = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR + "-<step>"
TRAINER_STATE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME: the last file _save_checkpoint writes
PARTIAL_DIRNAME = "partial"  # <output_dir>/partial/: partial checkpoints moved aside on resume


def _complete_marker() -> str:
    # lazy: ppo.checkpoint imports torch (importing this module, as train.sft does, stays light)
    from scholar_agents.train.ppo.checkpoint import COMPLETE

    return COMPLETE


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Every ``checkpoint-N`` folder in ``output_dir``, complete or not, by step (oldest first)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), d) for d in output_dir.iterdir() if (m := CHECKPOINT_RE.match(d.name)) and d.is_dir()]
    return [d for _, d in sorted(found)]


def _safetensors_problem(path: Path) -> Optional[str]:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{path.name}: {size} bytes, no header"
        n = int.from_bytes(head, "little")
        if n > size - 8:
            return f"{path.name}: {size} bytes, shorter than its {n}-byte header"
        try:
            header = json.loads(f.read(n))
        except ValueError:
            return f"{path.name}: header does not parse"
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        return f"{path.name}: {size} bytes, its header describes {8 + n + end}"
    return None


def checkpoint_problem(ckpt: str | Path) -> Optional[str]:
    """None when ``ckpt`` is a complete checkpoint, else what makes it partial (see the module docstring)."""
    ckpt = Path(ckpt)
    try:
        if (ckpt / _complete_marker()).is_file():
            return None
        state = ckpt / TRAINER_STATE
        if not state.is_file():
            return f"no {_complete_marker()} marker and no {TRAINER_STATE}: the save stopped before its last file"
        try:
            json.loads(state.read_text())
        except ValueError:
            return f"{TRAINER_STATE} does not parse"
        for path in sorted(p for p in ckpt.rglob("*") if p.is_file()):
            problem = None
            if path.suffix == ".safetensors":
                problem = _safetensors_problem(path)
            elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
                problem = f"{path.relative_to(ckpt)}: no zip directory at its end (cut short)"
            elif path.name.endswith(".index.json"):
                shards = set(json.loads(path.read_text()).get("weight_map", {}).values())
                missing = sorted(s for s in shards if not (path.parent / s).is_file())
                problem = f"{path.name} names missing files {missing}" if missing else None
            if problem:
                return problem
    except (OSError, ValueError) as e:  # a file vanished or a JSON file is cut: partial either way
        return f"unreadable ({e})"
    return None


def last_checkpoint(output_dir: str | Path) -> Optional[str]:
    """The newest complete ``checkpoint-N`` in ``output_dir`` (None when there is none). It reads only and moves
    nothing; ``train export`` uses it."""
    for d in reversed(checkpoint_dirs(output_dir)):
        if checkpoint_problem(d) is None:
            return str(d)
    return None


def _move_aside(ckpt: Path) -> Path:
    dest_dir = ckpt.parent / PARTIAL_DIRNAME
    dest_dir.mkdir(exist_ok=True)
    dest, k = dest_dir / ckpt.name, 0
    while dest.exists():  # the same step cut short again on a later try
        k += 1
        dest = dest_dir / f"{ckpt.name}.{k}"
    ckpt.rename(dest)
    return dest


def checkpoint_to_resume(output_dir: str | Path) -> Optional[str]:
    """The newest complete checkpoint to resume from (None: start from step 0). It logs one line for each partial
    ``checkpoint-N`` it skips, and global rank 0 moves that folder to ``<output_dir>/partial/``. Each rank decides
    alone, before any process group exists. The complete folders are never touched, so every rank picks the same
    one."""
    chosen: Optional[Path] = None
    partial: list[tuple[Path, str]] = []
    for d in reversed(checkpoint_dirs(output_dir)):
        problem = checkpoint_problem(d)
        if problem is not None:
            partial.append((d, problem))
        elif chosen is None:
            chosen = d
    for d, problem in reversed(partial):
        if global_rank() == 0:
            log.warning("skipping partial checkpoint %s (%s): moved to %s", d.name, problem, _move_aside(d))
        else:
            log.warning("skipping partial checkpoint %s (%s)", d.name, problem)
    if chosen is not None and not (chosen / _complete_marker()).is_file():
        log.info("%s has no %s marker (saved before markers, or killed just before its marker) but its files are "
                 "complete: resuming from it", chosen.name, _complete_marker())
    return str(chosen) if chosen is not None else None


def marker_callback():
    """A ``transformers.TrainerCallback`` that writes ``checkpoint-N/COMPLETE`` after the Trainer saved
    ``checkpoint-N``. Every rank calls ``on_save``; they all wait in a barrier first, so every rank's files are
    written, and then the process that saves (``args.should_save``) writes the marker."""
    from transformers import TrainerCallback

    # lazy: ppo.checkpoint imports torch (importing this module stays light)
    from scholar_agents.train.ppo.checkpoint import COMPLETE, write_text_atomic

    class CheckpointMarker(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            # lazy: imports torch (importing this module stays light)
            from scholar_agents.runtime import collectives

            collectives.barrier()  # RNG states and ZeRO shards are written by every rank
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if args.should_save and ckpt.is_dir():
                write_text_atomic(ckpt / COMPLETE, f"{state.global_step}\n")
            return control

    return CheckpointMarker()
