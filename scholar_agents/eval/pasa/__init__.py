"""``scholar eval pasa``: the command and its runner (``command.py``), the rows it runs (``rows.py``), the per-query
metrics (``metrics.py``), the gold-blind oracle row (``oracle.py``), the paired statistics (``stats.py``), the
Markdown report (``report.py``) and the figures (``plots.py``)."""
