"""The per-user cache folder: files softdict derives once from installed packages and keeps.

``$SOFTDICT_CACHE_DIR``, else ``$XDG_CACHE_HOME/softdict``, else ``~/.cache/softdict``. What is
kept there can always be made again from the packages it came from (the bundled model's ONNX
export, the spelling channel's common-word list), so a file is only ever put in place whole:
written under a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

__all__ = ["CACHE_ENV_VAR", "cache_root", "file_digest", "source_key", "write_whole"]

CACHE_ENV_VAR = "SOFTDICT_CACHE_DIR"


def cache_root() -> Path:
    """The per-user folder softdict keeps derived files in."""
    explicit = os.environ.get(CACHE_ENV_VAR)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "softdict"


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` so that no reader ever sees part of it (raises ``OSError``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A partial file of this thread's own: two threads of one process writing the same file
    # (the first lookups of two threads) would otherwise write into one partial file, one of
    # them moving it into place while the other still wrote.
    partial = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def file_digest(path: Path) -> bytes:
    """The SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def source_key(label: str, files: Iterable[Path], packages: Iterable[str]) -> str:
    """A folder name for what is derived from ``files`` by ``packages``: a hash of ``label``
    (which says what is made and in which format), the files' bytes and the packages' versions
    (read from package metadata, without importing them). A new version of any of them makes a
    new name, so an old derived file is never taken for a new one."""
    digest = hashlib.sha256(label.encode())
    for path in files:
        digest.update(file_digest(path))
    for package in packages:
        try:
            digest.update(f"{package} {metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{package} absent".encode())
    return digest.hexdigest()[:20]
