"""Fetch only the tokenizer files of a Hugging Face Hub repository, through the Hub's own cache.

huggingface_hub does the caching (`HF_HUB_CACHE` / `HF_HOME`), the authentication (`HF_TOKEN` or
the stored login, unless a token is passed) and the offline mode; this module picks the files,
decides when to stay offline, and turns every failure into one `TokenizerLoadError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from detok.tokenizer.base import TokenizerLoadError

# Tokenizer, template and vocabulary files only: never weights (.safetensors, .bin, .gguf, .pt).
TOKENIZER_FILE_PATTERNS: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "tokenizer.model.v*",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tekken.json",
    "*.tiktoken",
    "vocab.json",
    "merges.txt",
)

# A string ending like a tokenizer file is a path the user mistyped, not a repository name.
_FILE_SUFFIX = re.compile(r"\.(json|model|gguf|tiktoken|jinja|bin|txt|v\d+)$", re.IGNORECASE)
_TRUE = {"1", "on", "yes", "true"}


def looks_like_hub_id(source: str) -> bool:
    """True for 'org/name' that is not an existing path and not a file name."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if source.count("/") != 1 or os.path.exists(source) or _FILE_SUFFIX.search(source):
        return False
    try:
        validate_repo_id(source)
    except HFValidationError:
        return False
    return True


def hub_offline() -> bool:
    """Offline if huggingface_hub saw HF_HUB_OFFLINE at import, or it has been set since."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or env.strip().lower() in _TRUE


def download_tokenizer_files(
    repo_id: str,
    revision: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The local snapshot folder holding the repository's tokenizer files (downloaded if needed).

    Offline, only the cache is looked at. `token=None` lets huggingface_hub use HF_TOKEN or the
    stored login.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = hub_offline()
    where = f"{repo_id}@{revision}" if revision else repo_id
    cache = Path(cache_dir or constants.HF_HUB_CACHE)
    try:
        folder = Path(
            snapshot_download(
                repo_id,
                revision=revision,
                token=token,
                cache_dir=cache_dir,
                allow_patterns=list(TOKENIZER_FILE_PATTERNS),
                local_files_only=offline,
            )
        )
    except LocalEntryNotFoundError as e:
        if offline:
            reason = (
                f"Hub repository {where} is not in the local Hugging Face cache ({cache}) and offline "
                "mode is on (HF_HUB_OFFLINE=1): download it once with network access, or unset HF_HUB_OFFLINE"
            )
        else:
            reason = f"the Hugging Face Hub could not be reached and {where} is not in the cache ({cache}): {e}"
        raise TokenizerLoadError(repo_id, reason) from None
    except GatedRepoError:
        reason = f"{repo_id} is a gated repository: accept its terms on the Hub, then set HF_TOKEN or pass token="
        raise TokenizerLoadError(repo_id, reason) from None
    except RepositoryNotFoundError:
        reason = f"no Hub repository {repo_id} (or it is private: set HF_TOKEN or pass token=)"
        raise TokenizerLoadError(repo_id, reason) from None
    except RevisionNotFoundError:
        raise TokenizerLoadError(repo_id, f"Hub repository {repo_id} has no revision {revision!r}") from None
    except HFValidationError as e:
        raise TokenizerLoadError(repo_id, f"not a valid Hub repository id ({e})") from None
    except (HfHubHTTPError, OSError) as e:
        raise TokenizerLoadError(repo_id, f"downloading from the Hub failed: {type(e).__name__}: {e}") from None
    if not folder.is_dir() or not any(folder.iterdir()):
        raise TokenizerLoadError(repo_id, f"Hub repository {where} holds no tokenizer files")
    return folder
