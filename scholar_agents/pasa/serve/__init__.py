"""``scholar pasa serve``: the PaSa agent and its crawls in a local web page (live search, crawl trees, runs).

FastAPI/Starlette + server-sent events + one static page (no JS build step, no CDN): vLLM's own server stack
(already installed with it), and SSE is one-way streaming, which is what a crawl is."""
