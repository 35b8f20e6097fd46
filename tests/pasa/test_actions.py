"""The Crawler's action grammar (PaSa Table 8): valid responses, malformed ones, and real SmolLM2 outputs."""

import pytest

from scholar_agents.pasa.actions import (
    EXPAND, GRAMMAR_ERRORS, SEARCH, STOP, parse_response, render_response,
)


def kinds_args(parsed):
    return [(a.kind, a.argument) for a in parsed.actions]


def test_table8_search_session():
    p = parse_response("[Search] graph neural networks survey [Search] message passing [Stop]")
    assert p.ok and p.stopped
    assert kinds_args(p) == [(SEARCH, "graph neural networks survey"), (SEARCH, "message passing"), (STOP, "")]
    assert [a.argument for a in p.moves] == ["graph neural networks survey", "message passing"]


def test_expand_session_with_newlines_and_brackets_in_argument():
    text = "[Expand]  2 Related Work\n[Expand] [CLS] pooling\n[Stop]\n"
    p = parse_response(text)
    assert p.ok
    assert kinds_args(p) == [(EXPAND, "2 Related Work"), (EXPAND, "[CLS] pooling"), (STOP, "")]
    # spans cover the token and the stripped argument exactly
    first = p.actions[0]
    assert text[first.start:first.end] == "[Expand]  2 Related Work"
    assert text[p.actions[2].start:p.actions[2].end] == "[Stop]"


def test_stop_only_is_a_valid_empty_session():
    p = parse_response("[Stop]")
    assert p.ok and p.stopped and p.moves == []


@pytest.mark.parametrize("text, codes, kept", [
    ("", ["no_action"], []),
    ("   \n", ["no_action"], []),
    ('["query1", "query2"]', ["no_action"], []),
    ("[Browse] something", ["unknown_action"], []),
    ("Sure! Here are queries: [Search] a b [Stop]", ["text_before_action"], [(SEARCH, "a b"), (STOP, "")]),
    ("[Browse] x [Search] a [Stop]", ["unknown_action"], [(SEARCH, "a"), (STOP, "")]),
    ("[Search] [Search] b [Stop]", ["empty_argument"], [(SEARCH, "b"), (STOP, "")]),
    ("[Search] a [search] b [Stop]", ["miscased_action_token"], [(STOP, "")]),
    ("[Search] a [Stop] and more text", ["text_after_stop"], [(SEARCH, "a"), (STOP, "")]),
    ("[Search] a [Stop] [Search] b", ["text_after_stop"], [(SEARCH, "a"), (STOP, "")]),
    ("[Search] a [Search] b", ["missing_stop"], [(SEARCH, "a"), (SEARCH, "b")]),
])
def test_malformed_responses_are_counted_not_raised(text, codes, kept):
    p = parse_response(text)
    assert p.error_codes() == codes
    assert kinds_args(p) == kept
    assert all(c in GRAMMAR_ERRORS for c in p.error_codes())


def test_truncated_generation_drops_the_unterminated_last_action():
    p = parse_response("[Search] a [Search] transformers for lon", truncated=True)
    assert p.error_codes() == ["truncated_action", "missing_stop"]
    assert kinds_args(p) == [(SEARCH, "a")]
    # the same text ended by EOS keeps both actions
    assert kinds_args(parse_response("[Search] a [Search] transformers for lon")) == [
        (SEARCH, "a"), (SEARCH, "transformers for lon")]


def test_render_round_trips_and_rejects_bad_arguments():
    text = render_response(SEARCH, ["q one", "q  two\n"])
    assert text == "[Search] q one [Search] q two [Stop]"
    assert [a.argument for a in parse_response(text).moves] == ["q one", "q two"]
    with pytest.raises(ValueError):
        render_response(SEARCH, [""])
    with pytest.raises(ValueError):
        render_response(STOP, ["x"])
    with pytest.raises(ValueError):
        render_response(EXPAND, ["[stop] now"])


# Outputs of the untrained SmolLM2-135M-Instruct on Table 8 prompts (6 search sessions, 2 expand sessions; greedy,
# hf backend, 96 new tokens). It never writes an action token: each is one counted "no_action", nothing executed.
SMOLLM2_OUTPUTS = [
    "Sure, I'd be happy to help with that.\n\nA paper that proposes neural algorithms for f-divergence regularized costs is:\n\n\"Acknowledgments: The authors of this paper are the authors of the paper.\n\nA related topic: Neural algorithms for f-divergence regularized costs.\n\nA related topic: Neural algorithms for f-divergence regularized costs.\n\nA related topic: Neural algorithms for",
    "1. What works implemented temporal pixel-wise audio-visual interaction module in FCN-based methods for AVS?\n2. What works implemented temporal pixel-wise audio-visual interaction module in FCN-based methods for AVS?",
    "1. 1.1.1.1: Which studies indicate a natural conflict between adversarial robustness and standard accuracy?\n2. 1.1.1.2: Which studies indicate a natural conflict between adversarial robustness and standard accuracy?\n3. 1.1.1.3: Which studies indicate a natural conflict between adversarial robustness and standard accuracy?\n4. 1.1.1.4: Which studies indicate a natural conflict between",
    "I'm sorry for the confusion, but as a chatbot, I'm designed to assist with any topic. However, I can assist with queries related to the User Query.\n\nPlease provide a list of studies that have been conducted on adversarial training, and I'll be happy to assist you with that.",
    "I'm ready to assist. Please provide the list of papers that work on lower bound theory for ReLU networks.",
    "The methods proposed for learning from downstream data in continual input embedding space (FINEMAS) are:\n\n1. Continuous Input Embedding Space (CIIS)\n2. Continuous Input Embedding Space (CIIS)\n3. Continuous Input Embedding Space (CIIS)\n4. Continuous Input Embedding Space (CIIS)\n5. Continuous Input Embedding Space (CIIS)\n\nPlease provide the list of the methods proposed",
    "You are ready to assist. What is your next question?",
    "A: 2022-01-21 12:22:12.123.123.123.123.123.123.123.123.123.123.123.123.123.123.123.123.123.123.1",
]


@pytest.mark.parametrize("text", SMOLLM2_OUTPUTS)
def test_real_smollm2_outputs_parse_without_raising(text):
    p = parse_response(text, truncated=True)
    assert p.error_codes() == ["no_action"] and p.actions == []
