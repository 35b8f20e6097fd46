"""``scholar data_gen autoscholarquery`` (PaSa §3.1, Table 16): the command and its config (``command.py``), the
related-work passages it reads (``inputs.py``), the LLM calls and their parsing (``generation.py``), the dataset's
assembly and splits (``assembly.py``) and its stats report (``report.py``)."""
