"""The push of an export to the Hugging Face Hub (``export.push=true``): :func:`check_push_environment` checks,
before any work, that a token is in ``HF_TOKEN`` (never in config) and that the shell lifted ``HF_HUB_OFFLINE``;
:func:`push_to_hub` uploads the directory and keeps the token out of every log line and error message.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from scholar_agents.train.export.config import EXPORT_REPORT

log = logging.getLogger(__name__)


def check_push_environment() -> str:
    """The token for a push (from HF_TOKEN only), checked before any work is done."""
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise ValueError("export.push=true needs HF_TOKEN in the environment (a write token; never put it in config)")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "false", "False", ""):
        raise ValueError("export.push=true needs network: every scholar command runs with HF_HUB_OFFLINE=1 unless "
                         "you export HF_HUB_OFFLINE=0 in the shell that runs the export")
    return token


def push_to_hub(out: Path, repo_id: str, private: bool) -> str:
    """Upload ``out``; the token never reaches a log line or an error message."""
    token = check_push_environment()
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        commit = api.upload_folder(folder_path=str(out), repo_id=repo_id, repo_type="model",
                                   commit_message="scholar-agents train export", ignore_patterns=[EXPORT_REPORT])
    except Exception as e:  # noqa: BLE001 — re-raised without the request details that could carry the token
        raise RuntimeError(f"push to {repo_id} failed: {type(e).__name__}: {str(e).replace(token, '***')}") from None
    url = getattr(commit, "commit_url", None) or f"https://huggingface.co/{repo_id}"
    log.info("pushed %s to %s", out, url)
    return str(url)
