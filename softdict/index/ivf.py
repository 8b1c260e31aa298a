"""``index="ivf"`` and ``"ivf_sq8"``: inverted lists around k-means centroids (IndexIVFFlat, or
IndexIVFScalarQuantizer with 1 byte per dimension instead of 4).

The number of lists follows the store: the index is rebuilt, retrained, each time the store has
grown 4x since it was trained, so list lengths stay balanced at any size. The number of lists
probed follows k (see ``ivf_params``): attention wants hundreds of keys, not 10.
"""

from __future__ import annotations

import math

import faiss
import numpy as np

from softdict._similarity import Metric
from softdict.index._faiss import FaissBackend, SearchPlan, SearchRequest, faiss_metric
from softdict.index.base import Capabilities

__all__ = ["MIN_TRAIN_KEYS", "IVFBackend", "ivf_params"]

# FAISS IVF parallel_mode for a single query: 0 runs it on one thread, 1 splits its lists over
# the threads. Splitting pays only while idle threads spin; with the passive OpenMP waiting that
# softdict sets (see softdict._runtime), waking them costs more, so one query runs on one thread.
_SINGLE_QUERY_PARALLEL_MODE = 0


def ivf_params(ivf: faiss.IndexIVF, minimum: int, request: SearchRequest) -> faiss.SearchParameters:
    """Probe enough lists to hold about 4·k candidates, at least ``minimum``, and more in
    proportion when only a fraction of the keys are allowed; set the threads for the batch.

    A fixed nprobe would return fewer candidates than k on small lists and miss much of the
    attention mass.
    """
    # A batch: one query per thread, FAISS's default. One query: see the constant.
    ivf.parallel_mode = _SINGLE_QUERY_PARALLEL_MODE if request.n_queries == 1 else 0
    mean_list = max(ivf.ntotal / ivf.nlist, 1.0)
    nprobe = max(minimum, math.ceil(4 * request.k / mean_list))
    nprobe /= max(min(request.fraction, 1.0), 1e-9)
    return faiss.SearchParametersIVF(
        sel=request.selector, nprobe=int(min(math.ceil(nprobe), ivf.nlist))
    )


# Below this many keys an IVF index is not worth building: exact search answers until then (see
# softdict.index.growing), faster and exactly.
MIN_TRAIN_KEYS = 2_000


def _list_count(n: int) -> int:
    # About 4·sqrt(n) lists, and at least 39 training points per list as FAISS advises.
    return int(max(1, min(4 * math.sqrt(n), n // 39)))


class IVFBackend(FaissBackend):
    """IndexIVFFlat ("Flat") or IndexIVFScalarQuantizer ("SQ8"), retrained as the store grows."""

    def __init__(self, dim: int, metric: Metric, encoding: str = "Flat", nprobe: int = 16) -> None:
        super().__init__(dim, metric)
        self.encoding, self.nprobe = encoding, nprobe
        self.name = "ivf" if encoding == "Flat" else f"ivf_{encoding.lower()}"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(exact=False)

    def min_train_size(self) -> int:
        return MIN_TRAIN_KEYS

    def builds_lossy_codes(self) -> bool:
        return self.encoding != "Flat"

    def _new_index(self, training: np.ndarray) -> faiss.Index:
        nlist = _list_count(len(training))
        metric = faiss_metric(self.metric)
        quantizer = faiss.IndexFlat(self.dim, metric)
        if self.encoding == "Flat":
            index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, metric)
        else:
            index = faiss.IndexIVFScalarQuantizer(
                quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit, metric
            )
        # k-means on a sample of 64 points per list, 10 iterations: list quality that more
        # iterations barely improve, at a training cost that stays small beside encoding.
        index.cp.max_points_per_centroid = 64
        index.cp.niter = 10
        index.train(training)
        index.make_direct_map(True)  # lets compaction reconstruct vectors by row
        return index

    def _fits(self, index: faiss.Index) -> bool:
        wanted = faiss.IndexIVFFlat if self.encoding == "Flat" else faiss.IndexIVFScalarQuantizer
        return isinstance(faiss.downcast_index(index), wanted)

    def _wants_rebuild(self, size: int, built_for: int) -> bool:
        return size >= 4 * built_for

    def _search_plan(self, index: faiss.Index, request: SearchRequest) -> SearchPlan:
        return index, ivf_params(index, self.nprobe, request)

    def describe(self) -> str:
        lists = f"nlist={self._index.nlist}, " if self._index is not None else ""
        return f"{self.name} ({lists}nprobe>={self.nprobe})"
