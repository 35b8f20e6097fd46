"""τ2's keyword format (scipip.db.constrained) cannot spell the prompt's "entity1, entity2" placeholders, which
the parser drops: SmolLM2 wrote only those for 1 of 12 papers of the bundled store and got no keyword."""

from __future__ import annotations

import re

from scholar_agents.scipip.output_parsers import parse_keywords
from scholar_agents.scipip.prompts import keywords_format


def test_keyword_format_excludes_the_template_placeholders_and_keeps_real_entities():
    rx = re.compile(keywords_format(5).regex)
    echo = "The entity1, entity2 are the most important, and the entity3 is themost"
    assert not parse_keywords(echo).ok  # what the parser makes of the echo: nothing
    assert rx.fullmatch(echo) is None
    assert rx.fullmatch("the entity1 is, entity2 is the most") is None
    for answer in ("GPT-4 evaluation, large language models", "key-value cache, state space models, T5 encoder"):
        assert rx.fullmatch(answer), answer
        assert parse_keywords(answer).ok, answer
