"""The index-backend protocol: where the key vectors live and how a query finds the best keys.

A backend holds prepared key vectors (see ``softdict._similarity``) under int64 ids that the store
hands out, in increasing order, and never reuses. A backend never renumbers an id: compaction,
retraining and rebuilding happen behind it. That is what lets a backend live elsewhere (a vector
database keeps its own primary keys) and lets the store keep its own layout.

Searches take an ``Allow``, the one filter type: the ids a search may return. A local backend
turns it into a FAISS ``IDSelector``; a remote one into its own filter expression. Results come
back as FAISS pads them: best first, with id -1 and score -inf where fewer than k keys qualify.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from softdict._errors import ConfigError
from softdict._files import FileReader, StoreFiles
from softdict._similarity import Metric, metric_scores
from softdict.index._code_error import CodeError
from softdict.index._ids import IdRows
from softdict.index._plug_in_checks import checked_score_all, checked_search

__all__ = [
    "Allow",
    "BackendDump",
    "Capabilities",
    "IndexBackend",
    "RowsBackend",
    "ScoreErrors",
    "is_in",
    "require_vectors",
    "sorted_unique",
]


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D integer array: a sort and a neighbour comparison, several times
    faster than numpy's hash-based unique on the thousands of ids a mask holds."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def is_in(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin(values, pool)`` of 1-D integer arrays: a sort and a binary search, for the
    few hundred ids a lookup compares (numpy's isin took 0.1 ms for 64 ids in 256, this 4 us)."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    ordered = np.sort(pool)
    at = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return np.asarray(ordered[at] == values)


@dataclass(frozen=True)
class Allow:
    """The ids a search may return: sorted, unique, every one held by the store."""

    ids: np.ndarray

    @classmethod
    def of(cls, ids: np.ndarray | list[int]) -> Allow:
        return cls(sorted_unique(np.asarray(ids, dtype=np.int64)))

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, which decides how the retrieval policy uses it.

    Attributes:
        exact: searches return the true best keys, and ``score_all`` scores every key.
        cost_grows_with_k: a larger k makes one search much slower (HNSW's efSearch must be >= k),
            so adaptive top-k searches in rounds; elsewhere one search at the largest k is cheaper.
        returns_vectors: ``vectors(ids)`` gives the stored vectors back (calibrate and fit need
            the keys' vectors; without it they refuse with a message).
        scan_max_keys: up to this many allowed keys, ``score_all`` (a scan of every key) is
            cheaper than an estimated attention's head search and sample, so full attention is
            computed exactly (0: ``score_all`` is not offered, or never cheaper).
        approximate_scores: ``score_approximately`` gives every key's compressed score with a
            bound on its error (``softdict.index.compressed``), and full attention over a large
            store is computed from them (``softdict._compressed``).
        head_share: an estimated attention's head grows past ``max_k`` to this share of the
            allowed keys, up to ``softdict._retrieval.HEAD_GROWTH_MAX`` times ``max_k`` (0:
            ``max_k`` keys), where the backend draws the tail uniformly (no ``sample_near`` of
            its own): a uniform sample's error grows with the store as a near-query draw's does
            not, and where a search is one request whatever its k (Milvus), a wider head costs
            less than the wider sample that would give the same error.
        first_sample: an estimated attention's sample starts at least this many draws (within
            ``max_sample``), where a draw costs little beside the head's search (a pass over
            every key's proxy scores, ``softdict.index.projected``) and the tail interval's rule
            alone would stop while the value's error is still large (0: ``FIRST_SAMPLE``).
        draws_outside_head: ``sample_near`` and ``sample_scored`` are given the head's ids
            (``head=``), which they may draw less often. Without it they are called as before
            that argument was added, so a plug-in written then keeps working.
        batch_queries: an estimated attention's batch goes through search and sample in chunks
            of at most this many queries (0: as many as the lookup's memory allows), where the
            backend keeps what a chunk's search computed for its draws and can keep it for only
            so many queries (the proxy scores of ``softdict.index.projected``).
    """

    exact: bool
    cost_grows_with_k: bool = False
    returns_vectors: bool = True
    scan_max_keys: int = 0
    approximate_scores: bool = False
    head_share: float = 0.0
    first_sample: int = 0
    draws_outside_head: bool = False
    batch_queries: int = 0


@dataclass(frozen=True)
class ScoreErrors:
    """Bounds on approximate scores' errors (``IndexBackend.score_approximately``), kept as
    factors: a pair per query, ``query`` (m, 2), and a pair per key, ``keys`` (2, c); the bound
    for a query and a key is the dot product of their pairs. ``of`` multiplies them out.

    ``summary``: the keys' largest factors (2,) and the columns of those scored exactly (factors
    0), where the codes keep them (``softdict.index._codes``): each is a pass over every key's
    factors otherwise, which a lookup then makes for every query."""

    query: np.ndarray
    keys: np.ndarray
    summary: tuple[np.ndarray, np.ndarray] | None = None

    def of(self, columns: np.ndarray | slice = slice(None)) -> np.ndarray:
        """(m, c) float64: the bound for each query and each key of ``columns``."""
        return self.query @ self.keys[:, columns].astype(np.float64)

    def restricted(self, columns: np.ndarray | slice, scale: float = 1.0) -> ScoreErrors:
        """The bounds of the keys ``columns`` only, times ``scale``."""
        every = isinstance(columns, slice) and columns == slice(None)
        return ScoreErrors(
            self.query * scale, self.keys[:, columns], self.summary if every else None
        )

    def largest(self) -> np.ndarray:
        """(2,) float64: each key factor's largest value (0 where there are no keys)."""
        if self.summary is not None:
            return self.summary[0]
        if not self.keys.shape[1]:
            return np.zeros(2)
        return self.keys.max(axis=1).astype(np.float64)

    def exact_columns(self) -> np.ndarray:
        """The columns of the keys scored exactly (a bound of 0 whatever the query), increasing."""
        if self.summary is not None:
            return self.summary[1]
        return np.flatnonzero((self.keys[0] == 0) & (self.keys[1] == 0))


@dataclass(frozen=True)
class BackendDump:
    """A backend's saved state: JSON-able ``meta`` for the manifest, and its files."""

    meta: dict[str, Any]
    files: StoreFiles


def require_vectors(backend: IndexBackend, caller: str) -> None:
    """ConfigError unless ``backend`` can give its vectors back, which ``caller`` needs."""
    if not backend.capabilities.returns_vectors:
        raise ConfigError(
            f"{caller} uses the stored keys' vectors, and the index {backend.describe()!r} cannot "
            f"return them; use an index that can (e.g. index='auto')"
        )


class IndexBackend(ABC):
    """Prepared key vectors under stable int64 ids, searchable by the ``metric``.

    Subclasses implement the abstract methods; ``score_all`` and ``vectors`` are needed only
    where ``capabilities`` says so.
    """

    def __init__(self, dim: int, metric: Metric) -> None:
        self.dim = dim
        self.metric = metric

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A backend defined outside softdict (a plug-in) has its search and score_all answers
        checked (``_plug_in_checks``); softdict's own are tested instead."""
        super().__init_subclass__(**kwargs)
        if cls.__module__.split(".")[0] == "softdict":
            return
        for name, check in (("search", checked_search), ("score_all", checked_score_all)):
            if name in cls.__dict__:
                setattr(cls, name, check(cls.__dict__[name]))

    @abstractmethod
    def __len__(self) -> int:
        """How many vectors it holds (removed ones not counted)."""

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What this backend can do now (it may change as the backend grows)."""

    @abstractmethod
    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add prepared ``vectors`` (n, dim) float32 under ``ids`` (n,) int64: new ids, each
        larger than any id added before, in increasing order."""

    @abstractmethod
    def remove(self, ids: np.ndarray) -> None:
        """Remove ``ids``: no search returns them again. Ids it does not hold are ignored.

        It must not fail: the store has committed to the delete. A backend that cannot compact
        or retrain now keeps what it has (tombstones) and tries again later."""

    @abstractmethod
    def ids(self) -> np.ndarray:
        """Every id held, in increasing order (int64)."""

    @abstractmethod
    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best held ids per prepared query (m, dim), best first: float64 scores
        (m, k) and int64 ids (m, k), padded with -inf and -1. One call serves the batch."""

    def score_all(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores (m, c) of prepared queries against every held (and allowed) vector, and the
        ids (c,) of those columns, in increasing order. Only where ``capabilities.exact`` or
        ``capabilities.scan_max_keys``."""
        raise NotImplementedError(f"{self.describe()} cannot score every key; search it instead")

    def sample(
        self, count: int, rng: np.random.Generator, allow: Allow | None = None
    ) -> np.ndarray:
        """``count`` held (and allowed) ids drawn uniformly with replacement: the sampled tail of
        an estimated attention (``softdict._sampling``). By default from ``ids()``; backends
        that keep rows draw rows instead of listing every id."""
        ids = allow.ids if allow is not None else self.ids()
        if not len(ids):
            return np.zeros(0, dtype=np.int64)
        return ids[rng.integers(0, len(ids), size=count)]

    def sample_near(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``count`` held (and allowed) ids drawn with replacement for the prepared ``query``
        (d,), and the probability each draw had: the sampled tail of an estimated attention at
        ``temperature``, which weighs each draw by the inverse of its probability. By default
        uniformly (``sample``); a backend that knows where the query's near keys lie may draw
        them more often (``softdict.index._cells``, ``softdict.index.projected``), as long as
        every allowed key can be drawn. ``head``: the ids the estimate counts exactly (a draw
        of one is dropped), which such a backend may draw less often."""
        ids = self.sample(count, rng, allow)
        n = len(allow) if allow is not None else len(self)
        return ids, np.full(len(ids), 1.0 / max(n, 1))

    def sample_scored(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``sample_near``'s draws and probabilities, and the draws' scores (as ``score_ids``
        gives them) where the backend gets them with the draw: a remote index then answers in
        one request, not a draw and a scoring. None: the caller scores the draws it keeps."""
        if head is None:  # as a plug-in's sample_near written before ``head`` takes it
            ids, probability = self.sample_near(query, count, rng, allow, temperature)
        else:
            ids, probability = self.sample_near(query, count, rng, allow, temperature, head)
        return ids, probability, None

    def score_approximately(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray, ScoreErrors]:
        """Every held (and allowed) key's approximate score for prepared ``queries`` (m, dim),
        float64 (m, c), their ids (c,), increasing, and the bound on each score's error.
        Only where ``capabilities.approximate_scores``."""
        raise NotImplementedError(f"{self.describe()} keeps no compressed scores")

    def code_error(self) -> CodeError | None:
        """How far the stored vectors may lie from the vectors added, where the backend keeps
        only lossy codes of them (``softdict.index._code_error``); None where they are those."""
        return None

    def carry(self, earlier: CodeError) -> None:
        """Count every vector held as the decoded vector of another store's, whose error was
        ``earlier`` (a copy of a store of codes, ``softdict.store.copying``).

        Raises:
            ConfigError: the backend cannot record it (by default).
        """
        raise ConfigError(
            f"the index {self.describe()!r} cannot record how far the vectors it is given are "
            f"from those first added (they were read from lossy codes); use the source's index"
        )

    def score_error(self, queries: np.ndarray) -> np.ndarray | None:
        """(m,) how far any key's score may be from its score against the vector added, for
        each prepared query, where the backend keeps only lossy codes of its vectors and scores
        those (``code_error``); None where its scores are exact. (Compressed scores beside exact
        vectors say their errors in ``score_approximately`` instead.)"""
        error = self.code_error()
        return None if error is None else error.of_queries(queries, self.metric)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """The prepared vectors of held ``ids`` (approximations for compressed indexes).
        Only where ``capabilities.returns_vectors``."""
        raise NotImplementedError(f"{self.describe()} cannot return its vectors")

    def score_ids(self, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Scores (m, c) of prepared queries (m, dim) against the held ``ids`` (c,), as a search
        would score them. The spelling channel asks for the keys it proposes that the search did
        not find. By default from ``vectors``, or else by a search limited to ``ids``, which an
        approximate backend without vectors should override (its search can miss some)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.capabilities.returns_vectors:
            return metric_scores(queries, self.vectors(ids), self.metric)
        columns, result = self.scores_by_search(queries, ids)
        # Back to the order asked for (the columns are sorted).
        return result[:, np.searchsorted(columns, ids)]

    def scores_by_search(
        self, queries: np.ndarray, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The distinct ``ids``, increasing (c,), and the scores (m, c) a search limited to them
        gives each prepared query; -inf for an id no search returned (one not held)."""
        allow = Allow.of(ids)
        scores, found = self.search(queries, len(allow), allow)
        result = np.full((len(queries), len(allow)), -np.inf)
        for i in range(len(queries)):
            hit = found[i] >= 0
            result[i, np.searchsorted(allow.ids, found[i, hit])] = scores[i, hit]
        return allow.ids, result

    @abstractmethod
    def describe(self) -> str:
        """A short description for people, e.g. "ivf (nlist=1264, nprobe>=16)"."""

    @abstractmethod
    def memory_bytes(self) -> int:
        """Bytes this process holds for the vectors and their ids."""

    @abstractmethod
    def dump(self) -> BackendDump:
        """The state to save; ``restore`` on a fresh backend of the same kind reads it back."""

    @abstractmethod
    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        """Replace this (empty) backend's state with a saved one; StoreFormatError if it does
        not fit (the reader names the file)."""


class RowsBackend(IndexBackend):
    """An ``IndexBackend`` that holds its vectors by row and maps rows to ids with an
    ``IdRows`` (deletes as tombstones): it counts, lists and samples its ids from the rows."""

    def __init__(self, dim: int, metric: Metric) -> None:
        super().__init__(dim, metric)
        self._rows = IdRows()

    def __len__(self) -> int:
        return self._rows.n_live

    def ids(self) -> np.ndarray:
        return self._rows.live_ids()

    def sample(
        self, count: int, rng: np.random.Generator, allow: Allow | None = None
    ) -> np.ndarray:
        # Live rows drawn directly, without listing every id; a mask lists its own ids.
        if allow is not None:
            return super().sample(count, rng, allow)
        return self._rows.sample(count, rng)
