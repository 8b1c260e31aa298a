"""The advisory lock a store folder's saves and loads take, and the errors of a folder this
process may not read or write (``softdict._persistence`` saves and loads under them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from softdict._errors import StoreBusyError, StoreFormatError

__all__ = ["LOCK_TIMEOUT", "locked", "permission_refused"]

# How long save and load wait for another process's save or load of the same store, by default.
LOCK_TIMEOUT = 60.0


@contextmanager
def locked(target: Path, timeout: float, *, writing: bool) -> Iterator[None]:
    """Hold the advisory lock of the store at ``target`` (the file ``.NAME.lock`` beside it: the
    store folder itself is renamed by a save). Every save and load of one store, in any process,
    takes it, so a load never sees a save between its renames and two saves never interleave.

    Where the lock file cannot be created (a read-only place), loading goes ahead unlocked:
    nobody can save there either.
    """
    lock_path = target.parent / f".{target.name}.lock"
    lock = FileLock(lock_path, timeout=timeout)
    try:
        # Polled every 10 ms (filelock's default is 50): a process that saves or loads in a
        # loop would otherwise win the lock again and again before a waiting one looks.
        lock.acquire(poll_interval=0.01)
    except Timeout:
        raise StoreBusyError(
            f"another process has been saving or loading {target} for over {timeout:g} s (it "
            f"holds {lock_path}); try again later, or pass a longer timeout="
        ) from None
    except OSError as exc:
        if writing:
            raise StoreFormatError(
                f"cannot save to {target}: cannot create its lock file {lock_path} ({exc})"
            ) from None
        yield
        return
    try:
        yield
    finally:
        lock.release()


@contextmanager
def permission_refused(doing: str, target: Path) -> Iterator[None]:
    """A file or folder of the store this process may not read or write, as a StoreFormatError
    naming it: a store folder or file of mode 000 raised a raw PermissionError."""
    try:
        yield
    except PermissionError as exc:
        where = exc.filename or target
        raise StoreFormatError(
            f"cannot {doing} {target}: permission to read or write {where} is denied; run as a "
            f"user who may, or change its permissions"
        ) from None
