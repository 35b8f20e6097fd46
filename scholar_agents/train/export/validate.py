"""The export's checks, on the logits of a Selector and a Crawler prompt (:func:`validation_prompts`):
:func:`compare_logits` measures two models' difference against ``atol + rtol * max|logit|`` (merged vs unmerged
LoRA in fp32; the written directory vs the model in memory; a 16-bit cast's drift, reported only),
:func:`fail_unless` turns a failed comparison into an error, and :func:`check_saved_files` checks that the weights
are safetensors only with no adapter tensor left in them.
"""

from __future__ import annotations

from pathlib import Path

from scholar_agents.pasa.prompts import crawler_search_messages, selector_messages


def validation_prompts() -> list[list[dict]]:
    """A Selector (Table 15) and a Crawler (Table 7) prompt: what the exported model will be asked."""
    query = "Which papers study reinforcement learning for literature search agents?"
    return [
        selector_messages(query, "PaSa: An LLM Agent for Comprehensive Academic Paper Search",
                          "We introduce PaSa, an advanced paper search agent powered by large language models."),
        crawler_search_messages(query),
    ]


def render_ids(tokenizer, prompts: list[list[dict]]) -> list[list[int]]:
    return [list(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]) for p in prompts]


def prompt_logits(model, ids: list[list[int]]) -> list:
    import torch

    with torch.no_grad():
        return [model(input_ids=torch.tensor([x])).logits[0].float() for x in ids]


def compare_logits(ref: list, got: list, atol: float, rtol: float) -> dict:
    import torch

    max_abs = max(float((a - b).abs().max()) for a, b in zip(ref, got))
    scale = max(float(a.abs().max()) for a in ref)
    top1 = float(torch.cat([(a.argmax(-1) == b.argmax(-1)).float() for a, b in zip(ref, got)]).mean())
    bound = atol + rtol * scale
    return {"max_abs_logit_diff": max_abs, "max_abs_logit": scale, "tolerance": bound, "top1_agreement": top1,
            "ok": max_abs <= bound}


def fail_unless(result: dict, what: str) -> None:
    if not result["ok"]:
        raise RuntimeError(f"export check failed: {what} by {result['max_abs_logit_diff']:.3g} > "
                           f"{result['tolerance']:.3g} (top-1 agreement {result['top1_agreement']:.4f})")


def check_saved_files(out: Path) -> dict:
    """The weights are safetensors only and no adapter leaked into them."""
    from safetensors import safe_open

    weights = sorted(out.glob("*.safetensors"))
    if not weights:
        raise RuntimeError(f"{out}: no *.safetensors written")
    if list(out.glob("*.bin")) or list(out.glob("*.pt")):
        raise RuntimeError(f"{out}: pickle weights written next to the safetensors")
    n_tensors = 0
    for w in weights:
        with safe_open(str(w), framework="pt") as f:
            keys = list(f.keys())
        leaked = [k for k in keys if "lora_" in k or ".base_layer." in k]
        if leaked:
            raise RuntimeError(f"{w.name}: adapter tensors left after the merge, e.g. {leaked[:3]}")
        n_tensors += len(keys)
    return {"weight_files": [w.name for w in weights], "tensors": n_tensors}
