"""What every FAISS backend shares: rows in a FAISS index, ids by row, tombstones, rebuilds.

The FAISS index is always filled in row order without an id map, so a FAISS id is a row of this
backend, and ``IdRows`` turns rows into the store's ids. Deletes are tombstones: a deleted row
stays in the FAISS index, and every search passes FAISS an ``IDSelectorBitmap`` of the rows it may
return, so a deleted key is never returned (HNSW cannot remove vectors at all; IVF could, but
then FAISS ids would no longer be rows). The same selector carries a caller's ``Allow``. Once
tombstones outnumber live rows, the index is rebuilt from its own reconstructed vectors, so no
second copy of the embeddings is kept.

A backend whose ``_draws_by_cell`` is set also keeps k-means cells over its rows
(``softdict.index._cells``), so that the sampled tail of an estimated attention is drawn near the
query.
"""

from __future__ import annotations

import math
import re
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from softdict._files import FileReader, StoreFiles
from softdict._rows import ROWS_AT_A_TIME
from softdict._similarity import Metric
from softdict.index._by_hand import rescored, search_by_hand
from softdict.index._cells import CellSampler
from softdict.index._code_error import (
    CodeError,
    decoding_gap,
    keeps_exact_vectors,
    scores_decoded_vectors,
)
from softdict.index._ids import IdRows, increasing_ids
from softdict.index.base import Allow, BackendDump, RowsBackend
from softdict.index.exact import score_rows

__all__ = ["FaissBackend", "SearchPlan", "SearchRequest", "faiss_message", "faiss_metric"]

# Which FAISS index to search, and with which parameters.
SearchPlan = tuple[faiss.Index, faiss.SearchParameters | None]


@dataclass(frozen=True)
class SearchRequest:
    """One search, as a backend plans it: ``n_queries`` queries of ``k`` results each, limited to
    ``selector`` (None: every row), which lets ``fraction`` of the index's rows through."""

    k: int
    selector: faiss.IDSelector | None
    fraction: float
    n_queries: int


def faiss_metric(metric: Metric) -> int:
    return faiss.METRIC_L2 if metric is Metric.L2 else faiss.METRIC_INNER_PRODUCT


def faiss_message(exc: RuntimeError, fallback: str) -> str:
    """The useful last line of a FAISS error (its first lines are C++ frames), without the C++
    signature and source line it starts with."""
    text = str(exc).strip()
    if not text:
        return fallback
    line = text.splitlines()[-1]
    return _FAISS_WHERE.sub("", line) or line


# "Error in virtual void faiss::X::f(...) at /project/faiss/X.cpp:109: Error: '...' failed: ",
# as often as FAISS nests it (reconstruct_batch's around a transform's).
_FAISS_WHERE = re.compile(r"^(?:Error in .*? at \S+:\d+: (?:Error: )?)+")


class FaissBackend(RowsBackend):
    """A FAISS index over this backend's rows. Subclasses say how to build and search it."""

    # Whether the sampled tail is drawn by k-means cells near the query (else uniformly).
    _draws_by_cell = False
    # Whether a saved index of another metric is read (for its vectors only: ``reindexing``).
    reads_any_metric = False

    def __init__(self, dim: int, metric: Metric) -> None:
        super().__init__(dim, metric)
        self._index: faiss.Index | None = None
        self._built_for = 0  # keys the index was built (trained) for
        self._live_bitmap: np.ndarray | None = None  # packed live rows, rebuilt after changes
        self._cells = CellSampler(dim, metric) if self._draws_by_cell else None
        # How far the stored vectors may be from those added, for an index that keeps lossy
        # codes of them (softdict.index._code_error); None while they are the vectors added.
        self._code_error: CodeError | None = None
        # False once FAISS refused an IDSelector for this index's searches (a flat PQ, fast-scan
        # PQ): masks and tombstones are then applied without one (``_by_hand.search_by_hand``).
        self._takes_selector = True

    # -- what a subclass says --------------------------------------------------------------------

    @abstractmethod
    def _new_index(self, training: np.ndarray) -> faiss.Index:
        """An empty FAISS index, trained on ``training`` if it needs training."""

    @abstractmethod
    def _search_plan(self, index: faiss.Index, request: SearchRequest) -> SearchPlan:
        """Which index to search, with which parameters, for ``request``."""

    def _fits(self, index: faiss.Index) -> bool:
        """Whether a loaded FAISS index is of this backend's kind."""
        return True

    def _wants_rebuild(self, size: int, built_for: int) -> bool:
        """Whether an index built for ``built_for`` keys should be rebuilt now it holds ``size``."""
        return False

    def min_train_size(self) -> int:
        """How many keys building the index needs (the growing policy waits for them)."""
        return 0

    def builds_lossy_codes(self) -> bool:
        """Whether the index, once built, keeps lossy codes of the keys rather than their
        vectors (``softdict.index._code_error``)."""
        return False

    def _flat_vectors(self) -> np.ndarray | None:
        """The built index's vectors by row (tombstones included), read in place where its
        storage is a plain array numpy can scan; None where it is not (``score_all`` then
        refuses)."""
        return None

    # -- the protocol ------------------------------------------------------------------------------

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._rows.check_new(ids)
        # Everything that can fail comes first, so a failed add changes nothing.
        index = self._index if self._index is not None else self._new_index(vectors)
        first_row = index.ntotal
        index.add(vectors)
        if self._index is None:
            self._index, self._built_for = index, len(vectors)
            self._code_error = None if keeps_exact_vectors(index) else CodeError()
        if self._code_error is not None:
            self._code_error = self._measured(self._code_error.widened, index, first_row, vectors)
        self._rows.append(ids)
        self._live_bitmap = None
        if self._cells is not None:
            self._place_in_cells(vectors)
        if self._wants_rebuild(self._rows.n_live, self._built_for):
            self._try_rebuild(self._rows.live_rows())

    @staticmethod
    def _measured(
        update: Callable[[float, float], CodeError],
        index: faiss.Index,
        first_row: int,
        vectors: np.ndarray,
    ) -> CodeError:
        """The code error ``update`` gives with the decoding gap of ``vectors`` (held by
        ``index`` from ``first_row`` on), or an unknown one where FAISS cannot decode them: the
        add has happened, and must not fail now."""
        try:
            return update(*decoding_gap(index, first_row, vectors))
        except RuntimeError:
            return CodeError(math.nan, 0.0)

    def _place_in_cells(self, vectors: np.ndarray) -> None:
        """Give the rows just added their cells, training the cells first when it is time
        (a store that has grown 4x since). The add has happened: a failure to train leaves the
        cells as they were, and the sample is drawn uniformly until training succeeds."""
        cells = self._cells
        assert cells is not None
        if cells.wants_training(self._rows.n_live):
            live = self._rows.live_rows()
            try:
                cells.train(self._stored_rows(cells.training_rows(live)), len(live))
            except RuntimeError:  # FAISS k-means: not enough points after all
                pass
            else:
                parts = [
                    np.arange(start, min(start + ROWS_AT_A_TIME, self._rows.size))
                    for start in range(0, self._rows.size, ROWS_AT_A_TIME)
                ]
                cells.replace_all(
                    np.concatenate([cells.nearest(self._stored_rows(p)) for p in parts])
                )
                return
        cells.append(cells.nearest(vectors) if cells.trained else np.full(len(vectors), -1))

    def remove(self, ids: np.ndarray) -> None:
        self._rows.remove(ids)
        self._live_bitmap = None
        if self._cells is not None:
            self._cells.changed()
        if self._rows.needs_compaction:
            self._try_rebuild(self._rows.live_rows())

    def _try_rebuild(self, rows: np.ndarray) -> None:
        """Rebuild (and retrain) the index from the vectors of ``rows``, renumbered from 0.

        If FAISS cannot train on that many vectors (a product quantiser needs 256, k-means one
        per list), the index stays as it is, tombstones and all, and answers as before. With no
        rows left there is nothing to train on: the next add builds a new index."""
        assert self._index is not None
        index = None
        if len(rows):
            vectors = np.ascontiguousarray(self._stored_rows(rows), dtype=np.float32)
            try:
                index = self._new_index(vectors)
                index.add(vectors)  # an NSG graph of too few vectors fails here
            except RuntimeError:
                return
            if self._code_error is not None:  # the decoded vectors, encoded again
                self._code_error = self._measured(self._code_error.re_encoded, index, 0, vectors)
        self._rows.keep(rows)
        if self._cells is not None:
            self._cells.keep(rows)
        self._index, self._built_for, self._live_bitmap = index, len(rows), None

    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        m = len(queries)
        if self._index is None or not self._rows.n_live:
            return np.full((m, k), -np.inf), np.full((m, k), -1, dtype=np.int64)
        selector, bitmap, n_allowed = None, None, self._rows.n_live
        if allow is not None:
            rows = self._rows.rows_of(allow.ids)
            n_allowed = len(rows)
            mask = np.zeros(self._rows.size, dtype=bool)
            mask[rows] = True
            bitmap = np.packbits(mask, bitorder="little")
        elif self._rows.has_tombstones:
            if self._live_bitmap is None:
                self._live_bitmap = np.packbits(self._rows.live, bitorder="little")
            bitmap = self._live_bitmap
        if bitmap is not None:
            selector = faiss.IDSelectorBitmap(self._rows.size, faiss.swig_ptr(bitmap))
        fraction = n_allowed / max(self._rows.size, 1)
        request = SearchRequest(k, selector, fraction, m)
        queries = np.ascontiguousarray(queries)
        if selector is not None and not self._takes_selector:
            scores, rows = self._searched_by_hand(queries, k, allow)
        else:
            index, params = self._search_plan(self._index, request)
            try:
                distances, rows = index.search(queries, k, params=params)
            except RuntimeError:
                if selector is None:
                    raise
                # This index takes no selector (FAISS checks it only at search time).
                self._takes_selector = False
                scores, rows = self._searched_by_hand(queries, k, allow)
            else:
                scores = distances.astype(np.float64)
                if self.metric is Metric.L2:
                    scores = -scores  # FAISS gives squared distances, smallest first
            del bitmap  # kept alive until here: the selector points into it
        if self._code_error is not None and not scores_decoded_vectors(self._index):
            scores, rows = rescored(self._stored_rows, self.metric, queries, scores, rows)
        return np.where(rows >= 0, scores, -np.inf), self._rows.ids_of(rows)

    def _searched_by_hand(
        self, queries: np.ndarray, k: int, allow: Allow | None
    ) -> tuple[np.ndarray, np.ndarray]:
        assert self._index is not None
        stored, metric = self._stored_rows, self.metric
        return search_by_hand(self._index, self._rows, stored, metric, queries, k, allow)

    def code_error(self) -> CodeError | None:
        return self._code_error

    def carry(self, earlier: CodeError) -> None:
        self._code_error = (self._code_error or CodeError()).carried(earlier)

    def score_all(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._index is None:
            return np.zeros((len(queries), 0)), np.zeros(0, dtype=np.int64)
        vectors = self._flat_vectors()
        if vectors is None:
            return super().score_all(queries, allow)
        return score_rows(queries, vectors, self._rows, allow, self.metric)

    def sample_near(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        # The cells' proposal ignores ``head``: a cell holds about 500 keys, the head's among them.
        if self._cells is None or not self._cells.trained or allow is not None:
            return super().sample_near(query, count, rng, allow, temperature, head)
        rows, probability = self._cells.draw(query, count, rng, self._rows.live, temperature)
        return self._rows.ids_of(rows), probability

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        rows = self._rows.rows_of(np.asarray(ids, dtype=np.int64))
        if len(rows) != len(ids) or self._index is None:
            raise KeyError("vectors() asked for ids this backend does not hold")
        return np.asarray(self._stored_rows(rows), dtype=np.float32)

    def _stored_rows(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of FAISS ``rows`` (a copy); a backend whose storage numpy can read in
        place overrides it."""
        assert self._index is not None
        return self._index.reconstruct_batch(rows)

    def memory_bytes(self) -> int:
        index_bytes = faiss.serialize_index(self._index).nbytes if self._index is not None else 0
        cell_bytes = self._cells.nbytes() if self._cells is not None else 0
        return int(index_bytes + self._rows.nbytes() + cell_bytes)

    def dump(self) -> BackendDump:
        files: StoreFiles = {
            "index_ids.npy": self._rows.ids.copy(),
            "index_live.npy": self._rows.live.copy(),
        }
        if self._index is not None:
            files["index.faiss"] = faiss.serialize_index(self._index).tobytes()
        meta: dict[str, Any] = {"built_for": self._built_for}
        if self._code_error is not None:
            meta["code_error"] = self._code_error.meta()
        if self._cells is not None and self._cells.centroids is not None:
            files["index_cells.npy"] = self._cells.cells.copy()
            files["index_centroids.npy"] = self._cells.centroids.copy()
            meta["cells_trained_for"] = self._cells.trained_for
        return BackendDump(meta, files)

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        ids = files.npy("index_ids.npy", np.int64, (None,))
        live = files.npy("index_live.npy", np.bool_, (len(ids),))
        if not increasing_ids(ids):
            raise files.error("index_ids.npy", "holds ids that are negative or not increasing")
        if not len(ids):
            return
        try:
            index = faiss.deserialize_index(np.frombuffer(files.raw("index.faiss"), np.uint8))
        except RuntimeError as exc:
            raise files.error(
                "index.faiss", f"cannot be read by FAISS ({faiss_message(exc, 'unreadable')})"
            ) from None
        if index.d != self.dim or index.ntotal != len(ids):
            raise files.error(
                "index.faiss",
                f"does not fit the store: it holds {index.ntotal} vectors of {index.d} dims, "
                f"the store {len(ids)} of {self.dim}",
            )
        if (
            index.metric_type != faiss_metric(self.metric) and not self.reads_any_metric
        ) or not self._fits(index):
            raise files.error(
                "index.faiss", f"is not a {self.describe()} index with this store's metric"
            )
        built_for = meta.get("built_for", index.ntotal)  # format 1 did not record it
        if not isinstance(built_for, int) or built_for < 0:
            raise files.error("manifest.json", f"has an invalid index built_for {built_for!r}")
        code_error, saved = None, meta.get("code_error")
        # An index of exact vectors has one where they were decoded from another's codes
        # (carried: a reindexed or copied store; a reindexed one lost it to its save); one of
        # codes saved before it was kept: not known (a bound of 1).
        if saved is not None or not keeps_exact_vectors(index):
            code_error = CodeError.from_meta(saved or {"radius": None, "norm": 0})
            if code_error is None:
                raise files.error("manifest.json", "has an invalid index code_error")
        if self._cells is not None:
            self._restore_cells(meta, files, len(ids))
        self._index, self._built_for, self._code_error = index, int(built_for), code_error
        self._rows = IdRows.restored(ids, live)
        self._live_bitmap = None

    def _restore_cells(self, meta: dict[str, Any], files: FileReader, n_rows: int) -> None:
        """The saved cells, checked. A store saved without them (before they existed) draws its
        sample uniformly until the cells are trained, at its next insert."""
        assert self._cells is not None
        if not files.has("index_cells.npy"):
            self._cells.append(np.full(n_rows, -1))  # no cell yet: none trained
            return
        centroids = files.finite_npy("index_centroids.npy", np.float32, (None, self.dim))
        cells = files.npy("index_cells.npy", np.int32, (n_rows,))
        if not len(centroids) or (
            len(cells) and (cells.min() < 0 or cells.max() >= len(centroids))
        ):
            raise files.error("index_cells.npy", f"names cells outside 0..{len(centroids) - 1}")
        trained_for = meta.get("cells_trained_for")
        if not isinstance(trained_for, int) or trained_for < 1:
            raise files.error("manifest.json", f"has an invalid cells_trained_for {trained_for!r}")
        self._cells.set_centroids(centroids, trained_for)
        self._cells.replace_all(cells)
