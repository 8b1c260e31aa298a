"""``index="compressed"``: the keys' float32 vectors, kept as ``flat`` keeps them, and 4-bit
codes of them (``softdict.index._codes``) that searches and full attention read first. Also the
middle phase of ``index="auto"`` (``softdict.index``).

A search scores every key from its codes, then scores exactly every key whose compressed score
could reach the k best: with each compressed score within ± e of the true one (the codes'
bound), the true k-th best score is at least L, the k-th best of (score − e), and a key whose
(score + e) is below L cannot be among the k best. So the answer is the exact top k, as a flat
scan's, and the backend is exact (``Capabilities.exact``): the tail bounds of the retrieval
policy hold on it.

Full attention over a large store reads the compressed scores of every key
(``score_approximately``) and rescores exactly only the keys that weigh most
(``softdict._compressed``).

Up to ``codes_from`` keys there are no codes: a flat scan of that many keys is as cheap, and
the store's exact path scores every key anyway (``softdict._config.EXACT_MAX_KEYS``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from softdict._files import FileReader
from softdict._similarity import Metric, metric_scores
from softdict.index._codes import OPEN_ROWS, Coded, CodeLayout, KeyCodes
from softdict.index.base import Allow, BackendDump, Capabilities, ScoreErrors
from softdict.index.exact import SCAN_ANY_SIZE, ExactBackend

__all__ = ["CODE_BLOCK", "COMPRESSED_MAX_KEYS", "CompressedBackend"]

# Components per code block (one scale and zero point each): chosen by benchmarks/real_scale.py.
CODE_BLOCK = 32

# index="auto" keeps its keys here (with codes past the exact path) up to this many, then builds
# an HNSW graph: chosen by benchmarks/real_scale.py, where full attention from the codes stops
# being cheaper than the graph's estimate.
COMPRESSED_MAX_KEYS = 150_000

_CODE_FILES = ("codes", "code_scales", "code_zero_points", "code_norms")


class CompressedBackend(ExactBackend):
    """Exact vectors by row, and their codes once it holds more than ``codes_from`` keys."""

    def __init__(
        self,
        dim: int,
        metric: Metric,
        *,
        bits: int = 4,
        block: int = CODE_BLOCK,
        codes_from: int = 0,
        open_rows: int = OPEN_ROWS,
        name: str = "compressed",
    ) -> None:
        super().__init__(dim, metric, name=name)
        self.layout = CodeLayout(dim, bits, block)
        self.codes_from = codes_from
        self._open_rows = open_rows
        self._codes: KeyCodes | None = None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            exact=True, scan_max_keys=SCAN_ANY_SIZE, approximate_scores=self._codes is not None
        )

    def describe(self) -> str:
        if self._codes is None:
            return "exact" if self.codes_from else self.name
        return f"{self.name} ({self.layout.bits}-bit codes, blocks of {self.layout.block})"

    # -- keeping the codes in step with the rows -------------------------------------------------

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._append(ids, vectors)
        if self._codes is not None:
            self._codes.append(vectors)
        elif len(self) > self.codes_from:
            self._code_every_row()

    def _code_every_row(self) -> None:
        codes = KeyCodes(self.layout, open_rows=self._open_rows)
        codes.append(self._vectors.view)
        self._codes = codes

    def _keep(self, rows: np.ndarray) -> None:
        super()._keep(rows)
        if self._codes is not None:
            if len(rows) > self.codes_from // 2:
                self._codes.keep(rows)
            else:  # well below where codes pay: drop them (half, so as not to flap)
                self._codes = None

    # -- scoring -----------------------------------------------------------------------------

    def score_approximately(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray, ScoreErrors]:
        """Every live (and allowed) key's compressed score for prepared ``queries`` (m, dim),
        float64 (m, c); their ids (c,), increasing; and the bound on each score's error
        (``softdict.index._codes``; 0 where a key was scored exactly). Without codes, the exact
        scores and a bound of 0."""
        if self._codes is None:
            scores, ids = self.score_all(queries, allow)
            return scores, ids, ScoreErrors(np.zeros((len(queries), 2)), np.zeros((2, len(ids))))
        scores, errors, rows = self._approximate(queries, allow)
        return scores, self._rows.ids[rows], errors

    def _approximate(
        self, queries: np.ndarray, allow: Allow | None
    ) -> tuple[np.ndarray, ScoreErrors, np.ndarray]:
        """``score_approximately`` by row: scores (m, c), their bounds, and the c rows."""
        assert self._codes is not None
        products, bound = self._codes.scores(queries, self._vectors.view)
        every = allow is None and not self._rows.has_tombstones
        if every:
            rows = np.arange(self._rows.size)
            dots = products.astype(np.float64)
        else:
            rows = self._rows.live_rows() if allow is None else self._rows.rows_of(allow.ids)
            dots, bound = products[:, rows].astype(np.float64), bound.restricted(rows)
        if self.metric is Metric.INNER_PRODUCT:
            return dots, bound, rows
        # −‖q − k‖² = 2q·k − ‖q‖² − ‖k‖²: only the product is approximate.
        distance = (
            (queries.astype(np.float64) ** 2).sum(axis=1)[:, None]
            - 2.0 * dots
            + self._sq_norms.view[rows][None, :]
        )
        return -np.maximum(distance, 0.0), bound.restricted(slice(None), 2.0), rows

    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The exact k best (module docstring): compressed scores, then the keys they cannot
        rule out, scored exactly."""
        if self._codes is None or not self._codes.sealed:
            return super().search(queries, k, allow)
        scores, bound, rows = self._approximate(queries, allow)
        m, c = scores.shape
        take = min(k, c)
        best = np.full((m, k), -np.inf)
        ids = np.full((m, k), -1, dtype=np.int64)
        if not take:
            return best, ids
        for i in range(m):
            row = scores[i]
            # The k best by compressed score, scored exactly: k keys whose worst true score
            # the true k-th best is at least, so no key whose bound stays below it can be
            # among the k best; the others are scored exactly too.
            first = np.argpartition(-row, take - 1)[:take] if take < c else np.arange(c)
            first_scores = self._exact_scores(queries[i : i + 1], rows[first])[0]
            maybe = row + bound.query[i] @ bound.keys >= first_scores.min()
            maybe[first] = False
            more = np.flatnonzero(maybe)
            columns = np.concatenate([first, more])
            exact = np.concatenate(
                [first_scores, self._exact_scores(queries[i : i + 1], rows[more])[0]]
            )
            order = np.argsort(-exact, kind="stable")[:take]
            best[i, :take] = exact[order]
            ids[i, :take] = self._rows.ids[rows[columns[order]]]
        return best, ids

    def _exact_scores(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        norms = self._sq_norms.view[rows] if self.metric is Metric.L2 else None
        return metric_scores(queries, self._vectors.view[rows], self.metric, norms)

    def memory_bytes(self) -> int:
        codes = self._codes.nbytes() if self._codes is not None else 0
        return super().memory_bytes() + codes

    # -- saving --------------------------------------------------------------------------------

    def dump(self) -> BackendDump:
        saved = super().dump()
        if self._codes is None:
            return saved
        live = self._rows.live_rows()
        coded = self._codes.coded()
        files = dict(saved.files)
        for name, part in zip(_CODE_FILES, (coded.blobs, coded.scales, coded.zero_points,
                                             coded.norms)):  # fmt: skip
            files[f"embedding_{name}.npy"] = part[live]
        meta = {"codes": {"bits": self.layout.bits, "block": self.layout.block}}
        return BackendDump({**saved.meta, **meta}, files)

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        super().restore(meta, files)
        saved = meta.get("codes")
        if saved is None or saved != {"bits": self.layout.bits, "block": self.layout.block}:
            # Saved without codes (below codes_from, or before they existed), or in another
            # layout: made again from the vectors.
            if len(self) > self.codes_from:
                self._code_every_row()
            return
        n, layout = len(self), self.layout
        coded = Coded(
            files.npy("embedding_codes.npy", np.uint8, (n, layout.blocks, layout.blob_bytes)),
            files.finite_npy("embedding_code_scales.npy", np.float32, (n, layout.blocks)),
            files.npy("embedding_code_zero_points.npy", np.uint8, (n, layout.zero_point_bytes)),
            files.finite_npy("embedding_code_norms.npy", np.float32, (n, 2)),
        )
        self._codes = KeyCodes(layout, open_rows=self._open_rows)
        self._codes.restore(coded)
