"""A cheap upper bound on the spelling similarity of a query and every key: character counts.

Scoring a query's spelling against every key with rapidfuzz costs about 60 ns a key and pass
(three passes: the forms, the token-sorted forms, the transposition-aware distance), 1.8 ms at
10^4 keys, more than everything else in a lookup. Yet below ``SIMILARITY_FLOOR`` spelling adds
nothing, and most keys are spelled nothing like the query. Both of the similarity's parts are
bounded by how many characters the two texts share, counted as multisets (B):

* Indel (``fuzz.ratio``): 2·LCS / (|q| + |k|), and a common subsequence uses shared characters
  only, so LCS ≤ B; the token-sorted forms hold the same characters, so the same bound holds.
* optimal string alignment: 1 − d / max(|q|, |k|), and an insertion, deletion or substitution
  closes the multiset difference max(|q| − B, |k| − B) by at most one (a transposition leaves
  it as it is), so d ≥ max(|q|, |k|) − B.

So similarity ≤ (2B / (|q| + |k|) + B / max(|q|, |k|)) / 2. Characters are counted in 64
buckets (letters and digits one each, the space one, the rest of Unicode hashed into 27):
sharing a bucket can only raise min(count_q, count_k) summed, so the bound still holds. Counts
are kept as uint8; a form with 255 or more of one bucket is bounded by 1 (always scored).
``softdict.spelling.bounded`` scores exactly only the keys this bound cannot rule out.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUCKETS", "character_counts", "similarity_ceiling"]

BUCKETS = 64
_SPACE = 36
_OTHER = 37  # buckets 37..63: every other code point, by its value modulo 27
_SATURATED = 255


def _buckets(codes: np.ndarray) -> np.ndarray:
    """Each code point's bucket (see the module docstring)."""
    codes = codes.astype(np.int64)
    out = _OTHER + codes % (BUCKETS - _OTHER)
    letters = (codes >= ord("a")) & (codes <= ord("z"))
    digits = (codes >= ord("0")) & (codes <= ord("9"))
    out[letters] = codes[letters] - ord("a")
    out[digits] = 26 + codes[digits] - ord("0")
    out[codes == ord(" ")] = _SPACE
    return out


def character_counts(forms: list[str]) -> np.ndarray:
    """(n, 64) uint8: how many characters of each bucket each form holds (at most 255)."""
    n = len(forms)
    lengths = np.fromiter(map(len, forms), dtype=np.int64, count=n)
    # One UTF-32 buffer of every form: its units are code points, as Python's len counts them.
    codes = np.frombuffer("".join(forms).encode("utf-32-le"), dtype=np.uint32)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    flat = np.bincount(rows * BUCKETS + _buckets(codes), minlength=n * BUCKETS)
    return np.minimum(flat.reshape(n, BUCKETS), _SATURATED).astype(np.uint8)


def similarity_ceiling(
    query_counts: np.ndarray,
    query_length: int,
    key_counts: np.ndarray,
    key_lengths: np.ndarray,
) -> np.ndarray:
    """(n,) float64: an upper bound on the spelling similarity of one query (its counts (64,)
    and form length) with each key (counts (n, 64), lengths (n,))."""
    n = len(key_lengths)
    if query_length == 0:
        return np.zeros(n)  # an empty form is alike to nothing
    columns = np.flatnonzero(query_counts)
    held = key_counts[:, columns]
    shared = np.minimum(held, query_counts[columns]).sum(axis=1, dtype=np.float64)
    lengths = key_lengths.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ceiling = (
            2.0 * shared / (query_length + lengths) + shared / np.maximum(query_length, lengths)
        ) / 2.0
    ceiling = np.where(lengths > 0, ceiling, 0.0)
    if np.any(query_counts[columns] == _SATURATED):
        return np.where(lengths > 0, 1.0, 0.0)
    saturated = (held == _SATURATED).any(axis=1)
    return np.where(saturated, 1.0, np.minimum(ceiling, 1.0))
