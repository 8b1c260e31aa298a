"""Spelling candidates for large stores: an inverted index of character 3-grams.

Scoring every key's spelling costs about what scoring every key's meaning does (rapidfuzz takes
~0.1 µs a pair), which a store of 10^6 keys cannot afford per lookup. This index finds the keys
that share the query's rarest 3-grams instead: scikit-learn's ``HashingVectorizer`` turns each
form into its 3-grams (words padded with spaces, hashed into 2^18 columns, no vocabulary to keep
in step), and a gram-major sparse matrix lists the rows holding each 3-gram. A query sums the
inverse document frequency of the 3-grams it shares with each row, rarest 3-grams first up to a
budget of postings, divided by the square root of the row's 3-gram count; the best few
thousand rows are then scored exactly by the caller. On 10^6 real names and words
(``benchmarks/matching_scale.py``), the union these candidates join held the best key by the
combined score over every key for 0.975 to 1.00 of typo, name and phrase queries.

Rows arrive in order (the spelling index's rows). New rows wait in a small key-major block that
is scored directly, and join the gram-major postings (``maintain``) when that block grows past a
share of them, so adding a key never rebuilds the postings and a lookup never scans more than
that block. The slow steps (cutting forms into 3-grams, merging) compute aside and change
nothing until their last assignments, so a store can do them before or after its commit.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from softdict._files import FileReader, StoreFiles
from softdict._rows import GrowableRows

if TYPE_CHECKING:
    import scipy.sparse as sp  # imported where used: small stores never need it (0.1 s)

__all__ = ["N_FEATURES", "POSTINGS_FILES", "NgramCandidates", "gram_vectorizer"]

N_FEATURES = 2**18
# The files a store saves the postings in.
POSTINGS_FILES = ("spelling_indptr.npy", "spelling_rows.npy", "spelling_lengths.npy")
NGRAM = 3
# The rarest 3-grams of a query are read until this many postings: common 3-grams ("the") list
# a good part of a large store and say little about which key was meant.
POSTINGS_BUDGET = 200_000
# New rows are merged into the postings once they are more than this many and this share of them.
_MERGE_MIN_ROWS = 4096
_MERGE_SHARE = 1 / 32


@functools.cache
def gram_vectorizer() -> Any:
    """The 3-gram vectorizer of every spelling form (a Milvus store's 3-gram field too)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(
        analyzer="char_wb",
        ngram_range=(NGRAM, NGRAM),
        n_features=N_FEATURES,
        binary=True,
        norm=None,
        alternate_sign=False,
        lowercase=False,  # forms are case-folded already
        dtype=np.float32,
    )


class NgramCandidates:
    """Character 3-gram postings over rows 0..n-1 (see the module docstring)."""

    def __init__(self) -> None:
        self._vectorize = gram_vectorizer().transform
        # Gram-major postings, CSR without its data (every entry is 1): the rows holding 3-gram
        # g are indices[indptr[g]:indptr[g + 1]], increasing.
        self._indptr = np.zeros(N_FEATURES + 1, dtype=np.int64)
        self._indices = np.zeros(0, dtype=np.int32)
        self._covered = 0  # rows in the postings; the rest wait in ``_pending``
        self._idf = np.zeros(N_FEATURES, dtype=np.float32)
        self._pending: list[sp.csr_matrix] = []  # key-major blocks of rows after the postings
        self._pending_block: sp.csr_matrix | None = None  # the blocks stacked (a cache)
        self._lengths = GrowableRows((), np.float32)  # each row's number of 3-grams

    def __len__(self) -> int:
        return len(self._lengths)

    def grams(self, forms: list[str]) -> sp.csr_matrix:
        """The 3-grams of ``forms``, key-major, for ``add`` (the slow part, changing nothing)."""
        return self._vectorize(forms).tocsr()

    def add(self, grams: sp.csr_matrix) -> None:
        """Rows for the 3-grams ``grams`` (from ``grams``), after the rows already held. Quick:
        they wait in the pending block until ``maintain`` merges them."""
        lengths = np.diff(grams.indptr).astype(np.float32)
        self._pending.append(grams)
        self._pending_block = None
        self._lengths.append(lengths)

    def merge_due(self) -> bool:
        """Whether the pending rows are many enough to merge (``maintain``)."""
        waiting = len(self) - self._covered
        return waiting > 0 and (
            not self._covered or waiting > max(_MERGE_MIN_ROWS, _MERGE_SHARE * self._covered)
        )

    def maintain(self, *, force: bool = False) -> None:
        """Move the waiting rows into the postings when they are due (``force``: whenever some
        wait): one pass over all the postings, computed aside and put in place at the end, so
        an interruption leaves the rows where they were."""
        if not self._pending or not (force or self.merge_due()):
            return
        import scipy.sparse as sp

        pending = len(self._pending)
        block = sp.vstack(self._pending, format="csr")
        held = sp.csr_matrix(
            (np.ones(len(self._indices), np.float32), self._indices, self._indptr),
            shape=(N_FEATURES, self._covered),
        )
        merged = sp.hstack([held, block.T], format="csr")
        merged.sort_indices()
        indptr = merged.indptr.astype(np.int64)
        indices = merged.indices.astype(np.int32)
        idf = np.log((merged.shape[1] + 1) / (np.diff(indptr) + 1)).astype(np.float32)
        self._indptr, self._indices, self._idf = indptr, indices, idf
        self._covered = merged.shape[1]
        self._pending, self._pending_block = self._pending[pending:], None

    def search(
        self, forms: list[str], pool: int, admissible: np.ndarray | None
    ) -> list[np.ndarray]:
        """For each form, up to ``pool`` rows sharing its 3-grams, best first; ``admissible``
        (bool per row, or None for all) limits the rows."""
        import scipy.sparse as sp

        queries = self._vectorize(forms).tocsr()
        if self._pending and self._pending_block is None:
            self._pending_block = sp.vstack(self._pending, format="csr")
        return [
            self._search_one(
                queries.indices[queries.indptr[i] : queries.indptr[i + 1]], pool, admissible
            )
            for i in range(len(forms))
        ]

    def _search_one(
        self, grams: np.ndarray, pool: int, admissible: np.ndarray | None
    ) -> np.ndarray:
        # Each 3-gram's postings count from its two pointers: a diff of the whole pointer
        # (2^18 entries) took 0.09 ms, twice a query.
        counts = self._indptr[grams + 1] - self._indptr[grams]
        order = np.argsort(counts, kind="stable")
        grams, counts = grams[order], counts[order]
        budget = int(np.searchsorted(np.cumsum(counts), POSTINGS_BUDGET, side="right")) + 1
        read, read_counts = grams[:budget], counts[:budget]
        postings = np.concatenate(
            [self._indices[self._indptr[g] : self._indptr[g + 1]] for g in read]
            or [np.zeros(0, np.int32)]
        )
        rows, scores = _idf_sums(postings, read_counts, self._idf[read])
        if self._pending_block is not None and len(grams):
            weights = np.zeros(N_FEATURES, dtype=np.float32)
            # A 3-gram no merged row holds is rare: weigh it as the rarest there are.
            weights[grams] = np.where(counts > 0, self._idf[grams], np.log(self._covered + 1))
            pending = self._pending_block @ weights
            hit = np.flatnonzero(pending)
            rows = np.concatenate([rows, hit + self._covered])
            scores = np.concatenate([scores, pending[hit]])
        if admissible is not None and len(rows):
            keep = admissible[rows]
            rows, scores = rows[keep], scores[keep]
        scores = scores / np.sqrt(self._lengths.view[rows] + 1.0)
        if len(rows) > pool:
            best = np.argpartition(-scores, pool - 1)[:pool]
            rows, scores = rows[best], scores[best]
        return rows[np.argsort(-scores, kind="stable")]

    def nbytes(self) -> int:
        pending = sum(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes for m in self._pending)
        if self._pending_block is not None:
            block = self._pending_block
            pending += block.data.nbytes + block.indices.nbytes + block.indptr.nbytes
        return int(
            self._indptr.nbytes
            + self._indices.nbytes
            + self._idf.nbytes
            + self._lengths.view.nbytes
            + pending
        )

    # -- persistence -------------------------------------------------------------------------

    def files(self) -> StoreFiles:
        """The postings and row lengths, every row merged, as a store saves them."""
        self.maintain(force=True)
        arrays = (self._indptr, self._indices, self._lengths.view)
        return dict(zip(POSTINGS_FILES, arrays))

    @classmethod
    def from_files(cls, files: FileReader, n_rows: int) -> NgramCandidates | None:
        """Postings that ``files`` saved for ``n_rows`` rows, checked; None where none were."""
        if not all(files.has(name) for name in POSTINGS_FILES):
            return None
        indptr_name, rows_name, lengths_name = POSTINGS_FILES
        indptr = files.npy(indptr_name, np.int64, (N_FEATURES + 1,))
        rows = files.npy(rows_name, np.int32, (None,))
        lengths = files.npy(lengths_name, np.float32, (n_rows,))
        if indptr[0] != 0 or indptr[-1] != len(rows) or np.any(np.diff(indptr) < 0):
            raise files.error(indptr_name, "is not a valid postings pointer for its rows")
        if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
            raise files.error(rows_name, f"names rows outside the {n_rows} keys")
        if not np.all(np.isfinite(lengths)) or np.any(lengths < 0):
            raise files.error(lengths_name, "holds invalid 3-gram counts")
        candidates = cls()
        candidates._indptr = indptr.astype(np.int64)
        candidates._indices = rows.astype(np.int32)
        candidates._covered = n_rows
        candidates._lengths.append(lengths.astype(np.float32))
        counts = np.diff(candidates._indptr)
        candidates._idf = np.log((candidates._covered + 1) / (counts + 1)).astype(np.float32)
        return candidates


def _idf_sums(
    postings: np.ndarray, counts: np.ndarray, idf: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each row named in ``postings`` (the rows of several 3-grams one after the other, ``counts``
    of each) with the sum of the ``idf`` of its 3-grams among them: rows increasing, float64.

    Grouped by one sort of (row, place of the 3-gram) pairs, which keeps each row's idfs in the
    order given. Measured one-off on random postings: for 20,000 into 10^5 rows np.unique's
    inverse (numpy 2.4's hash-based path) took 1.06 ms, a bincount over every row 0.08; for
    44,000 into 10^6 rows (a median query of 10^6 real names) the bincount and a sort of the
    rows it names took 1.38 ms (zeroing 8 MB), this 0.97."""
    if not len(postings):
        return np.zeros(0, np.int64), np.zeros(0)
    width = len(counts)
    pairs = postings.astype(np.int64) * width + np.repeat(np.arange(width), counts)
    pairs.sort()
    rows = pairs // width
    starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
    return rows[starts], np.add.reduceat(idf.astype(np.float64)[pairs % width], starts)
