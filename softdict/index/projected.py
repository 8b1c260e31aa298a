"""``index="projected"``: the keys' float32 vectors, kept as ``flat`` keeps them, and proxy
scores of every key from 4-bit codes of a low-dimensional projection (``softdict.index.
_projection``), for stores of 10^6 keys and more.

A search reads every key's proxy score, scores exactly the ``candidates_for(k)`` best of them
and returns the k best of those: an approximate index, like HNSW, whose recall on real text
``benchmarks/proxy_proposal.py`` measures, with nothing to build but a basis and the codes
(seconds at 10^6 keys, where an HNSW graph took minutes). Where the candidates would be every
allowed key (a small mask), those keys are scored exactly instead, without the pass.

An estimated full attention draws its sampled tail by the proxy scores (``sample_near``):

    p_i = (1 − MIX)·g_i/Σg + MIX/N,    g_i = e^((s̃_i − max s̃)/τ), 0 for the head's keys

over the N allowed keys, s̃ the proxy scores and τ the attention's temperature. The head is
counted exactly (a draw landing there is dropped), so its keys get only the uniform share;
every key keeps that share, so the estimate stays unbiased however far the proxy is from the
true score, and its interval stays honest.

Up to ``PROXY_FROM`` keys there is no projection: every key is scored from its vector, the
backend is exact, and a store answers as ``"flat"`` would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from softdict._attention import best_unordered
from softdict._files import FileReader
from softdict._similarity import Metric, metric_scores
from softdict.index._projection import PROXY_DIMS, SVD_SAMPLE, BlockProposal, Projection
from softdict.index.base import Allow, BackendDump, Capabilities
from softdict.index.exact import SCAN_ANY_SIZE, ExactBackend
from softdict.index.hnsw import SCAN_MAX_KEYS

__all__ = ["MIX", "PROXY_FROM", "ProjectedBackend", "candidates_for"]

# From this many keys searches read the proxy scores, and full attention over more allowed
# keys than this is estimated; up to it, a scan of every allowed key is exact and cheaper (the
# crossover measured for HNSW's estimate, benchmarks/scan_crossover.py, taken as it is).
PROXY_FROM = SCAN_MAX_KEYS
# The proposal's uniform share (as the k-means cells', ``softdict.index._cells``).
MIX = 0.2
# An estimate's first sample (``Capabilities.first_sample``). Drawn by the proxy, 512 draws
# already narrowed the tail's interval to the default tolerance, while the value still erred
# 3.1% (10^6 words, ``benchmarks/results_proxy_proposal.md``); 1,024 more draws cost about a
# fifth of the pass over the proxy scores, and 2,048 erred 1.8% in issue 29's study. Chosen on
# those words, which the study's constants were chosen on too.
FIRST_SAMPLE = 2048
# Scores of at most this many bytes are held at once when a batch of queries is searched.
_BATCH_SCORE_BYTES = 1 << 26


def candidates_for(k: int) -> int:
    """How many keys, best by proxy score, a search for k scores exactly: 2k + 128. Issue 29's
    study rescored 2,048 for a head of 1,024 (``benchmarks/results_proxy_proposal.md``)."""
    return 2 * k + 128


class ProjectedBackend(ExactBackend):
    """Exact vectors by row, and proxy scores of them from ``proxy_from`` keys on."""

    def __init__(
        self,
        dim: int,
        metric: Metric,
        *,
        dims: int = PROXY_DIMS,
        proxy_from: int = PROXY_FROM,
        name: str = "projected",
    ) -> None:
        super().__init__(dim, metric, name=name)
        self.proxy_from = proxy_from
        self._projection = Projection(dim, dims)
        # Proxy scores kept by the query's bytes: its search and its draws (twice,
        # ``softdict._sampling``) read one pass. Those of the last query scored alone, and of
        # the last batch's queries (at most ``_BATCH_SCORE_BYTES``: 16 queries at 10^6 keys; a
        # lookup's batch comes in chunks of that many, ``Capabilities.batch_queries``, so each
        # query makes one pass, not two). Cleared by any change to the rows.
        self._recent_single: tuple[bytes, np.ndarray] | None = None
        self._recent_batch: dict[bytes, np.ndarray] = {}

    @property
    def capabilities(self) -> Capabilities:
        if not self._projection.trained:
            return Capabilities(exact=True, scan_max_keys=SCAN_ANY_SIZE)
        return Capabilities(
            exact=False,
            scan_max_keys=self.proxy_from,
            first_sample=FIRST_SAMPLE,
            draws_outside_head=True,
            batch_queries=self._batch_queries(),
        )

    def describe(self) -> str:
        dims, start = self._projection.dims, self.proxy_from
        return f"{self.name} ({dims}-dim 4-bit proxy from {start:,} keys)"

    # -- keeping the proxy in step with the rows ------------------------------------------------

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._append(ids, vectors)
        self._forget_proxy()
        if self._projection.wants_training(len(self), self.proxy_from):
            self._train()
        elif self._projection.trained:
            self._projection.append(vectors)

    def _train(self) -> None:
        """A new basis from a sample of the live keys, and every row coded under it."""
        live = self._rows.live_rows()
        if len(live) > SVD_SAMPLE:
            live = np.sort(np.random.default_rng(0).choice(live, SVD_SAMPLE, replace=False))
        self._projection.train(self._vectors.view[live], len(self))
        self._projection.code_all(self._vectors.view)

    def _keep(self, rows: np.ndarray) -> None:
        super()._keep(rows)
        self._forget_proxy()
        if self._projection.trained:  # every row coded again (seconds at 10^6 keys)
            self._projection.code_all(self._vectors.view)

    def remove(self, ids: np.ndarray) -> None:
        super().remove(ids)
        self._forget_proxy()
        if self._projection.trained and len(self) < self.proxy_from // 2:
            # Fewer than half the keys it starts at: exact again. Half, not all: a store
            # hovering at the threshold does not code every key on each insert and delete.
            self._projection = Projection(self.dim, self._projection.dims)

    # -- scoring -------------------------------------------------------------------------------

    def _forget_proxy(self) -> None:
        self._recent_single, self._recent_batch = None, {}

    def _proxy(self, queries: np.ndarray) -> np.ndarray:
        """(m, rows) float32: every row's proxy score under the metric, in row order, for
        prepared float32 ``queries`` (m, dim)."""
        if len(queries) == 1:
            # Each kept entry read once: another reader may replace it meanwhile.
            key, single, batch = queries.tobytes(), self._recent_single, self._recent_batch
            if single is not None and single[0] == key:
                return single[1][None, :]
            if key in batch:
                return batch[key][None, :]
        dots = self._projection.scores(queries)
        if self.metric is Metric.L2:
            # −‖q − k‖² up to −‖q‖², which every key of a query shares; in place (the scores
            # are this call's own), without a float32 copy of every norm.
            dots *= 2.0
            dots -= self._sq_norms.view[None, :]
        if len(queries) == 1:
            self._recent_single = (queries.tobytes(), dots[0])
        else:
            self._recent_batch = {query.tobytes(): row for query, row in zip(queries, dots)}
        return dots

    def _batch_queries(self) -> int:
        """How many queries' proxy scores are kept (``_BATCH_SCORE_BYTES``): a search scores
        this many at a time, and a lookup's batch reaches it in chunks of at most this many
        (``Capabilities.batch_queries``), so that its draws find their scores kept."""
        return max(1, _BATCH_SCORE_BYTES // (4 * self._rows.size))

    def _allowed_rows(self, allow: Allow | None) -> np.ndarray | None:
        """The rows a search may return, increasing; None: every row (no tombstones)."""
        if allow is not None:
            return self._rows.rows_of(allow.ids)
        return self._rows.live_rows() if self._rows.has_tombstones else None

    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k best: every key's proxy score, then the ``candidates_for(k)`` best of those
        scored exactly (module docstring)."""
        if not self._projection.trained:
            return super().search(queries, k, allow)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        m = len(queries)
        best = np.full((m, k), -np.inf)
        ids = np.full((m, k), -1, dtype=np.int64)
        rows = self._allowed_rows(allow)
        c = self._rows.size if rows is None else len(rows)
        take = min(k, c)
        if not take:
            return best, ids
        if candidates_for(take) >= c:  # every allowed key a candidate: scored exactly
            return super().search(queries, k, allow)
        wanted = candidates_for(take)
        chunk = self._batch_queries()
        for start in range(0, m, chunk):
            proxy = self._proxy(queries[start : start + chunk])
            for i, row in enumerate(proxy, start):
                scores = row if rows is None else row[rows]
                # In row order, so that keys tied in exact score come back by id, as on "flat"
                # (which tied keys are candidates is as arbitrary as on HNSW).
                columns = np.sort(best_unordered(scores, wanted))
                picked = columns if rows is None else rows[columns]
                exact = self._exact_scores(queries[i : i + 1], picked)[0]
                order = np.argsort(-exact, kind="stable")[:take]
                best[i, :take] = exact[order]
                ids[i, :take] = self._rows.ids[picked[order]]
        return best, ids

    def _exact_scores(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Scores of ``queries`` against the vectors of ``rows``, gathered with ``np.take``
        (faster than fancy indexing for the thousands of scattered rows a lookup reads)."""
        norms = self._sq_norms.view[rows] if self.metric is Metric.L2 else None
        vectors = np.take(self._vectors.view, rows, axis=0)
        return metric_scores(queries, vectors, self.metric, norms)

    def sample_near(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``count`` allowed ids drawn by the proposal of the module docstring (``head``: the
        ids it gives only the uniform share), and the probability of each draw."""
        if not self._projection.trained:
            return super().sample_near(query, count, rng, allow, temperature, head)
        rows, probability = self._draw(query, count, rng, allow, temperature, head)
        return self._rows.ids[rows], probability

    def sample_scored(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``sample_near``'s draws with their exact scores, read from the rows drawn (the ids'
        rows looked up again took a binary search over every id: 0.3 ms at 10^6 keys)."""
        if not self._projection.trained:
            return super().sample_scored(query, count, rng, allow, temperature, head)
        rows, probability = self._draw(query, count, rng, allow, temperature, head)
        query = np.ascontiguousarray(query, dtype=np.float32)[None, :]
        return self._rows.ids[rows], probability, self._exact_scores(query, rows)[0]

    def _draw(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``sample_near`` by row: the rows drawn and the probability of each draw."""
        rows = self._allowed_rows(allow)
        proxy = self._proxy(np.ascontiguousarray(query, dtype=np.float32)[None, :])[0]
        scores = proxy if rows is None else proxy[rows]
        n = len(scores)
        if not n or not count:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        # g (module docstring) written in place into whole blocks for the draw: at 10^6 keys
        # each pass over the scores is about 0.3 ms. Shifted by the best key outside the head
        # (at a tiny temperature every other key's g underflowed to 0 when the head's best
        # shifted it), -inf in the head: e^-inf = 0. The factor at most float32's range: 1/τ
        # of a tiny τ overflowed, and inf·0 is NaN.
        sharpness = np.float32(min(1.0 / temperature, 1e30))
        weights = BlockProposal.padded(n)
        g = weights[:n]
        g[:] = scores
        if head is not None and len(head):
            g[self._positions(head, rows)] = -np.inf
        best = g.max()
        positions = rng.integers(0, n, size=count)
        if best == -np.inf:  # every allowed key in the head: the uniform share is all there is
            return (positions if rows is None else rows[positions]), np.full(count, 1.0 / n)
        with np.errstate(under="ignore", over="ignore"):
            g -= best
            g *= sharpness
            np.exp(g, out=g)
        proposal = BlockProposal(weights)  # Σg >= 1: the best key outside the head has g = 1
        near = rng.random(count) >= MIX
        positions[near] = proposal.draw(int(near.sum()), rng)
        probability = (1 - MIX) * g[positions].astype(np.float64) / proposal.total + MIX / n
        return (positions if rows is None else rows[positions]), probability

    def _positions(self, ids: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """The positions, among the allowed ``rows``, of those of ``ids`` that are allowed."""
        held = self._rows.rows_of(np.asarray(ids, dtype=np.int64))
        if rows is None:
            return held
        at = np.minimum(np.searchsorted(rows, held), len(rows) - 1)
        return at[rows[at] == held]

    def memory_bytes(self) -> int:
        return super().memory_bytes() + self._projection.nbytes()

    # -- saving --------------------------------------------------------------------------------

    def dump(self) -> BackendDump:
        saved = super().dump()
        projection = self._projection
        if projection.basis is None:
            return saved
        meta = {"projection": {"dims": projection.dims, "trained_for": projection.trained_for}}
        files = {**saved.files, "embedding_basis.npy": projection.basis}
        return BackendDump({**saved.meta, **meta}, files)

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        """The vectors, and the saved basis, under which every row is coded again (a pass of
        a few seconds at 10^6 keys: the codes are made from the vectors, never read)."""
        super().restore(meta, files)
        saved = meta.get("projection")
        if saved is None:  # saved before the proxy was due
            if self._projection.wants_training(len(self), self.proxy_from):
                self._train()
            return
        dims, trained_for = _saved_projection(saved, self._projection.dims, files)
        basis = files.finite_npy("embedding_basis.npy", np.float32, (self.dim, dims))
        # An SVD of a sample of ``trained_for`` keys gives min(dims, trained_for) orthonormal
        # directions, then columns of 0 (a sample with fewer keys than directions).
        found = min(dims, trained_for)
        expected = np.diag((np.arange(dims) < found).astype(np.float64))
        if not np.allclose(basis.T.astype(np.float64) @ basis, expected, atol=1e-4):
            raise files.error(
                "embedding_basis.npy",
                f"does not hold {found} orthonormal directions (and columns of 0 after them)",
            )
        self._projection.set_basis(basis, trained_for)
        self._projection.code_all(self._vectors.view)


def _saved_projection(saved: Any, dims: int, files: FileReader) -> tuple[int, int]:
    """The manifest's ``projection`` entry: its dims (this backend's) and ``trained_for``."""
    if (
        not isinstance(saved, dict)
        or type(saved.get("dims")) is not int
        or saved["dims"] != dims
        or type(saved.get("trained_for")) is not int
        or saved["trained_for"] < 1
    ):
        raise files.error(
            "manifest.json", f"has an index projection entry this backend cannot use: {saved!r}"
        )
    return dims, int(saved["trained_for"])
