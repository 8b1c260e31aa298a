"""``MilvusBackend``: the index backend of a Milvus store, where Milvus holds and searches the
vectors. This process holds none of them, except where the store keeps a small store's vectors
(``local_vectors``): then searching and scoring every key are done here, exactly, by numpy.

An ``Allow`` becomes the cheapest filter Milvus offers for it: a handful of ids is scored here
from their vectors (one get, no filter), a mask that allows most keys becomes ``id not in`` its
complement, and any other becomes ``id in`` its ids (a filter's cost grows with its length). A k
beyond Milvus's 16,384 results per query is searched in rounds, each excluding the keys found.

A store's keys have ids that are uniform hashes of their texts (``_ids``), so the keys whose ids
lie in a random range of the id space are a uniform sample of them: a store's backend
(``count`` given) draws the sampled tail that way (``KeyRows.draw_by_id``), listing no id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from softdict._errors import StoreUnavailableError
from softdict._files import FileReader
from softdict._similarity import metric_scores
from softdict.index.base import Allow, BackendDump, Capabilities, IndexBackend
from softdict.store.milvus._client import MAX_TOPK
from softdict.store.milvus._collection import KeyRows, SeenKeys, seen_columns

__all__ = ["CLIENT_SIDE_MAX", "HEAD_SHARE", "IN_LIST_MAX", "MilvusBackend"]

# Up to this many allowed keys, a masked search fetches their vectors and scores them here: one
# get by primary key is cheaper than a filtered search, and exact.
CLIENT_SIDE_MAX = 64
# The head of an estimated attention holds this share of the allowed keys where it is more than
# max_k (``Capabilities.head_share``): the tail is a uniform sample here, whose error grows with
# the store. On the served binary (benchmarks/results_milvus.md), the head of 1,559 keys at 10^5
# erred by 1.5% at 2.8x Milvus alone's search (1,024 keys: 1.8%, 2.7x), and of 4,096 at 10^6 by
# 2.2% at 1.7x (1,024: 3.8%), as the memory store's near-query sample does (1.6%, 2.3%); a
# sample three times larger gave 2.6% at 10^6 for twice the time the wider head added.
HEAD_SHARE = 1 / 64
# Up to this many allowed keys, a filter lists them ("id in [...]", ~20 bytes an id).
IN_LIST_MAX = 16384


def _rows_of(held: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The positions in ``held`` (increasing) of the ``ids`` it holds, in their order."""
    if not len(held):
        return np.zeros(0, dtype=np.int64)
    rows = np.searchsorted(held, ids).clip(0, len(held) - 1)
    return rows[held[rows] == ids]


def _best(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``scores`` (m, c) over the columns' ``ids``, best first, padded with
    -inf and -1 as a search pads them."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    padded_scores = np.full((len(scores), k), -np.inf)
    padded_ids = np.full((len(scores), k), -1, dtype=np.int64)
    width = order.shape[1]
    padded_scores[:, :width] = np.take_along_axis(scores, order, axis=1)
    padded_ids[:, :width] = ids[order]
    return padded_scores, padded_ids


def _ids_expression(operator: str, ids: np.ndarray) -> str:
    return f"id {operator} [{', '.join(str(int(i)) for i in ids)}]"


class MilvusBackend(IndexBackend):
    """Vectors in the Milvus collection ``rows`` (see the module docstring).

    ``held_ids`` lists every id held, increasing; by default by reading every row's id, and a
    store passes its own cached list. ``local_vectors`` gives the ids (increasing) and vectors of
    a store small enough to keep them in this process, checked current by the store, or None:
    then scoring every key (``score_all``) and ``vectors`` need not ask Milvus. ``count`` gives
    the number of keys held, where their ids are hashes of their texts (a store's): then samples
    are drawn by id range. ``seen`` is told the rows (keys and values) that come back with
    searches, samples and vectors fetched (a store then needs not fetch them again).
    """

    def __init__(
        self,
        rows: KeyRows,
        held_ids: Callable[[], np.ndarray] | None = None,
        local_vectors: Callable[[], tuple[np.ndarray, np.ndarray] | None] | None = None,
        count: Callable[[], int] | None = None,
        seen: SeenKeys | None = None,
    ) -> None:
        super().__init__(rows.dim, rows.metric)
        self.rows = rows
        self._held_ids = held_ids or self._scan_ids
        self._local_vectors = local_vectors or (lambda: None)
        self._count = count
        self._seen = seen

    def _scan_ids(self) -> np.ndarray:
        if not self.rows.exists():
            return np.zeros(0, dtype=np.int64)
        found = [row["id"] for batch in self.rows.scan(["id"]) for row in batch]
        return np.sort(np.asarray(found, dtype=np.int64))

    def __len__(self) -> int:
        return self.rows.count()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            exact=self.rows.index == "FLAT", returns_vectors=True, head_share=HEAD_SHARE
        )

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        # Only where the backend is used alone (the store writes whole rows itself).
        self.rows.upsert(
            [
                {"id": int(i), "key": "", "order": int(i), "value": {"v": None}, "vector": v}
                for i, v in zip(np.asarray(ids).tolist(), np.asarray(vectors, np.float32))
            ]
        )

    def remove(self, ids: np.ndarray) -> None:
        self.rows.delete(np.asarray(ids, dtype=np.int64))

    def ids(self) -> np.ndarray:
        return self._held_ids()

    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = np.asarray(queries, dtype=np.float32)
        local = self._local_vectors()
        if local is not None:  # a small store's vectors, kept here: an exact search here
            held, vectors = local
            rows = _rows_of(held, allow.ids) if allow is not None else np.arange(len(held))
            return _best(metric_scores(queries, vectors[rows], self.metric), held[rows], k)
        if allow is not None and len(allow) <= CLIENT_SIDE_MAX:
            return self._scored_here(queries, k, allow.ids)
        expression = self.filter_of(allow)
        if k <= MAX_TOPK:
            return self.rows.search(queries, k, expression, self._seen)
        return self._search_in_rounds(queries, k, expression)

    def filter_of(self, allow: Allow | None) -> str:
        """The Milvus filter that admits the keys ``allow`` allows ("" for all)."""
        if allow is None:
            return ""
        # A long list of most keys is shorter as its complement, which lists every id held; a
        # list of a few thousand ids (a sampled tail, a top-k's rescoring) is sent as it is.
        if len(allow) <= IN_LIST_MAX:
            return _ids_expression("in", allow.ids)
        count = self._count() if self._count is not None else len(self.ids())
        if len(allow) > count // 2:
            rest = np.setdiff1d(self.ids(), allow.ids, assume_unique=True)
            return _ids_expression("not in", rest) if len(rest) else ""
        return _ids_expression("in", allow.ids)

    def _scored_here(
        self, queries: np.ndarray, k: int, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        held, vectors = self._vectors_found(ids)
        return _best(metric_scores(queries, vectors, self.metric), held, k)

    def _search_in_rounds(
        self, queries: np.ndarray, k: int, expression: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """More than ``MAX_TOPK`` keys per query: each round excludes what earlier ones found."""
        scores = np.full((len(queries), k), -np.inf)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        for i in range(len(queries)):
            found = 0
            while found < k:
                excluded = _ids_expression("not in", ids[i, :found]) if found else ""
                both = " and ".join(f"({e})" for e in (expression, excluded) if e)
                width = min(MAX_TOPK, k - found)
                part_scores, part_ids = self.rows.search(queries[i : i + 1], width, both)
                got = int((part_ids[0] >= 0).sum())
                scores[i, found : found + got] = part_scores[0, :got]
                ids[i, found : found + got] = part_ids[0, :got]
                found += got
                if got < width:
                    break
        return scores, ids

    def sample_near(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Uniform draws (``IndexBackend.sample_near``): by id range where the ids are hashes
        (see the module docstring). A range's keys come without replacement, and each kept draw
        stands for n/M keys, as a uniform draw with replacement would."""
        ids, probability, _ = self._drawn(query, count, rng, allow, temperature, scored=False)
        return ids, probability

    def sample_scored(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``sample_near``'s draws with their scores, in one search of the id ranges where the
        index is exact (FLAT scores every row a filter passes; IVF would miss some)."""
        exact = self.rows.index == "FLAT"
        return self._drawn(query, count, rng, allow, temperature, scored=exact)

    def _drawn(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        scored: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if allow is not None or self._count is None:
            ids, probability = super().sample_near(query, count, rng, allow, temperature)
            return ids, probability, None
        n = self._count()
        searched = np.asarray(query, dtype=np.float32) if scored else None
        ids, scores = self.rows.draw_by_id(count, n, rng, self._seen, searched)
        return ids, np.full(len(ids), 1.0 / max(n, 1)), scores

    def score_all(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = np.asarray(queries, dtype=np.float32)
        local = self._local_vectors()
        if local is not None:
            held, vectors = local
            rows = _rows_of(held, allow.ids if allow is not None else held)
            return metric_scores(queries, vectors[rows], self.metric), held[rows]
        columns = allow.ids if allow is not None else self.ids()
        if len(columns) <= MAX_TOPK:
            # Milvus scores them (FLAT: every allowed key), and only scores come back. An
            # allowed id that is not held comes back from no query, and is no column.
            columns, result = self.scores_by_search(queries, columns)
            held = np.isfinite(result).any(axis=0)
            result, columns = result[:, held], columns[held]
        else:
            result = metric_scores(queries, self.vectors(columns), self.metric)
        # No column of a store counted as holding keys: its rows went meanwhile (a probe saw
        # numpy's "zero-size array" from the softmax over none).
        if not np.all(np.isfinite(result)) or not len(columns):
            raise changed_during_lookup()
        return result, columns

    def score_ids(self, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self._local_vectors() is not None or not 0 < len(np.unique(ids)) <= MAX_TOPK:
            return super().score_ids(queries, ids)
        # Milvus scores them where the vectors are: a search limited to these ids returns
        # scores alone, where fetching 4,096 vectors of 384 dims took most of a lookup.
        columns, result = self.scores_by_search(np.asarray(queries, dtype=np.float32), ids)
        if not np.all(np.isfinite(result)):
            raise changed_during_lookup()
        return result[:, np.searchsorted(columns, ids)]

    def _vectors_found(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        fields = ["vector"] if self._seen is None else ["vector", *self._seen.seen_fields()]
        rows = self.rows.get(ids, fields)
        held = np.asarray(seen_columns(rows, self._seen), dtype=np.int64)
        vectors = np.asarray([row["vector"] for row in rows], dtype=np.float32)
        return held, vectors.reshape(len(rows), self.dim)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        local = self._local_vectors()
        if local is not None:
            rows = _rows_of(local[0], ids)
            if len(rows) == len(ids):
                return local[1][rows]
        held, vectors = self._vectors_found(np.unique(ids))
        order = np.argsort(held)
        held, vectors = held[order], vectors[order]
        positions = np.searchsorted(held, ids)
        if len(held) < len(np.unique(ids)):
            raise changed_during_lookup()
        return vectors[positions]

    def describe(self) -> str:
        kind = "exact" if self.rows.index == "FLAT" else self.rows.index.lower()
        return f"milvus {kind} (collection {self.rows.name!r} at {self.rows.location})"

    def memory_bytes(self) -> int:
        local = self._local_vectors()  # a small store's copy; else the vectors are in Milvus
        return 0 if local is None else local[0].nbytes + local[1].nbytes

    def dump(self) -> BackendDump:
        return BackendDump({"milvus_collection": self.rows.name}, {})

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        # The vectors never left Milvus: restoring is finding their collection again.
        name = meta.get("milvus_collection")
        rows = self.rows
        if not isinstance(name, str):
            raise files.error("manifest.json", "names no Milvus collection")
        restored = KeyRows(rows.client, rows.location, name, rows.dim, rows.metric, rows.index)
        if not restored.exists():
            raise files.error("manifest.json", f"names the Milvus collection {name!r}, absent")
        self.rows = restored


def changed_during_lookup() -> StoreUnavailableError:
    return StoreUnavailableError(
        "the Milvus store changed during the lookup, copy or save (keys were deleted by another "
        "process); try again"
    )
