"""``MilvusStore``: a store kept in a Milvus collection, shared by every process that opens it.

Milvus holds everything (``_collection``): the keys, values and prepared vectors in one row per
key (ids: ``_ids``), and the options, encoder identity and query projection in the metadata
collection (``_metadata``). Exact access goes to Milvus every time: ``sd[key]`` is a get by
primary key, ``len`` a count, so each call sees every write another process has finished (the
collections are read with Strong consistency).

**What is cached, and how it stays right.** A store of more than ``EXACT_MAX_KEYS`` keys keeps
nothing per key here (but spelling forms by id, a bounded number): Milvus serves its lookups
(``backend``, ``_spelling``). A smaller one keeps its keys in this process's key directory
(``_directory``), reused while no writer's counter row (``writer:<uuid>``) moved. Another
process's ``clear`` drops the key collection: a call that finds it gone forgets the store's rows
and shape here and is tried once more (``_shared``). The shape (dimension, kind, first value) is
read again before every write, at a directory's full reread, and where a value does not fit it:
another process may have filled the store again with another kind. The query projection is read
when the store opens: another process's ``fit`` changes it for processes that open it later.

**Writes.** ``stage`` validates the whole write before anything is sent, so bad input changes
nothing. ``commit`` upserts whole rows (``_rows``), in requests under 4 MB, each applied or
rejected; a server that fails between them raises ``StoreUnavailableError``, the earlier
requests' keys written. Writes are upserts by id, so repeating the update completes it: nothing
a returned call reported as written is lost (tests kill the server mid-update)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

from softdict._config import SoftDictConfig
from softdict._errors import EmptyStoreError, SoftDictError, StoreFormatError
from softdict._files import StoreFiles
from softdict._manifest import EncoderEntry
from softdict._types import Value
from softdict.encoders import EncoderIdentity
from softdict.spelling import SpellingSource
from softdict.store.base import StagedWrite, Store, StoreState
from softdict.store.copying import copy_into
from softdict.store.memory import MemoryStore
from softdict.store.milvus._client import CollectionGone, connect, schema_error, shown
from softdict.store.milvus._collection import KeyRows, check_collection_name, index_type, meta_name
from softdict.store.milvus._collector import collector_paused
from softdict.store.milvus._directory import KeyDirectory
from softdict.store.milvus._ids import rows_of_keys
from softdict.store.milvus._metadata import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MetaRows,
    StoreMetadata,
    adopted_config,
)
from softdict.store.milvus._rows import (
    OrderClock,
    append_every_value,
    check_key_sizes,
    kept_vectors,
    keys_of_rows,
    rows_of_write,
    stored_values,
    values_of_rows,
)
from softdict.store.milvus._shared import again_after_a_clear, drop_collections, holdable
from softdict.store.milvus._writers import new_writer
from softdict.store.milvus.backend import MilvusBackend, changed_during_lookup
from softdict.values.base import ValueColumn
from softdict.values.registry import check_inferred_kind, column_class, write_column

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "MilvusStore"]


class MilvusStore(Store):
    """A store in the Milvus collection ``collection`` at ``location`` (see the module
    docstring). Opening an existing one keeps its options, and ``config`` only changes this
    process's use of it (``adopted_config``)."""

    def __init__(
        self, location: str, collection: str, config: SoftDictConfig, *, create: bool = True
    ) -> None:
        check_collection_name(collection)
        index_type(config.index)  # before connect makes a Lite file (copy_to of "SQ4" left one)
        self._client = connect(location, must_exist=not create)
        location = shown(location)  # messages and descriptions show no password
        self._location = location
        self._collection = collection
        meta_rows = MetaRows(self._client, location, meta_name(collection))
        self._meta = StoreMetadata(meta_rows, location, collection, new_writer(uuid.uuid4().hex))
        self._clock = OrderClock()
        self._projection: np.ndarray | None = None
        self.made_here = not self._meta.rows.exists()  # ``abandon`` drops only such a store
        if not self.made_here:
            stored = self._meta.open()
            self._config = adopted_config(stored.config, config, collection, stored.value_kind)
            self._projection = self._meta.projection_as_stored()
        else:
            if KeyRows(self._client, location, collection, 1, config.similarity.metric).exists():
                raise schema_error(location, collection, "it has no softdict metadata")
            if not create:
                raise StoreFormatError(
                    f"there is no softdict store in the collection {collection!r} at {location}; "
                    f"build one first (SoftDict(store=..., collection=...) makes it)"
                )
            self._meta.create(config)
            self._config = config
        self._index = index_type(self._meta.manifest.config.index)
        self._rows: KeyRows | None = None
        self._open_rows()
        self._keys = KeyDirectory(self._meta, self._key_rows, self._column_of, self._count)

    # -- metadata --------------------------------------------------------------------------------

    def _refresh_manifest(self) -> None:
        self._meta.refresh_shape()
        self._open_rows()

    def _shape_as_stored(self) -> bool:
        """The store's dimension, kind and first value read again; whether they changed."""
        if changed := self._meta.refresh_shape():
            self._forget_shape()
        return changed

    def _forget_shape(self) -> None:
        """Another process cleared the store, or filled it again: its key collection, dimension
        and kind are read again at the next call (``_key_rows``)."""
        self._rows = None
        self._keys.forget()

    def _key_rows_of(self, dim: int) -> KeyRows:
        """The key collection of this store, for ``dim``-dim vectors (whether it exists or not)."""
        manifest, where = self._meta.manifest, (self._client, self._location, self._collection)
        metric = manifest.config.similarity.metric
        return KeyRows(*where, dim, metric, self._index, pairs=manifest.holds_pairs)

    def _open_rows(self) -> None:
        dim = self._meta.manifest.dim
        rows = None if dim is None else self._key_rows_of(dim)
        self._rows = rows if rows is not None and rows.exists() else None
        if self._rows is not None:
            self._rows.check_schema(self._collection)

    def recorded_encoder(self) -> EncoderIdentity | None:
        entry = self._meta.manifest.encoder
        return None if entry is None else entry.identity()

    def record_encoder(self, identity: EncoderIdentity) -> None:
        self._meta.update(encoder=EncoderEntry.of(identity))

    def abandon(self) -> None:
        with suppress(SoftDictError):  # a server that is down: the error that led here says more
            if self.made_here and not len(self):
                drop_collections(self._key_rows(), self._meta.rows)

    @contextmanager
    def _writing(self, changed: np.ndarray | None) -> Iterator[None]:
        """Around a write: every process's directory learns which keys it changes (ids; None:
        any key), from before the rows change (``StoreMetadata.writing``)."""
        try:
            with self._meta.writing(changed):
                yield
        except BaseException:
            self._keys.forget()
            raise

    # -- options and shape ------------------------------------------------------------------------

    @property
    def config(self) -> SoftDictConfig:
        return self._config

    @config.setter
    def config(self, config: SoftDictConfig) -> None:
        # The options changed now are written: others this process was opened with stay its own.
        self._meta.update_config(self._config, config)
        self._config = config

    def set_options(self, **changes: object) -> None:
        config = self._config.replace(**changes)
        self._meta.update_config(self._config, config, named=changes)
        self._config = config

    @property
    def dim(self) -> int | None:
        if self._meta.manifest.dim is None:
            self._refresh_manifest()
        return self._meta.manifest.dim

    @property
    def value_kind(self) -> str | None:
        self._shape_as_stored()  # another process may have refilled the store with another kind
        return self._kind()

    def _kind(self) -> str | None:
        return self._meta.manifest.value_kind or self._meta.manifest.config.value_kind

    @property
    def projection(self) -> np.ndarray | None:
        return self._projection  # read when the store opened (the module docstring)

    @projection.setter
    def projection(self, projection: np.ndarray | None) -> None:
        with self._writing(np.zeros(0, np.int64)):  # no key changes; kept here once written
            if projection is None:
                self._meta.update(projection=None)
                self._projection = None
            else:
                array = np.ascontiguousarray(projection, dtype=np.float32)
                self._meta.update(projection=self._meta.write_projection(array))
                self._projection = array.copy()

    def describe_index(self) -> str:
        kind, version = self._index.lower(), self._meta.manifest.format_version  # the store's
        where = f"collection {self._collection!r} at {self._location}"
        return f"milvus {'exact' if kind == 'flat' else kind} ({where}, {FORMAT_NAME} {version})"

    def index_memory_bytes(self) -> int:
        directory = self._keys.cached  # a small store's vectors, while current; else none here
        if directory is None or directory.vectors is None:
            return 0
        return int(directory.ids.nbytes + directory.vectors.nbytes)

    # -- the exact mapping ------------------------------------------------------------------------

    def _key_rows(self) -> KeyRows | None:
        if self._rows is None or self._meta.manifest.dim is None:
            self._refresh_manifest()
        elif self._rows.dim != self._meta.manifest.dim:  # refilled with keys of another dim
            self._open_rows()
        return self._rows

    @again_after_a_clear
    def __len__(self) -> int:
        return self._keys.count()

    def _count(self) -> int:
        rows = self._key_rows()
        return rows.count() if rows is not None else 0

    @contextmanager
    def reading(self, spelled: bool = True) -> Iterator[None]:
        try:
            with collector_paused(), self._keys.reading(spelled):  # (why: _collector's docstring)
                yield
        except CollectionGone:  # cleared by another process: the next lookup sees it so
            self._forget_shape()
            raise changed_during_lookup() from None

    def _found(
        self, keys: list[str], fields: list[str], *, writing: bool = False
    ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        """``rows_of_keys`` in this store's key collection; a key no store can hold (no str, or
        no valid Unicode) is absent, as from a dict."""
        held = [key for key in keys if holdable(key)]
        return rows_of_keys(self._key_rows(), held, fields, writing=writing)

    @again_after_a_clear
    def __contains__(self, key: object) -> bool:
        return holdable(key) and key in self._found([key], [])[0]  # type: ignore[list-item]

    @again_after_a_clear
    def keys(self) -> list[str]:
        directory = self._keys.listing()
        return [directory.keys[i] for i in directory.by_order.tolist()]

    @again_after_a_clear
    def get(self, key: str) -> Value:
        found, _ = self._found([key], ["value"])
        if key not in found:
            raise KeyError(key)
        try:
            column = self._column_of([found[key]["value"]["v"]], [key])
        except SoftDictError:  # refilled by another process with another
            if not self._shape_as_stored():  # kind: read as it is stored now
                raise
            column = self._column_of([found[key]["value"]["v"]], [key])
        return column.get(0)

    @again_after_a_clear
    def newest_key(self) -> str:
        directory = self._keys.listing()
        if not directory.keys:
            raise KeyError("the store is empty")
        return directory.keys[int(directory.by_order[-1])]

    # -- values -----------------------------------------------------------------------------------

    def _empty_column(self) -> ValueColumn[Any] | None:
        """A column of the store's values, empty; None before its first value is written (a
        kind fixed by ``value_kind=`` alone: the first value makes it, as in memory, and a
        vector column needs its length)."""
        if self._kind() is None:  # another process may have written the first value
            self._shape_as_stored()
        kind, exemplar = self._kind(), self._meta.exemplar()
        if kind is None or exemplar is None:
            return None
        return column_class(kind).for_first_value(*exemplar)

    def _column_of(self, values: list[object], keys: list[str]) -> ValueColumn[Any]:
        column = self._empty_column()
        if column is None:
            raise changed_during_lookup()
        column.append(column.stage(values, keys))
        return column

    # -- writing ----------------------------------------------------------------------------------

    @again_after_a_clear
    def stage(
        self,
        items: Mapping[str, object],
        vectors: Mapping[str, np.ndarray] | None = None,
        *,
        replace_vectors: bool = False,
    ) -> StagedWrite:
        keys = list(items)
        check_key_sizes(keys)
        # Checked against the store as it is now: another process may have cleared it, and
        # filled it again with another kind or dimension, which this one would corrupt.
        self._shape_as_stored()
        fixed = self._meta.manifest.config.value_kind
        fixed_kind = column_class(fixed) if fixed is not None else None
        column = write_column(self._empty_column(), fixed_kind, items)
        staged = column.stage([items[key] for key in keys], keys)
        check_inferred_kind(column, fixed_kind, items.items())
        found, free = self._found(keys, ["order"], writing=True)
        fresh, kept, missing = self._split_write(keys, found, vectors, replace_vectors)
        details: dict[str, Any] = {"found": found, "free": free}
        if fresh and not missing:
            assert vectors is not None
            projection = self._meta.manifest.projection
            shape = None if projection is None else tuple(projection["shape"])
            raw = self._checked_key_vectors(fresh, vectors, shape)
            details["prepared"] = dict(
                zip(fresh, self._meta.manifest.config.similarity.prepare_keys(raw))
            )
            details["dim"] = raw.shape[1]
        if kept:
            details["kept_vectors"] = kept_vectors(self._key_rows(), found, kept)
        details["values"] = stored_values(column, keys, items, staged)
        details["exemplar"] = {"key": keys[0], "value": details["values"][keys[0]]}
        details["kind"] = column.kind
        return StagedWrite(fresh, kept, missing, details)

    @again_after_a_clear
    def commit(self, staged: StagedWrite) -> None:
        if staged.missing:
            raise ValueError(f"{len(staged.missing)} new keys have no embedding; stage them again")
        details = staged.details
        if staged.fresh and self._key_rows() is None:
            self._create_rows(details["dim"], details["kind"], details["exemplar"])
        rows = self._key_rows()
        assert rows is not None
        written = rows_of_write(staged, self._clock)
        with self._writing(np.array([row["id"] for row in written], dtype=np.int64)):
            rows.upsert(written)

    def _create_rows(self, dim: int, kind: str, exemplar: dict[str, Any]) -> None:
        rows = self._key_rows_of(dim)
        rows.create()  # checks the schema where another process made it first
        self._meta.record_shape(dim, kind, exemplar)
        self._rows = rows

    @again_after_a_clear
    def remove(self, key: str) -> None:
        found, _ = self._found([key], [])
        if key not in found:
            raise KeyError(key)
        self._delete(found)

    def remove_keys(self, keys: list[str]) -> None:
        self._delete(self._found(keys, [])[0])  # one request for the ids, one for the delete

    def _delete(self, found: dict[str, dict[str, Any]]) -> None:
        rows = self._key_rows()
        if found and rows is not None:
            deleted = np.array([row["id"] for row in found.values()], np.int64)
            with self._writing(deleted):
                rows.delete(deleted)

    def compact(self) -> None:
        """Milvus compacts its segments on its own."""

    def clear(self) -> None:
        rows = self._key_rows()
        with self._writing(None):
            if rows is not None:
                with suppress(CollectionGone):  # another process's clear came first
                    rows.drop()
            self._rows = None
            self._meta.update(dim=None, value_kind=None, exemplar=None)

    # -- reading for attention ---------------------------------------------------------------------

    @property
    def value_column(self) -> ValueColumn[Any] | None:
        return self._empty_column()

    @property
    def backend(self) -> MilvusBackend:
        rows = self._key_rows()
        if rows is None:
            raise EmptyStoreError("the store holds no keys, so it has no index to search")
        keys = self._keys
        return MilvusBackend(
            rows, lambda: keys.listing().ids, keys.local_vectors, keys.count, keys.seen_hook()
        )

    @property
    def spelling(self) -> SpellingSource:
        return self._keys.spelling(self.backend)

    def _ids_where(self, predicate: Callable[[str], bool]) -> np.ndarray:
        return self._keys.ids_where(predicate)

    def _ids_of(self, keys: list[str]) -> np.ndarray:
        found, _ = self._found(keys, [])
        return np.array([row["id"] for row in found.values()], np.int64)

    def values_of(self, ids: np.ndarray) -> tuple[ValueColumn[Any], np.ndarray]:
        cached = self._keys.cached
        if cached is not None and cached.column is not None:
            directory = self._keys.current()  # one request: whether it is still current
            slots = directory.slots_of(ids)
            if slots is not None and directory.column is not None:
                return directory.column, slots
        noted = self._keys.take_noted_values()
        return values_of_rows(self._key_rows(), ids, self._column_of, noted)

    def present_slots(self, column: ValueColumn[Any]) -> np.ndarray:
        cached = self._keys.cached
        if cached is not None and column is cached.column:
            return np.arange(len(column))  # the directory's column holds every value
        # Every stored value joins the column (a label store's explanation lists its labels).
        return append_every_value(self._key_rows(), column)

    def keys_of(self, ids: np.ndarray) -> list[str]:
        return keys_of_rows(self._key_rows(), ids)

    def ids(self) -> np.ndarray:
        directory = self._keys.listing()
        return directory.ids[directory.by_order]

    # -- persistence ------------------------------------------------------------------------------

    def copy(self) -> MemoryStore:
        """Everything in this store, copied into a ``MemoryStore`` (``SoftDict.copy`` of a
        Milvus store is a local snapshot; ``SoftDict.copy_to`` copies to another collection)."""
        return copy_into(self, MemoryStore(self.config))

    def snapshot(self) -> tuple[StoreState, StoreFiles]:
        return self.copy().snapshot()
