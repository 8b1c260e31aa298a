"""A cheap upper bound on the spelling similarity of a query and every key: character counts.

Scoring a query's spelling against every key with rapidfuzz costs about 60 ns a key and pass
(three passes: the forms, the token-sorted forms, the transposition-aware distance; four under
``rule-6`` and ``rule-7``, which take that one on the sorted forms too), 1.8 ms at 10^4 keys,
more than everything else in a lookup. Yet below the combination's first knot spelling adds
nothing, and most keys are spelled nothing like the query. Both of the
similarity's parts are bounded by how many characters the two texts share, counted as
multisets (B):

* Indel (``fuzz.ratio``): 2·LCS / (|q| + |k|), and a common subsequence uses shared characters
  only, so LCS ≤ B; the token-sorted forms hold the same characters, so the same bound holds.
* optimal string alignment: 1 − d / max(|q|, |k|), and an insertion, deletion or substitution
  closes the multiset difference max(|q| − B, |k| − B) by at most one (a transposition leaves
  it as it is), so d ≥ max(|q|, |k|) − B; the token-sorted forms (``rule-6`` on) hold the same
  characters at the same lengths, so the same bound holds.

So similarity ≤ (2B / (|q| + |k|) + B / max(|q|, |k|)) / 2. Characters are counted in 64
buckets (letters and digits one each, the space one, the rest of Unicode hashed into 27):
sharing a bucket can only raise min(count_q, count_k) summed, so the bound still holds. Counts
are kept as uint8 (at most 255), held by bucket so that a query reads only its own buckets;
for a query of 255 characters or more, whose counts saturate, B ≤ min(|q|, |k|) stands in.
``softdict.spelling.bounded`` scores exactly only the keys this bound cannot rule out.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BUCKETS",
    "ceiling_and_could",
    "character_counts",
    "could_mark",
    "several_words",
    "similarity_ceiling",
]

BUCKETS = 64
_SPACE = 36
_OTHER = 37  # buckets 37..63: every other code point, by its value modulo 27
_SATURATED = 255
_ROUNDING = np.float32(1e-6)


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


# Each ASCII character's bucket, for counting a few forms in Python (a query's).
_ASCII_BUCKETS = [int(b) for b in _buckets(np.arange(128))]
# Up to this many forms are counted in Python: numpy's set-up costs more (13 us for one form).
_FEW_FORMS = 8


def character_counts(forms: list[str]) -> np.ndarray:
    """(n, 64) uint8: how many characters of each bucket each form holds (at most 255)."""
    n = len(forms)
    if n <= _FEW_FORMS:
        rows = []
        for form in forms:
            counts = [0] * BUCKETS
            for ch in form:
                code = ord(ch)
                counts[
                    _ASCII_BUCKETS[code] if code < 128 else _OTHER + code % (BUCKETS - _OTHER)
                ] += 1
            rows.append(counts)
        return np.minimum(np.array(rows, dtype=np.int64).reshape(n, BUCKETS), _SATURATED).astype(
            np.uint8
        )
    lengths = np.fromiter(map(len, forms), dtype=np.int64, count=n)
    # One UTF-32 buffer of every form: its units are code points, as Python's len counts them.
    codes = np.frombuffer("".join(forms).encode("utf-32-le"), dtype=np.uint32)
    rows_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
    flat = np.bincount(rows_of * BUCKETS + _buckets(codes), minlength=n * BUCKETS)
    return np.minimum(flat.reshape(n, BUCKETS), _SATURATED).astype(np.uint8)


def similarity_ceiling(
    query_counts: np.ndarray,
    query_length: int,
    key_counts: np.ndarray,
    key_lengths: np.ndarray,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """(n,) float32: an upper bound on the spelling similarity of one query (its counts (64,)
    and form length) with each key (counts held by column, (64, n), ``rows``: only those n of
    its columns; and the keys' lengths (n,) float32).

    A key's count of 255 may stand for more; min(query's count, 255) is still exact while the
    query holds fewer than 255 characters. A longer query shares at most min(|q|, |k|)."""
    return ceiling_and_could(query_counts, query_length, key_counts, key_lengths, rows, False)[0]


def could_mark(
    query_counts: np.ndarray, key_counts: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """(n,) bool: which keys (counts held by column, (64, n); ``rows``: only those n of its
    columns) hold at least as many characters of every bucket but the space as the query
    (counts (64,)): only those can bear one of ``evidence``'s marks, which each need the
    query's characters, spaces aside, in the key."""
    columns = np.flatnonzero(query_counts)
    columns = columns[columns != _SPACE]
    held = _held(key_counts, columns, rows)
    return np.all(held >= _spread(query_counts, columns, held.shape[1]), axis=0)


def ceiling_and_could(
    query_counts: np.ndarray,
    query_length: int,
    key_counts: np.ndarray,
    key_lengths: np.ndarray,
    rows: np.ndarray | None = None,
    marking: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``similarity_ceiling`` and, where ``marking``, ``could_mark`` of the same keys (else
    None), from one gather of the query's buckets at their rows: a large store's lookup asks
    for both of a few thousand keys several times (``reach``)."""
    n = len(key_lengths)
    could = None
    if query_length >= _SATURATED:
        # Its counts saturate, and their sum could pass 255: the characters shared are bounded
        # by the shorter form instead, loose for keys as long as the query but tight for the
        # short ones most keys are (a ceiling of 1 scored every key of 10^4 with rapidfuzz
        # for a 100,000-character query: 1.5 s). Which keys could bear a mark: bucket by bucket.
        shared = np.minimum(key_lengths, query_length).astype(np.float32)
        if marking:
            could = could_mark(query_counts, key_counts, rows)
    else:
        columns = np.flatnonzero(query_counts)
        # Each key's sum is at most the query's length (< 255).
        capped = np.minimum(_held(key_counts, columns, rows), _spread(query_counts, columns, n))
        shared = capped.sum(axis=0, dtype=np.uint8)
        if marking:
            # A key holds every character of the query, spaces aside, where it shares all of
            # them: one comparison of the sums, not one of every bucket (``could_mark``, which
            # took ~15 us of a lookup at 10^4 keys).
            spaces = np.flatnonzero(columns == _SPACE)
            needed = int(query_counts.sum()) - int(query_counts[_SPACE])
            found = shared if not len(spaces) else shared - capped[spaces[0]]
            could = np.asarray(found == needed)
    if query_length == 0 or not n:
        return np.zeros(n, dtype=np.float32), could  # an empty form is alike to nothing
    # (2B / (|q| + |k|) + B / max(|q|, |k|)) / 2, and a margin: float32 rounds the bound by
    # ~1e-7 either way. An empty key (|k| = 0) shares nothing: 0. In place, in float32.
    length = np.float32(query_length)
    bound = np.float32(1.0) / (key_lengths + length)
    bound += np.float32(0.5) / np.maximum(key_lengths, length)
    bound += _ROUNDING
    bound *= shared
    return np.minimum(bound, np.float32(1.0), out=bound), could


def several_words(key_counts: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """(n,) bool: which keys (counts held by column, (64, n); ``rows``: only those n of its
    columns) have several words: a space in their form, which is trimmed."""
    spaces = key_counts[_SPACE]
    return (spaces if rows is None else spaces[rows]) > 0


def _held(key_counts: np.ndarray, columns: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """(len(columns), n): the keys' counts of the query's buckets ``columns``, at ``rows``
    (None: every key). The query's buckets alone, each gathered at the rows: gathering every
    bucket first took 222 us for 2,048 of 10^5 keys against 18 (one-off timing here)."""
    if rows is None:
        return key_counts[columns]
    held = np.empty((len(columns), len(rows)), dtype=key_counts.dtype)
    for j, column in enumerate(columns):
        key_counts[column].take(rows, out=held[j])
    return held


def _spread(query_counts: np.ndarray, columns: np.ndarray, n: int) -> np.ndarray:
    """(len(columns), n): the query's counts of ``columns``, each repeated for n keys. Compared
    with the keys' counts as a broadcast column instead, numpy's uint8 loops ran 6x slower
    (83 against 15 us for 10 buckets of 10^4 keys, one-off timing here)."""
    return np.repeat(query_counts[columns], n).reshape(len(columns), n)
