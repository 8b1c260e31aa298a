"""The files of a saved store as its parts write and read them: typed, checked, named in errors.

Each part of a store (the store's own key list, the value column, the index backend) writes a
dict of ``StoreFiles`` (name -> numpy array, JSON list, or raw bytes) and reads them back through
a ``FileReader``, which turns every problem into a ``StoreFormatError`` that names the file.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias, Union

import numpy as np

from softdict._errors import ConfigError, StoreFormatError

__all__ = [
    "FileReader",
    "StoreFiles",
    "encode_file",
    "fsync_dir",
    "store_folder",
    "write_durably",
]

StoreFiles: TypeAlias = dict[str, Union[np.ndarray, list[Any], bytes]]  # noqa: UP007

# A JSON escape of a surrogate ("\ud83d"): half of a pair, or a lone one no text can hold.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path`` and flush it to the disk."""
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    """Flush the folder ``path``'s entries (a file made or renamed in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def store_folder(path: object, doing: str) -> Path:
    """The folder a store path names, whose parent is a folder: through a symbolic link, its
    target, so that saving replaces what the link points to and the link stays a link.
    ``doing`` ("save to", "load") begins the messages.

    Checked before any lock is taken (a lock file beside a missing folder would create it, and
    its parents): ConfigError for a path that is empty, or no str or os.PathLike of str;
    StoreFormatError for one the system refuses (a NUL character, a name too long) or whose
    parent is missing or a file.
    """
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise ConfigError(
            f"a store's path is a str or an os.PathLike of str, got {type(path).__name__} "
            f"({path!r:.60}); decode bytes with os.fsdecode()"
        )
    if not os.fspath(path):  # Path("") is ".": a save would try the current folder
        raise ConfigError(f"cannot {doing} '': the path is empty; name a folder")
    folder = Path(path)
    if "\0" in str(folder):
        raise StoreFormatError(f"cannot {doing} {str(folder)!r:.80}: a path holds no NUL character")
    try:
        # A link, to its target; "." and "..", to the folder they name: a store named "" got
        # the lock file "..lock" and was then refused as a folder that is no store.
        if folder.is_symlink() or folder.name in ("", ".."):
            folder = folder.resolve(strict=False)
        if not folder.parent.is_dir():
            why = "is a file" if folder.parent.exists() else "does not exist"
            raise StoreFormatError(
                f"cannot {doing} {folder}: its parent folder {folder.parent} {why}"
            )
    except OSError as exc:  # a name too long for the system, a folder it may not read
        raise StoreFormatError(f"cannot {doing} {folder}: {exc.strerror or exc}") from None
    except RuntimeError:  # pathlib's "Symlink loop" (Python 3.11; 3.13 raises OSError)
        raise StoreFormatError(
            f"cannot {doing} {folder}: its symbolic links point at each other in a loop"
        ) from None
    return folder


def canonical_json(obj: Any) -> bytes:
    """One byte string per JSON value: sorted keys, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, allow_nan=False).encode()


def encode_file(content: np.ndarray | list[Any] | bytes) -> bytes:
    """The bytes of one file: .npy for an array (never pickled), JSON for a list, else as is."""
    if isinstance(content, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(content), allow_pickle=False)
        return buffer.getvalue()
    if isinstance(content, list):
        return canonical_json(content)
    return content


class FileReader:
    """Checked access to a store's files; the bytes have already passed their checksums."""

    def __init__(
        self, folder: Path, contents: Mapping[str, bytes | np.ndarray | list[Any]]
    ) -> None:
        self.folder = folder
        self._contents = dict(contents)

    def has(self, name: str) -> bool:
        return name in self._contents

    def error(self, name: str, problem: str) -> StoreFormatError:
        """A ``StoreFormatError`` that names the file: "<folder>/<name> <problem>"."""
        return StoreFormatError(f"{self.folder / name} {problem}")

    def raw(self, name: str) -> bytes:
        content = self._need(name)
        if isinstance(content, list):
            return canonical_json(content)
        if not isinstance(content, bytes):
            raise self.error(name, "is not a raw file")
        return content

    def npy(
        self, name: str, dtype: type | np.dtype[Any], shape: tuple[int | None, ...]
    ) -> np.ndarray:
        """The array in ``name``, which must have this dtype and shape (None: any length)."""
        array = self._array(name)
        if (
            array.dtype != np.dtype(dtype)
            or array.ndim != len(shape)
            or any(want is not None and got != want for got, want in zip(array.shape, shape))
        ):
            raise self.error(
                name,
                f"holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} "
                f"{tuple('n' if s is None else s for s in shape)}",
            )
        return array

    def npy_rows(self, name: str, n: int) -> np.ndarray:
        """The array in ``name``, of any dtype and shape, with ``n`` rows (its first axis)."""
        array = self._array(name)
        if array.ndim == 0 or array.shape[0] != n:
            raise self.error(name, f"holds {array.shape}, expected {n} rows")
        return array

    def _array(self, name: str) -> np.ndarray:
        content = self._need(name)
        if isinstance(content, np.ndarray):
            return content
        if isinstance(content, list):
            raise self.error(name, "holds a JSON list, not an array")
        try:
            return np.load(io.BytesIO(content), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise self.error(name, f"is not a readable .npy array ({exc})") from None

    def finite_npy(
        self, name: str, dtype: type | np.dtype[Any], shape: tuple[int | None, ...]
    ) -> np.ndarray:
        """``npy``, refusing NaN and infinity."""
        array = self.npy(name, dtype, shape)
        if not np.all(np.isfinite(array)):
            raise self.error(name, "holds NaN or infinity")
        return array

    def json_list(self, name: str) -> list[Any]:
        content = self._need(name)
        if isinstance(content, list):
            return content
        try:
            # Decoded strictly first: json.loads of bytes lets a UTF-8-encoded surrogate through.
            value = json.loads(content.decode("utf-8")) if isinstance(content, bytes) else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self.error(name, f"is not valid JSON ({exc})") from None
        except RecursionError:
            raise self.error(name, "is JSON nested too deeply to be a store's") from None
        if not isinstance(value, list):
            raise self.error(name, "should hold a JSON list")
        if _SURROGATE_ESCAPE.search(content):  # type: ignore[arg-type]  # bytes (loaded above)
            try:  # an escape of half a pair ("\ud800" alone): no text, and no save could write it
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise self.error(name, "holds text that is not valid Unicode") from None
        return value

    def _need(self, name: str) -> bytes | np.ndarray | list[Any]:
        if name not in self._contents:
            raise self.error(name, "is missing")
        return self._contents[name]
