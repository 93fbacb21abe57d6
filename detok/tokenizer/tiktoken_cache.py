"""Loading a tiktoken encoding by name from tiktoken's own cache, with downloads refused when
offline (DETOK_OFFLINE / HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): tiktoken has no offline switch."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import tiktoken
import tiktoken.load

from detok.tokenizer.base import TokenizerLoadError

_TRUE = {"1", "true", "yes", "on"}
_OFFLINE_ENV = ("DETOK_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


class _NotCached(Exception):
    pass


_download_guard = threading.Lock()


def _offline() -> bool:
    return any(os.environ.get(var, "").strip().lower() in _TRUE for var in _OFFLINE_ENV)


def _cache_dir() -> str:
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var] or "(caching disabled)"
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


@contextmanager
def _downloads_refused() -> Iterator[None]:
    """Make tiktoken's loader fail on a URL instead of fetching it; cached files still load.

    tiktoken has no offline switch: its loader reads the cache, then calls `tiktoken.load.read_file`
    for anything missing, so that function is swapped for the duration of the load.
    """
    original = tiktoken.load.read_file

    def refuse_urls(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise _NotCached(blobpath)
        return original(blobpath)

    with _download_guard:
        tiktoken.load.read_file = refuse_urls
        try:
            yield
        finally:
            tiktoken.load.read_file = original


def get_encoding(name: str, source: str) -> tiktoken.Encoding:
    """The encoding `name`; TokenizerLoadError naming `source` when it cannot be had."""
    offline = _offline()
    try:
        if offline:
            with _downloads_refused():
                return tiktoken.get_encoding(name)
        return tiktoken.get_encoding(name)
    except _NotCached:
        reason = (
            f"tiktoken encoding {name!r} is not available offline: its BPE file is not in tiktoken's cache "
            f"({_cache_dir()}) and downloads are off (DETOK_OFFLINE / HF_HUB_OFFLINE); load it once with "
            "network access, point TIKTOKEN_CACHE_DIR at a cache holding it, or pass a local .tiktoken file"
        )
    except Exception as e:  # requests / urllib / hash errors: the network is tiktoken's business
        reason = (
            f"tiktoken encoding {name!r} could not be downloaded ({type(e).__name__}: {e}) and is not "
            f"available offline: it is not in tiktoken's cache ({_cache_dir()})"
        )
    raise TokenizerLoadError(source, reason)
