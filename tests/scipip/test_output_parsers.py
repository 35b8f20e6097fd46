"""Parsers for SciPIP's LLM outputs, on well-formed and malformed answers."""

from scholar_agents.scipip.output_parsers import (
    clean_free_text,
    normalize_keyword,
    parse_ideas,
    parse_inspiration,
    parse_keywords,
    parse_motivations_details,
    parse_summary,
)


def test_normalize_keyword_matches_scipip_release_form():
    assert normalize_keyword("Memory-Efficient Fine-tuning") == "memoryefficient finetuning"
    assert normalize_keyword("  Large   Language Models. ") == "large language models"


def test_parse_keywords_formats():
    assert parse_keywords("kv cache, large language models, GPU memory").keywords == ["kv cache", "large language models", "gpu memory"]
    assert parse_keywords('Entities: ["graph neural network", "molecular property prediction"]').keywords == [
        "graph neural network", "molecular property prediction"]
    bullets = parse_keywords("Here are the entities:\n- kv cache\n- token eviction\n- attention\n")
    # one-word "attention" violates τ2's 2-word minimum; the chatter line has no list and is taken as a candidate
    assert "kv cache" in bullets.keywords and "token eviction" in bullets.keywords and "attention" not in bullets.keywords
    many = parse_keywords("a b, c d, e f, g h, i j, k l, m n")
    assert len(many.keywords) == 5  # τ2: at most 5
    long = parse_keywords("one two three four five six, short phrase")
    assert long.keywords == ["short phrase"] and long.dropped == 1
    assert parse_keywords("<entity 1>, <entity 2>").keywords == []  # the format line echoed back
    assert parse_keywords("<kv cache>, <token eviction>").keywords == ["kv cache", "token eviction"]


def test_parse_keywords_malformed():
    for bad in ["", "   ", "attention", "The answer is:", "[", "1. 2. 3."]:
        got = parse_keywords(bad)
        assert got.ok is False and got.keywords == []


def test_parse_summary():
    s, ok = parse_summary("Summary: the problem of slow decoding in LLMs can be addressed by speculative sampling with a draft model. Extra.")
    assert ok and s == "The problem of slow decoding in LLMs can be addressed by speculative sampling with a draft model."
    s, ok = parse_summary("This paper studies decoding. It is fast.")
    assert not ok and s == "This paper studies decoding."
    assert parse_summary("") == ("", False)


def test_parse_motivations_details():
    text = ("Motivations: 1. Decoding is slow for long outputs. 2. Draft models are cheap.\n"
            "Details: 1. A draft model proposes tokens. 2. The target verifies them in parallel. 3. Rejection sampling keeps the distribution.")
    p = parse_motivations_details(text)
    assert p.ok and len(p.motivations) == 2 and len(p.details) == 3
    assert p.background == "1. Decoding is slow for long outputs. 2. Draft models are cheap."
    bold = parse_motivations_details("**Motivations:**\n1) fast\n2) cheap things\n**Details:**\n- a draft model\n- verification step")
    assert bold.ok and bold.motivations == ["fast", "cheap things"] and bold.details == ["a draft model", "verification step"]
    for bad in ["", "Motivations: 1. only motivations here.", "Details: 1. x y z", "random words"]:
        assert parse_motivations_details(bad).ok is False


def test_parse_ideas_variants():
    text = "Intro.\n**Idea 1**: Use a retrieval memory for long contexts.\n**Idea 2**: Compress the cache with learned codes.\n"
    assert parse_ideas(text) == ["Use a retrieval memory for long contexts.", "Compress the cache with learned codes."]
    assert parse_ideas("### Idea 1: Modular finetuning with distillation\n- Description: break the model up.\n### Idea 2: Tensor decomposition of weights") == [
        "Modular finetuning with distillation - Description: break the model up.", "Tensor decomposition of weights"]
    assert parse_ideas("1. First idea about caches\n2. Second idea about memory") == ["First idea about caches", "Second idea about memory"]
    assert parse_ideas("**Idea **: a single unnumbered idea text") == ["a single unnumbered idea text"]
    for bad in ["", "no ideas here at all", "**Idea 1**: x"]:
        assert parse_ideas(bad) == []


def test_parse_inspiration_and_clean():
    assert parse_inspiration("None") is None
    assert parse_inspiration("none.") is None
    assert parse_inspiration("**Inspiration**: None") is None
    assert parse_inspiration("") is None
    assert parse_inspiration("**Inspiration**: Use contrastive decoding\nto ground rationales.") == "Use contrastive decoding to ground rationales."
    assert clean_free_text("## Your Summarized Methods\nWe do X.") == "We do X."
    assert clean_free_text("## Detailed Research Background\nText") == "Text"


def test_placeholder_echoes_are_failures():
    # a weak model repeating the prompt's template is not an answer
    assert parse_summary("The problem of [problem] can be addressed by [main idea/approach].") == ("", False)
    assert parse_motivations_details("Motivations: 1. [motiv1]. 2. [motiv2]. Details: 1.[detail1]. 2.[detail2].").ok is False
    got = parse_keywords("the entities you list should, the entity1, kv cache")
    assert got.keywords == ["kv cache"] and got.dropped == 2
    assert clean_free_text("## Your Methodology Section\nA B.\n\n## Your Methodology Section\nA B.\n\nC D.") == "A B.\n\nC D."
    assert parse_ideas("**Idea 1**: [Brief description of the first idea]\n**Idea 2**: a real idea about caches") == [
        "a real idea about caches"]
