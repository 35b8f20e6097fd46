"""``scholar pasa serve``: check the config, build the agent's service and the app, run uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from scholar_agents.pasa.serve.app import create_app
from scholar_agents.pasa.serve.service import SearchService
from scholar_agents.validation import UsageError, existing_file

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RedactToken(logging.Filter):
    """Uvicorn's access log writes the request line, query string included: ``token=...`` becomes ``token=***``."""

    _re = re.compile(r"(token=)[^&\s\"]+")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.args = tuple(self._re.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        record.msg = self._re.sub(r"\1***", str(record.msg))
        return True


def check_serve_config(cfg: DictConfig, environ=os.environ) -> Optional[str]:
    """The token to require (None on loopback without one), after checking every ``serve`` field; one
    UsageError line otherwise. The token's value is never put in a message."""
    s = cfg.serve
    if not isinstance(s.port, int) or not 0 <= s.port <= 65535:
        raise UsageError(f"serve.port={s.port!r}: a port number 0-65535 (0 = any free port)")
    if int(s.max_queue) < 0:
        raise UsageError(f"serve.max_queue={s.max_queue}: searches waiting behind the running one, >= 0")
    if int(s.max_query_chars) < 1:
        raise UsageError(f"serve.max_query_chars={s.max_query_chars}: must be >= 1")
    root = Path(str(s.runs_root))
    if not root.is_dir() and cfg.get("paths") is not None and root == Path(str(cfg.paths.output_root)):
        root.mkdir(parents=True, exist_ok=True)  # the project's own output folder, not made yet on a fresh clone
    if not root.is_dir():
        raise UsageError(f"serve.runs_root={s.runs_root}: no such directory (the Runs view opens runs under it)")
    if s.get("gold_queries"):
        existing_file(s.gold_queries, "serve.gold_queries")
    token = environ.get(str(s.token_env)) or None
    if not is_loopback(str(s.host)) and not token:
        raise UsageError(f"serve.host={s.host} is not a loopback address: set a token in ${s.token_env} first "
                         f"(anyone who can reach the port could run searches), or keep serve.host=127.0.0.1")
    return token


def serve(cfg: DictConfig) -> dict:
    """The ``pasa serve`` task: blocks serving until interrupted (Ctrl-C)."""
    import uvicorn

    token = check_serve_config(cfg)
    service = SearchService(cfg)
    app = create_app(cfg, service, token)
    if cfg.serve.preload:  # in the background: the page answers (and shows "loading") at once
        threading.Thread(target=service.preload, name="pasa-serve-preload", daemon=True).start()
    logging.getLogger("uvicorn.access").addFilter(RedactToken())
    url = f"http://{cfg.serve.host}:{cfg.serve.port}/" + ("?token=<$" + str(cfg.serve.token_env) + ">" if token else "")
    print(f"scholar pasa serve: {url} (runs under {Path(str(cfg.serve.runs_root)).resolve()})", flush=True)
    if cfg.serve.open_browser:
        import webbrowser

        webbrowser.open(url.split("?")[0])
    # log_config=None: uvicorn logs through the job's logging (Hydra's), where RedactToken filters the access log
    uvicorn.run(app, host=str(cfg.serve.host), port=int(cfg.serve.port), log_config=None)
    return {"url": url}
