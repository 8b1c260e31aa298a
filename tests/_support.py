"""Helpers shared by the tests: a tiny seeded fake encoder and sample values of every kind."""

from __future__ import annotations

import hashlib
import unicodedata

import numpy as np
import pytest
from rapidfuzz import fuzz
from rapidfuzz.distance import OSA

FAKE_DIM = 16

# -- comparing floats ---------------------------------------------------------------------------
#
# Scores come from float32 kernels (BLAS, FAISS, ONNX Runtime, rapidfuzz) whose SIMD code paths
# (AVX2, AVX-512, generic) sum in different orders, so a figure computed on one CPU is
# reproduced on another only to about float32's precision: a relative 1e-7 per score, which a
# softmax at a small temperature T multiplies by |score| / T (up to ~100 here) in the weights.
# Every comparison of such figures with saved or hand-computed ones allows a relative 1e-5, and
# an absolute 1e-9 below which a probability or weight is noise (a weight of e^-20 and less).
# A test that needs more (an estimate, an approximate index, an int8 model) says so, with why.
FLOAT32_RTOL = 1e-5
TINY_ABS = 1e-9


def close(expected: object, *, rel: float = FLOAT32_RTOL, abs: float = TINY_ABS) -> object:
    """``pytest.approx`` with the float32 tolerances above."""
    return pytest.approx(expected, rel=rel, abs=abs)


def assert_close(
    actual: object, expected: object, *, rtol: float = FLOAT32_RTOL, atol: float = TINY_ABS
) -> None:
    """``np.testing.assert_allclose`` with the float32 tolerances above."""
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def _token_vector(token: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).standard_normal(FAKE_DIM)


class FakeEncoder:
    """Seeded bag-of-words encoder: the sum of one fixed random vector per lower-case word.

    Texts that share words are similar ("red apple" ~ "apple"), texts that share none are not,
    and the same text always gets the same embedding. It counts its calls and texts so tests can
    check batching and caching.
    """

    name = "fake-bag-of-words"

    def __init__(self) -> None:
        self.calls = 0
        self.texts_encoded: list[str] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts_encoded.extend(texts)
        out = np.zeros((len(texts), FAKE_DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for token in text.lower().split():
                out[i] += _token_vector(token)
        return out


# One sample of each value kind, used to run the same contract over every kind of store.
VALUE_SAMPLES = {
    "scalar": [1, 2.5, -3, 4.0, 1e6],
    "vector": [np.array([1.0, 0.0]), [0.5, 0.5], (2.0, -1.0), np.array([0.0, 3.0]), [1e3, 1.0]],
    "categorical": ["fruit", {"id": 3, "tags": ["a"]}, None, True, "furniture"],
    "boolean": [True, False, False, True, True],  # the plug-in kind of tests/_plugins.py
}

# value_kind= for each sample: built-in kinds are inferred from the first value, plug-ins named.
VALUE_KIND_OPTION = {"boolean": "boolean"}


def same_value(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    return a == b and type(a) is type(b)


# -- the spelling similarity, naively (softdict.spelling.scores) ------------------------------


def naive_form(text: str) -> str:
    bare = "".join(
        ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)
    )
    return " ".join("".join(ch if ch.isalnum() else " " for ch in bare.casefold()).split())


def naive_spelling(query: str, key: str) -> float:
    """(the better Indel similarity of the forms and their sorted words + OSA similarity) / 2,
    pair by pair with rapidfuzz's plain scorers; 0 when either form is empty."""
    q, k = naive_form(query), naive_form(key)
    if not q or not k:
        return 0.0
    indel = max(
        fuzz.ratio(q, k), fuzz.ratio(" ".join(sorted(q.split())), " ".join(sorted(k.split())))
    )
    return (indel / 100 + OSA.normalized_similarity(q, k)) / 2
