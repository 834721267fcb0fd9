"""Whether the Hugging Face hub can be asked now, and offline mode when it cannot.

huggingface_hub retries a connection that fails 5 times (1 + 2 + 4 + 8 + 8 s), so on a machine
without network every run that named a hub id (a tokenizer, a dataset) waited ~23 s before it used
the local cache's copy or failed. One connection attempt (3 s at most; a failed DNS lookup returns at
once) decides instead.
"""

from __future__ import annotations

import os

__all__ = ["unreachable", "go_offline"]


def unreachable() -> str | None:
    """Why the hub cannot be asked now (HF_HUB_OFFLINE set, or no connection to its host within 3 s),
    or None."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                                       "all_proxy")):
        return None  # behind a proxy a direct connection proves nothing: huggingface_hub goes through it
    import socket
    from urllib.parse import urlparse
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=3).close()
    except OSError as e:
        return f"{url.hostname}: {e.strerror or e}"
    return None


def go_offline() -> None:
    """Offline mode for this process, as HF_HUB_OFFLINE=1 would have set it at import: huggingface_hub and
    datasets then serve from their caches, or fail at once."""
    from huggingface_hub import constants
    constants.HF_HUB_OFFLINE = True
    try:
        from datasets import config
        config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = True
    except ImportError:  # pragma: no cover - a declared dependency
        pass
