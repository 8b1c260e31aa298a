"""Compressed scores of every key: key vectors kept as 4-bit (or 8-bit) codes, scored for a
batch of queries by one ONNX Runtime quantised matrix product, with a bound on every score's
error.

Why: exact attention over a large store is memory-bound, it reads 4·d bytes a key for every
query. Codes of 4 bits a component read about a sixth of that (with their scales): over 10^5
real keys the kernel took a third of exact numpy's time on a CPU with AVX2
(``benchmarks/compressed_scores.py``), a seventh on one with AVX-512 VNNI (issue 29's study).

The codes are MatMulNBits' layout: a vector's d components in blocks of ``block`` (d padded with
zeros to a multiple of it), each block as unsigned integers c in [0, 2^bits − 1] with a float32
scale and an integer zero point z, a component approximated by scale·(c − z) (min-max
quantisation, rounded to nearest). The kernel is ``com.microsoft.MatMulNBits`` at accuracy level
4, which also rounds each block of the query to int8 (scale max|q_b|/127) and multiplies
integers. So for a query q and a key k whose codes decode to k̃ (residual r = k − k̃), with q̃ the
query as the kernel rounds it,

    q·k − score = q·r + (q − q̃)·k̃ + rounding of the float sums

and, with ‖q − q̃‖ ≤ √(Σ_b n_b·(max|q_b|/254)²) over the query's blocks b of n_b components,

    |q·k − score| ≤ ‖q‖·‖r‖ + ‖q − q̃‖·‖k̃‖ + 1e-5·‖q‖·(‖k̃‖ + ‖r‖)       (``score_error``)

which holds whatever the kernel does inside those roundings (a build of ONNX Runtime without the
int8 kernel scores the decoded codes in float32: its error is the first term alone). The bound
is a worst case: on real text it is about 27 times the typical error (the errors of the d
components mostly cancel), which is why the lookup that uses these scores rescores its best keys
exactly (``softdict._compressed``).

The kernel needs the codes as a constant of its graph (it reorders them once, when the session
is made: given as an input each call, it was 100x slower), so the codes of rows added since the
session was made are not in it: those rows are scored exactly from their float32 vectors until
they are many enough (``OPEN_ROWS``) to make the session again. The codes themselves are kept
in numpy for every row, so that compaction, saving and a new session need no second pass over
the vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from softdict._rows import GrowableColumns, GrowableRows
from softdict._runtime import usable_cores
from softdict.index.base import ScoreErrors

__all__ = [
    "CODE_BLOCK",
    "OPEN_ROWS",
    "CodeLayout",
    "Coded",
    "KeyCodes",
    "kernel_threads",
    "quantise",
]

# A session is made again once the rows outside it exceed this many and a sixteenth of the rows
# in it: a lookup scans at most 1/16 more rows exactly (each 8x the bytes of a coded row), and
# the cost of making the session (about 1.5 µs a row) is amortised over the rows added.
OPEN_ROWS = 4096
_OPEN_SHARE = 16
# The kernel's threads, at most: on 2 cores a second one scored 10^5 keys in 0.7 of one's time
# (an AMD EPYC with AVX-512, blocks of 64; benchmarks/results_compressed_scores.md), where on
# another EPYC without AVX-512 it gained nothing consistent. More were not measured.
_MAX_KERNEL_THREADS = 2
# Components per code block (one scale and zero point each). On real text blocks of 64 scored
# 10^5 keys in 0.7 of the time of blocks of 32 (two kernel threads), with 15% more error in a
# score (benchmarks/results_compressed_scores.md); the lookup's error stays near 0.1%
# (benchmarks/results_real_scale_epyc512.md).
CODE_BLOCK = 64
# ONNX Runtime's int8 path: the query rounded to int8 per block, integer products.
_ACCURACY_INT8 = 4
# Relative rounding of float32 sums of a few hundred products, with room to spare.
_FLOAT_SLACK = 1e-5


@dataclass(frozen=True)
class CodeLayout:
    """How a vector of ``dim`` components is coded: ``bits`` per component (4 or 8), in blocks
    of ``block`` components, each with its own scale and zero point."""

    dim: int
    bits: int = 4
    block: int = CODE_BLOCK

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise ValueError(f"codes have 4 or 8 bits a component, not {self.bits}")
        if self.block < 16 or self.block & (self.block - 1):
            raise ValueError(f"a code block is a power of two of at least 16, not {self.block}")

    @property
    def blocks(self) -> int:
        return -(-self.dim // self.block)

    @property
    def padded(self) -> int:
        return self.blocks * self.block

    @property
    def levels(self) -> int:
        return (1 << self.bits) - 1

    @property
    def blob_bytes(self) -> int:
        """Bytes of one block's codes."""
        return self.block * self.bits // 8

    @property
    def zero_point_bytes(self) -> int:
        """Bytes of one row's zero points, packed as MatMulNBits reads them."""
        return -(-self.blocks * self.bits // 8)

    def bytes_per_row(self) -> int:
        """Codes, scales, zero points and the two norms of the bound."""
        return self.blocks * (self.blob_bytes + 4) + self.zero_point_bytes + 8


@dataclass(frozen=True)
class Coded:
    """Rows of codes: ``blobs`` (n, blocks, blob_bytes) uint8, ``scales`` (n, blocks) float32,
    ``zero_points`` (n, zero_point_bytes) uint8, and the norms of each row's residual and of its
    decoded vector (n, 2) float32, for the bound (``KeyCodes`` holds them as (2, n))."""

    blobs: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray
    norms: np.ndarray

    @classmethod
    def joined(cls, parts: list[Coded]) -> Coded:
        """The rows of ``parts`` (at least one), one after another."""
        return cls(
            np.concatenate([part.blobs for part in parts]),
            np.concatenate([part.scales for part in parts]),
            np.concatenate([part.zero_points for part in parts]),
            np.concatenate([part.norms for part in parts]),
        )


def quantise(vectors: np.ndarray, layout: CodeLayout) -> Coded:
    """The codes of ``vectors`` (n, dim) float32 (module docstring)."""
    n = len(vectors)
    padded = _padded(vectors, layout, np.float32)
    blocks = padded.reshape(n, layout.blocks, layout.block)
    low, high = blocks.min(axis=2), blocks.max(axis=2)
    # A block's range must hold 0 exactly (the zero point is an integer level): the padding and
    # any zero component then decode to 0.
    low, high = np.minimum(low, 0.0), np.maximum(high, 0.0)
    scales = ((high - low) / layout.levels).astype(np.float32)
    scales[scales == 0] = 1.0  # an all-zero block: any scale decodes it exactly
    zero = np.clip(np.rint(-low / scales), 0, layout.levels)
    levels = np.clip(np.rint(blocks / scales[..., None]) + zero[..., None], 0, layout.levels)
    decoded = ((levels - zero[..., None]) * scales[..., None]).reshape(n, layout.padded)
    codes = levels.astype(np.uint8)
    zero_codes = zero.astype(np.uint8)
    if layout.bits == 4:  # two components a byte, the first in the low nibble
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
        if layout.blocks % 2:
            zero_codes = np.concatenate([zero_codes, np.zeros((n, 1), np.uint8)], axis=1)
        zero_codes = zero_codes[:, 0::2] | (zero_codes[:, 1::2] << 4)
    residual = padded - decoded
    norms = np.stack(
        [np.linalg.norm(residual, axis=1), np.linalg.norm(decoded, axis=1)], axis=1
    ).astype(np.float32)
    return Coded(np.ascontiguousarray(codes), scales, np.ascontiguousarray(zero_codes), norms)


def _padded(rows: np.ndarray, layout: CodeLayout, dtype: type) -> np.ndarray:
    """``rows`` (n, dim) as ``dtype``, with zeros up to the codes' padded dimension (the
    kernel's K); not copied where there is nothing to pad and they are of that type already."""
    if layout.padded == layout.dim:
        return np.asarray(rows, dtype=dtype)
    padded: np.ndarray = np.zeros((len(rows), layout.padded), dtype=dtype)
    padded[:, : layout.dim] = rows
    return padded


def kernel_threads() -> int:
    """The kernel's threads: ``_MAX_KERNEL_THREADS``, or one where the process may run on one
    core only (a second there would only take turns with the first). Between runs they wait
    without spinning (``_session``), so they take no time from a caller's own threads."""
    return min(_MAX_KERNEL_THREADS, usable_cores())


def query_factors(queries: np.ndarray, layout: CodeLayout) -> np.ndarray:
    """(m, 2): the factors of ``queries`` in ``score_error``: ‖q‖·(1 + slack) against the row's
    residual norm, and ‖q − q̃‖ + slack·‖q‖ against its decoded norm."""
    m = len(queries)
    padded = _padded(queries, layout, np.float64)
    blocks = padded.reshape(m, layout.blocks, layout.block)
    rounding = np.abs(blocks).max(axis=2) / 254.0  # half an int8 step of each block
    query_error = np.sqrt((layout.block * rounding**2).sum(axis=1))
    norm = np.linalg.norm(padded, axis=1)
    return np.stack([norm * (1 + _FLOAT_SLACK), query_error + _FLOAT_SLACK * norm], axis=1)


class KeyCodes:
    """The codes of a backend's rows (tombstones included, in row order) and the session that
    scores them; ``scores`` gives every row's compressed score and the bound on its error.

    ``open_rows``: how many rows may wait outside the session (scored exactly) before it is made
    again, at least (module docstring). ``codes_from``: up to this many rows there is no
    session, every row is scored exactly (default ``open_rows``). Both 0: a session from the
    first rows (tests use it).
    ``open_share``: the session is made again only once the rows outside it are also more than
    the rows in it over this (0: whatever their share).
    ``threads``: the kernel's (default ``kernel_threads()``)."""

    def __init__(
        self,
        layout: CodeLayout,
        *,
        open_rows: int = OPEN_ROWS,
        codes_from: int | None = None,
        open_share: int = _OPEN_SHARE,
        threads: int | None = None,
    ) -> None:
        self.layout = layout
        self._open_rows = open_rows
        self._open_share = open_share
        self._codes_from = open_rows if codes_from is None else codes_from
        self._threads = kernel_threads() if threads is None else threads
        self._blobs = GrowableRows((layout.blocks, layout.blob_bytes), np.uint8)
        self._scales = GrowableRows((layout.blocks,), np.float32)
        self._zero_points = GrowableRows((layout.zero_point_bytes,), np.uint8)
        self._norms = GrowableColumns(2, np.float32)  # (2, n): each factor contiguous
        self._session: object | None = None
        self._sealed = 0  # rows 0.._sealed-1 are in the session
        # The sealed rows' largest factors and which of them are exact (all-zero vectors): made
        # with the session, as every lookup needs them (``ScoreErrors.summary``).
        self._sealed_summary = _NO_ROWS_SUMMARY

    def __len__(self) -> int:
        return len(self._norms)

    @property
    def sealed(self) -> int:
        """Rows the session scores from their codes; the rows after it are scored exactly."""
        return self._sealed

    def append(self, vectors: np.ndarray) -> None:
        """Codes for rows added after the last (``vectors`` (n, dim) float32)."""
        self._add(quantise(vectors, self.layout))

    def restore(self, coded: Coded) -> None:
        """Codes made elsewhere (saved, or quantised in parts) in place of none, made into a
        session at once where one is due (checked by the caller against the layout and rows)."""
        assert not len(self)
        self._add(coded)

    def _add(self, coded: Coded) -> None:
        self._blobs.append(coded.blobs)
        self._scales.append(coded.scales)
        self._zero_points.append(coded.zero_points)
        self._norms.append(coded.norms)
        if self._session_due():
            self._seal()

    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows`` (increasing), renumbered from 0: the backend compacted."""
        for part in (self._blobs, self._scales, self._zero_points, self._norms):
            part.keep(rows)
        self._session, self._sealed = None, 0
        self._sealed_summary = _NO_ROWS_SUMMARY
        if self._session_due():
            self._seal()

    def _session_due(self) -> bool:
        """Whether to make the session again now (the class docstring's rule)."""
        waiting = len(self) - self._sealed
        share = self._sealed // self._open_share if self._open_share else 0
        return len(self) > self._codes_from and waiting > max(self._open_rows, share)

    def coded(self) -> Coded:
        """Every row's codes (views, but for the norms: for saving)."""
        norms = np.ascontiguousarray(self._norms.view.T)
        return Coded(self._blobs.view, self._scales.view, self._zero_points.view, norms)

    def nbytes(self) -> int:
        """Bytes of the codes kept here (the session keeps its own reordered copy)."""
        return len(self) * self.layout.bytes_per_row()

    def scores(self, queries: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, ScoreErrors]:
        """The inner products of ``queries`` (m, dim) with every row, (m, rows) float32: from
        the codes for the rows in the session, exactly from ``vectors`` (every row's float32
        vector) for the rest; and the bound on each one's error (0 for the exact ones)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        m, size = len(queries), len(self)
        sealed = self._sealed
        coded = self.sealed_scores(queries) if sealed else None
        if coded is not None and sealed == size:  # every row in the session (the usual case)
            out = coded
        else:
            out = np.empty((m, size), dtype=np.float32)
            if coded is not None:
                out[:, :sealed] = coded
            # (n, d)·(d, m): ``queries @ vectors.T`` multiplies a transposed operand, many
            # times slower for one query (softdict._similarity.metric_scores).
            out[:, sealed:] = (vectors[sealed:size] @ queries.T).T
        row_factors = self._norms.view
        largest, exact = self._sealed_summary
        if sealed < size:
            row_factors = row_factors.copy()
            row_factors[:, sealed:] = 0.0  # scored exactly
            exact = np.concatenate([exact, np.arange(sealed, size)])
        summary = (largest, exact)
        return out, ScoreErrors(query_factors(queries, self.layout), row_factors, summary)

    def sealed_scores(self, queries: np.ndarray) -> np.ndarray:
        """(m, ``sealed``) float32: the compressed scores of the rows in the session for
        ``queries`` (m, dim) float32, without bounds; the caller scores the rows after it."""
        session = self._session
        if session is None:
            return np.zeros((len(queries), 0), dtype=np.float32)
        padded = _padded(queries, self.layout, np.float32)
        return session.run(None, {"queries": padded})[0]  # type: ignore[attr-defined]

    def _seal(self) -> None:
        """Make the session over every row's codes (the store's lock is held: it is a write)."""
        self._session = _session(self.coded(), self.layout, self._threads)
        self._sealed = len(self)
        self._sealed_summary = _summary(self._norms.view)


def _summary(row_factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ScoreErrors.summary`` of rows with these factors (2, n), as ``ScoreErrors`` itself
    computes it, made read-only: every lookup's ``ScoreErrors`` shares it."""
    rows = ScoreErrors(np.zeros((0, 2)), row_factors)
    largest, exact = rows.largest(), rows.exact_columns()
    for part in (largest, exact):
        part.flags.writeable = False
    return largest, exact


_NO_ROWS_SUMMARY = _summary(np.zeros((2, 0), dtype=np.float32))


def _session(coded: Coded, layout: CodeLayout, threads: int) -> object:
    """A one-node ONNX Runtime session: (m, padded dim) float32 queries -> (m, rows) scores."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    rows = len(coded.scales)
    node = helper.make_node(
        "MatMulNBits",
        ["queries", "codes", "scales", "zero_points"],
        ["scores"],
        domain="com.microsoft",
        K=layout.padded,
        N=rows,
        bits=layout.bits,
        block_size=layout.block,
        accuracy_level=_ACCURACY_INT8,
    )
    graph = helper.make_graph(
        [node],
        "compressed_scores",
        [helper.make_tensor_value_info("queries", TensorProto.FLOAT, ["m", layout.padded])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["m", rows])],
        [
            numpy_helper.from_array(np.ascontiguousarray(coded.blobs), "codes"),
            numpy_helper.from_array(np.ascontiguousarray(coded.scales).reshape(-1), "scales"),
            numpy_helper.from_array(
                np.ascontiguousarray(coded.zero_points).reshape(-1), "zero_points"
            ),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        # onnx writes its newest IR version by default (14 with onnx 1.23), which ONNX Runtime
        # before 1.21 refuses ("max supported IR version: 10"); the graph needs nothing past 8.
        ir_version=8,
    )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # As for the encoder (softdict.encoders.onnx): no worker thread spinning after a run.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
