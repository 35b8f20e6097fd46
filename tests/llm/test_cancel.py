"""A generation in flight stops at the next token once its cancel event is set (llm/cancel.py, the hf backend's
stopping criterion) and raises instead of returning cut-off text; scoring stops between batches; a call outside
the scope, or in another thread, is never cancelled."""

import threading

import pytest

from scholar_agents.llm import SamplingParams
from scholar_agents.llm.cancel import GenerationCancelled, cancel_requested, cancel_scope


def _count_forwards(model, on_call=None):
    calls = []

    def hook(*_):
        calls.append(1)
        if on_call is not None:
            on_call(len(calls))

    return calls, model.register_forward_hook(hook)


def test_generation_stops_at_the_next_token_after_the_cancel(tiny_llm):
    params = SamplingParams(max_new_tokens=48)
    prompt = ["graph neural networks for molecular property prediction"]
    calls, handle = _count_forwards(tiny_llm.model)
    try:
        [full] = tiny_llm.generate(prompt, params)  # the uncancelled length: more steps than the cancel allows
        uncancelled = len(calls)
        assert uncancelled > 8 and full.completions[0].token_ids
    finally:
        handle.remove()
    event = threading.Event()
    calls, handle = _count_forwards(tiny_llm.model, lambda n: event.set() if n == 4 else None)
    try:
        with cancel_scope(event), pytest.raises(GenerationCancelled):
            tiny_llm.generate(prompt, params)
    finally:
        handle.remove()
    assert len(calls) == 4  # the step that saw the cancel was the last one
    assert not cancel_requested()  # the scope ended with the block
    # another thread is not in the scope: the same event set does not touch its call
    out = []
    with cancel_scope(event):
        t = threading.Thread(target=lambda: out.append(tiny_llm.generate(prompt, SamplingParams(max_new_tokens=4))))
        t.start()
        t.join()
    assert out and out[0][0].completions[0].token_ids


def test_scoring_stops_between_batches(tiny_llm):
    event = threading.Event()
    prompts = [f"question {i}" for i in range(3 * tiny_llm.cfg.batch_size)]
    calls, handle = _count_forwards(tiny_llm.model, lambda n: event.set() if n == 1 else None)
    try:
        with cancel_scope(event), pytest.raises(GenerationCancelled, match="scoring cancelled"):
            tiny_llm.next_token_probs(prompts, ["True", "False"])
    finally:
        handle.remove()
    assert len(calls) == 1
    assert tiny_llm.next_token_probs(prompts[:2], ["True", "False"]).shape == (2, 2)  # outside: not cancelled
