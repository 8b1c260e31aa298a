"""A Milvus store's metadata, in its metadata collection (``MetaRows``): the manifest row (the
format, the options, the keys' dimension and value kind, the encoder's identity, the query
projection's shape and checksum), the query projection itself as base64 chunks (a VARCHAR holds
at most 65,535 bytes), and one counter row per process that writes (``writer:<uuid>``), which
tells other processes' key directories that the store changed (``softdict.store.milvus.store``;
what the counters hold and tell: ``_writers``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from softdict._config import CombinationName, SoftDictConfig, shown_option
from softdict._errors import ConfigError, StoreFormatError, ValueShapeError
from softdict._manifest import EncoderEntry, blank_kind_as_unfixed, refuse_newer_combination
from softdict.store.milvus._client import schema_error
from softdict.store.milvus._collection import MAX_VARCHAR, CollectionRows
from softdict.store.milvus._writers import WRITER_PREFIX, counter_of

__all__ = [
    "CHANGES_KEPT",
    "FIXED_OPTIONS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Manifest",
    "MetaRows",
    "StoreMetadata",
    "adopted_config",
]

FORMAT_NAME = "softdict-milvus"
# 2: the config names its combination of meaning and spelling (``combination``); a format 1
# store answered with the hand-set rule, and is read so. 3: the key collection holds each key's
# 3-grams (``_collection``), which serve a large store's spelling candidates; the collection of
# an older store has none, and such a store keeps its key directory (``_directory``). 4: that
# field also holds each key's first character paired with each of its characters (``_grams``),
# which propose the keys a mark could lift; a format 3 store's rows lack them, and its lookups
# do not search them (a key only initials point at is then not proposed). 5: the keys' shape
# (dim, value kind, first value) is read from a row of its own (``_SHAPE``), and a long first
# value from another: softdict before it read the manifest's copy alone, which a write of the
# options can make stale, so it refuses a format 5 store. A format 4 store becomes format 5 at
# its first shape write (a first insert, a clear); an older one keeps its shape in the manifest.
FORMAT_VERSION = 5
PAIRS_FORMAT = 4
_MANIFEST = "manifest"
_PROJECTION = "projection:"
# The keys' shape (dim, value kind, first value), a row apart from the manifest's options: an
# option set by one handle, read and written back whole, put back dim None over the first
# insert another handle made meanwhile, and every handle opened after saw no keys (a probe).
# The manifest keeps a copy, which is all a store of format 4 or before has.
_SHAPE = "shape"
SHAPE_FIELDS = ("dim", "value_kind", "exemplar")
# A manifest row that is not there is read again this many times, a little later each (2.5 s in
# all): Milvus Lite's upsert deletes the row a moment before it writes it again (a probe saw
# 94-184 false "lacks its manifest" errors in 600 inserts while another handle set options), and
# a process that makes a store writes the row after its collection (up to 1.2 s apart on a cold
# Lite start, a probe: another process opening the store between them was told it is damaged).
_MISSING_ROW_TRIES = 8
_EXEMPLAR = "exemplar:"
# A store's first value (the exemplar its value column is made from: a vector's length) whose
# JSON is longer than this goes in a row of its own, named by its checksum: the manifest row is
# a VARCHAR of at most 65,535 bytes on a cluster (Milvus Lite does not hold it to that), and a
# vector of 4,000 numbers took 70 KB of it.
_INLINE_EXEMPLAR_BYTES = 8192
# Characters of the first key kept beside it: the key only names the value in messages.
_EXEMPLAR_KEY_CHARS = 200
# Base64 characters per projection row (a VARCHAR holds 65,535 bytes).
_CHUNK = 60_000
# Options a store keeps from its creation (they decide how its rows were written).
FIXED_OPTIONS = ("similarity", "index", "value_kind")
# Ids kept in a writer's log of changes (about 20 bytes each in its row of at most 65,535).
CHANGES_KEPT = 2048
# A writer's counter row is deleted by the next process to write after it has been idle this
# long (an hour: far beyond the clocks of two machines drifting apart, and a reader that last
# looked before then reads every key once more), or a day where its last write is still open
# (a writer killed in the middle of it; a live one writes for no day long).
WRITER_IDLE_SECONDS = 3600
OPEN_WRITE_SECONDS = 86400


class MetaRows(CollectionRows):
    """Named text rows (see the module docstring)."""

    def create(self) -> None:
        from pymilvus import DataType

        schema = self.client.create_schema(auto_id=False, description="softdict store metadata")
        schema.add_field("name", DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_VARCHAR)
        # Milvus requires a vector field in every collection; this one is never searched.
        schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)
        params = self.client.prepare_index_params()
        params.add_index("unused", index_type="FLAT", metric_type="L2")
        self._create(schema, params, "create the metadata collection")

    def check_schema(self, collection: str) -> None:
        with self.calling("describe the collection"):
            described = self.client.describe_collection(self.name)
        names = {field["name"] for field in described.get("fields", [])}
        if names != {"name", "text", "unused"}:
            raise schema_error(self.location, collection, f"{self.name!r} has other fields")

    def read(self, names: Sequence[str]) -> dict[str, str]:
        if not names:
            return {}
        with self.calling("read metadata"):
            rows = self.client.get(self.name, ids=list(names), output_fields=["text"])
        return {row["name"]: row["text"] for row in rows}

    def read_prefix(self, prefix: str) -> dict[str, str]:
        with self.calling("read metadata"):
            rows = self.client.query(
                self.name, filter=f"name like {json.dumps(prefix + '%')}", output_fields=["text"]
            )
        return {row["name"]: row["text"] for row in rows}

    def write(self, texts: dict[str, str]) -> None:
        rows = [{"name": name, "text": text, "unused": [0.0, 0.0]} for name, text in texts.items()]
        for start in range(0, len(rows), 256):
            with self.calling("write metadata"):
                self.client.upsert(self.name, rows[start : start + 256])

    def delete(self, names: Sequence[str]) -> None:
        if names:
            with self.calling("delete metadata"):
                self.client.delete(self.name, ids=list(names))


class Manifest(BaseModel):
    """The metadata row ``manifest``: what a store folder's manifest.json holds."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    format: str
    format_version: int
    config: SoftDictConfig
    dim: int | None = None
    value_kind: str | None = None
    # The first value ever stored: a column made for it checks new values (a vector's length).
    exemplar: dict[str, Any] | None = None
    encoder: EncoderEntry | None = None
    projection: dict[str, Any] | None = None  # {"shape": [d, d], "chunks": n, "sha256": ...}

    @property
    def holds_pairs(self) -> bool:
        """Whether the store's key rows hold their pair features (``_grams``): from format 4."""
        return self.format_version >= PAIRS_FORMAT


class StoreMetadata:
    """The metadata rows of the store in ``collection`` at ``location``, this process's copy of
    its manifest (``manifest``: set by ``open`` or ``create``), and its writer's counter."""

    manifest: Manifest

    def __init__(self, rows: MetaRows, location: str, collection: str, writer: str) -> None:
        self.rows = rows
        self._location = location
        self._collection = collection
        self._writer = writer
        self._writes = 0
        self._log: list[tuple[int, list[int]]] = []  # (write, the ids it changed), oldest first
        self._exemplars: dict[str, object] = {}  # first values kept in rows, by their row

    def open(self) -> Manifest:
        """This process's copy of the stored manifest (the store exists)."""
        self.rows.check_schema(self._collection)
        self.manifest = self.read_manifest()
        return self.manifest

    def create(self, config: SoftDictConfig) -> None:
        """Make the metadata collection of a new store, and its manifest."""
        self.manifest = Manifest(format=FORMAT_NAME, format_version=FORMAT_VERSION, config=config)
        self.rows.create()
        self.write_manifest(self.manifest)

    def update(self, **changes: Any) -> None:
        """Write ``changes`` into the stored manifest, read again first, so that what other
        processes wrote since this one opened the store stays; this copy becomes it. A change
        of the shape (all three of ``SHAPE_FIELDS``) is written to its own row first (format 5:
        ``FORMAT_VERSION``)."""
        manifest = self.read_manifest().model_copy(update=changes)
        if manifest.format_version >= PAIRS_FORMAT and any(
            name in changes for name in SHAPE_FIELDS
        ):
            manifest = manifest.model_copy(update={"format_version": FORMAT_VERSION})
            shape = {name: getattr(manifest, name) for name in SHAPE_FIELDS}
            self.rows.write({_SHAPE: json.dumps(shape)})
        self.write_manifest(manifest)
        self.manifest = manifest

    def record_shape(self, dim: int, kind: str, exemplar: dict[str, Any]) -> None:
        """Record the shape of the store's first keys (their ``dim``, value ``kind`` and first
        value, ``{"key", "value"}``), where another process has not recorded one first: its
        kind and first value stay, and another dimension is refused (ValueShapeError)."""
        stored = self.read_manifest()
        if stored.dim is not None and stored.dim != dim:
            raise ValueShapeError(
                f"the store's keys are {stored.dim}-dim embeddings (written by another process), "
                f"and these are {dim}-dim"
            )
        if stored.exemplar is None:
            exemplar = self.exemplar_entry(exemplar["key"], exemplar["value"])
        self.update(
            dim=dim, value_kind=stored.value_kind or kind, exemplar=stored.exemplar or exemplar
        )

    def refresh_shape(self) -> bool:
        """Another process may have made the key collection (dim, kind) or cleared it, or
        recorded the encoder: this copy takes those from the stored manifest. Whether the
        shape (dim, kind, first value) changed."""
        stored = self.read_manifest()
        shape = {name: getattr(stored, name) for name in SHAPE_FIELDS}
        changed = any(getattr(self.manifest, name) != value for name, value in shape.items())
        self.manifest = self.manifest.model_copy(update={**shape, "encoder": stored.encoder})
        return changed

    def update_config(
        self, before: SoftDictConfig, after: SoftDictConfig, named: Iterable[str] = ()
    ) -> None:
        """Write the options that changed from ``before`` to ``after``, and those ``named`` (set
        by name, perhaps to what this process already used), into the stored config; the others
        stay as stored (this process may use its own, ``adopted_config``)."""
        if any(getattr(after, name) != getattr(before, name) for name in FIXED_OPTIONS):
            raise ValueError("index, value_kind and similarity are fixed when a store is made")
        changes = {
            name: getattr(after, name)
            for name in SoftDictConfig.model_fields
            if getattr(after, name) != getattr(before, name) or name in named
        }
        self.update(config=self.read_manifest().config.replace(**changes))

    @contextmanager
    def writing(self, changed: np.ndarray | None) -> Iterator[None]:
        """Around a write that changes the keys of ``changed`` ids (None: unknown, or every
        key): raise this process's writer counter and log the ids, marked open, before the rows
        change, and close the write after, whether the rows were written or not. A reader
        fetches an open write's ids again at every lookup (``changed_since``), so a writer
        killed in between leaves no reader answering with what it deleted or overwrote."""
        if not self._writes:  # this process's first write (a writer may delete rows; a
            self._forget_idle_writers()  # reader, perhaps with read-only rights, never does)
        self._writes += 1
        if changed is None or len(changed) > CHANGES_KEPT:
            self._log = []  # a gap: a reader from before it reads every key again
        else:
            self._log.append((self._writes, [int(i) for i in changed]))
            while sum(len(ids) for _, ids in self._log) > CHANGES_KEPT:
                self._log.pop(0)
        self._write_counter(open_write=self._writes)
        try:
            yield
        finally:
            self._write_counter(open_write=None)

    def _write_counter(self, open_write: int | None) -> None:
        record = {"writes": self._writes, "changed": self._log, "open": open_write}
        record["time"] = round(time.time())  # when, for ``_forget_idle_writers``
        self.rows.write({self._writer: json.dumps(record, separators=(",", ":"))})

    def _forget_idle_writers(self) -> None:
        """Delete the counter rows of writers idle for ``WRITER_IDLE_SECONDS`` (a write left
        open: ``OPEN_WRITE_SECONDS``). Every process that ever wrote kept its row, and every
        lookup reads them all: 30 short-lived writers made 1.2 MB a lookup, 1.1 -> 3.3 ms (a
        probe), and a few thousand would pass gRPC's 64 MB. A reader that saw a row deleted
        reads every key again once (``changed_since``), and a writer's next write writes its row
        again: nothing is missed. Rows without a time (an older softdict's) are kept."""
        now, idle = time.time(), []
        for name, text in self.writers().items():
            counter = counter_of(text)
            if name == self._writer or counter is None or counter.time is None:
                continue
            limit = WRITER_IDLE_SECONDS if counter.open is None else OPEN_WRITE_SECONDS
            if now - counter.time > limit:
                idle.append(name)
        self.rows.delete(idle)

    def read_manifest(self) -> Manifest:
        """The stored manifest, checked; a format 1 store's config reads as the hand-set rule."""
        where = f"the Milvus collection {self._collection!r} at {self._location}"
        for attempt in range(_MISSING_ROW_TRIES):
            rows = self.rows.read([_MANIFEST, _SHAPE])
            if _MANIFEST in rows:
                break
            if attempt + 1 == _MISSING_ROW_TRIES:
                raise StoreFormatError(f"{where} lacks its softdict manifest (metadata row)")
            time.sleep(0.02 * 2**attempt)
        try:
            parsed = json.loads(rows[_MANIFEST])
            refuse_newer_combination(parsed, where)
            blank_kind_as_unfixed(parsed)
            if _SHAPE in rows:  # the shape's own row, where it has one (``_SHAPE``)
                parsed.update(json.loads(rows[_SHAPE]))
            manifest = Manifest.model_validate(parsed)
        except StoreFormatError:  # intact, but from a newer softdict: not to be made again
            raise
        except (ValueError, TypeError, ValidationError, RecursionError) as exc:
            raise StoreFormatError(
                f"{where} has a damaged manifest ({str(exc)[:200]}); copy what it holds elsewhere "
                f"and make the store again"
            ) from None
        if manifest.format != FORMAT_NAME:
            raise schema_error(self._location, self._collection, "its metadata is not softdict's")
        if manifest.format_version > FORMAT_VERSION:
            raise StoreFormatError(
                f"{where} is in softdict-milvus format {manifest.format_version}, newer than "
                f"this softdict reads ({FORMAT_VERSION}); upgrade softdict"
            )
        if manifest.format_version < 2 and "combination" not in parsed["config"]:
            rule = manifest.config.replace(combination=CombinationName.RULE_1)
            manifest = manifest.model_copy(update={"config": rule})
        return manifest

    def write_manifest(self, manifest: Manifest) -> None:
        self.rows.write({_MANIFEST: json.dumps(manifest.model_dump(mode="json"))})

    def write_projection(self, array: np.ndarray) -> dict[str, Any]:
        """Write the chunks of the float32 ``array``; the manifest's entry for them (written
        last, so a reader finds chunks that match its checksum, or fails it)."""
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        text = base64.b64encode(data).decode("ascii")
        chunks = [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)]
        self.rows.write({f"{_PROJECTION}{i}": chunk for i, chunk in enumerate(chunks)})
        return {
            "shape": list(array.shape),
            "chunks": len(chunks),
            "sha256": hashlib.sha256(data).hexdigest(),
        }

    def projection_as_stored(self) -> np.ndarray | None:
        """The stored query projection (None: none), read again once where another process
        was writing it meanwhile (its rows are written in place: the checksum tells)."""
        for last in (False, True):
            info = self.manifest.projection
            try:
                return None if info is None else self.read_projection(info)
            except StoreFormatError:
                if last:
                    raise
                self.manifest = self.manifest.model_copy(
                    update={"projection": self.read_manifest().projection}
                )
        return None  # not reached

    def read_projection(self, info: dict[str, Any]) -> np.ndarray:
        names = [f"{_PROJECTION}{i}" for i in range(int(info["chunks"]))]
        texts = self.rows.read(names)
        data = base64.b64decode("".join(texts.get(name, "") for name in names))
        if hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise StoreFormatError(
                f"the query projection of the Milvus collection {self._collection!r} fails its "
                f"checksum (another process may be writing it); open the store again"
            )
        return np.frombuffer(data, dtype=np.float32).reshape(info["shape"]).copy()

    def exemplar_entry(self, key: str, value: object) -> dict[str, Any]:
        """The manifest's entry for the store's first value (for ``key``): the value itself
        where its JSON is short, else the name of a row written for it now. A row is never
        rewritten with other text (its name is its checksum), so a process that made the key
        collection at the same moment cannot leave the manifest naming a row that is not its.
        Rows of earlier first values (before a clear) stay: a few, of at most 64 KB each."""
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        key = key[:_EXEMPLAR_KEY_CHARS]
        if len(text.encode("utf-8")) <= _INLINE_EXEMPLAR_BYTES:
            return {"key": key, "value": value}
        row = _EXEMPLAR + hashlib.sha256(text.encode("utf-8")).hexdigest()
        self.rows.write({row: text})
        return {"key": key, "row": row}

    def exemplar(self) -> tuple[str, object] | None:
        """The store's first key (shortened) and value, from the manifest or its row; None
        before the first value."""
        entry = self.manifest.exemplar
        if entry is None:
            return None
        if "row" not in entry:
            return entry["key"], entry["value"]
        row = entry["row"]
        if row not in self._exemplars:
            text = self.rows.read([row]).get(row, "")
            if _EXEMPLAR + hashlib.sha256(text.encode("utf-8")).hexdigest() != row:
                raise StoreFormatError(
                    f"the first value of the Milvus collection {self._collection!r} (its row "
                    f"{row[:24]}...) is missing or damaged; copy what the store holds elsewhere "
                    f"and make it again"
                )
            self._exemplars[row] = json.loads(text)
        return entry["key"], self._exemplars[row]

    def writers(self) -> dict[str, str]:
        """Every writer's counter: equal between two reads only if no write came between."""
        return self.rows.read_prefix(WRITER_PREFIX)


def adopted_config(
    stored: SoftDictConfig, given: SoftDictConfig, collection: str, held_kind: str | None = None
) -> SoftDictConfig:
    """The options of an existing store opened with ``given``: its own, and those the caller
    named (``SoftDictConfig.naming``: ``given.model_fields_set``) at another value, for this
    process. ``FIXED_OPTIONS`` decide how the rows were written: one named must be the store's
    (ConfigError). A store whose value kind was inferred (option None) holds ``held_kind``:
    naming that kind is no conflict."""
    changed = {
        name: getattr(given, name)
        for name in given.model_fields_set
        if getattr(given, name) != getattr(stored, name)
    }
    if (
        stored.value_kind is None
        and held_kind is not None
        and changed.get("value_kind") == held_kind
    ):
        del changed["value_kind"]
    conflicts = [
        f"{name}={shown_option(changed[name])} (it has {shown_option(getattr(stored, name))})"
        for name in FIXED_OPTIONS
        if name in changed
    ]
    if conflicts:
        raise ConfigError(
            f"the collection {collection!r} holds a store made with other options: "
            f"{', '.join(conflicts)}; open it without them (a store keeps them for good)"
        )
    return stored.replace(**changed)
