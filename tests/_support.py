"""Helpers shared by the tests: a tiny seeded fake encoder and sample values of every kind."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

import numpy as np
import pytest
from rapidfuzz import fuzz
from rapidfuzz.distance import OSA

from softdict._config import CombinationName

FAKE_DIM = 16
# Every combination a store can name, in the enum's order ("rule-1" ... "learned-1").
COMBINATIONS = [name.value for name in CombinationName]

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


def tail_mass_estimates(
    backends: dict[str, object], keys: np.ndarray, query: np.ndarray, temperature: float
) -> tuple[dict[str, np.ndarray], float]:
    """Each backend's estimated tail mass for ``query`` (1, d) over its unit ``keys`` (row i
    under id i) with 200 seeds (a head of 32, a sample of 256 draws), and the true mass
    outside the head (the same head for every seed): for tests that an estimate is unbiased
    and how much its proposal narrows it."""
    from softdict._retrieval import RetrievalPolicy, select

    weights = np.exp((keys @ query[0]) / temperature)
    weights /= weights.sum()
    estimates: dict[str, list[float]] = {name: [] for name in backends}
    truth = np.nan
    for seed in range(200):
        policy = RetrievalPolicy(temperature, max_k=32, max_sample=256, tolerance=0.9, seed=seed)
        for name, backend in backends.items():
            chosen = select(backend, query, policy, None, len(keys))  # type: ignore[arg-type]
            head = chosen.ids[0, : chosen.k[0]]
            truth = 1 - float(weights[head].sum())
            estimates[name].append(chosen.tail_mass[0])
    return {name: np.array(found) for name, found in estimates.items()}, truth


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


# Cached: the large-store tests ask for the forms of the same 12,000 keys for every query.
@functools.lru_cache(maxsize=1 << 16)
def naive_form(text: str) -> str:
    bare = "".join(
        ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)
    )
    return " ".join("".join(ch if ch.isalnum() else " " for ch in bare.casefold()).split())


def naive_accented_form(text: str) -> str:
    """The form with each letter's accents kept, as the docstring of
    ``softdict.spelling.text.accented_form`` states it: character by character of the text
    (composed), the letter the form makes of it, with the accents it bore where Unicode composes
    the two into one character; the form itself where the result does not strip back to it."""
    out = []
    for ch in unicodedata.normalize("NFC", text):
        parts = unicodedata.normalize("NFKD", ch)
        accents = "".join(c for c in parts if unicodedata.combining(c))
        bare = "".join(c for c in parts if not unicodedata.combining(c)).casefold()
        letters = "".join(c if c.isalnum() else " " for c in bare)
        kept = unicodedata.normalize("NFC", letters + accents) if len(letters) == 1 else letters
        out.append(kept if accents and len(kept) == 1 else letters)
    accented = " ".join("".join(out).split())
    return accented if naive_form(accented) == naive_form(text) else naive_form(text)


def _in_form_order(form: str, kept: str) -> str:
    """``kept``'s words (an accented form) in the order that sorting ``form``'s words gives."""
    return " ".join(word for _, word in sorted(zip(form.split(), kept.split())))


def _naive_measure(
    q: str, k: str, q_form: str | None = None, k_form: str | None = None, sort_edits: bool = False
) -> float:
    """The measure of two texts, their words sorted in the order of their forms' words (the
    texts themselves where None: forms); with ``sort_edits``, OSA's the better of both orders
    too."""
    if not q or not k:
        return 0.0
    q_sorted = _in_form_order(q_form if q_form is not None else q, q)
    k_sorted = _in_form_order(k_form if k_form is not None else k, k)
    indel = max(fuzz.ratio(q, k), fuzz.ratio(q_sorted, k_sorted))
    edits = OSA.normalized_similarity(q, k)
    if sort_edits:
        edits = max(edits, OSA.normalized_similarity(q_sorted, k_sorted))
    return (indel / 100 + edits) / 2


def naive_spelling(
    query: str, key: str, accents: bool = False, sort_edits: bool = False, as_typed: bool = False
) -> float:
    """(the better Indel similarity of the forms and their sorted words + OSA similarity) / 2,
    pair by pair with rapidfuzz's plain scorers; 0 when either form is empty. With ``accents``
    (``rule-4``), for a query that bore accents: the mean of that and the same on the accented
    forms, whose words are sorted in the order of the forms' words. With ``sort_edits``
    (``rule-6``), OSA too is the better of the forms and their sorted words. With ``as_typed``
    (``rule-7``), for a query that bore no accents and a key that bore some: that less
    ``AS_TYPED`` (a constant of the package), at least 0."""
    from softdict.spelling.scores import AS_TYPED

    q, k = naive_form(query), naive_form(key)
    found = _naive_measure(q, k, sort_edits=sort_edits)
    kept, key_kept = naive_accented_form(query), naive_accented_form(key)
    if accents and kept != q:
        accented = _naive_measure(kept, key_kept, q, k, sort_edits)
        return (found + accented) / 2
    if accents and as_typed and key_kept != k:
        return max(found - AS_TYPED, 0.0)
    return found


def spelling_reads(combination: str) -> dict[str, bool]:
    """How ``combination`` spells, as ``naive_spelling``'s options: whether it reads accents
    (``rule-4`` on), sorts words for the edit measure too (``rule-6`` on) and prefers a key
    spelled as typed (``rule-7``)."""
    return {
        "accents": combination in ("rule-4", "rule-5", "rule-6", "rule-7", "rule-8"),
        "sort_edits": combination in ("rule-6", "rule-7", "rule-8"),
        "as_typed": combination in ("rule-7", "rule-8"),
    }


def library_measures(
    query: str, keys: list[str], sort_edits: bool = False, as_typed: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The spelling similarity of ``query`` with each key from the library's own columns, as
    rule-4 reads it (accents) and on the forms alone (rule-3); with ``sort_edits``, as rule-6
    reads them (OSA on sorted words too); with ``as_typed`` too, the first as rule-7 reads it
    (accents both ways)."""
    from softdict.spelling.prepared import PreparedKeys, accented_columns
    from softdict.spelling.scores import KeyForms, object_column, spelling_similarity
    from softdict.spelling.text import SpellingQueries, spelled

    prepared = PreparedKeys.of_spelled([spelled(key) for key in keys])
    forms = prepared.forms
    columns = KeyForms(
        object_column(forms), object_column(prepared.sorted_forms), None, accented_columns(prepared)
    )
    options = {"edits_sorted": sort_edits}
    read = spelling_similarity(
        SpellingQueries.of([query], accents=True, as_typed=as_typed, **options), columns
    )[0]
    return read, spelling_similarity(SpellingQueries.of([query], **options), columns)[0]


def naive_description(text: str, strict_short: bool = False) -> list[float]:
    """The learned combination's description of a query, as its docstring states it; with
    ``strict_short``, rule-5's (a word of at most 3 characters is common at Zipf 3.5, read from
    wordfreq here)."""
    from softdict.spelling.text import common_words

    words = re.findall(r"[^\W\d_]+|\d+", unicodedata.normalize("NFC", text).casefold())
    letters = [w for w in words if not w.isdigit()]

    def common(word: str) -> bool:
        if strict_short and len(word) <= 3:
            return naive_zipf(word) >= 3.5
        return word in common_words()

    unknown = sum(not common(w) for w in letters) / len(words) if words else 1.0
    cased = [ch for ch in text if ch.isalpha()]
    return [
        1.0,
        unknown,
        float(any(w.isdigit() for w in words)),
        float(len("".join(words)) <= 3),
        float(len(text.split()) >= 2),
        float(len(cased) >= 2 and all(ch.isupper() for ch in cased)),
    ]


def naive_zipf(word: str) -> float:
    """``word``'s Zipf frequency in wordfreq's large English list (-inf where it has none):
    log10 of its frequency per billion words."""
    frequency = _english_frequencies().get(word, 0.0)
    return float(np.log10(frequency) + 9) if frequency else -np.inf


@functools.cache
def _english_frequencies() -> dict[str, float]:
    import wordfreq

    return wordfreq.get_frequency_dict("en", wordlist="large")


def naive_marks(query: str, key: str) -> list[float]:
    """same, start, word start, initials, abbreviation (softdict.spelling.evidence), pair by
    pair on the forms."""
    q, k = naive_form(query), naive_form(key)
    cq, ck = q.replace(" ", ""), k.replace(" ", "")
    if len(cq) < 2 or not k:
        return [0.0] * 5
    if cq == ck:
        return [1.0, 0.0, 0.0, 0.0, 0.0]
    if len(cq) >= len(ck):
        return [0.0] * 5
    words = k.split()
    at, in_order = 0, True
    for ch in cq:
        at = ck.find(ch, at) + 1
        in_order &= at > 0
    return [
        0.0,
        float(k.startswith(q)),
        float(any(" ".join(words[i:]).startswith(q) for i in range(1, len(words)))),
        float(len(words) >= 2 and cq == "".join(w[0] for w in words)),
        float(cq[0] == ck[0] and in_order),
    ]


@functools.lru_cache(maxsize=4)
def _keys_by_word_initial(keys: tuple[str, ...]) -> dict[str, list[int]]:
    """The positions of ``keys`` by each letter a word of their form begins with."""
    positions: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        for initial in {word[0] for word in naive_form(key).split()}:
            positions.setdefault(initial, []).append(i)
    return positions


def _may_bear_marks(form: str, keys: tuple[str, ...]) -> list[int]:
    """The positions of the keys that can bear a mark for a query of ``form``: each of
    ``naive_marks`` needs a word of the key to begin with the query's first character (the
    others are 0 without a pair-by-pair visit, which takes seconds for 12,000 keys)."""
    return _keys_by_word_initial(keys).get(form[:1], []) if form else []


def _naive_mark_rows(query: str, keys: list[str]) -> np.ndarray:
    """(len(keys), 5): ``naive_marks`` of the query with each key (0 where none can be borne)."""
    marks = np.zeros((len(keys), 5))
    for i in _may_bear_marks(naive_form(query), tuple(keys)):
        marks[i] = naive_marks(query, keys[i])
    return marks


def naive_combined(
    query: str,
    keys: list[str],
    cosine: np.ndarray,
    combination: str,
    known: float = 1 / 16,
    spelled: np.ndarray | None = None,
) -> np.ndarray:
    """Each key's score under ``combination`` ("rule-1" to "rule-8", or "learned-1"),
    from the formula of softdict.spelling.combination's docstring, pair by pair (the learned
    constants are data: read from the package); ``spelled``: the spelling similarities, when
    already known. ``cosine`` is the query's with every key it may attend to (``rule-8``
    reads its best)."""
    from softdict.spelling.combination import LEARNED_1, RULE_2_MARKS, RULE_5_MARKS
    from softdict.spelling.text import unknown_share

    if spelled is None:
        reads = spelling_reads(combination)
        spelled = np.array([naive_spelling(query, key, **reads) for key in keys])
    if combination == "rule-1":
        weight = 4.0 * (known + (1 - known) * unknown_share(query))
        return cosine + weight * np.maximum(spelled - 0.4, 0) / 0.6
    # rule-6's, rule-7's and rule-8's terms are rule-5's: its description and marks.
    strict_short = combination in ("rule-5", "rule-6", "rule-7", "rule-8")
    x = np.array(naive_description(query, strict_short=strict_short))
    letters = [ch for ch in query if ch.isalpha()]
    typed_as_code = bool(x[3] and letters) and (
        all(ch.islower() for ch in letters) or all(ch.isupper() for ch in letters)
    )
    if combination == "rule-8" and typed_as_code:  # a code as far as no key means it
        unsure = min(1.0, max(0.0, (0.45 - float(np.max(cosine))) / (0.45 - 0.30)))
        x[1] = max(x[1], unsure)  # ... or as far as it is no common word
        x[5] = max(x[5], x[1])
    if combination != "learned-1":  # rule-2 to rule-7: rule-1's curve, unknown share, marks
        weight = 4.0 * (known + (1 - known) * x[1])
        rule = np.asarray(cosine) + weight * np.maximum(np.asarray(spelled) - 0.4, 0) / 0.6
        mark_weights = np.array(RULE_5_MARKS if strict_short else RULE_2_MARKS) @ x
        if combination != "rule-2":  # "same" weighs at least the other four marks together
            mark_weights[0] = max(mark_weights[0], mark_weights[1:].sum())
        return rule + _naive_mark_rows(query, keys) @ mark_weights
    a = np.array(LEARNED_1.meaning)
    b, c = np.array(LEARNED_1.ramps), np.array(LEARNED_1.marks)
    knots = LEARNED_1.knots
    factor = max(0.0, 1.0 + float(a @ x[[1, 2, 3, 5]]))
    offset = float(np.array(LEARNED_1.offset) @ x)
    # Each ramp of each key's spelling similarity, then each key's marks, pair by pair.
    lows, highs = np.array(knots[:-1]), np.array(knots[1:])
    ramps = np.clip((np.asarray(spelled)[:, None] - lows) / (highs - lows), 0.0, 1.0)
    marks = _naive_mark_rows(query, keys)
    return np.asarray(cosine) * factor + offset + ramps @ (b @ x) + marks @ (c @ x)


def reloaded_answers_alike(sd: object, path: object, queries: np.ndarray) -> object:
    """``sd`` saved to ``path`` and loaded back (on ``FakeEncoder``): each estimated lookup of
    ``queries`` draws the same sample and gives the same keys, value and tail mass. Returns the
    loaded store."""
    from softdict import SoftDict

    sd.save(path)  # type: ignore[attr-defined]
    loaded = SoftDict.load(path, encoder=FakeEncoder())  # type: ignore[arg-type]
    before, after = sd.attend_embeddings(queries), loaded.attend_embeddings(queries)  # type: ignore[attr-defined]
    for one, other in zip(before, after):
        assert one.sampled > 0 and one.sampled == other.sampled
        assert one.keys == other.keys
        assert one.value == close(other.value)
        assert one.tail_mass == close(other.tail_mass)
    return loaded


def drawn_per_key(
    ids: np.ndarray, probability: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct keys of a sample's draws, the probability each reported (the same on every
    draw of it: checked for the first 50), and how often each was drawn."""
    keys, first, counts = np.unique(ids, return_index=True, return_counts=True)
    per_key = probability[first]
    for key in keys[:50]:
        assert np.all(probability[ids == key] == per_key[np.searchsorted(keys, key)])
    return keys, per_key, counts


def assert_frequencies_match(counts: np.ndarray, per_key: np.ndarray, draws: int) -> None:
    """Each key's count over ``draws`` draws matches its probability: a chi-square test with
    len(counts) − 1 degrees of freedom, at five of its standard deviations."""
    expected = draws * per_key
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < len(counts) + 5 * np.sqrt(2 * len(counts))
