"""The store protocol: everything one SoftDict holds, behind one interface.

A store holds the options (config), the keys and the int64 id each key's vector has, the value
column, the index backend, the keys' spelling forms (``softdict.spelling``), and the query
projection learned by ``fit``. ``SoftDict`` is a façade
over one store and one encoder: it parses arguments, encodes text, holds the lock, and asks the
store. Counting, iterating, getting, writing, deleting and searching all go through this
interface, and a lookup asks only for the values of the keys it attends to (and, in a label
store, which labels are stored), so the keys, values and vectors need not be in this process's
memory: a store backed by a vector database is a second implementation (one package and one
registration in ``softdict.store``). ``snapshot`` is the exception: it returns everything, for
saving to a folder.

Writes have two steps so that a failed write changes nothing: ``stage`` validates everything
against the store as it is and returns a ``StagedWrite`` (or raises); ``commit`` applies it and
cannot fail on bad input. Commit a staged write in the same critical section as its ``stage``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from softdict._arguments import checked_embeddings, projected_queries, within_score_range
from softdict._config import SoftDictConfig
from softdict._errors import (
    ConfigError,
    EmptyStoreError,
    KeyTypeError,
    StoreFormatError,
    ValueShapeError,
    short_repr,
)
from softdict._files import StoreFiles
from softdict._types import Mask, Value
from softdict.encoders.base import EncoderIdentity
from softdict.index.base import Allow, IndexBackend
from softdict.spelling import SpellingSource
from softdict.values.base import ValueColumn

__all__ = [
    "StagedWrite",
    "Store",
    "StoreState",
    "check_projection_fits",
    "dump_files",
]


@dataclass
class StagedWrite:
    """A validated write, ready to commit.

    Attributes:
        fresh: keys that get a new id and vector: new keys, or (``replace_vectors``) keys whose
            embedding is replaced.
        kept: existing keys whose value changes and whose vector stays.
        missing: the fresh keys that have no vector yet: encode them, then stage again.
        details: what the store needs to commit (its own business).
    """

    fresh: list[str]
    kept: list[str]
    missing: list[str]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreState:
    """A store as persistence saves it, less the files of its parts (values, index).

    ``keys`` are in iteration order; ``ids[i]`` is the id of ``keys[i]``, and the values in the
    parts' files are aligned with them. ``next_id`` is the id the next new key gets.
    """

    config: SoftDictConfig
    keys: list[str]
    ids: np.ndarray
    next_id: int
    dim: int | None
    value_kind: str | None
    index_meta: dict[str, Any] | None
    projection: np.ndarray | None


class Store(ABC):
    """What a SoftDict holds. See the module docstring."""

    # -- options and shape ----------------------------------------------------------------------

    @property
    @abstractmethod
    def config(self) -> SoftDictConfig:
        """The options in force."""

    @config.setter
    @abstractmethod
    def config(self, config: SoftDictConfig) -> None: ...

    def set_options(self, **changes: object) -> None:
        """Set options by name (ConfigError for a bad value). A store shared by processes
        writes exactly these for all of them, even at the value this one already used."""
        self.config = self.config.replace(**changes)

    @property
    @abstractmethod
    def dim(self) -> int | None:
        """The key embeddings' dimension; None while the store has never held a key."""

    @property
    @abstractmethod
    def value_kind(self) -> str | None:
        """The kind of value held, or None while empty and not fixed by ``value_kind=``."""

    @property
    @abstractmethod
    def projection(self) -> np.ndarray | None:
        """W_q, learned by ``fit``: queries become W_q·q before scoring. None is the identity."""

    @projection.setter
    @abstractmethod
    def projection(self, projection: np.ndarray | None) -> None: ...

    @abstractmethod
    def describe_index(self) -> str:
        """Which index backend holds the keys now, e.g. "auto: exact"."""

    @abstractmethod
    def index_memory_bytes(self) -> int:
        """Bytes this process holds for the key vectors and their ids."""

    # -- the exact mapping ---------------------------------------------------------------------

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @abstractmethod
    def keys(self) -> list[str]:
        """Every key, in insertion order (a snapshot)."""

    @abstractmethod
    def get(self, key: str) -> Value:
        """The value of ``key``; ``KeyError(key)`` if it is absent."""

    @abstractmethod
    def newest_key(self) -> str:
        """The most recently inserted key; KeyError if the store is empty."""

    # -- writing -------------------------------------------------------------------------------

    @abstractmethod
    def stage(
        self,
        items: Mapping[str, object],
        vectors: Mapping[str, np.ndarray] | None = None,
        *,
        replace_vectors: bool = False,
    ) -> StagedWrite:
        """Validate a write of ``items`` (key -> value) against the store as it is now.

        New keys need a raw embedding in ``vectors``; those without one are listed in
        ``missing``. With ``replace_vectors`` every key gets the embedding in ``vectors``, and
        existing keys move to it; otherwise existing keys keep theirs and only the value changes.

        Raises:
            ValueKindError, ValueShapeError, InvalidValueError: a value or embedding is bad.
            ConfigError: the index cannot be built for these embeddings.
        """

    @abstractmethod
    def commit(self, staged: StagedWrite) -> None:
        """Apply a staged write whose ``missing`` is empty."""

    @abstractmethod
    def remove(self, key: str) -> None:
        """Delete ``key``; ``KeyError(key)`` if it is absent."""

    def remove_keys(self, keys: list[str]) -> None:
        """Delete those of ``keys`` that are here (a copy that failed takes back its writes)."""
        for key in [key for key in keys if key in self]:
            self.remove(key)

    @abstractmethod
    def compact(self) -> None:
        """Reclaim what deleted keys left behind now (a store also does it on its own)."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every key. The options and the query projection stay; the value kind is free
        again for the next insert (unless fixed by ``value_kind=``)."""

    # -- reading for attention -----------------------------------------------------------------

    @property
    @abstractmethod
    def value_column(self) -> ValueColumn[Any] | None:
        """A column of the store's value kind (for a remote store, possibly an empty local one),
        for checks made before a lookup; None while the store holds no value."""

    @property
    @abstractmethod
    def backend(self) -> IndexBackend:
        """The index backend searched for soft lookups (only while the store holds keys)."""

    @property
    @abstractmethod
    def spelling(self) -> SpellingSource:
        """The keys' spelling channel: their forms' similarity and marks with queries, by id,
        and spelling candidates for large stores."""

    # Shared by every store: a store writes only ``_ids_where`` and ``_ids_of`` for masks, and
    # ``dim`` and ``projection`` (above) for queries.

    def checked_embeddings(self, embeddings: Any, what: str) -> np.ndarray:
        """``embeddings`` as float32 (n, d), or ValueShapeError (another dimension than the
        store's keys) or InvalidValueError (NaN, infinity, norms whose scores overflow);
        ``what`` names them in the message."""
        checked = checked_embeddings(embeddings, self.dim, what)
        return within_score_range(checked, self.config.similarity, what)

    def prepare_queries(self, embeddings: np.ndarray) -> np.ndarray:
        """Raw query embeddings (m, d) as the backend scores them: checked (ValueShapeError,
        InvalidValueError), projected by W_q, prepared for the similarity."""
        checked = self.checked_embeddings(embeddings, "query embeddings")
        projected = projected_queries(checked, self.projection)
        if projected is not checked:  # W_q may take them past the range the scores hold
            within_score_range(
                projected, self.config.similarity, "query embeddings projected by W_q"
            )
        return self.config.similarity.prepare_queries(projected)

    def allow(self, mask: Mask) -> Allow | None:
        """The ids a mask lets a lookup attend to; None for no mask.

        Raises:
            KeyTypeError: the mask is neither an iterable of keys nor a predicate, or holds an
                item that is no str.
            ConfigError: the mask's predicate raised, or answered neither True nor False (text,
                a float or an array).
            EmptyStoreError: the mask allows no stored key.
        """
        if mask is None:
            return None
        if callable(mask):
            ids = self._ids_where(_checked_predicate(mask))
        elif isinstance(mask, (str, bytes)) or not isinstance(mask, Iterable):
            raise KeyTypeError(
                f"mask must be an iterable of keys or a predicate key -> bool, got "
                f"{type(mask).__name__}; to allow one key, pass [key]"
            )
        else:
            keys = list(mask)
            # A non-str item is no key: a boolean array passed as a mask allowed none, silently.
            odd = [key for key in keys if not isinstance(key, str)]
            if odd:
                raise KeyTypeError(
                    f"mask items must be keys (str), got {type(odd[0]).__name__} "
                    f"({short_repr(odd[0], 60)}); "
                    "to allow the keys a condition holds for, pass a predicate key -> bool"
                )
            ids = self._ids_of(keys)
        if not len(ids):
            raise EmptyStoreError(
                f"the mask allows none of the {len(self)} stored keys; a soft lookup needs at "
                f"least one key to attend to"
            )
        return Allow.of(ids)

    def _split_write(
        self,
        keys: list[str],
        held: Container[str],
        vectors: Mapping[str, np.ndarray] | None,
        replace_vectors: bool,
    ) -> tuple[list[str], list[str], list[str]]:
        """A write's keys, for ``stage``: the fresh ones (not ``held``, or every one with
        ``replace_vectors``: they get a new id and vector), the kept ones (their vector stays),
        and the fresh ones ``vectors`` has no vector for (to encode, then stage again)."""
        if replace_vectors:
            fresh, kept = list(keys), []
        else:
            fresh = [key for key in keys if key not in held]
            kept = [key for key in keys if key in held]
        given = vectors or {}
        return fresh, kept, [key for key in fresh if key not in given]

    def _checked_key_vectors(
        self,
        fresh: list[str],
        vectors: Mapping[str, np.ndarray],
        projection_shape: tuple[int, ...] | None,
    ) -> np.ndarray:
        """The fresh keys' raw vectors as float32 (n, d), checked like any embeddings, and
        against a query projection the store keeps (``check_projection_fits``)."""
        raw = self.checked_embeddings(np.stack([vectors[key] for key in fresh]), "key embeddings")
        check_projection_fits(projection_shape, raw.shape[1])
        return raw

    @abstractmethod
    def _ids_where(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """The ids of the stored keys ``predicate`` accepts (for ``allow``)."""

    @abstractmethod
    def _ids_of(self, keys: list[str]) -> np.ndarray:
        """The ids of those of ``keys`` the store holds (for ``allow``)."""

    def reading(self, spelled: bool = True) -> AbstractContextManager[None]:
        """A context a lookup runs in (the façade enters it, holding its lock). A store shared
        with other processes may read one view of itself for its duration, rather than check
        for their writes at every call, and skip what only spelling needs where the lookup
        scores none (not ``spelled``: its queries are embeddings); by default nothing happens."""
        return nullcontext()

    @abstractmethod
    def values_of(self, ids: np.ndarray) -> tuple[ValueColumn[Any], np.ndarray]:
        """A column holding the values of ``ids`` ((c,) or (m, c), -1 for padding), and the
        slots of ``ids`` in it (padding points at any slot: it has weight 0)."""

    @abstractmethod
    def present_slots(self, column: ValueColumn[Any]) -> np.ndarray:
        """The slots of ``column`` (from ``values_of``) that hold every stored key's value. A
        store whose ``values_of`` returns only the values asked for appends the rest to
        ``column`` first."""

    @abstractmethod
    def keys_of(self, ids: np.ndarray) -> list[str]:
        """The keys of held ``ids`` (1-D, no padding), in that order."""

    @abstractmethod
    def ids(self) -> np.ndarray:
        """The ids of every key, in iteration order."""

    # -- persistence ---------------------------------------------------------------------------

    def recorded_encoder(self) -> EncoderIdentity | None:
        """The identity of the encoder a store that outlives this process recorded (a database
        collection), which whoever opens it must match; None where nothing is recorded."""
        return None

    def record_encoder(self, identity: EncoderIdentity) -> None:
        """Record the encoder that embeds this store's keys (a store that outlives this process
        keeps it; ``save`` records it in the folder for the others)."""
        return None  # held in this process: nothing to record

    def abandon(self) -> None:
        """Undo the making of this store where this handle made it and nothing was written to
        it since: an open whose encoder then failed to load, or a ``softdict build`` that
        failed, left an empty Milvus collection recording that attempt's options and encoder,
        which refused the next build's (a probe). A store in memory has nothing to undo."""
        return None

    @abstractmethod
    def copy(self) -> Store:
        """An independent store with the same options and contents (``SoftDict.copy``)."""

    @abstractmethod
    def snapshot(self) -> tuple[StoreState, StoreFiles]:
        """The state to save, and the files of its parts (the value column and the index)."""


def dump_files(*parts: StoreFiles) -> StoreFiles:
    """The parts' files in one dict; a part that wrote a name another did (a plug-in's) is
    caught here rather than in a half-overwritten store."""
    files: StoreFiles = {}
    for part in parts:
        for name, content in part.items():
            if name in files:
                raise StoreFormatError(
                    f"two parts of the store (its index, its value column, its spelling index) "
                    f"both write the file {name!r}; a plug-in's dump() must name files of its own"
                )
            files[name] = content
    return files


def _checked_predicate(predicate: Callable[[str], object]) -> Callable[[str], bool]:
    """``predicate`` as a mask: ConfigError naming the key where it raises, or answers what is
    neither true nor false (an array); its own error came out as it was (ZeroDivisionError,
    numpy's "truth value of an array is ambiguous"). An answer is read by its truth (None and a
    regex's match read as Python reads them), but for text and floats, whose truth is not what
    they say: the text "False" (a table's cell) let every key through, and so did NaN."""

    def allowed(key: str) -> bool:
        try:
            verdict = predicate(key)
        except Exception as exc:
            raise ConfigError(
                f"the mask's predicate raised {type(exc).__name__} on the key {key!r:.60} "
                f"({exc}); it must answer True or False for every key"
            ) from exc
        if isinstance(verdict, (str, bytes, float, np.floating)):
            raise ConfigError(
                f"the mask's predicate answered {short_repr(verdict, 40)} "
                f"({type(verdict).__name__}) for the key {key!r:.60}; it must answer True or "
                f"False (text and floats are not read as either: the text 'False' is true in "
                f"Python, and so is NaN)"
            )
        try:
            return bool(verdict)
        except Exception as exc:
            raise ConfigError(
                f"the mask's predicate answered a {type(verdict).__name__} for the key "
                f"{key!r:.60}, which is neither True nor False"
            ) from exc

    return allowed


def check_projection_fits(projection_shape: tuple[int, ...] | None, dim: int) -> None:
    """A projection kept through ``clear()`` must fit new keys of another dimension
    (ValueShapeError)."""
    if projection_shape is not None and tuple(projection_shape) != (dim, dim):
        raise ValueShapeError(
            f"this store keeps a query projection (W_q, from fit) for "
            f"{projection_shape[0]}-dim queries, and the new keys are {dim}-dim; set "
            f"sd.query_projection = None to drop it before inserting them"
        )
