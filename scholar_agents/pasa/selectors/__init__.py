"""The PaSa Selector (§4.3) and its kinds: does a paper satisfy a scholar query? ``factory.py`` builds the kind a
config names (``selector.kind``): PaSa's decision-token LLM Selector (``llm.py``), the cross-encoder
(``cross_encoder.py``), the embedding Selector (``embedding.py``) or the provenance Selector (``provenance.py``,
which sends dense-search hits to the lexical Selector, ``lexical.py``). ``pair_judge.py`` is what the Selectors that
score a pair without generating text share."""
