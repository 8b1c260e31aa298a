"""SoftDict: an exact ``MutableMapping[str, V]`` with a soft lookup by meaning beside it.

The exact mapping (``sd[key]``, ``in``, ``len``, iteration, ``del``, ``update``) behaves like a
plain dict. The soft lookup (``lookup``, ``attend``, ``nearest``) embeds the query and attends over
every stored key: softmax(sim(q, K) / T) · V.

A store is three row-aligned parts, each in its own module: the key index (``_index``: embeddings
by row), the value column (``_values``), and here the key <-> row maps. Every change is staged and
validated in full before any part is touched, so an operation that raises leaves the store as it
was.

Thread safety: one lock guards the store's state. Every read and every change holds it, so a
lookup sees the store before or after a write, never half of one. Encoding text, the slow part,
happens outside the lock, so threads encode in parallel and only the search and the commit are
serialised.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from softdict._attention import prepare_keys, prepare_queries, softmax, tail_mass_bound
from softdict._calibration import K_CHOICES, LeftOutScores, calibrate_leave_one_out
from softdict._config import Similarity, SoftDictConfig, ValueKind
from softdict._encoders import TextEncoder, resolve_encoder
from softdict._errors import (
    ConfigError,
    EmptyStoreError,
    InvalidValueError,
    KeyTypeError,
    NoMatchError,
    ValueShapeError,
)
from softdict._index import EXACT_MAX_KEYS, KeyIndex, index_spec
from softdict._learning import FitReport, fit_projection
from softdict._persistence import load_store, save_store
from softdict._results import Attention
from softdict._values import CategoricalColumn, ValueColumn, infer_kind, new_column

__all__ = ["SoftDict"]

# Distinguishes "no default given" from default=None, which is a legitimate default.
_MISSING: Any = object()

# Deleted rows are compacted away once they outnumber live ones (and are at least this many), so
# a lookup never scores more than about twice the live keys, and compaction cost is amortised.
_COMPACT_MIN_DEAD = 64

# Adaptive top-k starts here and grows 4x per round until the tail bound is met or max_k reached.
_INITIAL_K = 64

# Without progress=, a bar is drawn only for inserts of at least this many keys, on a terminal.
_PROGRESS_MIN_KEYS = 2_000

# A mask: the keys that may be attended to, or a predicate over keys.
Mask = Iterable[str] | Callable[[str], bool] | None


@dataclass(frozen=True)
class _Selection:
    """The rows each query attends to, with scores and weights; ``rows=None`` means all rows.

    Padded rows are -1 with score -inf and weight 0; ``k`` and ``tail_mass`` are per query.
    """

    scores: np.ndarray
    weights: np.ndarray
    rows: np.ndarray | None
    k: np.ndarray
    tail_mass: np.ndarray


def _check_key(key: object, position: str = "") -> str:
    if not isinstance(key, str):
        raise KeyTypeError(
            f"keys must be str{position}, got {type(key).__name__} ({key!r:.60}); "
            f"convert it with str() if its text is what should be matched"
        )
    return str(key)  # a str subclass (numpy.str_) is stored as a plain str


def _check_option(
    name: str, value: object, expected: str, valid: Callable[[Any], bool], *, whole: bool = False
) -> None:
    """ConfigError unless ``value`` is a finite number (a whole one if ``whole``; bools are not
    numbers here) for which ``valid`` holds; ``expected`` says what was wanted."""
    kind = numbers.Integral if whole else numbers.Real
    if (
        not isinstance(value, kind)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not valid(value)
    ):
        raise ConfigError(f"{name} must be {expected}, got {value!r}")


class SoftDict(MutableMapping[str, Any]):
    """A dictionary whose lookups go by meaning.

    ``sd[key]`` is exact and raises ``KeyError`` for a missing key, as in a dict; ``sd.lookup(q)``
    embeds ``q`` and returns the attention-weighted blend of the stored values.

    Example (on the bundled encoder)::

        sd = SoftDict({"apple": 10, "banana": 5, "chair": 2})
        sd.lookup("fruit")              # about 5.1: mostly banana's 5, a little of apple's 10
        sd.attend("fruit").top(2)       # [('banana', 0.98), ('apple', 0.02)]

    Args:
        data: optional initial mapping or iterable of (key, value) pairs.
        encoder: None (``SOFTDICT_MODEL``, else the bundled all-MiniLM-L6-v2), a model name or
            directory, a SentenceTransformer, or any object with ``.encode(list[str])`` returning
            an (n, d) array.
        similarity: "cosine" (default), "dot", "scaled_dot" (q·k/√d) or "l2" (−|q−k|²).
        temperature: softmax temperature, > 0; None picks the measured default for ``similarity``.
        top_k: attend over the k best keys per query. None: every key while the store (or the
            masked part of it) holds at most 10,000 keys, then an adaptive k that grows until
            the bound on the left-out mass is below ``tail_tolerance`` or k reaches ``max_k``.
        max_k: the largest k adaptive top-k may grow to.
        tail_tolerance: the left-out attention mass adaptive top-k aims to stay under.
        index: "auto" (exact up to 10,000 keys, then IVF), "flat" (exact), "hnsw", "ivf",
            "ivf_sq8" (compressed, 1 byte per dimension), or a FAISS index_factory string.
        value_kind: "scalar", "vector" or "categorical"; None infers it from the first value.
        query_cache_size: how many query embeddings to keep (LRU); 0 disables the cache.
        batch_size: how many texts the encoder embeds per call.
        progress: draw a progress bar while encoding inserts; None draws one only for large
            inserts when stderr is a terminal.

    Raises:
        ConfigError: an option is out of range or unknown.
        EncoderError: the encoder cannot be loaded offline or is not an encoder.
    """

    def __init__(
        self,
        data: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        /,
        *,
        encoder: object = None,
        similarity: Similarity | str = "cosine",
        temperature: float | None = None,
        top_k: int | None = None,
        max_k: int = 1024,
        tail_tolerance: float = 0.01,
        index: str = "auto",
        value_kind: ValueKind | str | None = None,
        query_cache_size: int = 1024,
        batch_size: int = 64,
        progress: bool | None = None,
    ) -> None:
        self._config = SoftDictConfig.build(
            similarity=similarity,
            temperature=temperature,
            top_k=top_k,
            max_k=max_k,
            tail_tolerance=tail_tolerance,
            index=index,
            value_kind=value_kind,
            query_cache_size=query_cache_size,
            batch_size=batch_size,
            progress=progress,
        )
        self._index_spec = index_spec(self._config.index)
        self._encoder = resolve_encoder(encoder, query_cache_size=query_cache_size)
        self._lock = threading.RLock()
        # W_q learned by fit(): queries become W_q·q before scoring. None is the identity. It
        # belongs to the encoder's queries, not to the keys, so clear() keeps it.
        self._query_projection: np.ndarray | None = None
        self._reset()
        if data is not None:
            self.update(data)

    def _reset(self) -> None:
        self._row_of: dict[str, int] = {}  # insertion-ordered, so iteration follows dict order
        self._key_of_row: list[str | None] = []  # None marks a deleted row awaiting compaction
        self._index: KeyIndex | None = None
        self._values: ValueColumn | None = None
        self._dead = 0

    # -- options -----------------------------------------------------------------------------

    @property
    def similarity(self) -> Similarity:
        """How queries are scored against keys."""
        return self._config.similarity

    @property
    def temperature(self) -> float:
        """The softmax temperature in force (the measured default unless one was set)."""
        # Only "scaled_dot" depends on the dimension. Before anything has been embedded it is not
        # known; 384 is the bundled model's, and lookups always use the store's real dimension.
        dim = self._index.dim if self._index is not None else (self._encoder.dim or 384)
        return self._config.temperature_for(dim)

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._config = SoftDictConfig.build(**{**self._config.model_dump(), "temperature": value})

    @property
    def top_k(self) -> int | None:
        """How many keys a query attends to; None for all of them."""
        return self._config.top_k

    @property
    def index_description(self) -> str:
        """Which index backend holds the keys now, e.g. "auto: exact" or "ivf (nlist=4000, ...)"."""
        return (
            self._index.describe() if self._index is not None else self._index_spec.describe(None)
        )

    @property
    def value_kind(self) -> ValueKind | None:
        """The kind of value this store holds, or None while it is empty and not fixed."""
        return self._values.kind if self._values is not None else self._config.value_kind

    @property
    def encoder(self) -> TextEncoder:
        """The encoder that embeds keys and queries."""
        return self._encoder

    def __repr__(self) -> str:
        kind = self.value_kind.value if self.value_kind is not None else "no values yet"
        return (
            f"SoftDict({len(self)} keys, {kind}, similarity={self.similarity.value!r}, "
            f"temperature={self.temperature:.4g}, encoder={self._encoder.name!r})"
        )

    # -- the exact mapping -------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        with self._lock:
            row = self._row_of[key]  # KeyError(key) for a missing key, as a dict raises
            assert self._values is not None
            return self._values.get(row)

    def __setitem__(self, key: str, value: Any) -> None:
        self._insert([_check_key(key)], [value], embeddings=None)

    def __delitem__(self, key: str) -> None:
        with self._lock:
            row = self._row_of.pop(key)
            assert self._index is not None
            self._index.remove(np.array([row]))
            self._key_of_row[row] = None
            self._dead += 1
            self._after_removal()

    # Iterates over a snapshot of the keys, so another thread's insert cannot break the loop.
    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._row_of))

    def __len__(self) -> int:
        return len(self._row_of)

    # Overridden: the mixin fetches the value, which copies a vector, only to test membership.
    def __contains__(self, key: object) -> bool:
        return key in self._row_of

    # Overridden: the mixin inserts one item at a time, which would call the encoder once per key
    # and could leave half a batch inserted. This encodes all new keys in batches and is atomic.
    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        """Insert or overwrite many items at once, like ``dict.update``; all or nothing.

        Raises:
            KeyTypeError: a key is not a str, or an item is not a (key, value) pair.
            ValueKindError, ValueShapeError, InvalidValueError: a value does not fit the store.
            EncoderError: the encoder failed or returned the wrong shape.
        """
        if isinstance(other, Mapping):
            pairs = list(other.items())
        elif hasattr(other, "keys"):
            # dict.update's protocol: any object with .keys() is read as a mapping.
            pairs = [(key, other[key]) for key in other.keys()]  # noqa: SIM118
        else:
            pairs = []
            for i, item in enumerate(other):
                if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) != 2:
                    raise KeyTypeError(
                        f"update() takes a mapping or an iterable of (key, value) pairs; "
                        f"item #{i} is {item!r:.60}"
                    )
                pairs.append((item[0], item[1]))
        pairs.extend(kwargs.items())
        keys = [_check_key(key, f" (item #{i})") for i, (key, _) in enumerate(pairs)]
        self._insert(keys, [value for _, value in pairs], embeddings=None)

    # Overridden: the mixin pops the first key; dict.popitem pops the last inserted (LIFO).
    def popitem(self) -> tuple[str, Any]:
        """Remove and return the most recently inserted (key, value), as ``dict.popitem`` does."""
        with self._lock:
            if not self._row_of:
                raise KeyError("popitem(): SoftDict is empty")
            key = next(reversed(self._row_of))
            value = self[key]
            del self[key]
            return key, value

    # Overridden: the mixin deletes key by key; emptying the store is one reset.
    def clear(self) -> None:
        """Remove every key. The value kind is free again for the next insert."""
        with self._lock:
            self._reset()

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
        the ``top_k`` in force is kept and only the temperature is chosen.

        Squared error follows the values' scale: a few keys with extreme values pull the
        temperature towards averaging them away.

        Returns:
            The temperature chosen, now in force (``top_k`` shows the k).

        Raises:
            EmptyStoreError: the store has fewer than 2 keys.
            ConfigError: ``sample_size`` is not a whole number >= 2, ``seed`` not one >= 0, or
                ``choose_k`` not a bool.
        """
        _check_option(
            "sample_size", sample_size, "a whole number >= 2", lambda v: v >= 2, whole=True
        )
        _check_option("seed", seed, "a whole number >= 0", lambda v: v >= 0, whole=True)
        if not isinstance(choose_k, bool):
            raise ConfigError(f"choose_k must be True or False, got {choose_k!r}")
        with self._lock:
            n_keys = len(self)
            if n_keys < 2:
                raise EmptyStoreError(
                    f"calibrate needs at least 2 keys to predict one from the others; the store "
                    f"has {n_keys}"
                )
            assert self._index is not None and self._values is not None
            rows = self._rows_in_order()
            if n_keys > sample_size:
                rows = np.sort(np.random.default_rng(seed).choice(rows, sample_size, replace=False))
            # Each sampled key is the query, as its own text would be. The query projection is
            # left out: it is learned for how users phrase queries, not for the keys themselves.
            queries = prepare_queries(self._index.vectors(rows), self.similarity)
            fixed = [k for k in K_CHOICES if k < n_keys - 1] if choose_k else []
            options: list[int | None] = [None, *fixed]
            if not choose_k and self._config.top_k is not None:
                options = [self._config.top_k]
            # How many of each key's best neighbours to rank: enough for every fixed k, and where
            # the store attends to its top candidates (large or approximate), for max_k of them.
            deepest = max((k for k in options if k is not None), default=1)
            if self._attends_to_every_key(n_keys):
                depth = min(deepest, n_keys - 1)
                scores = self._index.score_all(queries)
                left_out = LeftOutScores.from_all_scores(scores, rows, depth)
            else:
                depth = min(max(deepest, self._config.max_k), n_keys - 1)
                found_scores, found_rows = self._index.search(queries, depth + 1)
                left_out = LeftOutScores.from_search(
                    found_scores, found_rows, rows, self._config.max_k
                )
                found = left_out.found_any()
                if not found.any():
                    return self.temperature  # nothing to learn from: keep what is in force
                left_out, rows = left_out.subset(found), rows[found]
            chosen = calibrate_leave_one_out(
                left_out,
                self._values.targets(rows),
                self._values.targets,
                self._values.kind,
                self.similarity.default_temperature(self._index.dim),
                options,
            )
            self._config = SoftDictConfig.build(
                **{
                    **self._config.model_dump(),
                    "temperature": chosen.temperature,
                    "top_k": chosen.top_k,
                }
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
        """Learn a query projection W_q and the temperature from (query, target key) examples.

        W_q starts from the projection in force (the identity at first) and is pulled back
        towards the identity (``regularization``); the loss is the cross-entropy of attention on
        each query's target key. A ``heldout`` share of the pairs is kept aside for early
        stopping and for the report. If the learned projection does not reach the held-out
        accuracy of the one in force, that one is kept: ``fit`` never makes held-out accuracy
        worse. Every later lookup uses W_q, and ``save`` stores it.

        Raises:
            KeyTypeError: a pair is not two strings.
            NoMatchError: a target key is not in the store.
            ConfigError: too few pairs to hold some out, or an option out of range.
        """
        _check_option("heldout", heldout, "a fraction between 0 and 1", lambda v: 0 < v < 1)
        _check_option("max_steps", max_steps, "a whole number >= 1", lambda v: v >= 1, whole=True)
        _check_option("learning_rate", learning_rate, "a number > 0", lambda v: v > 0)
        _check_option("regularization", regularization, "a number >= 0", lambda v: v >= 0)
        _check_option("patience", patience, "a whole number >= 1", lambda v: v >= 1, whole=True)
        _check_option("seed", seed, "a whole number >= 0", lambda v: v >= 0, whole=True)
        examples = []
        for i, pair in enumerate(pairs):
            if not (
                isinstance(pair, (tuple, list))
                and len(pair) == 2
                and all(isinstance(x, str) for x in pair)
            ):
                raise KeyTypeError(
                    f"fit() takes (query, target key) pairs of strings; pair #{i} is {pair!r:.60}"
                )
            examples.append((str(pair[0]), str(pair[1])))
        n_heldout = round(len(examples) * heldout)
        if n_heldout < 2 or len(examples) - n_heldout < 2:
            raise ConfigError(
                f"fit needs at least 2 training and 2 held-out pairs; {len(examples)} pairs with "
                f"heldout={heldout} give {len(examples) - n_heldout} and {n_heldout}"
            )
        order = np.random.default_rng(seed).permutation(len(examples))
        examples = [examples[i] for i in order]
        queries = self._encoder.encode_queries(
            [q for q, _ in examples], batch_size=self._config.batch_size
        )
        with self._lock:
            missing = [t for _, t in examples if t not in self._row_of]
            if missing:
                raise NoMatchError(
                    f"{len(missing)} target key(s) are not in the store, e.g. {missing[0]!r}; "
                    f"fit learns to find stored keys, so insert them first"
                )
            assert self._index is not None
            rows = self._rows_in_order()
            position = {row: i for i, row in enumerate(rows.tolist())}
            targets = np.array([position[self._row_of[t]] for _, t in examples], dtype=np.int64)
            keys = self._index.vectors(rows)
            raw = self._checked_embeddings(queries, "query embeddings")
            weight, temperature, steps, before, after = fit_projection(
                raw[n_heldout:],
                targets[n_heldout:],
                raw[:n_heldout],
                targets[:n_heldout],
                keys,
                self.similarity,
                self.temperature,
                initial=self._query_projection,
                max_steps=max_steps,
                learning_rate=learning_rate,
                regularization=regularization,
                patience=patience,
                seed=seed,
            )
            kept = after >= before
            if kept:
                self._query_projection = weight.astype(np.float32)
                self.temperature = temperature
            return FitReport(
                accuracy_before=before,
                accuracy_after=after if kept else before,
                steps=steps,
                temperature=self.temperature,
                kept=kept,
                n_train=len(examples) - n_heldout,
                n_heldout=n_heldout,
            )

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save the store to the folder ``path``, atomically: a crash leaves the old or the new.

        The folder holds JSON and .npy files (never pickle), a manifest with checksums, and the
        encoder's identity. An existing folder at ``path`` is replaced only if it is a store.

        Raises:
            StoreFormatError: ``path`` is not writable as a store.
        """
        with self._lock:
            save_store(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, encoder: object = None) -> SoftDict:
        """Load a store saved with ``save``.

        Args:
            path: the store folder.
            encoder: the encoder to use; it must embed like the one the store was saved with.
                None loads the recorded encoder (a model name or path).

        Raises:
            StoreFormatError: a file is missing, truncated, corrupted or of an unknown version.
            EncoderError: the encoder does not match the store's, or cannot be loaded.
        """
        return load_store(cls, path, encoder)

    # -- inserting ---------------------------------------------------------------------------

    def _insert(self, keys: list[str], values: list[Any], embeddings: np.ndarray | None) -> None:
        """Stage, validate and then commit an insert; raises before changing anything.

        With ``embeddings=None`` new keys are encoded and existing keys keep their embedding (only
        the value changes). With embeddings given, every key gets that embedding.
        """
        # Later duplicates win, and a key keeps its first position, exactly as dict.update does.
        merged: dict[str, tuple[Any, int]] = {}
        for i, (key, value) in enumerate(zip(keys, values)):
            merged[key] = (value, i)
        if not merged:
            return
        encoded: dict[str, np.ndarray] = {}
        if embeddings is None:
            with self._lock:
                self._stage(merged, embeddings=None)  # fail fast on bad values, before encoding
                fresh = [key for key in merged if key not in self._row_of]
            # Outside the lock: encoding is slow, and other threads may look up meanwhile.
            encoded = self._encode_keys(fresh)
        with self._lock:
            self._commit(merged, embeddings, encoded)

    def _encode_keys(self, keys: list[str]) -> dict[str, np.ndarray]:
        if not keys:
            return {}
        progress = self._config.progress
        if progress is None:
            progress = len(keys) >= _PROGRESS_MIN_KEYS and sys.stderr.isatty()
        vectors = self._encoder.encode_keys(
            keys, batch_size=self._config.batch_size, progress=progress
        )
        return dict(zip(keys, self._checked_embeddings(vectors, "key embeddings")))

    def _stage(
        self, merged: dict[str, tuple[Any, int]], embeddings: np.ndarray | None
    ) -> tuple[ValueColumn, list[str], list[str], Any, Any]:
        """Validate every value against the store as it is now; returns what to commit."""
        column = self._values
        if column is None:
            first_key, (first_value, _) = next(iter(merged.items()))
            kind = self._config.value_kind or infer_kind(first_value)
            column = new_column(kind, first_key, first_value)
        if embeddings is None:
            fresh = [key for key in merged if key not in self._row_of]
            kept = [key for key in merged if key in self._row_of]
        else:
            fresh, kept = list(merged), []
        if column.kind is ValueKind.CATEGORICAL and self._config.value_kind is None:
            # Any JSON value could be a label, but a number or a vector would have made a scalar
            # or vector store: in an inferred label store it is a value of the wrong kind.
            for key in [*fresh, *kept]:
                if infer_kind(merged[key][0]) is not ValueKind.CATEGORICAL:
                    raise column.kind_error(key, merged[key][0])
        staged_fresh = column.stage([merged[k][0] for k in fresh], fresh)
        staged_kept = column.stage([merged[k][0] for k in kept], kept)
        return column, fresh, kept, staged_fresh, staged_kept

    def _commit(
        self,
        merged: dict[str, tuple[Any, int]],
        embeddings: np.ndarray | None,
        encoded: dict[str, np.ndarray],
    ) -> None:
        """Under the lock: stage against the current store, then apply. Raises before changing."""
        column, fresh, kept, staged_fresh, staged_kept = self._stage(merged, embeddings)
        prepared = np.zeros((0, 0), dtype=np.float32)
        if fresh:
            if embeddings is None:
                # A key deleted by another thread since encoding began is new again: encode it.
                encoded.update(self._encode_keys([k for k in fresh if k not in encoded]))
                new_vectors = np.stack([encoded[key] for key in fresh])
            elif len(fresh) == len(embeddings):
                new_vectors = embeddings  # no duplicate keys: rows already in order, no copy
            else:
                new_vectors = embeddings[[merged[k][1] for k in fresh]]
            new_vectors = self._checked_embeddings(new_vectors, "key embeddings")
            prepared = prepare_keys(new_vectors, self.similarity)

        # Commit: nothing below can fail on bad input.
        if self._index is None:
            self._index = KeyIndex(prepared.shape[1], self.similarity, self._index_spec)
        self._values = column
        replaced = [self._row_of[key] for key in fresh if key in self._row_of]
        if replaced:
            self._index.remove(np.array(replaced))
            for row in replaced:
                self._key_of_row[row] = None
            self._dead += len(replaced)
        if kept:
            column.assign(np.array([self._row_of[k] for k in kept]), staged_kept)
        if fresh:
            first_row = self._index.size
            self._index.add(prepared)
            column.append(staged_fresh)
            for offset, key in enumerate(fresh):
                self._row_of[key] = first_row + offset
            self._key_of_row.extend(fresh)
        if replaced:
            self._after_removal()

    def _checked_embeddings(self, embeddings: Any, what: str) -> np.ndarray:
        array = np.asarray(embeddings, dtype=np.float32)
        dim = self._index.dim if self._index is not None else None
        if array.ndim != 2 or (dim is not None and array.shape[1] != dim) or array.shape[1] == 0:
            expected = f"(n, {dim})" if dim is not None else "(n, d) with d >= 1"
            raise ValueShapeError(
                f"{what} have shape {array.shape}, expected {expected}"
                + (
                    f": this store's keys are {dim}-dim embeddings, so queries and new keys must "
                    f"be too (use the encoder the store was built with)"
                    if dim is not None
                    else ""
                )
            )
        if not np.all(np.isfinite(array)):
            raise InvalidValueError(
                f"{what} contain NaN or infinity (or values beyond float32 range); "
                f"embeddings must be finite"
            )
        return array

    def _rows_in_order(self) -> np.ndarray:
        """The rows of the stored keys, in iteration order."""
        return np.fromiter(self._row_of.values(), np.int64, len(self._row_of))

    def _after_removal(self) -> None:
        if not self._row_of:
            self._reset()
        elif self._dead > max(_COMPACT_MIN_DEAD, len(self._row_of)):
            self._compact()

    def _compact(self) -> None:
        """Drop deleted rows and renumber live ones, keeping their relative order."""
        assert self._index is not None and self._values is not None
        live_rows = np.flatnonzero(self._index.live)
        self._index.keep(live_rows)
        self._values.keep(live_rows)
        self._key_of_row = [self._key_of_row[row] for row in live_rows]
        for new_row, key in enumerate(self._key_of_row):
            assert key is not None
            self._row_of[key] = new_row
        self._dead = 0

    def add_embeddings(self, keys: Sequence[str], embeddings: Any, values: Sequence[Any]) -> None:
        """Insert keys with embeddings you already have, skipping the encoder; all or nothing.

        Args:
            keys: n keys (str).
            embeddings: (n, d) array; d must match the store's existing keys.
            values: n values.

        Raises:
            ValueShapeError: lengths differ, or the embeddings have the wrong shape.
            InvalidValueError: an embedding or value is NaN or infinite.
        """
        keys = [_check_key(key, f" (item #{i})") for i, key in enumerate(keys)]
        values = list(values)
        array = self._checked_embeddings(embeddings, "embeddings")
        if not len(keys) == len(values) == len(array):
            raise ValueShapeError(
                f"add_embeddings got {len(keys)} keys, {len(array)} embeddings and {len(values)} "
                f"values; give one embedding and one value per key"
            )
        self._insert(keys, values, embeddings=array)

    # -- soft lookup -------------------------------------------------------------------------

    def lookup(
        self,
        query: str | Sequence[str],
        *,
        min_score: float | None = None,
        default: Any = _MISSING,
        mask: Mask = None,
    ) -> Any:
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
        texts, single = self._query_texts(query)
        with self._lock:
            self._check_lookup_args(min_score, default, single)  # fail before the slow encode
        queries = self._encoder.encode_queries(texts, batch_size=self._config.batch_size)
        with self._lock:
            self._check_lookup_args(min_score, default, single)  # another thread may have written
            allowed = self._allowed_rows(mask)
            return self._lookup(queries, texts, single, min_score, default, allowed)

    def lookup_embeddings(
        self,
        queries: Any,
        *,
        min_score: float | None = None,
        default: Any = _MISSING,
        mask: Mask = None,
    ) -> Any:
        """Like ``lookup``, for query embeddings: (n, d) gives n results, (d,) gives one."""
        with self._lock:
            array, single = self._query_array(queries)
            self._check_lookup_args(min_score, default, single)
            return self._lookup(array, None, single, min_score, default, self._allowed_rows(mask))

    def attend(self, query: str | Sequence[str], *, mask: Mask = None) -> Any:
        """How ``query`` attends: an ``Attention``, or a list of them for a list of queries."""
        texts, single = self._query_texts(query)
        with self._lock:
            self._require_keys()
        queries = self._encoder.encode_queries(texts, batch_size=self._config.batch_size)
        with self._lock:
            self._require_keys()
            allowed = self._allowed_rows(mask)
            attentions = self._attentions(self._select(queries, allowed), texts)
        return attentions[0] if single else attentions

    def attend_embeddings(self, queries: Any, *, mask: Mask = None) -> Any:
        """``attend`` for query embeddings: (n, d) gives a list of n ``Attention``, (d,) one."""
        with self._lock:
            array, single = self._query_array(queries)
            self._require_keys()
            attentions = self._attentions(self._select(array, self._allowed_rows(mask)), None)
        return attentions[0] if single else attentions

    def nearest(self, query: str | Sequence[str], k: int = 3, *, mask: Mask = None) -> Any:
        """The ``k`` keys most similar to ``query``, as (key, score) pairs, best first.

        Fewer than ``k`` pairs come back when the store (or the mask) holds fewer keys. For a
        list of queries, a list of such lists.
        """
        _check_option("k", k, "a whole number >= 1", lambda v: v >= 1, whole=True)
        texts, single = self._query_texts(query)
        with self._lock:
            self._require_keys()
        queries = self._encoder.encode_queries(texts, batch_size=self._config.batch_size)
        with self._lock:
            self._require_keys()
            allowed = self._allowed_rows(mask)
            assert self._index is not None
            scores, rows = self._index.search(self._prepared_queries(queries), int(k), allowed)
            found = [
                [(self._key_of_row[r], float(s)) for r, s in zip(row_ids, row_scores) if r >= 0]
                for row_ids, row_scores in zip(rows, scores)
            ]
        return found[0] if single else found

    # -- lookup internals --------------------------------------------------------------------

    @staticmethod
    def _query_texts(query: Any) -> tuple[list[str], bool]:
        if isinstance(query, str):
            return [str(query)], True
        if isinstance(query, (bytes, Mapping)) or not isinstance(query, Iterable):
            raise KeyTypeError(
                f"a query must be a str or a sequence of str, got {type(query).__name__}"
            )
        return [_check_key(q, f" (query #{i})") for i, q in enumerate(query)], False

    def _query_array(self, queries: Any) -> tuple[np.ndarray, bool]:
        array = np.asarray(queries, dtype=np.float32)
        single = array.ndim == 1
        array = self._checked_embeddings(array[None, :] if single else array, "query embeddings")
        return array, single

    def _require_keys(self) -> None:
        if not self._row_of:
            raise EmptyStoreError(
                "soft lookup on an empty SoftDict: insert keys first "
                "(sd[key] = value, sd.update(...) or sd.add_embeddings(...))"
            )

    def _allowed_rows(self, mask: Mask) -> np.ndarray | None:
        """The rows a mask lets a query attend to, as a boolean array; None for no mask."""
        if mask is None:
            return None
        assert self._index is not None
        allowed = np.zeros(self._index.size, dtype=bool)
        if callable(mask):
            for key, row in self._row_of.items():
                if mask(key):
                    allowed[row] = True
        elif isinstance(mask, (str, bytes)) or not isinstance(mask, Iterable):
            raise KeyTypeError(
                f"mask must be an iterable of keys or a predicate key -> bool, got "
                f"{type(mask).__name__}; to allow one key, pass [key]"
            )
        else:
            rows = [
                self._row_of[key] for key in mask if isinstance(key, str) and key in self._row_of
            ]
            allowed[rows] = True
        if not allowed.any():
            raise EmptyStoreError(
                f"the mask allows none of the {len(self)} stored keys; a soft lookup needs at "
                f"least one key to attend to"
            )
        return allowed

    def _check_lookup_args(self, min_score: Any, default: Any, single: bool) -> None:
        self._require_keys()
        if min_score is not None and not (
            isinstance(min_score, numbers.Real) and math.isfinite(min_score)
        ):
            raise ConfigError(f"min_score must be a finite number or None, got {min_score!r}")
        if default is _MISSING or single or self._values is None:
            return
        # A batch result is one array, so a default has to fit in it.
        if self._values.kind is ValueKind.SCALAR:
            fits = np.ndim(default) == 0 and isinstance(default, numbers.Real)
            expected = "a number (float('nan') marks a miss)"
        elif self._values.kind is ValueKind.VECTOR:
            length = self._values.length  # type: ignore[attr-defined]
            fits = np.shape(default) == (length,) and np.issubdtype(
                np.asarray(default).dtype, np.number
            )
            expected = f"a vector of length {length}"
        else:
            return
        if not fits:
            raise ValueShapeError(
                f"a batch lookup returns one array, so default must be {expected}; got "
                f"{default!r:.60}. To get {default!r:.20} back, look the queries up one at a time"
            )

    def _prepared_queries(self, queries: np.ndarray) -> np.ndarray:
        checked = self._checked_embeddings(queries, "query embeddings")
        if self._query_projection is not None:
            checked = checked @ self._query_projection.T
        return prepare_queries(checked, self.similarity)

    def _select(self, queries: np.ndarray, allowed: np.ndarray | None) -> _Selection:
        """Score raw query embeddings and choose, per query, the rows its softmax runs over.

        Exact over every allowed key while there are at most EXACT_MAX_KEYS of them (and the
        index can score them all); otherwise top-k from the index: a fixed ``top_k``, or an
        adaptive k that grows until the tail bound is under ``tail_tolerance`` or at ``max_k``.
        """
        assert self._index is not None
        prepared = self._prepared_queries(queries)
        m = len(prepared)
        n_allowed = len(self._row_of) if allowed is None else int(allowed.sum())
        temperature = self.temperature
        top_k = self._config.top_k
        if top_k is None and self._attends_to_every_key(n_allowed):
            scores = self._index.score_all(prepared, allowed)
            return _Selection(
                scores, softmax(scores, temperature), None, np.full(m, n_allowed), np.zeros(m)
            )
        if top_k is not None:
            scores, rows = self._index.search(prepared, min(top_k, n_allowed), allowed)
        else:
            scores, rows = self._adaptive_search(prepared, allowed, n_allowed, temperature)
        return _Selection(
            scores,
            softmax(scores, temperature),
            rows,
            (rows >= 0).sum(axis=1),
            tail_mass_bound(scores, n_allowed, temperature),
        )

    def _attends_to_every_key(self, n_allowed: int) -> bool:
        """Whether attention without a fixed top_k scores every allowed key (else top-k)."""
        assert self._index is not None
        return n_allowed <= EXACT_MAX_KEYS and self._index.exact

    def _adaptive_search(
        self, queries: np.ndarray, allowed: np.ndarray | None, n_allowed: int, temperature: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k search whose k grows 4x per round, for the queries that still need it."""
        assert self._index is not None
        cap = min(self._config.max_k, n_allowed)
        if not self._index.cost_grows_with_k:
            return self._trimmed_search(queries, allowed, n_allowed, temperature, cap)
        m = len(queries)
        scores = np.full((m, cap), -np.inf)
        rows = np.full((m, cap), -1, dtype=np.int64)
        pending = np.arange(m)
        k = min(_INITIAL_K, cap)
        width = 0
        while len(pending):
            found_scores, found_rows = self._index.search(queries[pending], k, allowed)
            bound = tail_mass_bound(found_scores, n_allowed, temperature)
            # A short (padded) result means the index has no more candidates to give.
            done = (bound <= self._config.tail_tolerance) | (found_rows[:, -1] < 0) | (k >= cap)
            finished = pending[done]
            scores[finished, :k] = found_scores[done]
            rows[finished, :k] = found_rows[done]
            width = max(width, k) if len(finished) else width
            pending = pending[~done]
            k = min(4 * k, cap)
        return scores[:, :width], rows[:, :width]

    def _trimmed_search(
        self,
        queries: np.ndarray,
        allowed: np.ndarray | None,
        n_allowed: int,
        temperature: float,
        cap: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Adaptive top-k in one search, where k barely changes the cost of a search (exact
        scoring computes every score anyway; IVF scans about the same lists for any k up to
        max_k): take the top ``cap`` once and cut each query at the k the rounds would reach.
        """
        assert self._index is not None
        scores, rows = self._index.search(queries, cap, allowed)
        k = min(_INITIAL_K, cap)
        keep = np.full(len(queries), cap)
        undecided = np.ones(len(queries), dtype=bool)
        while k < cap and undecided.any():
            met = (
                tail_mass_bound(scores[:, :k], n_allowed, temperature)
                <= self._config.tail_tolerance
            )
            keep[undecided & met] = k
            undecided &= ~met
            k = min(4 * k, cap)
        beyond = np.arange(cap)[None, :] >= keep[:, None]
        return np.where(beyond, -np.inf, scores), np.where(beyond, -1, rows)

    def _lookup(
        self,
        queries: np.ndarray,
        texts: list[str] | None,
        single: bool,
        min_score: float | None,
        default: Any,
        allowed: np.ndarray | None,
    ) -> Any:
        assert self._values is not None
        selection = self._select(queries, allowed)
        blended = self._values.blend(selection.weights, self._gather_rows(selection))
        misses = np.zeros(len(selection.scores), dtype=bool)
        if min_score is not None:
            misses = selection.scores.max(axis=1) < min_score
            if misses.any() and default is _MISSING:
                first = int(np.argmax(misses))
                raise self._no_match(selection, texts, first, min_score, int(misses.sum()))
        if single:
            if misses[0]:
                return default
            return float(blended[0]) if self._values.kind is ValueKind.SCALAR else blended[0]
        for i in np.flatnonzero(misses):
            blended[i] = default  # _check_lookup_args made sure it fits the array
        return blended

    @staticmethod
    def _gather_rows(selection: _Selection) -> np.ndarray | None:
        # FAISS-style padding (-1) has weight 0; point it at row 0 so the gather stays in bounds.
        return None if selection.rows is None else np.maximum(selection.rows, 0)

    def _no_match(
        self, selection: _Selection, texts: list[str] | None, i: int, min_score: float, n: int
    ) -> NoMatchError:
        best = int(np.argmax(selection.scores[i]))
        row = best if selection.rows is None else int(selection.rows[i, best])
        what = f"query {texts[i]!r}" if texts is not None else f"query embedding #{i}"
        others = f" ({n - 1} other queries in the batch missed too)" if n > 1 else ""
        return NoMatchError(
            f"no key scored at least min_score={min_score} for {what}; the best was "
            f"{self._key_of_row[row]!r} at {selection.scores[i, best]:.4f}{others}. "
            f"Lower min_score, or pass default= to get a value back instead of this error"
        )

    def _attentions(self, selection: _Selection, texts: list[str] | None) -> list[Attention]:
        assert self._index is not None and self._values is not None
        values = self._values.blend(selection.weights, self._gather_rows(selection))
        if self._values.kind is ValueKind.SCALAR:
            values = [float(v) for v in values]
        categorical = self._values if isinstance(self._values, CategoricalColumn) else None
        # Only a label store needs the live rows (for its labels); scanning the live mask is O(n).
        live_codes = (
            categorical.live_codes(np.flatnonzero(self._index.live))
            if categorical is not None
            else None
        )
        results = []
        for i in range(len(selection.weights)):
            if selection.rows is None:
                rows = np.flatnonzero(np.isfinite(selection.scores[i]))
                weights, scores = selection.weights[i, rows], selection.scores[i, rows]
            else:
                found = selection.rows[i] >= 0
                rows = selection.rows[i, found]
                weights, scores = selection.weights[i, found], selection.scores[i, found]
            order = np.argsort(-scores, kind="stable")
            distribution = None
            if categorical is not None and live_codes is not None:
                mass = categorical.label_mass(weights[None, :], rows[None, :])[0]
                distribution = categorical.distribution(mass, live_codes)
            results.append(
                Attention(
                    query=texts[i] if texts is not None else None,
                    value=values[i],
                    keys=tuple(self._key_of_row[r] for r in rows[order]),
                    weights=weights[order],
                    scores=scores[order],
                    k=int(selection.k[i]),
                    tail_mass=float(selection.tail_mass[i]),
                    distribution=distribution,
                )
            )
        return results
