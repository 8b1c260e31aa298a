"""Row storage: a numpy array that grows in place, and when deleted rows are worth dropping.
Shared by the store's slots, the value columns and the index backends' rows."""

from __future__ import annotations

import numpy as np

__all__ = ["GrowableRows", "compaction_due"]

# Deleted rows are dropped once they outnumber live ones (and are at least this many), so a scan
# never covers more than about twice the live rows, and the cost of compacting is amortised over
# the deletes that made it necessary.
_COMPACT_MIN_DEAD = 64


def compaction_due(dead: int, live: int) -> bool:
    """Whether ``dead`` deleted rows beside ``live`` ones should be compacted away now."""
    return dead > max(_COMPACT_MIN_DEAD, live)


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
