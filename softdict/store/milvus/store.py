"""``MilvusStore``: a store kept in a Milvus collection, shared by every process that opens it.

Milvus holds everything (``_collection``): the keys, values and prepared vectors in one row per
key, and the options, encoder identity and query projection in the metadata collection
(``_metadata``). Exact
access goes to Milvus every time: ``sd[key]`` is a get by primary key, ``len`` a count, so each
call sees every write another process has finished (the collections are read with Strong
consistency).

**Ids.** A key's id is a 63-bit hash of its text (``key_id``), so two processes inserting the
same key write the same row, and Milvus's primary key keeps one row per key. A key whose hash
another key already holds (about once in 10^19 pairs) is refused with an InvalidValueError.

**What is cached, and how it stays right.** Lookups that need every key at once (the spelling
channel's forms, sampling the tail, masks given as predicates, iteration) read the keys into a
``Directory`` (``_directory``), kept until the store changes; in a store of at most
``EXACT_MAX_KEYS`` keys, where every lookup scores every key and blends every value, it holds
their values and vectors too.
Every process that writes keeps a counter row in the metadata (``writer:<uuid>``) and raises it
after each write; a process reuses its directory only while every counter is as it was when the
directory was read, which one small query tells. (A writer killed between its rows and its
counter leaves readers' directories stale until the next write.)

**Writes.** ``stage`` validates the whole write (values, embeddings, key lengths) before anything
is sent, so bad input changes nothing. ``commit`` then upserts whole rows, in requests under 4
MB. Milvus applies each request or rejects it; if the server fails between requests, a
``StoreUnavailableError`` is raised and the earlier requests' keys are written. Writes are
upserts by id, so repeating the update completes it. Nothing a returned call reported as
written is lost (tests kill the server mid-update).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from softdict._config import SoftDictConfig
from softdict._errors import (
    ConfigError,
    EmptyStoreError,
    InvalidValueError,
    StoreFormatError,
    ValueShapeError,
)
from softdict._files import StoreFiles
from softdict._manifest import EncoderEntry
from softdict._types import Value
from softdict.encoders import EncoderIdentity
from softdict.index.base import IndexBackend
from softdict.spelling import SpellingIndex
from softdict.store.base import (
    StagedWrite,
    Store,
    StoreState,
    check_inferred_kind,
    copy_into,
    write_column,
)
from softdict.store.memory import MemoryStore
from softdict.store.milvus._client import connect, schema_error
from softdict.store.milvus._collection import (
    MAX_VARCHAR,
    KeyRows,
    MetaRows,
    check_collection_name,
    index_type,
    meta_name,
)
from softdict.store.milvus._directory import Directory, View, read_directory
from softdict.store.milvus._metadata import (
    FIXED_OPTIONS,
    FORMAT_NAME,
    FORMAT_VERSION,
    Manifest,
    StoreMetadata,
    adopted_config,
    new_writer,
)
from softdict.store.milvus.backend import MilvusBackend, changed_during_lookup
from softdict.values.base import ValueColumn
from softdict.values.registry import column_class

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "MilvusStore", "key_id", "open_milvus_store"]

_ID_MASK = (1 << 63) - 1


def key_id(key: str) -> int:
    """The id of ``key`` in a Milvus store: non-negative, below 2^63, the same in every process."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _ID_MASK


def _json_value(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class MilvusStore(Store):
    """A store in the Milvus collection ``collection`` at ``location`` (see the module
    docstring). Opening an existing one keeps its options, and ``config`` only changes this
    process's use of it (``adopted_config``)."""

    def __init__(
        self, location: str, collection: str, config: SoftDictConfig, *, create: bool = True
    ) -> None:
        check_collection_name(collection)
        self._location = location
        self._collection = collection
        self._client = connect(location)
        self._meta = StoreMetadata(
            MetaRows(self._client, location, meta_name(collection)), location, collection
        )
        self._writer = new_writer(uuid.uuid4().hex)
        self._writes = 0
        self._last_order = 0
        self._directory: Directory | None = None
        self._view: View | None = None
        self._projection: np.ndarray | None = None
        if self._meta.rows.exists():
            self._meta.rows.check_schema(collection)
            self._manifest = self._meta.read_manifest()
            self._config = adopted_config(self._manifest.config, config, collection)
        else:
            if KeyRows(self._client, location, collection, 1, config.similarity.metric).exists():
                raise schema_error(location, collection, "it has no softdict metadata")
            if not create:
                raise StoreFormatError(
                    f"there is no softdict store in the collection {collection!r} at {location}; "
                    f"build one first (SoftDict(store=..., collection=...) makes it)"
                )
            index_type(config.index)  # ConfigError before anything is created
            self._manifest = Manifest(
                format=FORMAT_NAME, format_version=FORMAT_VERSION, config=config
            )
            self._config = config
            self._meta.rows.create()
            self._write_manifest(fresh=True)
        self._index = index_type(self._manifest.config.index)
        self._rows: KeyRows | None = None
        self._open_rows()

    # -- metadata --------------------------------------------------------------------------------

    def _write_manifest(self, *, fresh: bool = False, **changes: Any) -> None:
        """Write ``changes`` into the stored manifest (read again first, so that what other
        processes wrote since this one opened the store stays), or this one's when ``fresh``."""
        base = self._manifest if fresh else self._meta.read_manifest()
        manifest = base.model_copy(update=changes)
        self._meta.write_manifest(manifest)
        self._manifest = manifest

    def _refresh_manifest(self) -> None:
        """Another process may have made the key collection (dim, kind) or cleared it."""
        stored = self._meta.read_manifest()
        self._manifest = self._manifest.model_copy(
            update={
                "dim": stored.dim,
                "value_kind": stored.value_kind,
                "exemplar": stored.exemplar,
                "encoder": stored.encoder,
            }
        )
        self._open_rows()

    def _key_rows_of(self, dim: int) -> KeyRows:
        """The key collection of this store, for ``dim``-dim vectors (whether it exists or not)."""
        return KeyRows(
            self._client,
            self._location,
            self._collection,
            dim,
            self._manifest.config.similarity.metric,
            self._index,
        )

    def _open_rows(self) -> None:
        dim = self._manifest.dim
        if dim is None:
            self._rows = None
            return
        rows = self._key_rows_of(dim)
        self._rows = rows if rows.exists() else None
        if self._rows is not None:
            self._rows.check_schema(self._collection)

    def recorded_encoder(self) -> EncoderIdentity | None:
        entry = self._manifest.encoder
        return None if entry is None else entry.identity()

    def record_encoder(self, identity: EncoderIdentity) -> None:
        self._write_manifest(encoder=EncoderEntry.of(identity))

    def _bump(self) -> None:
        """Tell other processes (and this one's directory) that the store changed."""
        self._writes += 1
        self._directory = None
        self._meta.count_write(self._writer, self._writes)

    # -- options and shape ------------------------------------------------------------------------

    @property
    def config(self) -> SoftDictConfig:
        return self._config

    @config.setter
    def config(self, config: SoftDictConfig) -> None:
        if any(getattr(config, name) != getattr(self.config, name) for name in FIXED_OPTIONS):
            raise ValueError("index, value_kind and similarity are fixed when a store is made")
        # Only the options changed now are written: others this process was opened with stay
        # its own.
        changes = {
            name: getattr(config, name)
            for name in SoftDictConfig.model_fields
            if getattr(config, name) != getattr(self._config, name)
        }
        stored = self._meta.read_manifest().config
        self._write_manifest(config=stored.replace(**changes))
        self._config = config

    @property
    def dim(self) -> int | None:
        if self._manifest.dim is None:
            self._refresh_manifest()
        return self._manifest.dim

    @property
    def value_kind(self) -> str | None:
        if self._manifest.value_kind is None and self._manifest.config.value_kind is None:
            self._refresh_manifest()
        return self._manifest.value_kind or self._manifest.config.value_kind

    @property
    def projection(self) -> np.ndarray | None:
        # Read once, like the options: a lookup should not cost a request more for it.
        if self._projection is None and self._manifest.projection is not None:
            self._projection = self._meta.read_projection(self._manifest.projection)
        return self._projection

    @projection.setter
    def projection(self, projection: np.ndarray | None) -> None:
        self._projection = None
        if projection is None:
            self._write_manifest(projection=None)
            self._bump()
            return
        array = np.ascontiguousarray(projection, dtype=np.float32)
        self._write_manifest(projection=self._meta.write_projection(array))
        self._projection = array.copy()
        self._bump()

    def describe_index(self) -> str:
        kind = "exact" if self._index == "FLAT" else self._index.lower()
        return f"milvus {kind} (collection {self._collection!r} at {self._location})"

    def index_memory_bytes(self) -> int:
        directory = self._directory  # a small store's vectors, while current; else none here
        if directory is None or directory.vectors is None:
            return 0
        return int(directory.ids.nbytes + directory.vectors.nbytes)

    # -- the exact mapping ------------------------------------------------------------------------

    def _key_rows(self) -> KeyRows | None:
        if self._rows is None or self._manifest.dim is None:
            self._refresh_manifest()
        return self._rows

    def __len__(self) -> int:
        view = self._view
        if view is not None:
            small = self._directory is not None and self._directory.vectors is not None
            if view.directory is None and small:
                self._current_directory()  # one request checks it, and it serves the lookup
            if view.directory is not None:
                return len(view.directory.ids)
            if view.count is None:
                view.count = self._count()
            return view.count
        return self._count()

    def _count(self) -> int:
        rows = self._key_rows()
        return rows.count() if rows is not None else 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One lookup reads one view: the key directory is checked against the writers'
        counters once (not at every call), and the count is taken once."""
        if self._view is not None:
            yield
            return
        self._view = View()
        try:
            yield
        finally:
            self._view = None

    def _found(
        self, keys: list[str], fields: list[str], *, writing: bool = False
    ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        """The rows of ``keys`` that exist (key -> row with ``fields``), and for the others the
        id a new row would take. ``writing``: InvalidValueError for a key whose id another key
        holds (otherwise that key is simply not stored)."""
        rows = self._key_rows()
        wanted = {key: key_id(key) for key in dict.fromkeys(keys)}
        held: dict[int, dict[str, Any]] = {}
        if rows is not None and wanted:
            ids = np.fromiter(wanted.values(), np.int64, len(wanted))
            held = {row["id"]: row for row in rows.get(ids, ["key", *fields])}
        found: dict[str, dict[str, Any]] = {}
        free: dict[str, int] = {}
        for key, id_ in wanted.items():
            row = held.get(id_)
            if row is None:
                free[key] = id_
            elif row["key"] == key:
                found[key] = row
            elif writing:
                # Two keys' 63-bit hashes agree: about once in 10^19 pairs. Refused rather than
                # stored under another id, which a delete of the other key would hide.
                raise InvalidValueError(
                    f"the keys {key!r} and {row['key']!r} have the same id in a Milvus store "
                    f"(a hash collision); store this key with a small change, such as a space"
                )
        return found, free

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._found([key], [])[0]

    def keys(self) -> list[str]:
        directory = self._current_directory()
        return [directory.keys[i] for i in directory.by_order.tolist()]

    def get(self, key: str) -> Value:
        found, _ = self._found([key], ["value"])
        if key not in found:
            raise KeyError(key)
        column = self._column_of([found[key]["value"]["v"]], [key])
        return column.get(0)

    def newest_key(self) -> str:
        directory = self._current_directory()
        if not directory.keys:
            raise KeyError("the store is empty")
        return directory.keys[int(directory.by_order[-1])]

    # -- values -----------------------------------------------------------------------------------

    def _empty_column(self) -> ValueColumn[Any] | None:
        kind = self.value_kind
        exemplar = self._manifest.exemplar
        if kind is None:
            return None
        if exemplar is not None:
            column = column_class(kind).for_first_value(exemplar["key"], exemplar["value"])
        else:
            column = column_class(kind)()
        return column

    def _column_of(self, values: list[object], keys: list[str]) -> ValueColumn[Any]:
        column = self._empty_column()
        if column is None:
            raise changed_during_lookup()
        column.append(column.stage(values, keys))
        return column

    # -- writing ----------------------------------------------------------------------------------

    def stage(
        self,
        items: Mapping[str, object],
        vectors: Mapping[str, np.ndarray] | None = None,
        *,
        replace_vectors: bool = False,
    ) -> StagedWrite:
        keys = list(items)
        for key in keys:
            if len(key.encode("utf-8")) > MAX_VARCHAR:
                raise InvalidValueError(
                    f"the key {key[:40]!r}... is {len(key.encode('utf-8')):,} bytes of UTF-8; a "
                    f"Milvus store keeps keys of up to {MAX_VARCHAR:,} bytes"
                )
        fixed = self._manifest.config.value_kind
        fixed_kind = column_class(fixed) if fixed else None
        column = write_column(self._empty_column(), fixed_kind, items)
        staged = column.stage([items[key] for key in keys], keys)
        check_inferred_kind(column, fixed_kind, items.items())
        found, free = self._found(keys, ["order"], writing=True)
        fresh, kept, missing = self._split_write(keys, found, vectors, replace_vectors)
        details: dict[str, Any] = {"found": found, "free": free}
        if fresh and not missing:
            assert vectors is not None
            projection = self._manifest.projection
            shape = None if projection is None else tuple(projection["shape"])
            raw = self._checked_key_vectors(fresh, vectors, shape)
            details["prepared"] = dict(
                zip(fresh, self._manifest.config.similarity.prepare_keys(raw))
            )
            details["dim"] = raw.shape[1]
        if kept:
            rows = self._key_rows()
            assert rows is not None
            ids = np.array([found[key]["id"] for key in kept], np.int64)
            held = {row["id"]: row["vector"] for row in rows.get(ids, ["vector"])}
            details["kept_vectors"] = {key: held.get(found[key]["id"]) for key in kept}
        # The values as Milvus will hold them: as a column of the store's kind gives them back.
        echo = type(column).for_first_value(keys[0], items[keys[0]])
        echo.append(staged)
        details["values"] = {key: _json_value(echo.get(i)) for i, key in enumerate(keys)}
        details["exemplar"] = {"key": keys[0], "value": details["values"][keys[0]]}
        details["kind"] = column.kind
        return StagedWrite(fresh, kept, missing, details)

    def _next_orders(self, n: int) -> np.ndarray:
        """Orders for ``n`` new keys: microseconds since the epoch, increasing in this process."""
        start = max(time.time_ns() // 1000, self._last_order + 1)
        self._last_order = start + n - 1
        return np.arange(start, start + n, dtype=np.int64)

    def commit(self, staged: StagedWrite) -> None:
        if staged.missing:
            raise ValueError(f"{len(staged.missing)} new keys have no embedding; stage them again")
        details = staged.details
        found, free, values = details["found"], details["free"], details["values"]
        if staged.fresh and self._key_rows() is None:
            self._create_rows(details["dim"], details["kind"], details["exemplar"])
        rows = self._key_rows()
        assert rows is not None
        orders = iter(self._next_orders(sum(key not in found for key in staged.fresh)).tolist())
        written = []
        for key in staged.fresh:
            row = found.get(key)
            written.append(
                {
                    "id": row["id"] if row else free[key],
                    "key": key,
                    "order": row["order"] if row else next(orders),
                    "value": {"v": values[key]},
                    "vector": details["prepared"][key],
                }
            )
        for key in staged.kept:
            vector = details["kept_vectors"][key]
            if vector is None:
                raise changed_during_lookup()
            row = found[key]
            written.append(
                {
                    "id": row["id"],
                    "key": key,
                    "order": row["order"],
                    "value": {"v": values[key]},
                    "vector": vector,
                }
            )
        try:
            rows.upsert(written)
        finally:
            self._bump()

    def _create_rows(self, dim: int, kind: str, exemplar: dict[str, Any]) -> None:
        rows = self._key_rows_of(dim)
        rows.create()  # checks the schema where another process made it first
        stored = self._meta.read_manifest()
        if stored.dim is not None and stored.dim != dim:
            raise ValueShapeError(
                f"the store's keys are {stored.dim}-dim embeddings (written by another process), "
                f"and these are {dim}-dim"
            )
        self._write_manifest(
            dim=dim, value_kind=stored.value_kind or kind, exemplar=stored.exemplar or exemplar
        )
        self._rows = rows

    def remove(self, key: str) -> None:
        found, _ = self._found([key], [])
        if key not in found:
            raise KeyError(key)
        rows = self._key_rows()
        assert rows is not None
        try:
            rows.delete(np.array([found[key]["id"]], np.int64))
        finally:
            self._bump()

    def compact(self) -> None:
        """Milvus compacts its segments on its own."""

    def clear(self) -> None:
        rows = self._key_rows()
        try:
            if rows is not None:
                rows.drop()
            self._rows = None
            self._write_manifest(dim=None, value_kind=None, exemplar=None)
        finally:
            self._bump()

    # -- reading for attention ---------------------------------------------------------------------

    def _current_directory(self) -> Directory:
        view = self._view
        if view is not None and view.directory is not None:
            return view.directory
        directory = self._checked_directory()
        if view is not None:
            view.directory = directory
        return directory

    def _checked_directory(self) -> Directory:
        generation = self._meta.writers()
        directory = self._directory
        if directory is None or directory.generation != generation:
            directory = read_directory(self._key_rows(), generation, self._column_of)
            self._directory = directory
        return directory

    def _local_vectors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The ids and vectors of a small store, as read now (None for a large one)."""
        directory = self._current_directory()
        if directory.vectors is None:
            return None
        return directory.ids, directory.vectors

    @property
    def value_column(self) -> ValueColumn[Any] | None:
        return self._empty_column()

    @property
    def backend(self) -> IndexBackend:
        rows = self._key_rows()
        if rows is None:
            raise EmptyStoreError("the store holds no keys, so it has no index to search")
        return MilvusBackend(rows, lambda: self._current_directory().ids, self._local_vectors)

    @property
    def spelling(self) -> SpellingIndex:
        return self._current_directory().spelling_index()

    def _ids_where(self, predicate: Callable[[str], bool]) -> np.ndarray:
        directory = self._current_directory()
        return directory.ids[[i for i, key in enumerate(directory.keys) if predicate(key)]]

    def _ids_of(self, keys: list[str]) -> np.ndarray:
        found, _ = self._found(keys, [])
        return np.array([row["id"] for row in found.values()], np.int64)

    def values_of(self, ids: np.ndarray) -> tuple[ValueColumn[Any], np.ndarray]:
        if self._directory is not None and self._directory.column is not None:
            directory = self._current_directory()  # one request: whether it is still current
            slots = directory.slots_of(ids)
            if slots is not None and directory.column is not None:
                return directory.column, slots
        wanted = np.unique(ids[ids >= 0])
        rows = self._key_rows()
        found = {} if rows is None else {row["id"]: row for row in rows.get(wanted, ["value"])}
        if len(found) < len(wanted):
            raise changed_during_lookup()
        # The keys only name a value in an error message, and stored values passed the checks.
        column = self._column_of(
            [found[i]["value"]["v"] for i in wanted.tolist()], [str(i) for i in wanted.tolist()]
        )
        slots = np.searchsorted(wanted, np.maximum(ids, 0)).clip(0, max(len(wanted) - 1, 0))
        return column, slots

    def present_slots(self, column: ValueColumn[Any]) -> np.ndarray:
        if self._directory is not None and column is self._directory.column:
            return np.arange(len(column))  # the directory's column holds every value
        # Every stored value joins the column (a label store's explanation lists its labels).
        rows = self._key_rows()
        start = len(column)
        if rows is not None:
            for batch in rows.scan(["key", "value"]):
                values = [row["value"]["v"] for row in batch]
                column.append(column.stage(values, [row["key"] for row in batch]))
        return np.arange(start, len(column))

    def keys_of(self, ids: np.ndarray) -> list[str]:
        rows = self._key_rows()
        found = {} if rows is None else {row["id"]: row["key"] for row in rows.get(ids, ["key"])}
        try:
            return [found[i] for i in np.asarray(ids).tolist()]
        except KeyError:
            raise changed_during_lookup() from None

    def ids(self) -> np.ndarray:
        directory = self._current_directory()
        return directory.ids[directory.by_order]

    # -- persistence ------------------------------------------------------------------------------

    def to_memory(self) -> MemoryStore:
        """Everything in this store, copied into a ``MemoryStore``."""
        return copy_into(self, MemoryStore(self.config))

    def copy(self) -> Store:
        """An in-memory copy (``SoftDict.copy`` of a Milvus store is a local snapshot; use
        ``SoftDict.copy_to`` for another collection)."""
        return self.to_memory()

    def snapshot(self) -> tuple[StoreState, StoreFiles]:
        return self.to_memory().snapshot()


def open_milvus_store(location: str, config: SoftDictConfig, **options: Any) -> MilvusStore:
    """``store="milvus:LOCATION"`` with the store options ``collection`` (required) and
    ``create`` (False: only an existing store)."""
    unknown = sorted(set(options) - {"collection", "create"})
    if unknown:
        raise ConfigError(
            f"a Milvus store takes the options collection= and create=, not {unknown}"
        )
    collection = check_collection_name(options.get("collection"))
    return MilvusStore(location, collection, config, create=bool(options.get("create", True)))
