"""Where key embeddings live and how a query finds the keys it attends to.

One class, ``KeyIndex``, holds the prepared key vectors by row; an ``IndexSpec`` says which FAISS
index to build for how many keys. The mapping only sees ``KeyIndex``.

Rows are ids. A key keeps its row from insert until it is deleted; rows are renumbered only by
``keep`` (compaction, which the mapping calls once deleted rows outnumber live ones). The FAISS
index is always filled in row order without an id map, so a FAISS id *is* a row.

Deletes are tombstones: a deleted row stays in the FAISS index, and every search passes FAISS an
``IDSelectorBitmap`` of the live rows, so a deleted key is never returned, on any backend
(HNSW cannot remove vectors at all; IVF could, but then ids would no longer be rows). Compaction
rebuilds the FAISS index from its own reconstructed vectors, so no second copy of the embeddings is
kept. The same selector restricts a search to a caller's key subset (masked attention).

While a store is small, or while a trainable index has too few keys to train on, vectors are kept
in a numpy array and searched exactly; the FAISS index is built once there are enough.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import faiss
import numpy as np

from softdict._attention import prepared_scores
from softdict._config import Similarity
from softdict._errors import ConfigError
from softdict._rows import GrowableRows

__all__ = ["EXACT_MAX_KEYS", "IndexSpec", "KeyIndex", "index_spec", "top_of_scores"]

# index="auto" attends exactly over every key up to this many: one query then costs about 0.5 ms
# in numpy (benchmarks/scale.py; 88 ms at 10^6 keys x 384 dims), and the answer is exact.
EXACT_MAX_KEYS = 10_000

# A selector that lets through less than this fraction of the rows makes graph and cluster search
# miss most allowed keys; below it HNSW searches its flat storage and IVF probes more lists.
_SPARSE_MASK_FRACTION = 0.05


# FAISS IVF parallel_mode for a single query: 0 runs it on one thread, 1 splits its lists over
# the threads. Splitting pays only while idle threads spin; with the passive OpenMP waiting that
# softdict sets (see _runtime), waking them costs more: in a one-off probe at 10^6 keys,
# k = 1024, on 2 cores, mode 0 was the faster of the two.
_SINGLE_QUERY_PARALLEL_MODE = 0


def _metric(similarity: Similarity) -> int:
    return faiss.METRIC_L2 if similarity is Similarity.L2 else faiss.METRIC_INNER_PRODUCT


def _faiss_message(exc: RuntimeError, fallback: str) -> str:
    """The useful last line of a FAISS error (its first lines are C++ frames)."""
    text = str(exc).strip()
    return text.splitlines()[-1] if text else fallback


def _hnsw_params(
    ef_search: int, k: int, selector: faiss.IDSelector | None
) -> faiss.SearchParameters:
    # The graph search keeps efSearch candidates; it must be at least k to return k results.
    return faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef_search, k))


class IndexSpec(ABC):
    """Which FAISS index to build, when it can be built, and how to search it."""

    name: str

    def min_train_size(self, dim: int) -> int:
        """Keys needed before the FAISS index is built; until then search is exact in numpy."""
        return 0

    @abstractmethod
    def build(self, vectors: np.ndarray, similarity: Similarity) -> faiss.Index:
        """An empty FAISS index, trained on ``vectors`` if it needs training."""

    def search_params(
        self, index: faiss.Index, k: int, selector: faiss.IDSelector | None, fraction: float
    ) -> faiss.SearchParameters | None:
        """Parameters for a ``k``-result search, limited to ``selector`` (``fraction`` of rows)."""
        return faiss.SearchParameters(sel=selector) if selector is not None else None

    def wants_rebuild(self, size: int, built_for: int) -> bool:
        """Whether an index built for ``built_for`` keys should be rebuilt now it holds ``size``."""
        return False

    def describe(self, index: faiss.Index | None) -> str:
        return self.name


class FlatSpec(IndexSpec):
    """Exact search: every key scored. FAISS IndexFlatIP, or IndexFlatL2 for "l2"."""

    name = "flat"

    def build(self, vectors: np.ndarray, similarity: Similarity) -> faiss.Index:
        return faiss.IndexFlat(vectors.shape[1], _metric(similarity))


class HNSWSpec(IndexSpec):
    """A navigable small-world graph (IndexHNSWFlat): fast, approximate, no training needed."""

    name = "hnsw"

    def __init__(self, m: int = 32, ef_construction: int = 40, ef_search: int = 128) -> None:
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search

    def build(self, vectors: np.ndarray, similarity: Similarity) -> faiss.Index:
        index = faiss.IndexHNSWFlat(vectors.shape[1], self.m, _metric(similarity))
        index.hnsw.efConstruction = self.ef_construction
        return index

    def search_params(
        self, index: faiss.Index, k: int, selector: faiss.IDSelector | None, fraction: float
    ) -> faiss.SearchParameters:
        return _hnsw_params(self.ef_search, k, selector)

    def describe(self, index: faiss.Index | None) -> str:
        return f"hnsw (M={self.m}, efSearch={self.ef_search})"


def _ivf_params(
    ivf: faiss.IndexIVF, minimum: int, k: int, selector: faiss.IDSelector | None, fraction: float
) -> faiss.SearchParameters:
    """Probe enough lists to hold about 4·k candidates, at least ``minimum``, and more in
    proportion when a mask lets only ``fraction`` of the keys through.

    Attention wants hundreds of keys, not 10: a fixed nprobe would return fewer candidates than
    k on small lists and miss much of the attention mass.
    """
    mean_list = max(ivf.ntotal / ivf.nlist, 1.0)
    nprobe = max(minimum, math.ceil(4 * k / mean_list)) / max(min(fraction, 1.0), 1e-9)
    return faiss.SearchParametersIVF(sel=selector, nprobe=int(min(math.ceil(nprobe), ivf.nlist)))


def _ivf_list_count(n: int) -> int:
    # About 4·sqrt(n) lists, and at least 39 training points per list as FAISS advises.
    return int(max(1, min(4 * math.sqrt(n), n // 39)))


class IVFSpec(IndexSpec):
    """Inverted lists around k-means centroids (IndexIVFFlat, or IndexIVFScalarQuantizer for the
    compressed "ivf_sq8": 1 byte per dimension instead of 4).

    The number of lists follows the store: the index is rebuilt, retrained, each time the store
    has grown 4x since it was trained, so list lengths stay balanced at any size. The number of
    lists probed follows k (see ``_ivf_params``).
    """

    def __init__(self, encoding: str = "Flat", nprobe: int = 16, min_keys: int = 2_000) -> None:
        self.encoding, self.nprobe, self.min_keys = encoding, nprobe, min_keys
        self.name = "ivf" if encoding == "Flat" else f"ivf_{encoding.lower()}"

    def min_train_size(self, dim: int) -> int:
        return self.min_keys

    def build(self, vectors: np.ndarray, similarity: Similarity) -> faiss.Index:
        n, dim = vectors.shape
        nlist = _ivf_list_count(n)
        quantizer = faiss.IndexFlat(dim, _metric(similarity))
        if self.encoding == "Flat":
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, _metric(similarity))
        else:
            index = faiss.IndexIVFScalarQuantizer(
                quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, _metric(similarity)
            )
        # k-means on a sample of 64 points per list, 10 iterations: about a minute for 10^6 keys
        # on 2 cores, and list quality that more iterations barely improve.
        index.cp.max_points_per_centroid = 64
        index.cp.niter = 10
        index.train(vectors)
        index.make_direct_map(True)  # lets compaction reconstruct vectors by row
        return index

    def search_params(
        self, index: faiss.Index, k: int, selector: faiss.IDSelector | None, fraction: float
    ) -> faiss.SearchParameters:
        return _ivf_params(index, self.nprobe, k, selector, fraction)

    def wants_rebuild(self, size: int, built_for: int) -> bool:
        return size >= 4 * built_for

    def describe(self, index: faiss.Index | None) -> str:
        lists = f"nlist={index.nlist}, " if index is not None else ""
        return f"{self.name} ({lists}nprobe>={self.nprobe})"


class AutoSpec(IVFSpec):
    """index="auto": exact over all keys up to EXACT_MAX_KEYS, then IVF-Flat."""

    name = "auto"

    def min_train_size(self, dim: int) -> int:
        return EXACT_MAX_KEYS + 1

    def describe(self, index: faiss.Index | None) -> str:
        return "auto: exact" if index is None else f"auto: {super().describe(index)}"


class FactorySpec(IndexSpec):
    """Any FAISS ``index_factory`` string, e.g. "IVF1024,PQ48" or "HNSW16"."""

    def __init__(self, factory: str) -> None:
        self.name = factory

    def min_train_size(self, dim: int) -> int:
        # The first use with the real dimension: where a dimension-dependent string is checked.
        try:
            probe = faiss.index_factory(dim, self.name)
        except RuntimeError as exc:
            raise ConfigError(
                f"index={self.name!r} cannot be built for {dim}-dim embeddings "
                f"({_faiss_message(exc, '')}); choose parameters that fit {dim} dimensions"
            ) from None
        if probe.is_trained:
            return 0
        ivf = faiss.try_extract_index_ivf(probe)
        # k-means wants ~39 points per centroid; product quantisers want 256 per code.
        return max(256, 39 * ivf.nlist) if ivf is not None else 1_000

    def build(self, vectors: np.ndarray, similarity: Similarity) -> faiss.Index:
        index = faiss.index_factory(vectors.shape[1], self.name, _metric(similarity))
        if not index.is_trained:
            index.train(vectors)
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.make_direct_map(True)
        return index

    def search_params(
        self, index: faiss.Index, k: int, selector: faiss.IDSelector | None, fraction: float
    ) -> faiss.SearchParameters | None:
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            return _ivf_params(ivf, ivf.nprobe, k, selector, fraction)
        if isinstance(index, faiss.IndexHNSW):
            return _hnsw_params(index.hnsw.efSearch, k, selector)
        return super().search_params(index, k, selector, fraction)


def index_spec(name: str) -> IndexSpec:
    """The spec for an ``index=`` option.

    A FAISS factory string is parsed here; whether it fits the embeddings (a product quantiser
    needs d divisible by its code count) can only be checked once their dimension is known, so
    ``FactorySpec.min_train_size`` checks that when the store's index is first created.
    """
    named: dict[str, IndexSpec] = {
        "auto": AutoSpec(),
        "flat": FlatSpec(),
        "hnsw": HNSWSpec(),
        "ivf": IVFSpec(),
        "ivf_sq8": IVFSpec(encoding="SQ8"),
    }
    if name in named:
        return named[name]
    try:
        faiss.index_factory(8, name)
    except RuntimeError as exc:
        if "could not parse" not in str(exc):
            return FactorySpec(name)  # parsed, but does not fit 8 dimensions: checked later
        raise ConfigError(
            f"index={name!r} is neither one of {sorted(named)} nor a FAISS index_factory string "
            f"({_faiss_message(exc, '')}); see the FAISS wiki page 'The index factory' for the "
            f"syntax"
        ) from None
    return FactorySpec(name)


class KeyIndex:
    """Prepared key vectors by row: exact in numpy while small, then in a FAISS index."""

    def __init__(self, dim: int, similarity: Similarity, spec: IndexSpec) -> None:
        self.dim = dim
        self.similarity = similarity
        self.spec = spec
        self._live = GrowableRows((), np.bool_)
        self._n_live = 0  # kept up to date, so a search need not count a million-row mask
        self._staged: GrowableRows | None = GrowableRows((dim,), np.float32)
        self._staged_sq_norms = GrowableRows((), np.float64)  # cached for "l2"
        self._faiss: faiss.Index | None = None
        self._built_for = 0
        self._live_bitmap: np.ndarray | None = None  # packed live mask, rebuilt after changes
        self._min_train = spec.min_train_size(dim)
        self._maybe_build()

    # -- state ---------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of rows, deleted ones included."""
        return len(self._live)

    @property
    def live(self) -> np.ndarray:
        """Boolean mask of the rows that hold a key."""
        return self._live.view

    @property
    def cost_grows_with_k(self) -> bool:
        """True where a larger k makes a search much slower (HNSW's efSearch must be >= k), so
        adaptive top-k should search in rounds; elsewhere one search at the largest k is cheaper.
        """
        return isinstance(self._faiss, faiss.IndexHNSW)

    @property
    def exact(self) -> bool:
        """True when ``score_all`` is available: every key can be scored."""
        return self._faiss is None or isinstance(self._faiss, faiss.IndexFlat)

    def describe(self) -> str:
        return self.spec.describe(self._faiss)

    def memory_bytes(self) -> int:
        """Bytes held for the key vectors: the FAISS index as serialised, or the numpy rows."""
        if self._faiss is None:
            assert self._staged is not None
            return int(self._staged.view.nbytes + self._live.view.nbytes)
        return int(faiss.serialize_index(self._faiss).nbytes + self._live.view.nbytes)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The prepared vectors of ``rows`` (approximations for compressed indexes)."""
        if self._faiss is None:
            assert self._staged is not None
            return self._staged.view[rows]
        return self._faiss.reconstruct_batch(np.asarray(rows, dtype=np.int64))

    # -- saving --------------------------------------------------------------------------------

    def export(self) -> tuple[np.ndarray, np.ndarray | None, bytes | None]:
        """For saving: (live mask, vectors by row, serialised FAISS index).

        Exact stores give their vectors (rebuilding a flat index is one copy); the others give
        the FAISS index, whose training and graph would be slow to rebuild.
        """
        live = self._live.view.copy()
        if self._faiss is None:
            assert self._staged is not None
            return live, self._staged.view.copy(), None
        if isinstance(self._faiss, faiss.IndexFlat):
            return live, self._faiss.reconstruct_n(0, self._faiss.ntotal), None
        return live, None, faiss.serialize_index(self._faiss).tobytes()

    @classmethod
    def restore(
        cls,
        dim: int,
        similarity: Similarity,
        spec: IndexSpec,
        live: np.ndarray,
        vectors: np.ndarray | None,
        faiss_bytes: bytes | None,
    ) -> KeyIndex:
        """Rebuild from ``export`` output; raises ValueError if the FAISS bytes do not fit."""
        index = cls(dim, similarity, spec)
        if vectors is not None:
            index.add(vectors)  # the insert path: exact numpy, or a flat FAISS index
        else:
            assert faiss_bytes is not None
            try:
                restored = faiss.deserialize_index(np.frombuffer(faiss_bytes, dtype=np.uint8))
            except RuntimeError as exc:
                reason = _faiss_message(exc, "unreadable")
                raise ValueError(f"FAISS cannot read it ({reason})") from None
            if restored.d != dim or restored.ntotal != len(live):
                raise ValueError(
                    f"it holds {restored.ntotal} vectors of {restored.d} dims, the manifest "
                    f"{len(live)} of {dim}"
                )
            index._faiss, index._staged, index._built_for = restored, None, restored.ntotal
            index._live.append(np.ones(len(live), dtype=np.bool_))
        index._live.view[:] = live
        index._n_live = int(live.sum())
        index._live_bitmap = None
        return index

    # -- changes -------------------------------------------------------------------------------

    def add(self, vectors: np.ndarray) -> None:
        """Append prepared vectors (n, dim) as new live rows."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._live.append(np.ones(len(vectors), dtype=np.bool_))
        self._n_live += len(vectors)
        self._live_bitmap = None
        if self._faiss is None:
            assert self._staged is not None
            self._staged.append(vectors)
            self._staged_sq_norms.append(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64))
            self._maybe_build()
        else:
            self._faiss.add(vectors)
            if self.spec.wants_rebuild(self.size, self._built_for):
                self._rebuild(self._all_vectors())

    def remove(self, rows: np.ndarray) -> None:
        """Mark rows deleted; no search or score returns them again."""
        self._n_live -= int(self._live.view[rows].sum())
        self._live.view[rows] = False
        self._live_bitmap = None

    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows``, renumbered 0..len(rows)-1 in that order (compaction)."""
        if self._faiss is None:
            assert self._staged is not None
            self._staged.keep(rows)
            self._staged_sq_norms.keep(rows)
        else:
            self._rebuild(self._all_vectors()[rows])
        self._live.keep(rows)
        self._n_live = int(self._live.view.sum())
        self._live_bitmap = None

    def _maybe_build(self) -> None:
        """Move the staged vectors into a FAISS index once there are enough to build it."""
        if self._staged is None or self.size < self._min_train:
            return
        try:
            self._rebuild(self._staged.view)
        except RuntimeError:
            # Too few points for this factory's training after all: stay exact a while longer.
            self._min_train = 2 * self.size
            return
        self._staged = None
        self._staged_sq_norms = GrowableRows((), np.float64)

    def _rebuild(self, vectors: np.ndarray) -> None:
        index = self.spec.build(vectors, self.similarity)
        index.add(np.ascontiguousarray(vectors))
        self._faiss, self._built_for = index, len(vectors)

    def _all_vectors(self) -> np.ndarray:
        assert self._faiss is not None
        return self._faiss.reconstruct_n(0, self._faiss.ntotal)

    # -- search --------------------------------------------------------------------------------

    def _allowed(self, allowed: np.ndarray | None) -> np.ndarray:
        return self.live if allowed is None else self.live & allowed

    def score_all(self, queries: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
        """Scores (m, size) of prepared queries against every row; -inf where not allowed."""
        if self._faiss is None:
            assert self._staged is not None
            vectors, sq_norms = self._staged.view, self._staged_sq_norms.view
        else:
            assert isinstance(self._faiss, faiss.IndexFlat), "score_all needs an exact index"
            # A zero-copy view of the flat index's own storage.
            vectors = faiss.rev_swig_ptr(self._faiss.get_xb(), self.size * self.dim)
            vectors = vectors.reshape(self.size, self.dim)
            sq_norms = None
        scores = prepared_scores(queries, vectors, self.similarity, sq_norms)
        scores[:, ~self._allowed(allowed)] = -np.inf
        return scores

    def search(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best allowed live rows per query, best first: scores (m, k), rows (m, k).

        Where fewer than ``k`` rows are found, the tail is padded with row -1 and score -inf,
        the way FAISS pads its results. One call searches the whole batch.
        """
        if self.exact or self.size == 0:
            # One matrix product and a partial sort beat FAISS's single-query flat scan, whose
            # k-sized heap is slow for the hundreds of keys attention asks for.
            return self._search_exact(queries, k, allowed)
        mask = self._allowed(allowed)
        n_allowed = self._n_live if allowed is None else int(mask.sum())
        selector, bitmap = None, None
        if n_allowed < self.size:
            bitmap = self._bitmap(mask, cached=allowed is None)
            selector = faiss.IDSelectorBitmap(self.size, faiss.swig_ptr(bitmap))
        fraction = n_allowed / max(self.size, 1)
        index = self._faiss
        assert index is not None  # not exact, so the FAISS index exists
        if isinstance(index, faiss.IndexHNSW) and fraction < _SPARSE_MASK_FRACTION:
            # The graph walk would rarely meet an allowed row: score the flat storage instead.
            index = faiss.downcast_index(index.storage)
            params = faiss.SearchParameters(sel=selector)
        else:
            params = self.spec.search_params(index, k, selector, fraction)
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            # A batch: one query per thread, FAISS's default. One query: see the constant.
            ivf.parallel_mode = _SINGLE_QUERY_PARALLEL_MODE if len(queries) == 1 else 0
        distances, rows = index.search(np.ascontiguousarray(queries), k, params=params)
        del bitmap  # kept alive until here: the selector points into it
        scores = distances.astype(np.float64)
        if self.similarity is Similarity.L2:
            scores = -scores
        return np.where(rows >= 0, scores, -np.inf), rows.astype(np.int64)

    def _bitmap(self, mask: np.ndarray, cached: bool) -> np.ndarray:
        if not cached:
            return np.packbits(mask, bitorder="little")
        if self._live_bitmap is None:
            self._live_bitmap = np.packbits(mask, bitorder="little")
        return self._live_bitmap

    def _search_exact(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        return top_of_scores(self.score_all(queries, allowed), k)


def top_of_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best entries of each row of a score matrix (m, n), best first: scores and
    columns (m, k). Entries scored -inf, and the tail where n < k, are padded with column -1."""
    m, n = scores.shape
    take = min(k, n)
    if take < n:
        part = np.argpartition(-scores, take - 1, axis=1)[:, :take]
    else:
        part = np.broadcast_to(np.arange(n), (m, n))
    part_scores = np.take_along_axis(scores, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    rows = np.take_along_axis(part, order, axis=1)
    best = np.take_along_axis(part_scores, order, axis=1)
    rows = np.where(np.isfinite(best), rows, -1)
    if take < k:
        rows = np.pad(rows, ((0, 0), (0, k - take)), constant_values=-1)
        best = np.pad(best, ((0, 0), (0, k - take)), constant_values=-np.inf)
    return best, rows
