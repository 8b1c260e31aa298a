"""SoftDict: an exact ``MutableMapping[str, V]`` with a soft lookup by meaning beside it.

A façade: the state lives in one store (``softdict.store``: keys, ids, values, the index
backend, options and the query projection), and text becomes embeddings through one encoder
(``softdict.encoders``). This class parses arguments, encodes, holds the lock, and delegates: to
the store for the mapping, to ``_lookup`` (and through it ``_retrieval``) for soft lookups, to
``_calibration`` and ``_learning`` for learning, to ``_persistence`` for save and load.

Thread safety: one lock guards the store. Every read and every change holds it, so a lookup sees
the store before or after a write, never half of one. Encoding text, the slow part, happens
outside the lock, so threads encode in parallel and only the search and the commit are
serialised.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from softdict import _calibration, _learning, _lookup
from softdict._arguments import check_key, check_min_score, query_texts, update_items
from softdict._config import SoftDictConfig, ValueKind, check_number
from softdict._errors import (
    CalibrationWarning,
    ConfigError,
    EmptyStoreError,
    EncoderError,
    InvalidValueError,
    KeyTypeError,
    ValueShapeError,
)
from softdict._files import StoreFiles
from softdict._learning import FitReport
from softdict._persistence import (
    LOCK_TIMEOUT,
    load_store,
    matching_encoder,
    restore_snapshot,
    save_store,
)
from softdict._results import Attention
from softdict._similarity import Similarity
from softdict._types import NO_DEFAULT, BatchValue, Label, Mask, NoDefault, Value
from softdict.encoders import EncoderIdentity, TextEncoder, resolve_encoder
from softdict.store import Store, StoreState, copy_into, open_store

__all__ = ["SoftDict"]

D = TypeVar("D")


class SoftDict(MutableMapping[str, Value]):
    """A dictionary whose lookups go by meaning.

    ``sd[key]`` is exact and raises ``KeyError`` for a missing key, as in a dict; ``sd.lookup(q)``
    embeds ``q`` and returns the attention-weighted blend of the stored values.

    Example (on the bundled encoder)::

        sd = SoftDict({"apple": 10, "banana": 5, "chair": 2})
        sd.lookup("fruit")              # about 5.1: mostly banana's 5, a little of apple's 10
        sd.attend("fruit").top(2)       # [('banana', 0.98), ('apple', 0.02)]

    Args:
        data: optional initial mapping or iterable of (key, value) pairs.
        encoder: None (``SOFTDICT_MODEL``, else the bundled all-MiniLM-L6-v2), ``"bundled-int8"``
            (the bundled model quantised to int8: faster, not identical), a model name or
            directory, a SentenceTransformer, or any object with ``.encode(list[str])`` returning
            an (n, d) array.
        similarity: "cosine" (default), "dot", "scaled_dot" (q·k/√d) or "l2" (−|q−k|²).
        temperature: softmax temperature, > 0; None picks the measured default for ``similarity``.
        top_k: None (the default): full attention over every allowed key; computed exactly
            while the store (or the masked part of it) holds at most 10,000 keys on an exact
            index, and estimated above that (the head of nearest keys scored exactly, a sample
            of the rest standing for it). k: top-k attention, the softmax over the k nearest
            keys and nothing else.
        max_k: the largest head of an estimated attention (the head grows 64, 256, 1024 until
            the bound on the mass outside it is below ``tail_tolerance``).
        tail_tolerance: the bound on the mass outside the head at which the head stops growing.
        tolerance: the half-width wanted on the interval of an estimated attention's tail
            mass; the sample grows until its interval is this narrow or holds ``max_sample``.
        confidence: the confidence of the intervals an estimated attention reports.
        max_sample: the most keys an estimated attention samples per query (0: attend to the
            head alone, with no estimate of the rest).
        seed: seeds each query's sample, with the query itself: a lookup is reproducible.
        lexical: the weight of spelling against meaning in a text lookup (the spelling channel,
            ``softdict.spelling``): 1, the measured default, lets a misspelt name find its key;
            0 scores keys by meaning alone, as softdict did before the channel existed.
        combination: how meaning and spelling make one score: "rule-1" (the default, the
            hand-set rule) or "learned-1" (fitted on typos, aliases, codes and names cut short
            of real names: far better on codes and short forms, a little below the rule on
            single typos, and its best score tells a query with no key less well).
        lexical_known: under "rule-1", the share of the spelling weight a query's common English
            words keep (1/16 by default): meaning, not spelling, decides what a real word means.
        index: "auto" (exact up to 10,000 keys, then HNSW), "flat" (exact), "hnsw", "ivf",
            "ivf_sq8" (compressed, 1 byte per dimension), a FAISS index_factory string, or a
            name registered with ``softdict.index.register_backend``.
        value_kind: "scalar", "vector", "categorical" (or a kind registered with
            ``softdict.values.register_value_kind``); None infers it from the first value.
        query_cache_size: how many query embeddings to keep (LRU); 0 disables the cache.
        batch_size: how many texts the encoder embeds per call.
        progress: draw a progress bar while encoding inserts; None draws one only for large
            inserts when stderr is a terminal.
        store: where the keys, values and vectors live: "memory" (this process, the default),
            "milvus:PATH.db" (a Milvus Lite file) or "milvus:http://host:19530" (a Milvus
            server or cluster), or "scheme:location" for a store registered with
            ``softdict.store.register_store``.
        collection: the collection of a store that holds several (``store="milvus:..."``). If it
            exists, it is opened with its own options and encoder: options given here apply to
            this SoftDict, except similarity, index and value_kind, which must be the store's.
            Otherwise it is made with these options.

    Raises:
        ConfigError: an option is out of range or unknown.
        EncoderError: the encoder cannot be loaded offline or is not an encoder, or does not
            match the encoder of the existing store it opens.
        StoreFormatError: the collection exists and is not a softdict store.
        StoreUnavailableError: the store's server cannot be reached.
    """

    def __init__(
        self,
        data: Mapping[str, object] | Iterable[tuple[str, object]] | None = None,
        /,
        *,
        encoder: object = None,
        similarity: Similarity | str = "cosine",
        temperature: float | None = None,
        top_k: int | None = None,
        max_k: int = 1024,
        tail_tolerance: float = 0.01,
        tolerance: float = 0.01,
        confidence: float = 0.95,
        max_sample: int = 4096,
        seed: int = 0,
        lexical: float = 1.0,
        combination: str = "rule-1",
        lexical_known: float = 1 / 16,
        index: str = "auto",
        value_kind: ValueKind | str | None = None,
        query_cache_size: int = 1024,
        batch_size: int = 64,
        progress: bool | None = None,
        store: str = "memory",
        collection: str | None = None,
    ) -> None:
        config = SoftDictConfig.build(
            similarity=similarity,
            temperature=temperature,
            top_k=top_k,
            max_k=max_k,
            tail_tolerance=tail_tolerance,
            tolerance=tolerance,
            confidence=confidence,
            max_sample=max_sample,
            seed=seed,
            lexical=lexical,
            combination=combination,
            lexical_known=lexical_known,
            index=index,
            value_kind=value_kind,
            query_cache_size=query_cache_size,
            batch_size=batch_size,
            progress=progress,
        )
        # ConfigError for an unknown store, index or value kind, before the encoder loads.
        opened = open_store(store, config, collection=collection)
        self._attach(opened, _store_encoder(opened, encoder, query_cache_size))
        if data is not None:
            self.update(data)

    def _attach(self, store: Store, encoder: TextEncoder) -> None:
        self._store = store
        self._encoder = encoder
        self._lock = threading.RLock()

    @classmethod
    def _from_store(cls, store: Store, encoder: TextEncoder) -> SoftDict:
        """A SoftDict over an existing store (what ``load`` gives back)."""
        sd = cls.__new__(cls)
        sd._attach(store, encoder)
        return sd

    # -- options -----------------------------------------------------------------------------

    @property
    def similarity(self) -> Similarity:
        """How queries are scored against keys."""
        return self._store.config.similarity

    @property
    def temperature(self) -> float:
        """The softmax temperature in force (the measured default unless one was set)."""
        # Only "scaled_dot" depends on the dimension. Before anything has been embedded it is not
        # known; 384 is the bundled model's, and lookups always use the store's real dimension.
        dim = self._store.dim or self._encoder.dim or 384
        return self._store.config.temperature_for(dim)

    @temperature.setter
    def temperature(self, value: float) -> None:
        with self._lock:
            self._store.config = self._store.config.replace(temperature=value)

    @property
    def lexical(self) -> float:
        """The spelling channel's weight against meaning in text lookups; 0 when it is off."""
        return self._store.config.lexical

    @lexical.setter
    def lexical(self, value: float) -> None:
        with self._lock:
            self._store.config = self._store.config.replace(lexical=value)

    @property
    def combination(self) -> str:
        """How meaning and spelling make one score: "learned-1" or "rule-1"."""
        return self._store.config.combination.value

    @combination.setter
    def combination(self, value: str) -> None:
        with self._lock:
            self._store.config = self._store.config.replace(combination=value)

    @property
    def lexical_known(self) -> float:
        """Under the "rule-1" combination, the share of the spelling weight that a query's common
        English words keep."""
        return self._store.config.lexical_known

    @lexical_known.setter
    def lexical_known(self, value: float) -> None:
        with self._lock:
            self._store.config = self._store.config.replace(lexical_known=value)

    @property
    def top_k(self) -> int | None:
        """How many keys a query attends to; None for all of them."""
        return self._store.config.top_k

    @property
    def index_description(self) -> str:
        """Which index backend holds the keys now, e.g. "auto: exact" or "ivf (nlist=4000, ...)"."""
        with self._lock:
            return self._store.describe_index()

    @property
    def index_memory_bytes(self) -> int:
        """Bytes this process holds for the key vectors and their ids (the index backend)."""
        with self._lock:
            return self._store.index_memory_bytes()

    @property
    def value_kind(self) -> ValueKind | str | None:
        """The kind of value this store holds: a ``ValueKind`` for the built-in kinds (a str
        enum: it equals "scalar", "vector" or "categorical"), the name of a registered plug-in
        kind, or None while the store is empty and its kind not fixed by ``value_kind=``."""
        kind = self._store.value_kind
        built_in = {member.value for member in ValueKind}
        return ValueKind(kind) if kind in built_in else kind

    @property
    def query_projection(self) -> np.ndarray | None:
        """W_q, learned by ``fit``: every query becomes W_q·q before it is scored. None is the
        identity. Set it to reuse a projection from another store, or to None to drop it.

        Raises (on setting):
            ValueShapeError: it is not (d, d) for the store's d-dim keys (or the store has none).
            InvalidValueError: it holds NaN or infinity.
        """
        projection = self._store.projection
        return None if projection is None else projection.copy()

    @query_projection.setter
    def query_projection(self, projection: npt.ArrayLike | None) -> None:
        with self._lock:
            if projection is None:
                self._store.projection = None
                return
            array = np.asarray(projection, dtype=np.float64)
            dim = self._store.dim
            if dim is None or array.shape != (dim, dim):
                raise ValueShapeError(
                    f"query_projection must be a (d, d) matrix for the store's d-dim keys; got "
                    f"shape {array.shape}"
                    + (" and the store has no keys yet" if dim is None else f", d = {dim}")
                )
            if not np.all(np.isfinite(array)):
                raise InvalidValueError("query_projection holds NaN or infinity")
            self._store.projection = array.astype(np.float32)

    @property
    def encoder(self) -> TextEncoder:
        """The encoder that embeds keys and queries."""
        return self._encoder

    def __repr__(self) -> str:
        kind = self._store.value_kind or "no values yet"
        return (
            f"SoftDict({len(self)} keys, {kind}, similarity={self.similarity.value!r}, "
            f"temperature={self.temperature:.4g}, encoder={self._encoder.name!r})"
        )

    # -- the exact mapping -------------------------------------------------------------------

    def __getitem__(self, key: str) -> Value:
        with self._lock:
            return self._store.get(key)  # KeyError(key) for a missing key, as a dict raises

    def __setitem__(self, key: str, value: object) -> None:
        self._insert({check_key(key): value})

    def __delitem__(self, key: str) -> None:
        with self._lock:
            self._store.remove(key)

    # Iterates over a snapshot of the keys, so another thread's insert cannot break the loop.
    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(self._store.keys())

    def __len__(self) -> int:
        return len(self._store)

    # Overridden: the mixin fetches the value, which copies a vector, only to test membership.
    def __contains__(self, key: object) -> bool:
        return key in self._store

    # Overridden: the mixin inserts one item at a time, which would call the encoder once per key
    # and could leave half a batch inserted. This encodes all new keys in batches and is atomic.
    def update(self, other: Any = (), /, **kwargs: object) -> None:
        """Insert or overwrite many items at once, like ``dict.update``; all or nothing.

        Raises:
            KeyTypeError: a key is not a str, or an item is not a (key, value) pair.
            ValueKindError, ValueShapeError, InvalidValueError: a value does not fit the store.
            EncoderError: the encoder failed or returned the wrong shape.
        """
        self._insert(update_items(other, kwargs))

    # Overridden: the mixin's signature shows its private sentinel in help(), and it reads and
    # deletes in two steps; this does both under the lock.
    @overload
    def pop(self, key: str) -> Value: ...
    @overload
    def pop(self, key: str, default: D) -> Value | D: ...
    def pop(self, key: str, default: object = NO_DEFAULT) -> object:
        """Remove ``key`` and return its value; ``default`` if absent, else ``KeyError``."""
        with self._lock:
            if key in self._store:
                value = self._store.get(key)
                self._store.remove(key)
                return value
        if isinstance(default, NoDefault):
            raise KeyError(key)
        return default

    # Overridden: the mixin pops the first key; dict.popitem pops the last inserted (LIFO).
    def popitem(self) -> tuple[str, Value]:
        """Remove and return the most recently inserted (key, value), as ``dict.popitem`` does."""
        with self._lock:
            if not len(self._store):
                raise KeyError("popitem(): SoftDict is empty")
            key = self._store.newest_key()
            value = self._store.get(key)
            self._store.remove(key)
            return key, value

    # Overridden: the mixin deletes key by key; emptying the store is one reset.
    def clear(self) -> None:
        """Remove every key. The value kind is free again for the next insert."""
        with self._lock:
            self._store.clear()

    # -- copies, pickling and the dict operators ----------------------------------------------

    def copy(self) -> SoftDict:
        """An independent copy: the same options, keys, values, vectors and query projection
        (nothing is encoded again), sharing the encoder. Changes to one never reach the other."""
        with self._lock:
            return type(self)._from_store(self._store.copy(), self._encoder)

    def copy_to(self, store: str = "memory", *, collection: str | None = None) -> SoftDict:
        """A copy of this SoftDict in another store: every key with its value and vector, the
        options, the query projection and the encoder; nothing is encoded again.

        ``store`` and ``collection`` are as for ``SoftDict(...)``: ``copy_to("milvus:./p.db",
        collection="prices")`` moves an in-memory store into Milvus, and ``copy_to()`` brings a
        Milvus store back into memory (then ``save`` it to a folder). The target must hold no
        keys; an existing collection must have been made with the same options and encoder.

        Raises:
            ConfigError: the target holds keys, or was made with other options.
            EncoderError: the target collection records another encoder.
            StoreUnavailableError: the target's server cannot be reached.
        """
        with self._lock:
            target = open_store(store, self._store.config, collection=collection)
            if len(target):
                raise ConfigError(
                    f"copy_to writes into an empty store, and {store!r}"
                    + (f" (collection {collection!r})" if collection else "")
                    + f" holds {len(target):,} keys; choose a new collection, or clear it first"
                )
            encoder = _store_encoder(target, self._encoder, self._store.config.query_cache_size)
            copy_into(self._store, target)
            return type(self)._from_store(target, encoder)

    def __copy__(self) -> SoftDict:
        return self.copy()

    # The encoder is shared, not copied: it holds a model's weights and no state of the store.
    def __deepcopy__(self, memo: dict[int, object]) -> SoftDict:
        return self.copy()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickling: the store's contents and the encoder's name, never its weights; the
        unpickling process loads the encoder by name. An encoder that cannot be loaded by name
        (an object passed as ``encoder=``) cannot be pickled: save and load instead."""
        with self._lock:
            if not self._encoder.loadable_by_name:
                raise EncoderError(
                    f"cannot pickle this SoftDict: its encoder {self._encoder.name!r} cannot be "
                    f"loaded by name in another process. Save it with sd.save(path) and load it "
                    f"with SoftDict.load(path, encoder=...)"
                )
            state, files = self._store.snapshot()
            return _unpickle, (type(self), state, files, self._encoder.identity())

    @classmethod
    def fromkeys(cls, iterable: Iterable[str], value: object = None, /, **options: Any) -> SoftDict:
        """A new SoftDict with the keys of ``iterable``, each holding ``value``, like
        ``dict.fromkeys``; ``options`` go to the constructor. The keys are inserted in one batch
        (one encoder call), or one by one through a subclass's own ``__setitem__``.
        """
        try:
            keys = list(iterable)
        except TypeError:
            raise KeyTypeError(
                f"fromkeys() takes an iterable of keys, got {type(iterable).__name__}"
            ) from None
        sd = cls(**options)
        if type(sd).__setitem__ is SoftDict.__setitem__:
            sd.update((key, value) for key in keys)
        else:
            for key in keys:
                sd[key] = value
        return sd

    def __or__(self, other: object) -> SoftDict:
        """``sd | other``: a copy of ``sd`` updated with the mapping ``other`` (PEP 584)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: object) -> SoftDict:
        """``other | sd``: ``other``'s items, then ``sd``'s (which win), in a SoftDict with
        ``sd``'s options. ``sd``'s keys are encoded again, to come after ``other``'s."""
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = self.copy()
        merged.clear()
        merged.update(other)
        merged.update(self)
        return merged

    def __ior__(self, other: object) -> SoftDict:
        """``sd |= other``: ``sd.update(other)`` (a mapping or (key, value) pairs)."""
        self.update(other)
        return self

    # -- inserting ---------------------------------------------------------------------------

    def _insert(
        self,
        items: dict[str, object],
        vectors: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Validate, encode what is new, then commit; raises before changing anything.

        Without ``vectors``, new keys are encoded and existing keys keep their embedding (only
        the value changes). With them (``add_embeddings``), every key gets its vector.
        """
        if not items:
            return
        if vectors is not None:
            with self._lock:
                self._store.commit(self._store.stage(items, vectors, replace_vectors=True))
            return
        encoded: dict[str, np.ndarray] = {}
        while True:
            with self._lock:
                # Validates every value (and fails fast, before the slow encode).
                staged = self._store.stage(items, encoded)
                if not staged.missing:
                    self._store.commit(staged)
                    return
            # Outside the lock: encoding is slow, and other threads may look up meanwhile. A key
            # another thread deletes while this one encodes is new again: the loop encodes it.
            encoded.update(self._encode_keys(staged.missing))

    def _encode_keys(self, keys: list[str]) -> dict[str, np.ndarray]:
        if not keys:
            return {}
        config = self._store.config
        vectors = self._encoder.encode_keys(
            keys, batch_size=config.batch_size, progress=config.progress
        )
        return dict(zip(keys, vectors))

    def add_embeddings(
        self, keys: Iterable[str], embeddings: npt.ArrayLike, values: Iterable[object]
    ) -> None:
        """Insert keys with embeddings you already have, skipping the encoder; all or nothing.

        Args:
            keys: n keys (str).
            embeddings: (n, d) array; d must match the store's existing keys.
            values: n values.

        Raises:
            ValueShapeError: lengths differ, or the embeddings have the wrong shape.
            InvalidValueError: an embedding or value is NaN or infinite.
        """
        checked_keys = [check_key(key, f" (item #{i})") for i, key in enumerate(keys)]
        value_list = list(values)
        with self._lock:
            array = self._store.checked_embeddings(embeddings, "embeddings")
        if not len(checked_keys) == len(value_list) == len(array):
            raise ValueShapeError(
                f"add_embeddings got {len(checked_keys)} keys, {len(array)} embeddings and "
                f"{len(value_list)} values; give one embedding and one value per key"
            )
        # Later duplicates win, and a key keeps its first position, as dict.update does.
        items = dict(zip(checked_keys, value_list))
        self._insert(items, dict(zip(checked_keys, array)))

    # -- soft lookup -------------------------------------------------------------------------

    # A str is also an Iterable[str]: the str overloads come first, so a str gets one result.
    @overload
    def lookup(  # type: ignore[overload-overlap]
        self, query: str, *, min_score: float | None = None, mask: Mask = None
    ) -> Value: ...
    @overload
    def lookup(  # type: ignore[overload-overlap]
        self, query: str, *, min_score: float | None = None, default: D, mask: Mask = None
    ) -> Value | D: ...
    @overload
    def lookup(
        self, query: Iterable[str], *, min_score: float | None = None, mask: Mask = None
    ) -> BatchValue: ...
    @overload
    def lookup(
        self,
        query: Iterable[str],
        *,
        min_score: float | None = None,
        default: D,
        mask: Mask = None,
    ) -> npt.NDArray[np.float64] | list[Label | D]: ...
    def lookup(
        self,
        query: str | Iterable[str],
        *,
        min_score: float | None = None,
        default: object = NO_DEFAULT,
        mask: Mask = None,
    ) -> object:
        """The attention-weighted blend of stored values for ``query`` (a str, or a list of them).

        Returns a float (scalar store), a float64 array (vector store) or a label (categorical
        store); for a list of queries, a stacked array, or a list of labels.

        Args:
            query: one query text or a sequence of them (encoded and searched in one batch).
            min_score: if the best key's similarity score is below this, the query has no match.
            default: returned for a query with no match; without it, no match raises.
            mask: restrict attention to these keys (an iterable of keys; absent ones are
                ignored) or to the keys a predicate ``mask(key) -> bool`` accepts, as in masked
                attention. The restriction is applied inside the index search.

        Raises:
            NoMatchError: a query had no key scoring at least ``min_score``, and no default.
            EmptyStoreError: the store has no keys, or the mask allows none.
        """
        texts, single = query_texts(query)
        check_min_score(min_score)
        with self._encoded(texts, lambda: self._check_lookup(default, single)) as embeddings:
            return _lookup.lookup_values(
                self._store, embeddings, mask, texts, single, min_score, default
            )

    @overload
    def lookup_embeddings(
        self, queries: npt.ArrayLike, *, min_score: float | None = None, mask: Mask = None
    ) -> Value | BatchValue: ...
    @overload
    def lookup_embeddings(
        self,
        queries: npt.ArrayLike,
        *,
        min_score: float | None = None,
        default: D,
        mask: Mask = None,
    ) -> Value | BatchValue | D: ...
    def lookup_embeddings(
        self,
        queries: npt.ArrayLike,
        *,
        min_score: float | None = None,
        default: object = NO_DEFAULT,
        mask: Mask = None,
    ) -> object:
        """Like ``lookup``, for query embeddings: (n, d) gives n results, (d,) gives one."""
        check_min_score(min_score)
        array, single = self._query_array(queries)
        with self._lock, self._store.reading():
            self._check_lookup(default, single)
            return _lookup.lookup_values(self._store, array, mask, None, single, min_score, default)

    # A str is also an Iterable[str]: the str overloads come first, so a str gets one result.
    @overload
    def attend(self, query: str, *, mask: Mask = None) -> Attention: ...  # type: ignore[overload-overlap]
    @overload
    def attend(self, query: Iterable[str], *, mask: Mask = None) -> list[Attention]: ...
    def attend(
        self, query: str | Iterable[str], *, mask: Mask = None
    ) -> Attention | list[Attention]:
        """How ``query`` attends: an ``Attention``, or a list of them for a list of queries."""
        texts, single = query_texts(query)
        with self._encoded(texts, self._require_keys) as embeddings:
            found = _lookup.attentions(self._store, embeddings, mask, texts)
        return found[0] if single else found

    def attend_embeddings(
        self, queries: npt.ArrayLike, *, mask: Mask = None
    ) -> Attention | list[Attention]:
        """``attend`` for query embeddings: (n, d) gives a list of n ``Attention``, (d,) one."""
        array, single = self._query_array(queries)
        with self._lock, self._store.reading():
            self._require_keys()
            found = _lookup.attentions(self._store, array, mask, None)
        return found[0] if single else found

    # A str is also an Iterable[str]: the str overloads come first, so a str gets one result.
    @overload
    def nearest(  # type: ignore[overload-overlap]
        self, query: str, k: int = 3, *, mask: Mask = None
    ) -> list[tuple[str, float]]: ...
    @overload
    def nearest(
        self, query: Iterable[str], k: int = 3, *, mask: Mask = None
    ) -> list[list[tuple[str, float]]]: ...
    def nearest(
        self, query: str | Iterable[str], k: int = 3, *, mask: Mask = None
    ) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The ``k`` keys most similar to ``query``, as (key, score) pairs, best first.

        Fewer than ``k`` pairs come back when the store (or the mask) holds fewer keys. For a
        list of queries, a list of such lists.
        """
        check_number("k", k, "a whole number >= 1", lambda v: v >= 1, whole=True)
        texts, single = query_texts(query)
        with self._encoded(texts, self._require_keys) as embeddings:
            found = _lookup.nearest_keys(self._store, embeddings, int(k), mask, texts)
        return found[0] if single else found

    @contextmanager
    def _encoded(self, texts: list[str], check: Callable[[], None]) -> Iterator[np.ndarray]:
        """The query embeddings of ``texts``, with the lock held. Encoding, the slow part, runs
        outside the lock; ``check`` runs before it (to fail fast) and again under the lock
        (another thread may have written meanwhile)."""
        with self._lock:
            check()
        embeddings = self._encode_queries(texts)
        with self._lock, self._store.reading():
            check()
            yield embeddings

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encoder.encode_queries(texts, batch_size=self._store.config.batch_size)

    def _query_array(self, queries: npt.ArrayLike) -> tuple[np.ndarray, bool]:
        array = np.asarray(queries, dtype=np.float32)
        single = array.ndim == 1
        return (array[None, :] if single else array), single

    def _require_keys(self) -> None:
        if not len(self._store):
            raise EmptyStoreError(
                "soft lookup on an empty SoftDict: insert keys first "
                "(sd[key] = value, sd.update(...) or sd.add_embeddings(...))"
            )

    def _check_lookup(self, default: object, single: bool) -> None:
        self._require_keys()
        column = self._store.value_column
        if not single and not isinstance(default, NoDefault) and column is not None:
            column.check_batch_default(default)  # a batch result is one array: default must fit

    # -- learning ----------------------------------------------------------------------------

    def calibrate(self, *, sample_size: int = 2000, seed: int = 0, choose_k: bool = True) -> float:
        """Choose the temperature (and, where it clearly helps, a fixed k) that best predicts each
        stored value from the others; set them.

        Leave-one-out over the store: for each candidate temperature (a log grid from 1/50 to 50
        times the measured default), each key's value is predicted by attention over the other
        keys, as a lookup of that key would attend to them. Scalar and vector stores minimise the
        squared error (each value dimension in units of its variance), categorical stores
        maximise the likelihood of each key's own label. Stores larger than ``sample_size`` are
        calibrated on a random sample of that many keys (``seed`` fixes it), each still predicted
        from the whole store.

        With ``choose_k``, attending to only the k best keys (k = 1, 2, 4, ..., 512) is compared
        with attending to all of them; a fixed k is set only if its leave-one-out loss is lower by
        more than three standard errors, and ``top_k`` is reset to None otherwise. Without it,
        the ``top_k`` in force is kept and only the temperature is chosen. The temperature moves
        only where the data show it predicts better: by a one-sided paired t-test of the per-key
        losses at the 2.5% level. Otherwise it stays as it is, with a ``CalibrationWarning`` (a
        store of three keys cannot tell).

        With the spelling channel on, each key is scored as its own text would be (meaning and
        spelling), and ``lexical_known`` (how much spelling weighs between real words) moves on
        the same rule, among 0, 1/64, 1/16, 1/4 and 1, in stores scored exactly (up to 10,000
        keys). ``lexical``, the weight of misspelt words, is left alone: no stored key is a
        misspelling of another, so the values cannot judge it; ``fit`` learns it from examples.

        Squared error follows the values' scale: a few keys with extreme values pull the
        temperature towards averaging them away.

        Returns:
            The temperature chosen, now in force (``top_k`` shows the k).

        Raises:
            EmptyStoreError: the store has fewer than 2 keys.
            ConfigError: ``sample_size`` is not a whole number >= 2, ``seed`` not one >= 0, or
                ``choose_k`` not a bool.
        """
        check_number(
            "sample_size", sample_size, "a whole number >= 2", lambda v: v >= 2, whole=True
        )
        check_number("seed", seed, "a whole number >= 0", lambda v: v >= 0, whole=True)
        if not isinstance(choose_k, bool):
            raise ConfigError(f"choose_k must be True or False, got {choose_k!r}")
        with self._lock:
            n_keys = len(self._store)
            if n_keys < 2:
                raise EmptyStoreError(
                    f"calibrate needs at least 2 keys to predict one from the others; the store "
                    f"has {n_keys}"
                )
            in_force = self.temperature
            chosen = _calibration.calibrate(
                self._store,
                sample_size=int(sample_size),
                seed=int(seed),
                choose_k=choose_k,
                in_force=in_force,
            )
            if chosen is None:
                return in_force  # nothing to learn from: keep what is in force
            temperature = None if chosen.kept_temperature else chosen.temperature
            config = self._store.config
            self._store.config = config.replace(
                temperature=config.temperature if temperature is None else temperature,
                top_k=chosen.top_k,
                lexical_known=(
                    config.lexical_known if chosen.lexical_known is None else chosen.lexical_known
                ),
            )
        if chosen.kept_temperature:
            warnings.warn(
                f"calibrate() kept the temperature in force ({in_force:.4g}): no temperature "
                f"predicted the {n_keys} stored values clearly better (leave-one-out, a paired "
                f"t-test at the 2.5% level), as happens on a store this small or this uniform. "
                f"Add keys, or set sd.temperature yourself",
                CalibrationWarning,
                stacklevel=2,
            )
        return chosen.temperature

    def fit(
        self,
        pairs: Iterable[tuple[str, str]],
        *,
        heldout: float = 0.2,
        max_steps: int = 300,
        learning_rate: float = 0.01,
        regularization: float = 1e-2,
        patience: int = 20,
        seed: int = 0,
    ) -> FitReport:
        """Learn a query projection W_q, the temperature and the spelling channel's weights
        (``lexical``, ``lexical_known``; unless ``lexical`` is 0) from (query, target key)
        examples.

        W_q starts from the projection in force (the identity at first) and is pulled back
        towards the identity (``regularization``); the loss is the cross-entropy of attention on
        each query's target key over every key, scored as a lookup scores them. A ``heldout``
        share of the pairs is kept aside for early stopping and for the report. If what was
        learned does not reach the held-out accuracy of what is in force, nothing changes:
        ``fit`` never makes held-out accuracy worse. Every later lookup uses W_q and the
        learned options, and ``save`` stores them.

        Raises:
            KeyTypeError: a pair is not two strings.
            NoMatchError: a target key is not in the store.
            ConfigError: too few pairs to hold some out, or an option out of range.
        """
        check_number("heldout", heldout, "a fraction between 0 and 1", lambda v: 0 < v < 1)
        check_number("max_steps", max_steps, "a whole number >= 1", lambda v: v >= 1, whole=True)
        check_number("learning_rate", learning_rate, "a number > 0", lambda v: v > 0)
        check_number("regularization", regularization, "a number >= 0", lambda v: v >= 0)
        check_number("patience", patience, "a whole number >= 1", lambda v: v >= 1, whole=True)
        check_number("seed", seed, "a whole number >= 0", lambda v: v >= 0, whole=True)
        examples = _learning.examples_from(pairs)
        n_heldout = round(len(examples) * heldout)
        if n_heldout < 2 or len(examples) - n_heldout < 2:
            raise ConfigError(
                f"fit needs at least 2 training and 2 held-out pairs; {len(examples)} pairs with "
                f"heldout={heldout} give {len(examples) - n_heldout} and {n_heldout}"
            )
        order = np.random.default_rng(seed).permutation(len(examples))
        examples = [examples[i] for i in order]
        queries = self._encode_queries([query for query, _ in examples])
        with self._lock:
            report, projection = _learning.fit(
                self._store,
                [target for _, target in examples],
                queries,
                [query for query, _ in examples],
                n_heldout,
                max_steps=int(max_steps),
                learning_rate=float(learning_rate),
                regularization=float(regularization),
                patience=int(patience),
                seed=int(seed),
            )
            if projection is not None:
                # Validated first, so a bad learned option leaves the store as it was.
                config = self._store.config.replace(
                    temperature=report.temperature,
                    lexical=report.lexical,
                    lexical_known=report.lexical_known,
                )
                self._store.projection = projection
                self._store.config = config
            return report

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, timeout: float = LOCK_TIMEOUT) -> None:
        """Save the store to the folder ``path``, atomically: a crash leaves the old or the new.

        The folder holds JSON and .npy files (never pickle), a manifest with checksums, and the
        encoder's identity. An existing folder at ``path`` is replaced only if it is a store.
        Saves and loads of one path, from any process, take turns: each holds an advisory lock
        (the file ``.NAME.lock`` beside the folder), waiting up to ``timeout`` seconds for it.

        Raises:
            StoreFormatError: ``path`` is not writable as a store.
            StoreBusyError: another process held the lock for longer than ``timeout``.
        """
        check_number("timeout", timeout, "a number of seconds >= 0", lambda v: v >= 0)
        with self._lock:
            save_store(self._store, self._encoder, path, float(timeout))

    @classmethod
    def open(
        cls,
        store: str,
        *,
        collection: str | None = None,
        encoder: object = None,
        query_cache_size: int = 1024,
    ) -> SoftDict:
        """Open an existing store kept outside this process (``store="milvus:..."``) with its
        own options and encoder; unlike ``SoftDict(store=..., collection=...)``, never make one.

        Args:
            store: "milvus:PATH.db" or "milvus:http://host:19530".
            collection: the collection that holds it.
            encoder: the encoder to use; it must embed like the store's. None loads the
                recorded one.
            query_cache_size: how many query embeddings to keep in this process.

        Raises:
            StoreFormatError: no softdict store is there, or the collection is not one.
            EncoderError: the encoder does not match the store's.
            StoreUnavailableError: the store's server cannot be reached.
        """
        config = SoftDictConfig.build(query_cache_size=query_cache_size)
        opened = open_store(store, config, collection=collection, create=False)
        return cls._from_store(opened, _store_encoder(opened, encoder, query_cache_size))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: object = None,
        timeout: float = LOCK_TIMEOUT,
        accept_variant: bool = False,
    ) -> SoftDict:
        """Load a store saved with ``save``.

        Args:
            path: the store folder.
            encoder: the encoder to use; it must embed like the one the store was saved with.
                None loads the recorded encoder (a model name or path).
            timeout: how long to wait for another process's save or load of ``path``.
            accept_variant: use ``encoder`` although it is another variant of the recorded model
                (``"bundled-int8"`` for a store built on the bundled model, or the reverse):
                the keys keep their embeddings and queries get the variant's, so scores shift
                a little. A later ``save`` records the variant in use.

        Raises:
            StoreFormatError: a file is missing, truncated, corrupted or of an unknown version.
            EncoderError: the encoder does not match the store's, or cannot be loaded.
            StoreBusyError: another process held the store's lock for longer than ``timeout``.
        """
        check_number("timeout", timeout, "a number of seconds >= 0", lambda v: v >= 0)
        store, text_encoder = load_store(
            path, encoder, float(timeout), accept_variant=bool(accept_variant)
        )
        return cls._from_store(store, text_encoder)


def _store_encoder(store: Store, encoder: object, cache_size: int) -> TextEncoder:
    """The encoder of a store just opened: for a store that recorded one (a collection made
    before), the recorded one or one that embeds like it; else ``encoder``, then recorded."""
    recorded = store.recorded_encoder()
    if recorded is not None:
        return matching_encoder(recorded, encoder, cache_size)
    text_encoder = resolve_encoder(encoder, query_cache_size=cache_size)
    if type(store).record_encoder is not Store.record_encoder:
        store.record_encoder(text_encoder.identity())
    return text_encoder


def _unpickle(
    cls: type[SoftDict], state: StoreState, files: StoreFiles, identity: EncoderIdentity
) -> SoftDict:
    """Rebuild a pickled SoftDict (see ``SoftDict.__reduce__``)."""
    store, encoder = restore_snapshot(state, files, identity)
    return cls._from_store(store, encoder)
