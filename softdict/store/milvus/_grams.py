"""The spelling field of a Milvus store's keys: each key's character 3-grams as a sparse vector,
which Milvus indexes (``SPARSE_INVERTED_INDEX``) and searches by inner product, so that a
process finds the keys spelled like a query without holding any key itself.

A key's vector has its spelling form's 3-grams (``spelling.ngrams``: the same hashing into
2^18 columns as the memory store's postings), each weighing 1/sqrt(its 3-gram count + 1); a
query's has weight 1 on each of its 3-grams, so a key scores the number of 3-grams it shares
with the query, divided as the memory store divides it. The memory store also weighs each
3-gram by its rarity (inverse document frequency), which needs the counts of every key; here
every shared 3-gram counts alike, and the pool is rescored exactly (``_spelling``). On the
cities' typo and alias tasks at 10^5 keys the answers stayed within 1 point of the memory
store's, top-1 and top-5 (``benchmarks/results_milvus_matching.md``).

A short key (``SHORT_QUERY`` + 1 characters or fewer) also holds a feature for its first letter
and length, past the 3-gram columns: a short one-word query searches those of its own first
letter and its length plus or minus one, the keys the memory store adds as short neighbours
("cbua" shares no 3-gram with "cuba"): up to the pool's size of them, an arbitrary share where
more are held (the memory store takes them all).

From format 4 on, every key also holds a feature for its first character paired with each
character it holds: a query that could bear a mark (``spelling.marked``: "hcmc" for "ho chi
minh city") searches the pairs of its own first character with its characters, which ranks the
keys that begin with it by how many of its characters they hold, all of them first: up to the
pool's size of those come back, and are proposed as the memory store proposes them (an arbitrary
share of them where more hold every character: a query of two common letters).
"""

from __future__ import annotations

import zlib

import numpy as np

from softdict.spelling.evidence import compact, markable
from softdict.spelling.marked import SHORT_QUERY, short_query
from softdict.spelling.ngrams import N_FEATURES, gram_vectorizer
from softdict.spelling.text import spelling_form

__all__ = ["key_grams", "mark_vector", "neighbour_vector", "query_vectors"]

# The neighbour features: N_FEATURES + code point * _LENGTHS + length, below Milvus's 2^32
# columns for every code point (0x10FFFF * 8 + 2^18 < 2^24).
_LENGTHS = 8
assert SHORT_QUERY + 1 < _LENGTHS


# The pair features: _PAIRS + a 26-bit hash of (first character, character), past the neighbour
# features (below 2^24) and below Milvus's 2^32 columns. Two pairs of one hash propose a few keys
# that cannot bear a mark, which the exact scoring of the pool then leaves out.
_PAIRS = 1 << 28
_PAIR_BITS = (1 << 26) - 1


def _neighbour_feature(first: str, length: int) -> int:
    return N_FEATURES + ord(first) * _LENGTHS + length


def _pair_features(form: str) -> list[int]:
    """The features of a form's first character paired with each character it holds (spaces
    aside): a key's, and the query's it is searched with."""
    first = form[0]
    return [
        _PAIRS + (zlib.crc32(f"{first}{ch}".encode()) & _PAIR_BITS) for ch in set(compact(form))
    ]


def key_grams(keys: list[str]) -> list[dict[int, float]]:
    """Each key's sparse vector for the spelling field (see the module docstring)."""
    forms = [spelling_form(key) for key in keys]
    grams = gram_vectorizer().transform(forms).tocsr()
    vectors = []
    for i, form in enumerate(forms):
        columns = grams.indices[grams.indptr[i] : grams.indptr[i + 1]].tolist()
        weight = 1.0 / float(np.sqrt(len(columns) + 1.0))
        vector = dict.fromkeys(columns, weight)
        if 0 < len(form) <= SHORT_QUERY + 1:
            vector[_neighbour_feature(form[0], len(form))] = 1.0
        if form:
            vector.update(dict.fromkeys(_pair_features(form), 1.0))
        vectors.append(vector)
    return vectors


def query_vectors(forms: list[str]) -> list[dict[int, float]]:
    """Each query form's 3-grams, each weighing 1 (empty where it has none)."""
    grams = gram_vectorizer().transform(forms).tocsr()
    return [
        dict.fromkeys(grams.indices[grams.indptr[i] : grams.indptr[i + 1]].tolist(), 1.0)
        for i in range(len(forms))
    ]


def mark_vector(form: str) -> dict[int, float]:
    """A query form's pair features, each weighing 1 (empty for a query that cannot bear a
    mark): a key scores the number of the query's characters it holds, if it begins with the
    query's first character, else nothing."""
    return dict.fromkeys(_pair_features(form), 1.0) if markable(form) else {}


def neighbour_vector(form: str) -> dict[int, float]:
    """A short one-word query form's neighbour features (empty for any other query)."""
    if not short_query(form):
        return {}
    lengths = range(max(1, len(form) - 1), len(form) + 2)
    return {_neighbour_feature(form[0], length): 1.0 for length in lengths}
