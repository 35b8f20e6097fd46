"""Training each Selector kind of ``pasa/selectors/``, one ``scholar train selector_<name>`` command a module: PaSa's
decision-token Selector by SFT (``sft.py``, the shared recipe of ``train/sft.py``), the cross-encoder
(``cross_encoder.py``), the embedding Selector (``embedding.py``, with the encoder's own LoRA fine-tune in
``encoder_lora.py``) and the lexical Selector (``lexical.py``). ``pair_fitting.py`` is what the no-LLM trainers share:
labelled pairs, the by-query dev split and the fitted threshold."""
