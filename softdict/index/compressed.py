"""``index="compressed"``: the keys' float32 vectors, kept as ``flat`` keeps them, and 4-bit
codes of them (``softdict.index._codes``; ``"compressed_8bit"``: 8-bit) that searches and full
attention read first.

A search reads every key's compressed score, then scores exactly the ``candidates_for(k)`` best
of them (as many as an HNSW search keeps) and returns the k best of those: an approximate index,
like HNSW, that can miss a key whose compressed score fell out of the candidates (measured on
real text: ``benchmarks/real_scale.py``'s recall@k). Full attention over a large store reads
every key's compressed score (``score_approximately``) and scores exactly only the keys that
weigh most (``softdict._compressed``), with a bound on what the others can change.

Up to ``EXACT_MAX_KEYS`` keys (``codes_from``) the codes are kept but not read: every key is
scored from its vector, the backend is exact, and a store answers as ``"flat"`` would (the
store's exact path scores every key up to that size anyway).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from softdict._attention import best_unordered
from softdict._config import EXACT_MAX_KEYS
from softdict._files import FileReader
from softdict._rows import counting
from softdict._similarity import Metric, metric_scores
from softdict.index._codes import CODE_BLOCK, OPEN_ROWS, Coded, CodeLayout, KeyCodes, quantise
from softdict.index.base import Allow, BackendDump, Capabilities, ScoreErrors
from softdict.index.exact import SCAN_ANY_SIZE, ExactBackend

__all__ = ["CompressedBackend", "candidates_for"]


def candidates_for(k: int) -> int:
    """How many keys, best by compressed score, a search for k scores exactly: k + k/2 + 128,
    as many as an HNSW search keeps (``hnsw.ef_for``). Measured on real text
    (``benchmarks/real_scale.py``'s recall@k): the true k best were among them."""
    return k + k // 2 + 128


_CODE_FILES = ("codes", "code_scales", "code_zero_points", "code_norms")


class CompressedBackend(ExactBackend):
    """Exact vectors by row, and their codes (``open_rows``, ``codes_from``: see ``KeyCodes``)."""

    def __init__(
        self,
        dim: int,
        metric: Metric,
        *,
        bits: int = 4,
        block: int = CODE_BLOCK,
        open_rows: int = OPEN_ROWS,
        codes_from: int = EXACT_MAX_KEYS,
        name: str = "compressed",
    ) -> None:
        super().__init__(dim, metric, name=name)
        self.layout = CodeLayout(dim, bits, block)
        self._codes = KeyCodes(self.layout, open_rows=open_rows, codes_from=codes_from)

    @property
    def capabilities(self) -> Capabilities:
        reads_codes = self._reads_codes()
        # Exact while every key is scored from its vector; approximate once searches read codes
        # (they can miss a key whose compressed score fell out of the candidates).
        return Capabilities(
            exact=not reads_codes, scan_max_keys=SCAN_ANY_SIZE, approximate_scores=reads_codes
        )

    def _reads_codes(self) -> bool:
        return self._codes.sealed > 0

    def describe(self) -> str:
        return f"{self.name} ({self.layout.bits}-bit codes, blocks of {self.layout.block})"

    # -- keeping the codes in step with the rows -------------------------------------------------

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._append(ids, vectors)
        self._codes.append(vectors)

    def _keep(self, rows: np.ndarray) -> None:
        super()._keep(rows)
        self._codes.keep(rows)

    # -- scoring -----------------------------------------------------------------------------

    def score_approximately(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray, ScoreErrors]:
        """Every live (and allowed) key's compressed score for prepared ``queries`` (m, dim),
        float64 (m, c); their ids (c,), increasing; and the bound on each score's error
        (``softdict.index._codes``; 0 where a key was scored exactly)."""
        scores, errors, rows = self._approximate(queries, allow)
        ids = self._rows.ids
        if len(rows) == len(ids) and allow is None:  # every row, in order (as ``score_rows``)
            return scores, ids, errors
        return scores, ids[rows], errors

    def _approximate(
        self, queries: np.ndarray, allow: Allow | None
    ) -> tuple[np.ndarray, ScoreErrors, np.ndarray]:
        """``score_approximately`` by row: scores (m, c), their bounds, and the c rows."""
        products, bound = self._codes.scores(queries, self._vectors.view)
        every = allow is None and not self._rows.has_tombstones
        if every:
            rows = counting(self._rows.size)
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
        """The k best: every key's compressed score, then the ``candidates_for(k)`` best of
        those scored exactly (module docstring)."""
        if not self._reads_codes():
            return super().search(queries, k, allow)
        scores, _, rows = self._approximate(queries, allow)
        m, c = scores.shape
        take = min(k, c)
        best = np.full((m, k), -np.inf)
        ids = np.full((m, k), -1, dtype=np.int64)
        if not take:
            return best, ids
        wanted = min(candidates_for(take), c)
        for i in range(m):
            row = scores[i]
            columns = best_unordered(row, wanted)
            exact = self._exact_scores(queries[i : i + 1], rows[columns])[0]
            order = np.argsort(-exact, kind="stable")[:take]
            best[i, :take] = exact[order]
            ids[i, :take] = self._rows.ids[rows[columns[order]]]
        return best, ids

    def _exact_scores(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        norms = self._sq_norms.view[rows] if self.metric is Metric.L2 else None
        return metric_scores(queries, self._vectors.view[rows], self.metric, norms)

    def memory_bytes(self) -> int:
        return super().memory_bytes() + self._codes.nbytes()

    # -- saving --------------------------------------------------------------------------------

    def dump(self) -> BackendDump:
        saved = super().dump()
        live = self._rows.live_rows()
        coded = self._codes.coded()
        files = dict(saved.files)
        for name, part in zip(_CODE_FILES, _parts(coded)):
            files[f"embedding_{name}.npy"] = part[live]
        meta = {"codes": {"bits": self.layout.bits, "block": self.layout.block}}
        return BackendDump({**saved.meta, **meta}, files)

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        super().restore(meta, files)
        saved = meta.get("codes")
        if saved != {"bits": self.layout.bits, "block": self.layout.block}:
            # Saved without codes, or in another layout (a version with another CODE_BLOCK):
            # made again from the vectors.
            self._codes.append(self._vectors.view)
            return
        n, layout = len(self), self.layout
        coded = Coded(
            files.npy("embedding_codes.npy", np.uint8, (n, layout.blocks, layout.blob_bytes)),
            files.finite_npy("embedding_code_scales.npy", np.float32, (n, layout.blocks)),
            files.npy("embedding_code_zero_points.npy", np.uint8, (n, layout.zero_point_bytes)),
            files.finite_npy("embedding_code_norms.npy", np.float32, (n, 2)),
        )
        _check_codes(coded, self._vectors.view, layout, files)
        self._codes.restore(coded)


# Rows whose saved codes are made again from their vectors and compared, when a store loads.
_CHECKED_ROWS = 256


def _check_codes(coded: Coded, vectors: np.ndarray, layout: CodeLayout, files: FileReader) -> None:
    """StoreFormatError, naming the file, where saved codes disagree with the vectors they were
    made from: on rows spread over the store, the codes, scales and zero points are made again
    (exactly: element-wise arithmetic) and the norms (sums, which round apart by CPU) within
    float32's rounding. A code file rewritten with its checksum (negated norms, zero scales) made
    every bound false and reported a weight_error of 0 (a probe). Making every row's codes again
    costs what saving them saves (1.5 s for 10^5 keys here); a single row altered is missed."""
    if not len(vectors):
        return
    rows = np.unique(np.linspace(0, len(vectors) - 1, _CHECKED_ROWS).astype(np.int64))
    again = quantise(vectors[rows], layout)
    for name, saved, made in zip(_CODE_FILES, _parts(coded), _parts(again)):
        same = (
            np.allclose(saved[rows], made, rtol=1e-5, atol=1e-6)
            if name == "code_norms"
            else np.array_equal(saved[rows], made)
        )
        if not same:
            raise files.error(
                f"embedding_{name}.npy", "does not hold the codes of the stored vectors"
            )


def _parts(coded: Coded) -> tuple[np.ndarray, ...]:
    """The arrays of ``coded`` in the order of ``_CODE_FILES``."""
    return coded.blobs, coded.scales, coded.zero_points, coded.norms
