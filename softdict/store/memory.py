"""``MemoryStore``: a store held in this process's memory (the default).

Keys live in slots: slot ``s`` holds a key, its id, and (in the value column) its value. New keys
get new slots at the end and new ids from a counter, so ids increase with slots, and finding the
slots of ids is one ``searchsorted``. A deleted key leaves its slot empty until empty slots
outnumber the rest; then the store compacts (keeping the order). Ids never change: the index
backend holds vectors under them and compacts on its own schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from softdict._arguments import MAX_SCORED_NORM
from softdict._config import SoftDictConfig
from softdict._errors import EmptyStoreError, StoreFormatError
from softdict._files import FileReader, StoreFiles
from softdict._rows import ROWS_AT_A_TIME, GrowableRows, compaction_due, counting, positions_of
from softdict._similarity import Similarity, squared_norms
from softdict._types import Value
from softdict.index.base import IndexBackend
from softdict.index.registry import BackendSpec, backend_spec
from softdict.index.reindexing import reindexed, saved_backend
from softdict.spelling import SpellingIndex
from softdict.store.base import StagedWrite, Store, StoreState, dump_files
from softdict.values.base import ValueColumn
from softdict.values.registry import check_inferred_kind, column_class, write_column

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Keys, values and vectors in this process (see the module docstring)."""

    def __init__(self, config: SoftDictConfig) -> None:
        self._spec: BackendSpec = backend_spec(config.index)  # ConfigError if unknown
        self._fixed_kind = (
            column_class(config.value_kind) if config.value_kind is not None else None
        )
        self._config = config
        self._projection: np.ndarray | None = None
        self._next_id = 0
        self._reset()

    def _reset(self) -> None:
        self._slot_of: dict[str, int] = {}  # insertion-ordered: iteration follows dict order
        self._key_of_slot: list[str | None] = []  # None marks an empty slot
        self._id_of_slot = GrowableRows((), np.int64)
        self._alive = GrowableRows((), np.bool_)
        self._column: ValueColumn[Any] | None = None
        self._backend: IndexBackend | None = None
        self._spelling = SpellingIndex()
        self._dim: int | None = None

    # -- options and shape ----------------------------------------------------------------------

    @property
    def config(self) -> SoftDictConfig:
        return self._config

    @config.setter
    def config(self, config: SoftDictConfig) -> None:
        if (config.index, config.value_kind, config.similarity) != (
            self._config.index,
            self._config.value_kind,
            self._config.similarity,
        ):
            raise ValueError("index, value_kind and similarity are fixed when a store is made")
        self._config = config

    @property
    def dim(self) -> int | None:
        return self._dim

    @property
    def value_kind(self) -> str | None:
        if self._column is not None:
            return self._column.kind
        return self._fixed_kind.kind if self._fixed_kind is not None else None

    @property
    def projection(self) -> np.ndarray | None:
        return self._projection

    @projection.setter
    def projection(self, projection: np.ndarray | None) -> None:
        self._projection = None if projection is None else np.asarray(projection, np.float32)

    def describe_index(self) -> str:
        return self._backend.describe() if self._backend is not None else self._spec.description

    def index_memory_bytes(self) -> int:
        return self._backend.memory_bytes() if self._backend is not None else 0

    # -- the exact mapping ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    def keys(self) -> list[str]:
        return list(self._slot_of)

    def get(self, key: str) -> Value:
        slot = self._slot_of[key]  # KeyError(key) for a missing key, as a dict raises
        assert self._column is not None
        return self._column.get(slot)

    def newest_key(self) -> str:
        if not self._slot_of:
            raise KeyError("the store is empty")
        return next(reversed(self._slot_of))

    # -- writing -------------------------------------------------------------------------------

    def stage(
        self,
        items: Mapping[str, object],
        vectors: Mapping[str, np.ndarray] | None = None,
        *,
        replace_vectors: bool = False,
    ) -> StagedWrite:
        column = write_column(self._column, self._fixed_kind, items)
        fresh, kept, missing = self._split_write(
            list(items), self._slot_of, vectors, replace_vectors
        )
        staged_fresh = column.stage([items[key] for key in fresh], fresh)
        staged_kept = column.stage([items[key] for key in kept], kept)
        check_inferred_kind(
            column, self._fixed_kind, ((key, items[key]) for key in (*fresh, *kept))
        )
        details: dict[str, Any] = {
            "column": column,
            "staged_fresh": staged_fresh,
            "staged_kept": staged_kept,
        }
        if fresh and not missing:
            assert vectors is not None
            projection = None if self._projection is None else self._projection.shape
            raw = self._checked_key_vectors(fresh, vectors, projection)
            details["prepared"] = self._config.similarity.prepare_keys(raw)
            if self._backend is None:
                # May raise ConfigError (a factory string that does not fit d): nothing changed.
                details["backend"] = self._spec.create(raw.shape[1], self._config.similarity.metric)
        return StagedWrite(fresh, kept, missing, details)

    def commit(self, staged: StagedWrite) -> None:
        if staged.missing:
            raise ValueError(f"{len(staged.missing)} new keys have no embedding; stage them again")
        details = staged.details
        column: ValueColumn[Any] = details["column"]
        if staged.fresh:
            backend: IndexBackend = (
                self._backend if self._backend is not None else details["backend"]
            )
            prepared = details["prepared"]
            new_ids = np.arange(self._next_id, self._next_id + len(staged.fresh), dtype=np.int64)
            # The slow part of the spelling index's add, which changes nothing.
            spelled = self._spelling.prepare(staged.fresh)
            # A backend's add changes nothing if it fails. Its ids are not given again, even
            # where the add is undone below (a graph keeps a removed id's node).
            backend.add(new_ids, prepared)
            self._next_id += len(staged.fresh)

        def undo_add() -> None:
            if staged.fresh and backend is self._backend:  # else a new backend, dropped
                backend.remove(new_ids)

        self._change_column(column, staged, undo_add)
        # Nothing below can fail.
        if staged.fresh:
            self._backend, self._dim = backend, prepared.shape[1]
            self._spelling.add(new_ids, spelled)  # appends only
        self._column = column
        replaced = [self._slot_of[key] for key in staged.fresh if key in self._slot_of]
        if replaced:
            assert self._backend is not None
            self._backend.remove(self._id_of_slot.view[replaced])
            self._spelling.remove(self._id_of_slot.view[replaced])
            self._empty_slots(replaced)
        if staged.fresh:
            first_slot = len(self._key_of_slot)
            self._id_of_slot.append(new_ids)
            self._alive.append(np.ones(len(staged.fresh), dtype=np.bool_))
            for offset, key in enumerate(staged.fresh):
                self._slot_of[key] = first_slot + offset  # an existing key keeps its position
            self._key_of_slot.extend(staged.fresh)
        if replaced:
            self._after_removal()
        # The store is whole now; building or merging the spelling postings may take seconds,
        # and if it is interrupted, it is done by a later call.
        self._spelling.maintain()

    def _change_column(
        self, column: ValueColumn[Any], staged: StagedWrite, undo_add: Callable[[], None]
    ) -> None:
        """Append the fresh keys' values to ``column`` and assign the kept keys': the one step
        of a commit that runs a plug-in's code (``extending.md``), which may raise. It then
        undoes what it appended and the backend's add (``undo_add``), so the store is as it
        was: a plug-in whose append raised left the index holding keys the store did not list,
        and a save of it that load refused (a hostile-input probe). A plug-in's ``assign``
        must itself change nothing when it raises."""
        length = len(column)
        try:
            if staged.fresh:
                column.append(staged.details["staged_fresh"])
            if staged.kept:
                slots = np.array([self._slot_of[key] for key in staged.kept])
                column.assign(slots, staged.details["staged_kept"])
        except BaseException:
            if len(column) > length:
                column.keep(np.arange(length))
            undo_add()
            raise

    def remove(self, key: str) -> None:
        slot = self._slot_of[key]  # KeyError(key), as a dict raises
        assert self._backend is not None
        self._backend.remove(self._id_of_slot.view[[slot]])
        self._spelling.remove(self._id_of_slot.view[[slot]])
        del self._slot_of[key]
        self._empty_slots([slot])
        self._after_removal()
        self._spelling.maintain()

    def _empty_slots(self, slots: list[int]) -> None:
        for slot in slots:
            self._key_of_slot[slot] = None
        self._alive.view[slots] = False

    def clear(self) -> None:
        self._reset()

    def _after_removal(self) -> None:
        if not self._slot_of:
            self._reset()
            return
        if compaction_due(len(self._key_of_slot) - len(self._slot_of), len(self._slot_of)):
            self.compact()

    def compact(self) -> None:
        """Drop empty slots and renumber live ones, keeping their order (ids stay)."""
        if self._column is None or len(self._key_of_slot) == len(self._slot_of):
            return
        live = np.flatnonzero(self._alive.view)
        self._column.keep(live)
        self._id_of_slot.keep(live)
        self._alive.keep(live)
        self._key_of_slot = [self._key_of_slot[slot] for slot in live]
        for slot, key in enumerate(self._key_of_slot):
            assert key is not None
            self._slot_of[key] = slot  # reassigning keeps the dict's (insertion) order

    # -- reading for attention -----------------------------------------------------------------

    @property
    def value_column(self) -> ValueColumn[Any] | None:
        return self._column

    @property
    def backend(self) -> IndexBackend:
        if self._backend is None:
            raise EmptyStoreError("the store holds no keys, so it has no index to search")
        return self._backend

    @property
    def spelling(self) -> SpellingIndex:
        return self._spelling

    def _ids_where(self, predicate: Callable[[str], bool]) -> np.ndarray:
        # Over a copy of the keys, and then the accepted keys still held: a predicate that
        # wrote to the store (the lock is re-entrant) raised "dictionary changed size during
        # iteration" mid-lookup.
        accepted = [key for key in list(self._slot_of) if predicate(key)]
        return self._ids_of(accepted)

    def _ids_of(self, keys: list[str]) -> np.ndarray:
        slots = [self._slot_of[key] for key in keys if key in self._slot_of]
        return self._id_of_slot.view[np.asarray(slots, dtype=np.int64)]

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        held = self._id_of_slot.view
        if len(ids) == len(held) and np.array_equal(ids, held):
            # Every key, in id order, as a selection of every key gives them: slots 0..n-1,
            # without the search (an equality test costs a tenth of it).
            return counting(len(held))
        if not len(held):
            return np.zeros(np.shape(ids), dtype=np.int64)
        # Padding (-1) points at slot 0: it has weight 0.
        slots = positions_of(held, np.maximum(ids, 0))
        # A plug-in backend's unknown id had been read as a neighbour's, and a removed one as
        # the key None (probes).
        alive = (held[slots] == ids) & self._alive.view[slots]
        wrong = (ids < -1) | ((ids >= 0) & ~alive)
        if wrong.any():
            raise StoreFormatError(
                f"the index ({self.backend.describe()}) answered ids {ids[wrong][:3].tolist()} "
                f"that the store does not hold; an index answers the ids it holds, -1 for padding"
            )
        return slots

    def values_of(self, ids: np.ndarray) -> tuple[ValueColumn[Any], np.ndarray]:
        assert self._column is not None
        return self._column, self._slots(ids)

    def present_slots(self, column: ValueColumn[Any]) -> np.ndarray:
        return np.flatnonzero(self._alive.view)

    def keys_of(self, ids: np.ndarray) -> list[str]:
        key_of_slot = self._key_of_slot  # held ids only (the protocol): no slot here is empty
        return [key_of_slot[slot] for slot in self._slots(ids).tolist()]

    def ids(self) -> np.ndarray:
        slots = np.fromiter(self._slot_of.values(), np.int64, len(self._slot_of))
        return self._id_of_slot.view[slots]

    # -- persistence ---------------------------------------------------------------------------

    def snapshot(self) -> tuple[StoreState, StoreFiles]:
        slots = np.fromiter(self._slot_of.values(), np.int64, len(self._slot_of))
        dump = self._backend.dump() if self._backend is not None else None
        state = StoreState(
            config=self._config,
            keys=list(self._slot_of),
            ids=self._id_of_slot.view[slots].copy(),
            next_id=self._next_id,
            dim=self._dim,
            value_kind=self._column.kind if self._column is not None else None,
            index_meta=dump.meta if dump is not None else None,
            projection=None if self._projection is None else self._projection.copy(),
        )
        return state, dump_files(
            self._column.dump(slots) if self._column is not None else {},
            dump.files if dump is not None else {},
            self._spelling.dump(),
        )

    def copy(self) -> MemoryStore:
        state, files = self.snapshot()
        return MemoryStore.restore(state, FileReader(Path("<copy>"), dict(files)))

    @classmethod
    def restore(
        cls, state: StoreState, files: FileReader, saved_index: str | None = None
    ) -> MemoryStore:
        """A store from saved state and its parts' files (persistence has checked that the keys
        are distinct strings and the ids distinct, below ``next_id``, one per key).
        ``saved_index``: the index the files hold, where ``state.config`` names another one
        to rebuild them as (``softdict.index.reindexing``)."""
        store = cls(state.config)  # ConfigError for an unknown index or kind: caller reports it
        store._projection = state.projection
        store._next_id = state.next_id
        if not state.keys:
            return store
        if state.dim is None or state.value_kind is None:
            raise files.error("manifest.json", "lacks the dimension or value kind of its keys")
        fixed = state.config.value_kind
        if fixed is not None and fixed != state.value_kind:
            raise files.error(
                "manifest.json",
                f"fixes value_kind {fixed!r} but records {state.value_kind!r} values",
            )
        n = len(state.keys)
        by_id = np.argsort(state.ids, kind="stable")  # slots go in id order
        column = column_class(state.value_kind).restore(files, n)
        column.keep(by_id)
        metric = state.config.similarity.metric
        if saved_index is None:
            backend = store._spec.create(state.dim, metric)
        else:
            backend = saved_backend(saved_index, state.dim, metric, state.index_meta or {}, files)
        backend.restore(state.index_meta or {}, files)
        if not np.array_equal(backend.ids(), np.sort(state.ids)):
            raise files.error(
                "ids.npy",
                f"does not match the index: the store lists {n} keys, the index holds "
                f"{len(backend)} vectors, not under the same ids",
            )
        _check_key_norms(backend, files, state.config.similarity is Similarity.COSINE)
        if saved_index is not None:
            backend = reindexed(backend, store._spec, files)
        store._column, store._backend, store._dim = column, backend, state.dim
        store._spelling = SpellingIndex.restore(
            state.ids[by_id], [state.keys[i] for i in by_id], files
        )
        store._id_of_slot.append(state.ids[by_id])
        store._alive.append(np.ones(n, dtype=np.bool_))
        store._key_of_slot = [state.keys[i] for i in by_id]
        slot_of_position = np.empty(n, dtype=np.int64)
        slot_of_position[by_id] = np.arange(n)
        store._slot_of = dict(zip(state.keys, slot_of_position.tolist()))
        return store


# A cosine store's vectors are unit vectors or zero (``Similarity.prepare_keys`` makes them so),
# and another store's are at most ``MAX_SCORED_NORM`` long (an insert refuses longer ones): a
# longer one came from no insert but from a file edited with its checksums recomputed, and would
# outscore every other key, or overflow its scores. The margin covers float32 rounding. Only
# embeddings.npy is checked: FAISS's indexes hold approximations (PQ codes) and are trusted
# files anyway (their checksums catch damage, not a crafted file; docs/guarantees.md). A store
# that shrank from such an index to exact search holds its decoded vectors, each within the
# codes' error of a vector added (``IndexBackend.code_error``): that much longer.
_UNIT_MARGIN = 1e-3


def _check_key_norms(backend: IndexBackend, files: FileReader, cosine: bool) -> None:
    """StoreFormatError where a loaded store's embeddings.npy holds a vector longer than its
    keys can be: a unit one in a cosine store, ``MAX_SCORED_NORM`` in another."""
    if not files.has("embeddings.npy"):
        return
    ids, most = backend.ids(), 1.0 + _UNIT_MARGIN if cosine else MAX_SCORED_NORM
    error = backend.code_error()
    most += 0.0 if error is None else error.radius  # NaN (not known): nothing is refused
    for start in range(0, len(ids), ROWS_AT_A_TIME):
        vectors = backend.vectors(ids[start : start + ROWS_AT_A_TIME])
        longest = float(np.sqrt(np.max(squared_norms(vectors), initial=0.0)))
        if longest > most:
            whose = "unit vectors" if cosine else f"at most {MAX_SCORED_NORM:g} long"
            raise files.error(
                "embeddings.npy",
                f"holds a key vector of norm {longest:.6g}, where this store's keys are "
                f"{whose}: the file was edited, not written by save",
            )
