"""Ids by row for a backend that appends rows: the id <-> row map, tombstones, compaction.

A local backend stores vectors in rows, appended in the order they arrive. The store hands out
ids in increasing order, so the ids by row stay sorted, and finding the rows of ids is one
``searchsorted``: no per-id Python dict, whatever the store's size. Deleted rows stay as
tombstones (a FAISS graph cannot remove vectors) until they outnumber live ones.
"""

from __future__ import annotations

import numpy as np

from softdict._rows import GrowableRows, compaction_due, positions_of

__all__ = ["IdRows", "increasing_ids"]


def increasing_ids(ids: np.ndarray, after: int = -1) -> bool:
    """Whether ``ids`` are non-negative, strictly increasing, and all larger than ``after``."""
    return not len(ids) or bool(ids[0] > after and ids[0] >= 0 and np.all(np.diff(ids) > 0))


class IdRows:
    """Which id each row holds (increasing), and which rows are live."""

    def __init__(self) -> None:
        self._ids = GrowableRows((), np.int64)
        self._live = GrowableRows((), np.bool_)
        self.n_live = 0

    @property
    def size(self) -> int:
        """Rows, tombstones included."""
        return len(self._ids)

    @property
    def ids(self) -> np.ndarray:
        """The id of every row, tombstones included (read-only view)."""
        return self._ids.view

    @property
    def live(self) -> np.ndarray:
        """Which rows are live (read-only view)."""
        return self._live.view

    @property
    def has_tombstones(self) -> bool:
        return self.n_live < self.size

    @property
    def needs_compaction(self) -> bool:
        return compaction_due(self.size - self.n_live, self.n_live)

    def check_new(self, ids: np.ndarray) -> None:
        """ValueError unless ``ids`` increase and exceed every id held so far."""
        last = int(self._ids.view[-1]) if self.size else -1
        if not increasing_ids(ids, last):
            raise ValueError(
                "index backends take new ids in increasing order, each larger than every id "
                f"added before (the last was {last}); got {ids[:5].tolist()}..."
            )

    def append(self, ids: np.ndarray) -> None:
        """Rows for new ``ids`` (see ``check_new``)."""
        ids = np.asarray(ids, dtype=np.int64)
        self.check_new(ids)
        self._ids.append(ids)
        self._live.append(np.ones(len(ids), dtype=np.bool_))
        self.n_live += len(ids)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The live rows that hold ``ids``, in the order given; ids not held are dropped."""
        held = self._ids.view
        if not len(held) or not len(ids):
            return np.zeros(0, dtype=np.int64)
        rows = positions_of(held, ids)
        found = (held[rows] == ids) & self._live.view[rows]
        return rows[found]

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` live ids drawn uniformly with replacement: rows drawn uniformly, tombstones
        redrawn (compaction keeps at least half the rows live, so few are)."""
        if not self.n_live:
            return np.zeros(0, dtype=np.int64)
        live, chosen = self._live.view, []
        wanted = count
        while wanted > 0:
            rows = rng.integers(0, self.size, size=wanted + wanted // 4 + 8)
            rows = rows[live[rows]][:wanted]
            chosen.append(rows)
            wanted -= len(rows)
        return self._ids.view[np.concatenate(chosen)]

    def remove(self, ids: np.ndarray) -> None:
        rows = self.rows_of(np.asarray(ids, dtype=np.int64))
        rows = np.unique(rows)
        self._live.view[rows] = False
        self.n_live -= len(rows)

    def live_rows(self) -> np.ndarray:
        return np.flatnonzero(self._live.view)

    def live_ids(self) -> np.ndarray:
        """Every id held, increasing."""
        return self._ids.view[self.live_rows()]

    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows`` (live, increasing), renumbered 0..len(rows)-1: compaction."""
        self._ids.keep(rows)
        self._live.keep(rows)
        self.n_live = int(self._live.view.sum())

    def ids_of(self, rows: np.ndarray) -> np.ndarray:
        """The ids of ``rows`` (any shape); row -1 (padding) gives id -1."""
        rows = np.asarray(rows, dtype=np.int64)
        if not self.size:
            return np.full(rows.shape, -1, dtype=np.int64)
        return np.where(rows >= 0, self._ids.view[np.maximum(rows, 0)], -1)

    @classmethod
    def restored(cls, ids: np.ndarray, live: np.ndarray) -> IdRows:
        """From saved arrays; the caller has checked that ``ids`` increase."""
        rows = cls()
        rows._ids.append(ids)
        rows._live.append(live)
        rows.n_live = int(live.sum())
        return rows

    def nbytes(self) -> int:
        return int(self._ids.view.nbytes + self._live.view.nbytes)
