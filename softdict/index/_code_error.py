"""How far a FAISS index's stored vectors may lie from the vectors added: the error of lossy codes.

An index that keeps keys as codes ("ivf_sq8", a factory string with a scalar or product
quantiser, a PCA that drops dimensions) scores a query against each key's decoded vector k̃, not
the vector k it was given. softdict scores every key against k̃ (a search's keys are rescored
from their decoded vectors, so they agree with the keys scored beside them), and bounds the
difference by what it measured as the keys were added: r, the largest ‖k − k̃‖, and N, the
largest ‖k̃‖. For a prepared query q and every key alike:

* inner product: |q·k − q·k̃| <= ‖q‖·r;
* L2: −‖q − k‖² + ‖q − k̃‖² = 2q·(k − k̃) − ‖k‖² + ‖k̃‖², within 2‖q‖·r + r·(2N + r).

So each log-weight is within ± e/T, and the attention lies within a total variation of
1 − e^(−2e/T) of exact attention over the vectors added (``_attention.weight_error_bound``, one
spread for every key). A rebuild re-encodes decoded vectors, so r then grows by the re-encoding's
own error (the triangle inequality). A store saved before r was kept reports it as unknown (NaN:
a total variation of up to 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from softdict._rows import ROWS_AT_A_TIME
from softdict._similarity import Metric, squared_norms

__all__ = ["CodeError", "decoding_gap", "keeps_exact_vectors", "scores_decoded_vectors"]


# Indexes whose stored vectors are the vectors added, and whose search scores them exactly.
_EXACT_STORAGE = (faiss.IndexFlat, faiss.IndexHNSWFlat, faiss.IndexIVFFlat, faiss.IndexNSGFlat)


# Lossy indexes whose search scores a query against each key's decoded vector, as softdict
# does: their results need no rescoring (measured agreeing to float rounding). Exact types, not
# subclasses: a fast-scan PQ rounds its distance tables (0.05-0.3 off), a PCA scores in its own
# space, an HNSW over PQ codes by inner product was 7 off.
_SCORES_DECODED = (
    faiss.IndexScalarQuantizer,
    faiss.IndexIVFScalarQuantizer,
    faiss.IndexHNSWSQ,
    faiss.IndexPQ,
    faiss.IndexIVFPQ,
)


def scores_decoded_vectors(index: faiss.Index) -> bool:
    """Whether ``index``'s search scores each key against its decoded vector (so its results
    agree with scores taken from ``reconstruct``)."""
    return type(faiss.downcast_index(index)) in _SCORES_DECODED


def keeps_exact_vectors(index: faiss.Index) -> bool:
    """Whether ``index`` keeps the vectors added as they are and scores them exactly (a refine
    step scores and reconstructs from its refine index)."""
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexRefine):
        return keeps_exact_vectors(inner.refine_index)
    return isinstance(inner, _EXACT_STORAGE)


@dataclass
class CodeError:
    """The largest distance ``radius`` (r) between a key added and its decoded vector, and the
    largest decoded norm ``norm`` (N); NaN radius: not known."""

    radius: float = 0.0
    norm: float = 0.0

    def widened(self, gap: float, norm: float) -> CodeError:
        """The error once keys are added whose largest gap to their decoded vectors is ``gap``
        and whose largest decoded norm is ``norm`` (``decoding_gap``)."""
        radius = self.radius if math.isnan(self.radius) else max(self.radius, gap)
        return CodeError(radius, max(self.norm, norm))

    def re_encoded(self, gap: float, norm: float) -> CodeError:
        """The error once every key's decoded vector was encoded again (a rebuild), ``gap`` and
        ``norm`` measured on that encoding: each key is now within r + gap of the vector added."""
        return CodeError(self.radius + gap, norm)

    def carried(self, earlier: CodeError) -> CodeError:
        """The error of vectors added as the decoded vectors of an earlier index, whose own
        error was ``earlier`` (a store that shrank to exact search and grew again)."""
        return CodeError(self.radius + earlier.radius, max(self.norm, earlier.norm))

    def of_queries(self, queries: np.ndarray, metric: Metric) -> np.ndarray:
        """(m,) the most any key's score may be off for each prepared query (module docstring)."""
        length = np.sqrt(squared_norms(queries))
        r = self.radius
        if metric is Metric.L2:
            return 2.0 * length * r + r * (2.0 * self.norm + r)
        return length * r

    def meta(self) -> dict[str, Any]:
        # JSON has no NaN: an unknown radius is saved as null.
        return {"radius": None if math.isnan(self.radius) else self.radius, "norm": self.norm}

    @classmethod
    def from_meta(cls, meta: object) -> CodeError | None:
        """The saved error, or None where ``meta`` is no valid record of one."""
        if not isinstance(meta, dict) or set(meta) != {"radius", "norm"}:
            return None
        radius, norm = meta["radius"], meta["norm"]
        if radius is None:  # saved as not known
            radius = math.nan
        elif not _finite_non_negative(radius):
            return None
        if not _finite_non_negative(norm):
            return None
        return cls(float(radius), float(norm))


def decoding_gap(index: faiss.Index, first_row: int, vectors: np.ndarray) -> tuple[float, float]:
    """The largest ‖v − ṽ‖ over ``vectors`` (n, d), held by ``index`` from ``first_row`` on,
    and their decoded vectors ṽ, and the largest ‖ṽ‖; read in chunks, as a copy of every
    decoded vector at once would double the index's memory."""
    gap = norm = 0.0
    for start in range(0, len(vectors), ROWS_AT_A_TIME):
        part = vectors[start : start + ROWS_AT_A_TIME]
        decoded = index.reconstruct_batch(
            np.arange(first_row + start, first_row + start + len(part))
        )
        gap = max(gap, float(np.sqrt(np.max(squared_norms(part - decoded)))))
        norm = max(norm, float(np.sqrt(np.max(squared_norms(decoded)))))
    return gap, norm


def _finite_non_negative(number: object) -> bool:
    return (
        isinstance(number, (int, float))
        and not isinstance(number, bool)
        and math.isfinite(number)
        and number >= 0
    )
