"""The tokenizer shipped inside the package, so `detok serve` works offline on a fresh clone.

It is Qwen2's byte-level BPE (multilingual: CJK and emoji stream as they should), stored as
`_data/qwen2/tokenizer.json.xz`. The first use decompresses it once into a cache folder, which
is then an ordinary Hugging Face tokenizer folder: worker processes load it by path like any other
source, and later start-ups skip the ~0.2 s of decompression.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import tempfile
from importlib import resources
from pathlib import Path

from detok.tokenizer.hf import HFTokenizer

DEFAULT_TOKENIZER_NAME = "qwen2"
DEFAULT_SOURCE = "detok:default-qwen2"
_FILES = ("tokenizer_config.json", "chat_template.jinja")


def _package_folder() -> resources.abc.Traversable:
    return resources.files("detok") / "_data" / DEFAULT_TOKENIZER_NAME


def cache_folder() -> Path:
    """detok's cache folder: DETOK_CACHE_DIR, else $XDG_CACHE_HOME/detok or ~/.cache/detok."""
    explicit = os.environ.get("DETOK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "detok"


def write_atomically(path: Path, data: bytes) -> None:
    """Several processes may write one file of the cache folder at once (a pool's workers): each
    writes a private temp file and renames it into place, so no reader sees a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _materialise(folder: Path, compressed: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    package = _package_folder()
    for name in _FILES:
        write_atomically(folder / name, (package / name).read_bytes())
    # tokenizer.json last: its presence marks the folder complete
    write_atomically(folder / "tokenizer.json", lzma.decompress(compressed))


def default_tokenizer_dir(cache_root: Path | None = None) -> Path:
    """A folder holding the default tokenizer's files, decompressed on first use.

    The folder name carries a digest of the shipped archive, so a package upgrade that changes
    the tokenizer never reuses a stale copy. Falls back to the temp dir if the cache is read-only.
    """
    compressed = (_package_folder() / "tokenizer.json.xz").read_bytes()
    digest = hashlib.sha256(compressed).hexdigest()[:16]
    if cache_root is not None:
        roots = [cache_root]
    else:
        roots = [cache_folder(), Path(tempfile.gettempdir()) / f"detok-{os.getuid()}"]
    last_error: OSError | None = None
    for root in roots:
        folder = root / f"{DEFAULT_TOKENIZER_NAME}-{digest}"
        if (folder / "tokenizer.json").is_file():
            return folder
        try:
            _materialise(folder, compressed)
            return folder
        except OSError as e:
            last_error = e
    raise OSError(f"cannot write the default tokenizer to any cache folder: {last_error}")


def load_default_tokenizer() -> HFTokenizer:
    """The embedded default tokenizer, with its config and chat template."""
    try:
        return HFTokenizer.from_path(default_tokenizer_dir(), source=DEFAULT_SOURCE)
    except OSError:
        return _load_in_memory()


def _load_in_memory() -> HFTokenizer:
    import tokenizers

    package = _package_folder()
    text = lzma.decompress((package / "tokenizer.json.xz").read_bytes()).decode("utf-8")
    config = json.loads((package / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = (package / "chat_template.jinja").read_text(encoding="utf-8")
    return HFTokenizer(tokenizers.Tokenizer.from_str(text), DEFAULT_SOURCE, config=config, chat_template=template)
