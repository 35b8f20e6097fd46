"""PaSa on the live literature: search and [Expand] backends that call arXiv, Semantic Scholar and arXiv's HTML,
and put what they find into the run's paper store (``store.py``). ``http.py`` is the one cached, retrying,
rate-limited session they all use. Never required: the closed corpus stays the default for evaluation and
training; nothing here has been run against the live services (the tests replay documented responses)."""
