"""Row storage: a numpy array that grows in place, and when deleted rows are worth dropping.
Shared by the store's slots, the value columns and the index backends' rows."""

from __future__ import annotations

import numpy as np

__all__ = [
    "ROWS_AT_A_TIME",
    "GrowableColumns",
    "GrowableRows",
    "compaction_due",
    "counting",
    "every_slot",
    "positions_of",
]

# Stored vectors copied at a time by a pass over every one of them (decoding, checking, moving,
# scoring allowed rows by hand): 100 MB of float32 copies at 384 dims, whatever the store's
# size, where a copy of every vector at once would double the index's memory.
ROWS_AT_A_TIME = 1 << 16

# Deleted rows are dropped once they outnumber live ones (and are at least this many), so a scan
# never covers more than about twice the live rows, and the cost of compacting is amortised over
# the deletes that made it necessary.
_COMPACT_MIN_DEAD = 64


def compaction_due(dead: int, live: int) -> bool:
    """Whether ``dead`` deleted rows beside ``live`` ones should be compacted away now."""
    return dead > max(_COMPACT_MIN_DEAD, live)


_counted = np.arange(0, dtype=np.int64)
_counted.flags.writeable = False


def counting(n: int) -> np.ndarray:
    """0, 1, ..., n − 1 (int64, read-only): a view of one array, made again (twice as long) only
    when a longer one is asked for. Full attention over every key asks for it on every lookup,
    and making it cost 30 µs at 10^5 keys. The array stays for the process's life: 16 bytes for
    each key of the largest store at most (160 MB after a store of 10^7 keys, beside its 15 GB
    of vectors). Threads: a caller may get a view of an array another has just replaced, which
    holds the same numbers, or replace a longer one by a shorter one, made again when needed."""
    global _counted
    counted = _counted
    if len(counted) < n:
        counted = np.arange(max(n, 2 * len(counted)), dtype=np.int64)
        counted.flags.writeable = False
        _counted = counted
    return counted[:n]


def every_slot(slots: np.ndarray, n: int) -> bool:
    """Whether ``slots`` are 0, 1, ..., n − 1: every key in slot order, which a blend reads
    without a gather. A view ``counting`` gave is told at once, without reading it (comparing
    it with 0..n−1 cost ~8 µs a lookup at 10^4 keys and ~45 at 10^5); any other array is
    compared."""
    if len(slots) != n:
        return False
    base = _counted
    if slots.base is base and slots.ndim == 1 and slots.strides == base.strides:
        return bool(slots.__array_interface__["data"][0] == base.__array_interface__["data"][0])
    return bool(np.array_equal(slots, counting(n)))


def positions_of(held: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Where each of ``ids`` is in ``held`` (increasing, non-empty), or where it would be,
    clipped to a valid position: callers compare ``held[positions]`` to tell. While the held ids
    are consecutive (no compaction has left gaps), a position is an offset, with no search: a
    sampled tail asks for thousands of random ids, and the search took 0.5 ms of a lookup."""
    ids = np.asarray(ids, dtype=np.int64)
    first, size = int(held[0]), len(held)
    if int(held[-1]) - first == size - 1:
        return np.clip(ids - first, 0, size - 1)
    return np.minimum(np.searchsorted(held, ids), size - 1)


class GrowableRows:
    """A numpy array that grows by doubling, so appending n rows one at a time is O(n)."""

    def __init__(self, row_shape: tuple[int, ...], dtype: type | np.dtype) -> None:
        self._data = np.zeros((16, *row_shape), dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def view(self) -> np.ndarray:
        return self._data[: self._size]

    def append(self, rows: np.ndarray) -> None:
        needed = self._size + len(rows)
        if needed > len(self._data):
            grown = np.zeros(
                (max(needed, 2 * len(self._data)), *self._data.shape[1:]), self._data.dtype
            )
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : needed] = rows
        self._size = needed

    def keep(self, rows: np.ndarray) -> None:
        kept = self._data[rows]
        self._data = np.zeros((max(16, len(kept)), *self._data.shape[1:]), self._data.dtype)
        self._data[: len(kept)] = kept
        self._size = len(kept)


class GrowableColumns:
    """Like ``GrowableRows`` of (width,) rows, held column by column: ``view`` is (width, n),
    so the rows' values of one column are contiguous. Reading a few columns of every row (the
    spelling channel reads the query's letters of every key) then reads a few contiguous runs
    instead of touching every row."""

    def __init__(self, width: int, dtype: type | np.dtype) -> None:
        self._data = np.zeros((width, 16), dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def view(self) -> np.ndarray:
        return self._data[:, : self._size]

    def append(self, rows: np.ndarray) -> None:
        """Append (k, width) rows."""
        needed = self._size + len(rows)
        if needed > self._data.shape[1]:
            grown = np.zeros(
                (self._data.shape[0], max(needed, 2 * self._data.shape[1])), self._data.dtype
            )
            grown[:, : self._size] = self._data[:, : self._size]
            self._data = grown
        self._data[:, self._size : needed] = np.asarray(rows).T
        self._size = needed

    def keep(self, rows: np.ndarray) -> None:
        kept = self._data[:, rows]
        self._data = np.zeros((self._data.shape[0], max(16, kept.shape[1])), self._data.dtype)
        self._data[:, : kept.shape[1]] = kept
        self._size = kept.shape[1]
