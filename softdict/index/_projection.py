"""Proxy scores of every key, cheap enough to read whole for each query of a million-key store:
4-bit codes of each key's projection on a few directions, and a proposal for drawing a sampled
tail by them.

Why: at 10^6 keys an estimated attention (``softdict._sampling``) needs a head search and a
sample drawn near the query. Codes of the full vectors (``softdict.index._codes``) read 227
bytes a key with their scales, a pass about as slow as the whole estimate there (issue 29's
study). A key's projection on the top ``PROXY_DIMS`` right singular vectors of the stored keys
keeps most of what separates them (on real text the leading directions hold most of a unit
vector's energy), and its 4-bit codes are 81 bytes a key: one ``MatMulNBits`` pass over every
key reads a nineteenth of what exact attention reads (1,536 bytes a key), and the whole
estimate was 7.1x exact numpy at 10^6 keys (``benchmarks/results_proxy_proposal.md``).

Proxy scores rank keys for the head's candidates, which are then scored exactly, and make the
sampling proposal (``draw``): an estimate weighs each draw by the inverse of its probability,
so the proxy's error costs variance, never bias. The rows added since the kernel's session was
made are scored from their projections in float32 (at most ``OPEN_ROWS`` of them).

The basis is trained once the backend holds ``proxy_from`` keys, on at most ``SVD_SAMPLE``
of them, and again each time the live keys have grown 4x since; every row is then coded again.
"""

from __future__ import annotations

import numpy as np

from softdict._rows import GrowableRows
from softdict.index._codes import OPEN_ROWS, Coded, CodeLayout, KeyCodes, quantise

__all__ = ["PROXY_DIMS", "SVD_SAMPLE", "BlockProposal", "Projection"]

# Directions kept. In issue 29's study (50 held-out words among 10^6, a variance formula over
# exact weights) 128 gave the sampled tail's estimate less variance than 32 or 64 for the same
# time; a library default chosen on other data may differ (benchmarks/proxy_proposal.py).
PROXY_DIMS = 128
# Keys the basis is computed from (a float64 SVD of 50,000 x 384 took about 2 s here).
SVD_SAMPLE = 50_000
# Rows projected at a time when every row is coded.
_CODING_CHUNK = 100_000


class Projection:
    """The basis, the codes of every row's projection (tombstones included, in row order) and
    the projections of the rows the kernel's session does not hold yet."""

    def __init__(self, dim: int, dims: int = PROXY_DIMS, open_rows: int = OPEN_ROWS) -> None:
        self.dim = dim
        self.dims = min(dims, dim)
        self._open_rows = open_rows
        self.basis: np.ndarray | None = None  # (dim, dims) float32, orthonormal columns
        self.trained_for = 0
        self._codes = self._new_codes()
        self._open = GrowableRows((self.dims,), np.float32)  # projections of rows ``sealed``..

    def _new_codes(self) -> KeyCodes:
        # Sealed whenever more than ``open_rows`` rows wait, whatever their share: an open row
        # is scored from its float32 projection, 6x the bytes of its codes.
        layout = CodeLayout(self.dims)
        return KeyCodes(layout, open_rows=self._open_rows, codes_from=0, open_share=0)

    @property
    def trained(self) -> bool:
        return self.basis is not None

    def wants_training(self, n_live: int, proxy_from: int) -> bool:
        if self.basis is None:
            return n_live >= proxy_from
        return n_live >= 4 * self.trained_for

    def train(self, sample: np.ndarray, n_live: int) -> None:
        """A new basis from ``sample`` (at most ``SVD_SAMPLE`` of the keys, float32) for
        ``n_live`` keys; ``code_all`` must follow."""
        _, _, vt = np.linalg.svd(sample.astype(np.float64), full_matrices=False)
        basis = np.zeros((self.dim, self.dims), dtype=np.float32)
        found = min(self.dims, len(vt))
        basis[:, :found] = vt[:found].T
        self.set_basis(basis, n_live)

    def set_basis(self, basis: np.ndarray, trained_for: int) -> None:
        self.basis = np.ascontiguousarray(basis, dtype=np.float32)
        self.trained_for = trained_for

    def code_all(self, vectors: np.ndarray) -> None:
        """The codes of every row (``vectors``, in row order) under the current basis, made
        into the kernel's session once (appended part by part, each part would make one over
        every row so far)."""
        assert self.basis is not None
        self._codes, self._open = self._new_codes(), GrowableRows((self.dims,), np.float32)
        if not len(vectors):
            return
        # In parts: bounded memory for the float32 projections.
        parts = range(0, len(vectors), _CODING_CHUNK)
        coded = [self._quantised(vectors[start : start + _CODING_CHUNK]) for start in parts]
        self._codes.restore(Coded.joined(coded))
        if self._codes.sealed < len(vectors):  # too few rows for a session: scored in float32
            self._open.append(np.ascontiguousarray(vectors @ self.basis))

    def _quantised(self, vectors: np.ndarray) -> Coded:
        assert self.basis is not None
        return quantise(np.ascontiguousarray(vectors @ self.basis), self._codes.layout)

    def append(self, vectors: np.ndarray) -> None:
        """Codes of rows added after the last (``vectors`` (n, dim) float32)."""
        assert self.basis is not None
        projected = np.ascontiguousarray(vectors @ self.basis)
        before = self._codes.sealed
        self._codes.append(projected)
        if self._codes.sealed != before:  # the session took every row
            self._open = GrowableRows((self.dims,), np.float32)
        else:
            self._open.append(projected)

    def scores(self, queries: np.ndarray) -> np.ndarray:
        """(m, rows) float32: every row's proxy score, the projections' inner product."""
        assert self.basis is not None
        projected = np.ascontiguousarray(queries, dtype=np.float32) @ self.basis
        sealed = self._codes.sealed_scores(projected)
        if not len(self._open):
            return sealed
        # (n, d)·(d, m), as ``KeyCodes.scores`` multiplies, not a transposed operand.
        return np.concatenate([sealed, (self._open.view @ projected.T).T], axis=1)

    def nbytes(self) -> int:
        basis = 0 if self.basis is None else self.basis.nbytes
        return int(basis + self._codes.nbytes() + self._open.view.nbytes)


# Positions per block of a two-level draw, and the matrix whose product gives a block's running
# sums (``BlockProposal.draw``).
_DRAW_BLOCK = 64
_UPPER_ONES = np.triu(np.ones((_DRAW_BLOCK, _DRAW_BLOCK)))


class BlockProposal:
    """Draws with probability weights_i/Σ weights (weights ≥ 0) by inverse CDF in two levels:
    blocks of ``BLOCK`` positions by their sums, then a position within each drawn block. A
    cumulative sum of 10^6 entries took 3.4 ms here; the block sums take 0.1, the draws' own
    blocks' sums little.

    ``weights`` float32, its length a multiple of ``BLOCK`` (zeros past the last position: the
    caller writes the weights into such a buffer, ``padded``, rather than copying them there).
    A block is chosen by its float32 sum, so a draw's probability is weights_i/``total`` to
    within float32's rounding of that sum (a relative 1e-7 or so); within the block it is exact
    to float64's."""

    BLOCK = _DRAW_BLOCK

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = weights
        self.blocks = weights.reshape(-1, self.BLOCK)
        # As a matrix-vector product: numpy's sum along rows took 14x longer (0.58 ms at 10^6).
        self.sums = (self.blocks @ np.ones(self.BLOCK, dtype=np.float32)).astype(np.float64)
        self.running = np.cumsum(self.sums)
        self.total = float(self.running[-1]) if len(self.running) else 0.0

    @classmethod
    def padded(cls, n: int) -> np.ndarray:
        """A zeroed float32 buffer for n weights, padded to whole blocks."""
        return np.zeros(-(-n // cls.BLOCK) * cls.BLOCK, dtype=np.float32)

    def draw(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` positions drawn with replacement (``total`` > 0)."""
        block, sums, running = self.BLOCK, self.sums, self.running
        target = rng.random(count) * self.total
        chosen = np.minimum(np.searchsorted(running, target, side="right"), len(sums) - 1)
        within = target - (running[chosen] - sums[chosen])
        # Each draw's position within its block: the entries of its block's running sum at or
        # below what is left of the draw, counted. The running sums as one product with an
        # upper-triangular matrix of ones (a cumulative sum along rows took 0.3 ms for 1,600
        # blocks of 64, the product 0.05), in float64: in float32 a weight below half a step
        # of the sum before it was never drawn, though its probability was reported. What is
        # left of the draw is rescaled from the block's float32 sum to these sums' total.
        running_within = self.blocks[chosen].astype(np.float64) @ _UPPER_ONES
        within = within * (running_within[:, -1] / sums[chosen])
        column = np.minimum((running_within <= within[:, None]).sum(axis=1), block - 1)
        picked = chosen * block + column
        # Rounding of the two levels' sums can land a draw on a weight of 0 at a block's edge
        # (a position never to be drawn, or the padding): it takes the block's nearest positive.
        stray = np.flatnonzero(self.weights[picked] == 0)
        if len(stray):
            positive = self.blocks[chosen[stray]] > 0
            first = np.argmax(positive, axis=1)
            last = block - 1 - np.argmax(positive[:, ::-1], axis=1)
            edge = np.where(column[stray] == 0, first, last)
            picked[stray] = chosen[stray] * block + edge
        return picked
