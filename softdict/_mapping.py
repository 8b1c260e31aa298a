"""SoftDict: an exact ``MutableMapping[str, V]`` with a soft lookup by meaning beside it.

A façade: the state lives in one store (``softdict.store``: keys, ids, values, the index
backend, options and the query projection), and text becomes embeddings through one encoder
(``softdict.encoders``). It parses arguments, encodes, holds the lock, and delegates: to the
store for the mapping, to ``_lookup`` (and through it ``_retrieval``) for soft lookups, to
``_calibration`` and ``_learning`` for learning, to ``_persistence`` for save and load.

This module holds the constructor, the exact mapping, the dict operators and inserts; the other
concerns are one class each, which ``SoftDict`` inherits (``softdict._facade`` lists them, and
says how the lock makes it thread-safe).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, MutableMapping, ValuesView
from contextlib import suppress
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from softdict._arguments import check_key, embedding_items, update_items
from softdict._config import SoftDictConfig, ValueKind, noting_named_options
from softdict._copies import Copies
from softdict._copies import _unpickle as _unpickle  # pickles made before it moved name it here
from softdict._encoder_match import store_encoder
from softdict._errors import KeyTypeError, ValueShapeError
from softdict._saving import Saving
from softdict._similarity import Similarity
from softdict._soft_lookup import SoftLookups
from softdict._tuning import Tuning
from softdict._types import NO_DEFAULT, Label, NoDefault, Value
from softdict._views import LiveItems, LiveKeys, LiveValues, same_items
from softdict.store import open_store

__all__ = ["SoftDict"]

# Value's recursive alias refers to "Label" by name, and typing.get_type_hints resolves it in
# the globals of the module whose methods return Value: Label must be a name here.
_FOR_TYPE_HINTS = (Label,)

D = TypeVar("D")


class SoftDict(SoftLookups, Tuning, Saving, Copies, MutableMapping[str, Value]):
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
            the bound on the mass outside it is below ``tail_tolerance``). A Milvus store,
            whose sampled tail is uniform, widens it to 1/64 of the allowed keys where that
            is more, at most 4 times ``max_k``.
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
        combination: how meaning and spelling make one score: "rule-8" (the default: the
            hand-set rule's spelling curve with letters and digits split, and the weights of
            exact marks, prefixes, initials and the like, fitted on real names: far better than
            the rule on codes and short forms, as good on typos and aliases, at about its
            no-match threshold and speed; a key spelled as the query gains the most; a query
            prefers keys that bear the accents it bears, and of twins but for accents the one
            spelled as typed; a word of at most 3 letters that is not very common, "gam" or
            "hun", weighs spelling as a misspelling; words match in any order; a query of at
            most 3 letters and digits typed in small letters or capitals is read as a code where
            it is no common word or no key means it ("nor" finds Norwegian by its letters),
            "rule-7" (the same but reading no short query as a code, the default before
            rule-8), "rule-6" (rule-7 but that a query typed without accents ties such
            twins), "rule-5" (the edit measure in the typed order), "rule-4" (every short word
            of wordfreq's list common), "rule-3" (no accents read), "rule-2" (a longer key that
            starts with the query could outrank the key itself), "rule-1" (the hand-set rule
            alone) or "learned-1" (every weight fitted on real names: better on codes, slower,
            and its best score tells a query with no key less well).
        lexical_known: under "rule-1" to "rule-8", the share of the spelling weight a query's
            common English words keep (1/16 by default): meaning decides what a real word means.
        index: "auto" (exact up to 10,000 keys, then HNSW), "flat" (exact), "compressed" and
            "compressed_8bit" (exact, 4- or 8-bit codes read first), "hnsw", "ivf", "ivf_sq8" (1
            byte per dimension), a FAISS index_factory string, or a registered name.
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
            exists, it is opened with its own options and encoder: options named here (not None)
            apply to this SoftDict, but similarity, index and value_kind must be the store's.
            Otherwise it is made with these options.

    Raises:
        ConfigError: an option is out of range or unknown.
        EncoderError: the encoder cannot be loaded offline or is not an encoder, or does not
            match the encoder of the existing store it opens.
        StoreFormatError: the collection exists and is not a softdict store.
        StoreUnavailableError: the store's server cannot be reached.
    """

    _named_options: frozenset[str]  # the options the caller named (noting_named_options)

    @noting_named_options
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
        combination: str = "rule-8",
        lexical_known: float = 1 / 16,
        index: str = "auto",
        value_kind: ValueKind | str | None = None,
        query_cache_size: int = 1024,
        batch_size: int = 64,
        progress: bool | None = None,
        store: str = "memory",
        collection: str | None = None,
    ) -> None:
        # SoftDictConfig's fields, listed again above for help() (tests/test_options.py checks).
        given = locals()
        config = SoftDictConfig.build(**{name: given[name] for name in SoftDictConfig.model_fields})
        # An existing store (Milvus) keeps its options but for those named here, None aside.
        config = config.naming(n for n in self._named_options if given.get(n) is not None)
        # ConfigError for an unknown store, index or value kind, before the encoder loads.
        opened = open_store(store, config, collection=collection)
        self._attach(opened, store_encoder(opened, encoder, query_cache_size))
        if data is not None:
            self.update(data)

    def __repr__(self) -> str:
        with self._lock:  # a Milvus store reads its kind again (``value_kind``)
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

    # As a dict's (3.8+): every store keeps its keys in insertion order.
    def __reversed__(self) -> Iterator[str]:
        with self._lock:
            return reversed(self._store.keys())

    def __len__(self) -> int:
        return len(self._store)

    # Overridden: the mixin fetches the value, which copies a vector, only to test membership.
    def __contains__(self, key: object) -> bool:
        return key in self._store

    # Overridden: the mixin's views are not reversible as a dict's, and raise KeyError for a key
    # another thread deleted after the keys were listed; these skip it, as keys do.
    def keys(self) -> LiveKeys[str]:
        return LiveKeys(self)

    def items(self) -> ItemsView[str, Value]:
        return LiveItems(self)

    def values(self) -> ValuesView[Value]:
        return LiveValues(self)

    def __eq__(self, other: object) -> bool:
        """As a dict compares: the same keys, each with an equal value (a vector equal as a
        whole: the mixin compared its elements, and raised for a vector store)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        return same_items(self, other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict

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

    # Overridden: the mixin's help() shows its sentinel; this reads and deletes under the lock.
    @overload
    def pop(self, key: str) -> Value: ...
    @overload
    def pop(self, key: str, default: D) -> Value | D: ...
    def pop(self, key: str, default: object = NO_DEFAULT) -> object:
        """Remove ``key`` and return its value; ``default`` if absent, else ``KeyError``."""
        with self._lock:
            try:  # no check first: another process may delete a Milvus store's key after it
                value = self._store.get(key)
                self._store.remove(key)
                return value
            except KeyError:
                if isinstance(default, NoDefault):
                    raise KeyError(key) from None
                return default

    # Overridden: the mixin pops the first key; dict.popitem pops the last inserted (LIFO).
    def popitem(self) -> tuple[str, Value]:
        """Remove and return the most recently inserted (key, value), as ``dict.popitem`` does."""
        with self._lock:
            while len(self._store):
                with suppress(KeyError):  # another process took it meanwhile: the next newest
                    key = self._store.newest_key()
                    value = self._store.get(key)
                    self._store.remove(key)
                    return key, value
            raise KeyError("popitem(): SoftDict is empty")

    # Overridden: the mixin deletes key by key; emptying the store is one reset.
    def clear(self) -> None:
        """Remove every key. The value kind is free again for the next insert."""
        with self._lock:
            self._store.clear()

    # -- the dict operators -------------------------------------------------------------------

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
            KeyTypeError: a key is no str, or ``keys`` is one str (not a list of keys).
            ValueShapeError: lengths differ, ``values`` is one value, or the embeddings have the
                wrong shape or are not real numbers (text, a ragged list, complex numbers, times).
            InvalidValueError: an embedding or value is NaN or infinite, or (but under cosine)
                an embedding's norm is past 1e18, where its scores would pass float32's range.
        """
        checked_keys, value_list = embedding_items(keys, values)
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
