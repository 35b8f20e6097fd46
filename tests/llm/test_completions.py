"""The one truncation rule every backend applies to raw generated tokens (EOS, stop strings, logprobs)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from scholar_agents.llm.completions import build_completion, end_of_sequence_ids
from tests.fixtures.llm import TINY_TOKENIZER_DIR


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(TINY_TOKENIZER_DIR))


def _ids(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_eos_ends_the_text_but_stays_in_the_token_ids(tok):
    body = _ids(tok, "graph neural networks")
    eos = tok.eos_token_id
    raw = body + [eos] + _ids(tok, " garbage after eos")
    comp = build_completion(tok, raw, [-1.0] * len(raw), (), {eos})
    assert comp.text == "graph neural networks"
    assert comp.token_ids == body + [eos] and comp.logprobs == [-1.0] * (len(body) + 1)
    assert comp.finish_reason == "stop"


def test_no_eos_and_no_stop_means_length(tok):
    raw = _ids(tok, "graph neural networks")
    comp = build_completion(tok, raw, None, ("zzz",), {tok.eos_token_id})
    assert comp.text == "graph neural networks" and comp.token_ids == raw and comp.finish_reason == "length"


def test_stop_string_on_a_token_boundary_drops_its_tokens(tok):
    head, tail = _ids(tok, "[Search] graph"), _ids(tok, "\n\nmore text")
    raw = head + tail
    assert tok.decode(raw) == "[Search] graph\n\nmore text"
    lps = [float(-i) for i in range(len(raw))]
    comp = build_completion(tok, raw, lps, ("\n\n",), {tok.eos_token_id})
    assert comp.text == "[Search] graph"
    assert comp.token_ids == head and comp.logprobs == lps[: len(head)] and comp.finish_reason == "stop"


def test_stop_string_inside_a_token_keeps_that_token(tok):
    # The longest plain word the tiny vocabulary holds as one token, followed by more text.
    word = max((w for w in tok.get_vocab() if w.isalpha() and len(_ids(tok, w)) == 1), key=len)
    assert len(word) >= 5
    raw = _ids(tok, word + " are")
    stop = word[2:4]  # starts in the middle of the first token
    comp = build_completion(tok, raw, None, (stop,), {tok.eos_token_id})
    assert comp.text == word[:2]
    assert comp.token_ids == raw[:1] and comp.finish_reason == "stop"


def test_earliest_of_several_stop_strings_wins_and_empty_text_keeps_no_tokens(tok):
    raw = _ids(tok, "alpha beta gamma")
    comp = build_completion(tok, raw, None, (" gamma", " beta"), {tok.eos_token_id})
    assert comp.text == "alpha"
    comp = build_completion(tok, raw, None, ("alpha",), {tok.eos_token_id})
    assert comp.text == "" and comp.token_ids == []


def test_mismatched_logprobs_are_rejected(tok):
    with pytest.raises(ValueError, match="logprobs"):
        build_completion(tok, [1, 2, 3], [0.0], (), {tok.eos_token_id})


def test_end_of_sequence_ids_read_the_generation_config(tmp_path, tok):
    from transformers import GenerationConfig

    assert end_of_sequence_ids(tok, None) == {tok.eos_token_id}
    GenerationConfig(eos_token_id=[tok.eos_token_id, 0]).save_pretrained(str(tmp_path))
    assert end_of_sequence_ids(tok, str(tmp_path)) == {tok.eos_token_id, 0}
