"""A Milvus store's key directory in this process: every key, read at one moment. A store of
at most ``EXACT_MAX_KEYS`` keys (``held_here``), where every lookup scores every key and blends
every value, keeps it with their values, vectors and spelling forms. A larger one keeps it only
where its collection predates the keys' 3-gram field (format 3), for the spelling channel's
forms; otherwise Milvus serves its lookups (``_spelling``, ``backend``), and a directory is read
only for a call that lists every key (iteration, a predicate mask), and not kept.

A directory is reused while every writer's counter (``_metadata.StoreMetadata.writers``) is as
it was when it was read; one lookup checks that once, through its ``View`` (``KeyDirectory``
keeps both). When counters moved, the writers' logs name the keys their writes changed
(``_writers.changed_since``), and just those are fetched again (``Directory.changed``); where
the logs cannot tell, every key is read again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from softdict._config import EXACT_MAX_KEYS
from softdict.index.base import is_in
from softdict.spelling import SpellingIndex, SpellingSource
from softdict.spelling.prepared import PreparedKeys
from softdict.store.milvus._collection import SEEN_FIELDS, KeyRows, SeenKeys
from softdict.store.milvus._metadata import StoreMetadata
from softdict.store.milvus._spelling import FormCache, MilvusSpelling
from softdict.store.milvus._writers import changed_since, has_open_write
from softdict.store.milvus.backend import MilvusBackend
from softdict.values.base import ValueColumn

__all__ = ["Directory", "KeyDirectory", "View", "held_here", "read_directory"]


def held_here(count: int) -> bool:
    """Whether a store of ``count`` keys keeps its keys, values and vectors in this process."""
    return count <= EXACT_MAX_KEYS


@dataclass
class View:
    """What one lookup read of the store (``reading``): the directory it checked, or the count,
    and the values by id that came back with its requests (a served store's)."""

    directory: Directory | None = None
    count: int | None = None
    values: dict[int, object] = field(default_factory=dict)
    spelled: bool = True  # whether the lookup may score spelling, which needs the keys


@dataclass
class Directory:
    """Every key, read at one moment: ids increasing and their keys and insertion orders, and
    the iteration order."""

    generation: dict[str, str]
    ids: np.ndarray
    keys: list[str]
    orders: np.ndarray
    by_order: np.ndarray  # positions in ``ids`` in iteration order
    # Every value and vector, aligned with ``ids``, in a store small enough for lookups to
    # attend to every key (``EXACT_MAX_KEYS``): such a lookup needs every score and value, and
    # fetching them from Milvus each time took 25 ms of a lookup at 10^4 keys (a run of
    # benchmarks/milvus_store.py before this; 7 ms with it). The values as stored, for a
    # refresh, are one JSON text: kept as objects, they pinned the memory of the vectors read
    # beside them (a client of 10^4 keys held 475 MB against 367 MB without them).
    values_json: str | None = None
    column: ValueColumn[Any] | None = None
    vectors: np.ndarray | None = None
    spelling: SpellingIndex | None = field(default=None)
    # Whether a writer's write was open in ``generation``: its keys are fetched at every
    # lookup (decided when the directory is made, not by parsing the writers' logs each time).
    open_write: bool = False

    def spelling_index(self, forms: FormCache) -> SpellingIndex:
        """The spelling forms of every key, built on first use (from ``forms``, which keeps
        those spelled for an earlier directory)."""
        if self.spelling is None:
            spelling = SpellingIndex()
            if len(self.ids):
                spelled = forms.remember(list(zip(self.ids.tolist(), self.keys)))
                spelling.add(
                    self.ids, PreparedKeys.of_spelled([spelled[i] for i in self.ids.tolist()])
                )
                spelling.maintain()
            self.spelling = spelling
        return self.spelling

    def slots_of(self, ids: np.ndarray) -> np.ndarray | None:
        """The slots of ``ids`` in ``column`` (padding, -1, at any slot: its weight is 0); None
        where the directory holds no values or lacks one of the ids."""
        if self.column is None or not len(self.ids):
            return None
        wanted = np.maximum(ids, 0)
        slots = np.searchsorted(self.ids, wanted).clip(0, len(self.ids) - 1)
        return slots if np.all((self.ids[slots] == wanted) | (ids < 0)) else None

    def fields(self) -> list[str]:
        """The fields of a row that this directory holds."""
        return ["key", "order", "value", "vector"] if self.vectors is not None else ["key", "order"]

    def changed(
        self,
        found: list[dict[str, Any]],
        changed: np.ndarray,
        generation: dict[str, str],
        column_of: Callable[[list[object], list[str]], ValueColumn[Any]],
    ) -> Directory:
        """This directory after writes that ``changed`` the keys of these ids, whose rows now
        are ``found`` (``fields``; an id not found was deleted), as of ``generation``."""
        keep = ~is_in(self.ids, changed)
        kept = np.flatnonzero(keep).tolist()
        values = None
        if self.values_json is not None:
            held = json.loads(self.values_json)
            values = [held[i] for i in kept] + [row["value"]["v"] for row in found]
        vectors = None
        if self.vectors is not None:
            new = np.asarray([row["vector"] for row in found], dtype=np.float32)
            new = new.reshape(len(found), self.vectors.shape[1])
            vectors = np.concatenate([self.vectors[keep], new])
        return _assembled(
            generation,
            np.concatenate([self.ids[keep], np.array([row["id"] for row in found], np.int64)]),
            [self.keys[i] for i in kept] + [row["key"] for row in found],
            np.concatenate(
                [self.orders[keep], np.array([row["order"] for row in found], np.int64)]
            ),
            values,
            vectors,
            column_of,
        )


def _assembled(
    generation: dict[str, str],
    ids: np.ndarray,
    keys: list[str],
    orders: np.ndarray,
    values: list[object] | None,
    vectors: np.ndarray | None,
    column_of: Callable[[list[object], list[str]], ValueColumn[Any]],
) -> Directory:
    """A directory of these keys (any order), sorted by id."""
    by_id = np.argsort(ids)
    ids, orders = ids[by_id], orders[by_id]
    keys = [keys[i] for i in by_id.tolist()]
    directory = Directory(generation, ids, keys, orders, np.lexsort((ids, orders)))
    if values is not None and vectors is not None and len(ids):
        ordered = [values[i] for i in by_id.tolist()]
        directory.column = column_of(ordered, keys)
        directory.values_json = json.dumps(ordered)
        directory.vectors = vectors.reshape(len(ids), -1)[by_id]
    return directory


def read_directory(
    rows: KeyRows | None,
    generation: dict[str, str],
    column_of: Callable[[list[object], list[str]], ValueColumn[Any]],
) -> Directory:
    """Read every key of ``rows`` (and, in a small store, every value and vector), as of the
    writers' counters ``generation``; ``column_of`` makes a value column of values and keys."""
    ids: list[int] = []
    keys: list[str] = []
    orders: list[int] = []
    values: list[object] = []
    small = rows is not None and held_here(rows.count())
    fields = ["key", "order", "value", "vector"] if small else ["key", "order"]
    vectors: list[np.ndarray] = []
    if rows is not None:
        for batch in rows.scan(fields):
            for row in batch:
                ids.append(row["id"])
                keys.append(row["key"])
                orders.append(row["order"])
                if small:
                    values.append(row["value"]["v"])
                    vectors.append(row["vector"])
    return _assembled(
        generation,
        np.asarray(ids, dtype=np.int64),
        keys,
        np.asarray(orders, dtype=np.int64),
        values if small else None,
        np.asarray(vectors, dtype=np.float32) if small else None,
        column_of,
    )


class KeyDirectory:
    """This process's directory of a store's keys, and the view the lookup in progress reads.

    Args:
        metadata: the store's metadata rows (the writers' counters).
        rows: the store's key collection now (None while it has none).
        column_of: makes a value column of values and keys.
        count_rows: counts the store's keys (one request).
    """

    def __init__(
        self,
        metadata: StoreMetadata,
        rows: Callable[[], KeyRows | None],
        column_of: Callable[[list[object], list[str]], ValueColumn[Any]],
        count_rows: Callable[[], int],
    ) -> None:
        self._metadata = metadata
        self._rows = rows
        self._column_of = column_of
        self._count_rows = count_rows
        self._cached: Directory | None = None
        self._view: View | None = None
        # Keys' spelling forms by id: a served store's, and a directory's across its refreshes.
        self._forms = FormCache(rows)

    @property
    def cached(self) -> Directory | None:
        """The directory last read, current or not (None: none, or the store changed here)."""
        return self._cached

    def forget(self) -> None:
        """This process wrote: the directory is stale."""
        self._cached = None

    @contextmanager
    def reading(self, spelled: bool = True) -> Iterator[None]:
        """One lookup reads one view: the directory is checked against the writers' counters
        once (not at every call), and the count is taken once. A lookup that scores no spelling
        (not ``spelled``) is brought no keys with its rows (``seen_fields``)."""
        if self._view is not None:
            yield
            return
        self._view = View(spelled=spelled)
        try:
            yield
        finally:
            self._view = None

    def current(self) -> Directory:
        """The directory as of now: the cached one while no writer's counter moved, else read
        again; within a lookup, the one its view checked."""
        view = self._view
        if view is not None and view.directory is not None:
            return view.directory
        generation = self._metadata.writers()
        directory = self._cached
        if directory is None or directory.generation != generation or directory.open_write:
            directory = self._refreshed(directory, generation)
            directory.open_write = has_open_write(generation)
            self._cached = directory
        if view is not None:
            view.directory = directory
        return directory

    def _refreshed(self, directory: Directory | None, generation: dict[str, str]) -> Directory:
        """The directory as of ``generation``: ``directory`` with the keys the writers' logs
        say changed fetched again (one request), where they say it and the store stays on the
        same side of ``held_here``; else every key read again, with the store's shape read
        again first: another process may have cleared the store and filled it with values of
        another kind or keys of another dimension (a probe: a handle read numbers as labels)."""
        changed = None if directory is None else changed_since(directory.generation, generation)
        if directory is None or changed is None:
            self._metadata.refresh_shape()
        rows = self._rows()
        if directory is None or changed is None or rows is None:
            return read_directory(rows, generation, self._column_of)
        found = rows.get(changed, directory.fields()) if len(changed) else []
        updated = directory.changed(found, changed, generation, self._column_of)
        if held_here(len(updated.ids)) != (updated.vectors is not None or not len(updated.ids)):
            return read_directory(rows, generation, self._column_of)
        return updated

    def served(self) -> bool:
        """Whether Milvus serves the store's lookups, and no directory is kept (the module
        docstring): past ``EXACT_MAX_KEYS`` keys, in a collection with the 3-gram field."""
        rows = self._rows()
        return rows is not None and rows.grams and not held_here(self.count())

    def listing(self) -> Directory:
        """Every key as of now: the directory (``current``), or, where Milvus serves the store's
        lookups, one read for this call alone and not kept."""
        if not self.served():
            return self.current()
        self.forget()
        return read_directory(self._rows(), {}, self._column_of)

    def ids_where(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """The ids (increasing) of the keys for which ``predicate`` holds (a mask): a served
        store's are read page by page for each mask, and not kept."""
        rows = self._rows()
        if rows is None or not self.served():
            directory = self.current()
            return directory.ids[[i for i, key in enumerate(directory.keys) if predicate(key)]]
        found = [row["id"] for page in rows.scan(["key"]) for row in page if predicate(row["key"])]
        return np.sort(np.asarray(found, dtype=np.int64))

    def local_vectors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The ids and vectors of a small store, as read now (None for a large one)."""
        if self.served():
            return None
        directory = self.current()
        return None if directory.vectors is None else (directory.ids, directory.vectors)

    def seen_hook(self) -> SeenKeys | None:
        """What the backend of a served store tells of the rows (id, key, value) that come back
        with its requests (``see``); None for a store that is not served."""
        return self if self.served() else None

    def seen_fields(self) -> list[str]:
        """The fields the rows of a request come back with: no keys in a lookup that scores no
        spelling (its queries are embeddings), which would not read them; at 10^5 keys they
        were 8% of a full-attention lookup (their texts sent, read and noted)."""
        view = self._view
        return ["value"] if view is not None and not view.spelled else SEEN_FIELDS

    def see(self, ids: list[int], keys: list[str] | None, values: list[object]) -> None:
        """Keep the keys' spelling forms, and their values for the lookup in progress (none
        outside one): its last step, blending values, then needs not fetch them."""
        if keys is not None:
            self._forms.note(ids, keys)
        if self._view is not None:
            self._view.values.update(zip(ids, values))

    def spelling(self, backend: MilvusBackend) -> SpellingSource:
        """The store's spelling channel: served by Milvus (``_spelling``), or this process's
        directory's spelling index."""
        if self.served():
            return MilvusSpelling(backend.rows, self._forms, backend.filter_of)
        return self.current().spelling_index(self._forms)

    def take_noted_values(self) -> dict[int, object]:
        """The values kept by ``note_values`` in the lookup in progress, forgotten here: a batch
        blends each chunk's values after its requests, so the values kept stay a chunk's."""
        if self._view is None:
            return {}
        values, self._view.values = self._view.values, {}
        return values

    def count(self) -> int:
        """How many keys the store holds: within a lookup, taken once (from the directory of a
        small store, which one request checks and which then serves the lookup)."""
        count_rows = self._count_rows
        view = self._view
        if view is None:
            return count_rows()
        small = self._cached is not None and self._cached.vectors is not None
        if view.directory is None and small:
            self.current()
        if view.directory is not None:
            return len(view.directory.ids)
        if view.count is None:
            view.count = count_rows()
        return view.count
