"""Peak CUDA memory per training phase, as metrics.

``perf/max_memory_allocated_gb/<phase>`` and ``perf/max_memory_reserved_gb/<phase>``: ``torch.cuda``'s peaks since
the phase began (its counters reset at the start of each phase), in GiB — verl logs
``perf/max_memory_allocated_gb`` the same way. These are the measured numbers ``scholar plan``'s per-phase estimates
are compared with (``scripts/gpu_check.sh``). Nothing is logged off CUDA: the keys are absent on CPU.
"""

from __future__ import annotations

import torch

ALLOCATED = "perf/max_memory_allocated_gb"
RESERVED = "perf/max_memory_reserved_gb"


def _on_cuda(device) -> bool:
    return torch.cuda.is_available() and torch.device(device).type == "cuda"


def reset_peak(device) -> None:
    """Start a phase: the peak counters of ``device`` restart from what is allocated now."""
    if _on_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)


def peak_metrics(device, phase: str | None = None) -> dict[str, float]:
    """The peaks since the last :func:`reset_peak`, keyed ``perf/max_memory_*_gb[/<phase>]``; {} off CUDA."""
    if not _on_cuda(device):
        return {}
    suffix = f"/{phase}" if phase else ""
    return {ALLOCATED + suffix: torch.cuda.max_memory_allocated(device) / 2**30,
            RESERVED + suffix: torch.cuda.max_memory_reserved(device) / 2**30}


def peak_memory_callback(device=None):
    """A transformers ``TrainerCallback`` that adds to every logging interval's logs its peak CUDA memory
    (``perf/max_memory_*_gb``), its mean step time (``timing_s/step``) and, where the Trainer counts input tokens
    (``include_num_input_tokens_seen``), its tokens per second (``perf/tokens_per_s``). Put it FIRST in the
    Trainer's callbacks (``callback_handler.callbacks.insert(0, cb)``) so the reporters (wandb) see the keys; it
    also writes them into ``state.log_history`` (what ``sft_summary.json`` keeps)."""
    import time

    from transformers import TrainerCallback

    class PeakMemoryCallback(TrainerCallback):
        def __init__(self):
            self.t0 = None
            self.steps, self.seconds, self.tokens0 = 0, 0.0, 0

        def _dev(self, args):
            return device if device is not None else args.device

        def on_train_begin(self, args, state, control, **kwargs):
            reset_peak(self._dev(args))
            self.tokens0 = state.num_input_tokens_seen

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if self.t0 is not None:
                self.seconds += time.perf_counter() - self.t0
                self.steps += 1
                self.t0 = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is None or "train_loss" in logs:  # the end-of-training summary is not an interval
                return
            extra = peak_metrics(self._dev(args))
            if self.steps:
                extra["timing_s/step"] = self.seconds / self.steps
                tokens = state.num_input_tokens_seen - self.tokens0
                if tokens > 0:
                    extra["perf/tokens_per_s"] = tokens / max(self.seconds, 1e-9)
            self.steps, self.seconds, self.tokens0 = 0, 0.0, state.num_input_tokens_seen
            logs.update(extra)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(extra)
            reset_peak(self._dev(args))

    return PeakMemoryCallback()
