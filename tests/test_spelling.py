"""The spelling channel (softdict.spelling): the combined score against its own naive formula,
``lexical=0`` equal to meaning alone, every backend, the union of candidates in large stores
(its tail bound included), masks and deletes, and saving and loading.

Keys are real names from packages (pycountry's countries, wordfreq's English words); misspelt
queries are made from them by one deterministic edit. The fake encoder knows nothing of
spelling (a misspelt word gets an unrelated random vector), so what finds the key is spelling.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pycountry
import pytest
from _support import (
    COMBINATIONS,
    FakeEncoder,
    assert_close,
    close,
    library_measures,
    naive_accented_form,
    naive_combined,
    naive_description,
    naive_form,
    naive_marks,
    naive_spelling,
    naive_zipf,
    spelling_reads,
)
from rapidfuzz import fuzz
from rapidfuzz.distance import OSA

from softdict import SoftDict
from softdict._config import EXACT_MAX_KEYS
from softdict.index import Allow, Capabilities, register_backend
from softdict.index.exact import ExactBackend
from softdict.spelling import SpellingIndex, SpellingQueries, unknown_share
from softdict.spelling.evidence import EVIDENCE

COUNTRIES = sorted(c.name for c in pycountry.countries)
# The README's seven queries, each with the code of the country it means.
README_QUERIES = {
    "Germny": "DE",
    "Frnace": "FR",
    "Untied States": "US",
    "Brazl": "BR",
    "Swtzerland": "CH",
    "Deutschland": "DE",
    "Burma": "MM",
}
FIXTURE = Path(__file__).parent / "fixtures" / "format2"


def misspelt(name: str, edit: int) -> str:
    """``name`` with one edit in its longest word: 0 drops a letter, 1 swaps two, 2 doubles
    one, 3 replaces one with "x"."""
    words = name.split()
    w = max(range(len(words)), key=lambda i: len(words[i]))
    word = words[w]
    i = len(word) // 2
    word = [
        word[:i] + word[i + 1 :],
        word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :],
        word[:i] + word[i] + word[i:],
        word[:i] + "x" + word[i + 1 :],
    ][edit]
    return " ".join([*words[:w], word, *words[w + 1 :]])


def typo_queries(names: list[str], n: int) -> dict[str, str]:
    """Up to ``n`` misspelt queries for names whose longest word has 6+ letters -> the name."""
    chosen = [name for name in names if max(len(w) for w in name.split()) >= 6][:n]
    queries = {misspelt(name, i % 4): name for i, name in enumerate(chosen)}
    return {q: name for q, name in queries.items() if q != name}


# -- the formula, naively ---------------------------------------------------------------------


def naive_weight(unknown: float, lexical: float = 1.0, known: float = 1 / 16) -> float:
    return lexical * 4.0 * (known + (1 - known) * unknown)


def naive_attention(sd: SoftDict, query: str, keys: list[str], combination: str):
    """(combined scores, weights) of ``query`` over ``keys`` by the formula, in numpy."""
    encoder = FakeEncoder()
    q = encoder.encode([query])[0]
    K = encoder.encode(keys)
    cos = K @ q / (np.linalg.norm(K, axis=1) * np.linalg.norm(q))
    combined = naive_combined(query, keys, cos, combination)
    e = np.exp((combined - combined.max()) / sd.temperature)
    return combined, e / e.sum()


@pytest.mark.parametrize("combination", COMBINATIONS)
@pytest.mark.parametrize(
    ("query", "unknown"),
    [
        ("Germny", 1.0),
        ("united kingdm", 0.5),
        ("Republic", 0.0),
        ("Côte d'Ivoire", 0.0),
        ("Bosnia and Herzegovna", 1 / 3),
        ("UK", 0.0),
        ("Switz", 1.0),
        ("Gam", 0.0),  # a word to rule-1 to rule-4, not to rule-5, rule-6 (Zipf 2.77 < 3.5)
    ],
)
def test_lookup_is_softmax_of_the_combined_score(
    query: str, unknown: float, combination: str
) -> None:
    """Every key of a small store: each key's score is the combination's formula (computed
    pair by pair, naively), the weights are the softmax of those, the value is their blend;
    Attention reports each part."""
    values = np.arange(len(COUNTRIES), dtype=float)
    sd = SoftDict(
        dict(zip(COUNTRIES, values)), encoder=FakeEncoder(), temperature=0.3,
        combination=combination,
    )  # fmt: skip
    assert unknown_share(query) == unknown
    combined, weights = naive_attention(sd, query, COUNTRIES, combination)
    assert sd.lookup(query) == close(weights @ values)
    attention = sd.attend(query)
    assert attention.k == len(COUNTRIES) and attention.tail_mass == 0.0
    if combination == "rule-1":
        assert attention.spelling_weight == close(naive_weight(unknown))
        assert attention.meaning_factor == 1.0
    column = {key: i for i, key in enumerate(COUNTRIES)}
    order = [column[key] for key in attention.keys]
    # Spelling is scored where it can matter (softdict.spelling.bounded): elsewhere the score is
    # the meaning part, the similarity NaN, and the weights are within the reported bound.
    reads = spelling_reads(combination)
    spelled = np.array([naive_spelling(query, key, **reads) for key in attention.keys])
    scored = ~np.isnan(attention.spelling_scores)
    assert scored[0] and attention.keys[0] == COUNTRIES[int(np.argmax(combined))]
    assert_close(attention.spelling_scores[scored], spelled[scored], atol=1e-6)
    assert_close(attention.scores[scored], combined[order][scored], atol=1e-6)
    meaning_part = attention.meaning_factor * attention.meaning_scores + attention.score_offset
    assert_close(attention.scores[~scored], meaning_part[~scored])
    total_variation = np.abs(attention.weights - weights[order]).sum() / 2
    assert total_variation <= attention.weight_error + 1e-6
    assert attention.weight_error <= 1e-4
    marks = [naive_marks(query, key) for key in attention.keys]
    if combination == "rule-1":
        assert attention.marks is None
    else:
        assert attention.marks == tuple(
            tuple(name for name, on in zip(EVIDENCE, row) if on) for row in marks
        )


@pytest.mark.parametrize("combination", COMBINATIONS)
@pytest.mark.parametrize("per_block", [2, 1000, 0])
def test_a_batch_is_scored_as_each_query_alone(
    combination: str, per_block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several queries go through the bounded scoring together (``bounded_batch``, in blocks
    of queries; query by query past ``_BATCH_MAX_KEYS``, here with ``per_block`` 0), one query
    alone through ``bounded_scores``: the same keys scored, the same scores, weights and bound
    for every query, whatever its batch and block."""
    from softdict.spelling import held_keys as spelling_index

    if not per_block:
        monkeypatch.setattr(spelling_index, "_BATCH_MAX_KEYS", 0)

    sd = SoftDict(
        dict(zip(COUNTRIES, np.arange(len(COUNTRIES), dtype=float))), encoder=FakeEncoder(),
        temperature=0.3, combination=combination,
    )  # fmt: skip
    queries = ["Germny", "united kingdm", "Republic", "Côte d'Ivoire", "UK", "Switz", "Frnace"]
    monkeypatch.setattr(spelling_index, "_BLOCK_ENTRIES", max(per_block, 1) * len(COUNTRIES))
    together = sd.attend(queries)
    for query, batch in zip(queries, together):
        alone = sd.attend(query)
        assert batch.keys == alone.keys
        np.testing.assert_array_equal(
            np.isnan(batch.spelling_scores), np.isnan(alone.spelling_scores)
        )
        # A batch's meaning scores come from a matrix product, one query's from a matrix-vector
        # product: float32 kernels that round differently, ~1e-7 of a cosine.
        assert_close(batch.scores, alone.scores, atol=1e-6)
        assert_close(batch.weights, alone.weights)
        assert batch.weight_error == close(alone.weight_error)
    assert sd.lookup(queries) == close([sd.lookup(q) for q in queries])


def test_rounds_sized_by_the_gains_keep_the_bound_in_fewer_rounds() -> None:
    """Scores close together (learned-1's terms for a misspelt query, keys whose spelling
    ceilings are far above their true similarity): thousands of keys must be scored before
    the rest's weight is within the tolerance. The rounds, sized by what the open keys could
    gain (``bounded._needed``), take a few calls where doubling from 32 took seven, and the
    weights are within the bound of every key's exact score."""
    from softdict._attention import softmax
    from softdict.spelling.bounded import _needed, bounded_scores
    from softdict.spelling.combination import LEARNED_1
    from softdict.spelling.terms import query_terms

    rng = np.random.default_rng(7)
    n = 6000
    meaning = rng.uniform(0.0, 0.6, n)
    similarity = rng.beta(2.0, 5.0, n)
    ceiling = np.minimum(1.0, similarity + rng.uniform(0.0, 0.4, n)).astype(np.float32)
    terms = query_terms(LEARNED_1, ["Germny"], 1.0, 1.0)
    calls: list[int] = []

    def exact(positions: np.ndarray) -> tuple[np.ndarray, None]:
        calls.append(len(positions))
        return similarity[positions], None

    found = bounded_scores(meaning, ceiling, None, terms, 0.05, exact)
    every = terms.score(meaning[None], similarity[None])[0]
    weights = np.exp((every - every.max()) / 0.05)
    weights /= weights.sum()
    mine = np.exp((found.combined - found.combined.max()) / 0.05)
    mine /= mine.sum()
    assert found.error <= 1e-4
    assert np.abs(mine - weights).sum() / 2 <= found.error + 1e-9
    assert sum(calls) > 1000 and len(calls) <= 4, calls
    # The weights the bound made on the way are softmax's, bit for bit (a lookup hands on one
    # or the other by route: fusion.every_key_with_spelling).
    assert found.weights is not None
    assert np.array_equal(found.weights, softmax(found.combined[None], 0.05)[0])

    # The estimate itself: scoring the ``needed`` largest gains leaves at most the allowance,
    # one fewer would not; none needed is never asked (the caller checks δ first).
    for _ in range(50):
        gain = rng.exponential(1.0, int(rng.integers(1, 200))) * (rng.uniform() < 0.9)
        allowance = float(rng.uniform(0.0, gain.sum()))
        needed = _needed(gain, allowance)
        ordered = np.sort(gain)[::-1]
        assert 1 <= needed <= len(gain)
        assert ordered[needed:].sum() <= allowance + 1e-9
        assert needed == 1 or ordered[needed - 1 :].sum() > allowance - 1e-9


class UnitEncoder(FakeEncoder):
    """The fake encoder with unit-norm embeddings."""

    def encode(self, texts: list[str]) -> np.ndarray:
        out = super().encode(texts)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


@pytest.mark.parametrize("similarity", ["dot", "scaled_dot", "l2"])
def test_the_spelling_weight_is_in_cosine_units_of_each_similarity(similarity: str) -> None:
    """On unit embeddings every similarity gives the same weights by default, with spelling
    too: its weight is scaled as the default temperature is."""
    sd = {
        name: SoftDict(
            {key: float(i) for i, key in enumerate(COUNTRIES)},
            encoder=UnitEncoder(),
            similarity=name,
        )
        for name in ("cosine", similarity)
    }
    for query in ("Germny", "united kingdm", "Republic"):
        a, b = (sd[name].attend(query) for name in ("cosine", similarity))
        assert a.keys[:5] == b.keys[:5]
        # The same similarity reached through another metric's float32 arithmetic.
        np.testing.assert_allclose(a.weights, b.weights, rtol=1e-4, atol=1e-7)
        assert b.spelling_weight == close(
            a.spelling_weight * {"dot": 1, "scaled_dot": 1 / 4, "l2": 2}[similarity]
        )  # scaled_dot: 1/sqrt(16) per cosine


def test_lexical_zero_is_meaning_alone() -> None:
    """``lexical=0`` gives the meaning-only attention exactly, for every kind of lookup; the
    option can be changed on a store."""
    values = np.arange(len(COUNTRIES), dtype=float)
    on = SoftDict(dict(zip(COUNTRIES, values)), encoder=FakeEncoder(), temperature=0.3)
    off = SoftDict(dict(zip(COUNTRIES, values)), encoder=FakeEncoder(), temperature=0.3, lexical=0)
    queries = ["Germny", "united kingdm", "Republic"]
    embeddings = FakeEncoder().encode(queries)
    np.testing.assert_array_equal(off.lookup(queries), on.lookup_embeddings(embeddings))
    for a, b in zip(off.attend(queries), on.attend_embeddings(embeddings)):
        assert a.keys == b.keys and a.spelling_scores is None and a.spelling_weight == 0.0
        np.testing.assert_array_equal(a.scores, a.meaning_scores)
        np.testing.assert_array_equal(a.weights, b.weights)
    K = FakeEncoder().encode(COUNTRIES)
    cos = K @ embeddings[0] / (np.linalg.norm(K, axis=1) * np.linalg.norm(embeddings[0]))
    best = np.argsort(-cos, kind="stable")[:3]
    assert off.nearest("Germny", 3) == [(COUNTRIES[i], close(cos[i])) for i in best]
    assert on.nearest("Germny", 1)[0][0] == "Germany"
    assert off.nearest("Germny", 1)[0][0] != "Germany"
    on.lexical = 0
    np.testing.assert_array_equal(on.lookup(queries), off.lookup(queries))
    with pytest.raises(Exception, match="lexical"):
        on.lexical = -1


# -- every backend, the union of candidates ---------------------------------------------------


class NoVectors(ExactBackend):
    """An exact backend that cannot return its vectors: meaning scores of spelling candidates
    come from a search limited to them."""

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(exact=False, returns_vectors=False)


register_backend("test-no-vectors", NoVectors)

BACKENDS = [
    "auto",
    "flat",
    "hnsw",
    "ivf-from-start",
    "ivf_sq8-from-start",
    "test-dict",
    "test-no-vectors",
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_typos_find_their_key_on_every_backend(backend: str) -> None:
    """Misspelt country names find their country on every backend: exact ones, and HNSW, which
    scans its flat storage where so few keys are allowed, score every key; the others take the
    union of dense and spelling candidates."""
    sd = SoftDict({name: name for name in COUNTRIES}, encoder=FakeEncoder(), index=backend)
    queries = typo_queries(COUNTRIES, 120)
    assert len(queries) > 100
    found = sd.lookup(list(queries))
    right = np.mean([got == want for got, want in zip(found, queries.values())])
    assert right >= 0.97, right
    meaning_only = SoftDict(
        {name: name for name in COUNTRIES}, encoder=FakeEncoder(), index=backend, lexical=0
    ).lookup(list(queries))
    assert np.mean([got == want for got, want in zip(meaning_only, queries.values())]) < 0.2
    for attention in sd.attend(list(queries)[:10]):
        assert attention.spelling_scores is not None
        assert np.all(np.isfinite(attention.scores)) and np.all(
            np.isfinite(attention.meaning_scores)
        )
        # The keys listed are the head; the rest, scored whole here, holds tail_mass.
        assert attention.weights.sum() + attention.tail_mass == close(1.0)
        assert np.all(np.diff(attention.scores) <= 1e-12)


@pytest.fixture(scope="module")
def english_words() -> list[str]:
    """More English words than a lookup scores exactly (wordfreq's list, real text)."""
    from wordfreq import top_n_list

    words = [w for w in top_n_list("en", 20_000) if w.isalpha()]
    assert len(words) > EXACT_MAX_KEYS
    return words[: EXACT_MAX_KEYS + 2000]


@pytest.fixture(scope="module")
def large_store(english_words: list[str]) -> SoftDict:
    return SoftDict(
        {word: float(i) for i, word in enumerate(english_words)},
        encoder=FakeEncoder(),
        index="flat",
        temperature=0.1,
    )


@functools.cache
def fake_embeddings(keys: tuple[str, ...]) -> np.ndarray:
    return FakeEncoder().encode(list(keys))


def exact_combined(sd: SoftDict, query: str, keys: list[str]) -> np.ndarray:
    """The combined score of ``query`` with every one of ``keys``: ``naive_combined``'s, with
    rapidfuzz's same scorers over all keys at once (``naive_spelling`` pair by pair would take
    seconds for 12,000 keys)."""
    from rapidfuzz import process

    def words_sorted(form: str) -> str:
        return " ".join(sorted(form.split()))

    q, forms = naive_form(query), [naive_form(key) for key in keys]
    indel = np.maximum(
        process.cdist([q], forms, scorer=fuzz.ratio)[0],
        process.cdist([words_sorted(q)], [words_sorted(f) for f in forms], scorer=fuzz.ratio)[0],
    )
    spelling = (indel / 100 + process.cdist([q], forms, scorer=OSA.normalized_similarity)[0]) / 2
    if spelling_reads(sd.combination)["as_typed"] and naive_accented_form(query) == q:
        # rule-7: a query typed without accents, against the keys that bear some.
        accented = [i for i, key in enumerate(keys) if naive_accented_form(key) != forms[i]]
        spelling[accented] = [
            naive_spelling(query, keys[i], **spelling_reads(sd.combination)) for i in accented
        ]
    qv, K = FakeEncoder().encode([query])[0], fake_embeddings(tuple(keys))
    cos = K @ qv / (np.linalg.norm(K, axis=1) * np.linalg.norm(qv))
    return naive_combined(query, keys, cos, sd.combination, spelled=spelling)


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_a_large_store_takes_the_union_and_its_tail_bound_holds(
    large_store: SoftDict, english_words: list[str], combination: str
) -> None:
    """Above the exact size: the best key by the combined score over every key is found, and
    each key's score is its exact combined score. The tail bound assumes no key outside the
    spelling candidates is spelled more like the query than they are, which a key sharing no
    3-gram with it can be ("besides" for "busixess"); it covers the true left-out mass for most
    queries, and where it does not, that mass is tiny.

    The sampled estimate of that mass: under the hand-set rule the tail is tiny and its interval
    covers it. The learned combination leaves more mass on keys spelled like the query (its
    scores span less than the rule's), which a uniform sample of 12,000 keys rarely draws: the
    estimate falls short more often than its confidence says (measured: the interval held for
    92% of these queries at T = 0.1, 78% at 0.05), by at most 0.025 of the mass."""
    sd = large_store.copy()  # the module's store keeps its own options
    sd.combination = combination
    queries = typo_queries([w for w in english_words if len(w) >= 5][:600], 150)
    held, covered, errors = [], [], []
    assert all(" " not in q for q in queries)
    for query in queries:
        attention = sd.attend(query)
        assert attention.k < len(sd)  # the union, not every key
        combined = exact_combined(sd, query, english_words)
        assert attention.keys[0] == english_words[int(np.argmax(combined))]
        column = {key: i for i, key in enumerate(english_words)}
        assert_close(attention.scores, combined[[column[k] for k in attention.keys]], atol=1e-6)
        weights = np.exp((combined - combined.max()).astype(np.float64) / sd.temperature)
        weights /= weights.sum()
        outside = np.ones(len(weights), dtype=bool)
        outside[[column[k] for k in attention.keys]] = False
        true_tail = weights[outside].sum()  # summed, not 1 - the head's: float noise
        assert attention.tail_bound is not None  # an exact index
        held.append(true_tail <= attention.tail_bound + 1e-9)
        assert true_tail <= max(attention.tail_bound, 1e-3)
        # The sample's estimate of the same mass (both channels scored on the sampled keys).
        assert attention.tail_interval is not None and attention.tail_mass is not None
        low, high = attention.tail_interval
        # A tail of 10^-7 rests on the few keys just outside the head, which a uniform sample
        # rarely draws: its interval can miss, by an error far below any tolerance.
        covered.append(low <= true_tail <= high or abs(true_tail - attention.tail_mass) < 1e-4)
        errors.append(abs(true_tail - attention.tail_mass))
    assert np.mean(held) >= 0.9
    if combination == "rule-1":
        assert np.mean(covered) >= 0.95
    else:
        assert np.mean(covered) >= 0.85 and max(errors) <= 0.03


def test_a_fixed_k_keeps_the_keys_full_attention_ranks_first(
    large_store: SoftDict, english_words: list[str]
) -> None:
    """Above the exact size, ``nearest(q, k)`` and ``top_k`` searched a fixed 64 dense keys, while
    full attention's rounds search until its bound is met: a key spelled like the query but
    sharing no 3-gram with it, of middling meaning, was found by ``attend`` and missed by
    ``nearest(q, 1)`` (a hostile-input probe: "dxnqz" for "xqzv"). Both now take the rounds'
    keys: the same best keys, with the same scores (``nearest`` is a lookup with ``top_k``)."""
    sd = large_store.copy()
    rng = np.random.default_rng(5)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    queries = list(typo_queries([w for w in english_words if len(w) >= 5][:300], 40))
    queries += ["".join(rng.choice(letters, 4)) for _ in range(40)]  # like nothing stored
    for query in queries:
        attention = sd.attend(query)
        best = sd.nearest(query, 3)
        assert [key for key, _ in best] == list(attention.keys[:3]), query
        assert_close([score for _, score in best], attention.scores[:3], atol=1e-6)


def test_a_large_store_proposes_the_keys_a_mark_could_lift(english_words: list[str]) -> None:
    """Past the exact size, a query that is a key's initials ("HCMC" for Ho Chi Minh City) or
    has its letters in order shares no 3-gram with it, yet bears a mark, which ``rule-3``
    weighs: the keys of the query's first character that hold its characters are proposed
    beside the 3-gram pool where their score could reach the candidates'
    (``spelling.marked``). So the best key by the combined score over every key is found
    (without the proposals "AJAG" finds "lag", not Al Jabal al Gharbī), and no left-out key
    bearing such a mark holds more than the tail bound; nor, for a code of 5 letters or fewer,
    any left-out key of its first character ("abc" for "ACBAC": its rows of that character are
    proposed where their spelling ceiling could reach the candidates). (A key of another first
    letter spelled like a short code without a 3-gram in common, "barbara" for "ABAA", is the
    postings' own limit, which the bound assumes away: large-stores guide.) Real multi-word
    names (pycountry's subdivisions) among 12,000 English words; their initials, 4 letters or
    more, as queries."""
    from softdict.spelling.evidence import initials
    from softdict.spelling.marked import short_query

    names = sorted({s.name for s in pycountry.subdivisions if " " in s.name})
    codes: dict[str, list[str]] = {}
    for name in names:
        codes.setdefault(initials(naive_form(name)) or "", []).append(name)
    chosen = [found[0] for code, found in codes.items() if len(code) >= 4 and len(found) == 1]
    keys = english_words + [name for name in names if name not in set(english_words)]
    sd = SoftDict(dict.fromkeys(keys, 1.0), encoder=FakeEncoder(), index="flat", temperature=0.1)
    assert sd.combination == "rule-8" and len(chosen) >= 30
    found_by_initials = []
    for name in chosen[:30]:
        query = initials(naive_form(name)).upper()
        attention = sd.attend(query)
        assert attention.k < len(sd)  # the union, not every key
        combined = exact_combined(sd, query, keys)
        assert attention.keys[0] == keys[int(np.argmax(combined))], query
        found_by_initials.append(attention.keys[0] == name)
        weights = np.exp((combined - combined.max()) / sd.temperature)
        weights /= weights.sum()
        assert attention.tail_bound is not None
        inside = set(attention.keys)
        form = naive_form(query)
        for j in np.flatnonzero(weights > attention.tail_bound + 1e-9):
            if keys[j] not in inside:  # a key the postings left out: no mark but word start
                same, start, _, initial, in_order = naive_marks(query, keys[j])
                assert not (same or start or initial or in_order), (query, keys[j])
                # nor, for a short query, a key of its first character ("abc" for "ACBAC")
                assert not (short_query(form) and naive_form(keys[j])[:1] == form[0]), keys[j]
    assert sum(found_by_initials) >= 5  # the initials decide for several of them (10 here)


def test_a_code_whose_meaning_weighs_nothing_is_found_by_spelling_in_a_large_store(
    english_words: list[str],
) -> None:
    """A short query of unknown letters is a code to the learned combination: its meaning
    weighs nothing (factor 0), and the union of candidates, padded, still gives finite scores
    and weights (0 · -inf padding stays -inf, without a floating-point warning)."""
    sd = SoftDict(
        dict.fromkeys(english_words, 1.0), encoder=FakeEncoder(), index="hnsw",
        combination="learned-1",
    )  # fmt: skip
    attention = sd.attend("qzx")
    assert attention.meaning_factor == 0.0 and attention.k < len(sd)
    assert np.all(np.isfinite(attention.scores)) and np.all(np.isfinite(attention.weights))
    assert sd.lookup(["qzx", "wxy"]) == close([1.0, 1.0])


def test_few_allowed_keys_of_a_graph_are_answered_as_an_exact_store(
    english_words: list[str],
) -> None:
    """A mask of fewer than 10,000 keys in a store past the exact size, and a store that
    shrank below it but keeps its HNSW graph, score every allowed key in both channels from the
    graph's flat storage: the same keys and weights as an exact store of those keys (a graph
    search and the 3-gram candidates could miss some)."""
    values = {word: float(i) for i, word in enumerate(english_words)}
    sd = SoftDict(values, encoder=FakeEncoder(), index="hnsw", temperature=0.1)
    allowed = english_words[::2]
    exact = SoftDict(
        {word: values[word] for word in allowed}, encoder=FakeEncoder(), index="flat",
        temperature=0.1,
    )  # fmt: skip
    queries = ["restaurnt", "goverment", "beautful", "qzx", "PARIS", "the"]
    for masked, alone in zip(sd.attend(queries, mask=allowed), exact.attend(queries)):
        assert masked.k == len(allowed) and masked.tail_mass == 0.0
        assert masked.keys == alone.keys
        assert masked.weights == close(alone.weights)
    for key in english_words[1::2]:
        del sd[key]
    assert sd.index_description.startswith("hnsw")
    for shrunk, alone in zip(sd.attend(queries), exact.attend(queries)):
        assert shrunk.keys == alone.keys and shrunk.weights == close(alone.weights)


def test_nearest_ranks_by_the_combined_score(
    large_store: SoftDict, english_words: list[str]
) -> None:
    for query in ("restaurnt", "goverment", "beautful"):
        best = large_store.nearest(query, 5)
        combined = exact_combined(large_store, query, english_words)
        want = [english_words[i] for i in np.argsort(-combined, kind="stable")[:5]]
        assert [key for key, _ in best][:3] == want[:3]
        assert [score for _, score in best] == sorted((s for _, s in best), reverse=True)


def test_masks_and_deletes_bind_the_spelling_candidates(english_words: list[str]) -> None:
    """A deleted or masked-out key is never proposed by spelling, in the union or in nearest;
    a key put back is found again."""
    sd = SoftDict(
        {word: float(i) for i, word in enumerate(english_words)},
        encoder=FakeEncoder(),
        index="flat",
    )
    assert sd.attend("restaurnt").keys[0] == "restaurant"
    del sd["restaurant"]
    attention = sd.attend("restaurnt")
    assert "restaurant" not in attention.keys and "restaurants" in attention.keys[:2]
    assert "restaurant" not in dict(sd.nearest("restaurnt", 10))
    allowed = [w for w in english_words if w.startswith("b")] + ["restaurants"]
    masked = sd.attend("restaurnt", mask=lambda key: key != "restaurants")
    assert "restaurants" not in masked.keys and "restaurant" not in masked.keys
    subset = sd.attend("restaurnt", mask=allowed)
    assert set(subset.keys) <= set(allowed) and subset.keys[0] == "restaurants"
    sd["restaurant"] = 1.0
    assert sd.attend("restaurnt").keys[0] == "restaurant"


def test_many_deletes_compact_the_spelling_index(english_words: list[str]) -> None:
    index = SpellingIndex()
    index.add(np.arange(len(english_words)), english_words)
    queries = SpellingQueries.of(["goverment", "restaurnt"])
    before_ids, before = index.candidates(queries, 5, None)
    gone = np.arange(0, len(english_words), 2)
    gone = gone[~np.isin(gone, before_ids)]
    index.remove(gone)
    index.remove(gone)  # twice: ids not held are ignored
    assert len(index) == len(english_words) - len(gone)
    after_ids, after = index.candidates(queries, 5, None)
    np.testing.assert_array_equal(after_ids, before_ids)
    assert_close(after, before)
    assert not np.isin(
        index.candidates(SpellingQueries.of(english_words[:40:2]), 64, None)[0], gone
    ).any()


def test_postings_added_in_small_batches_equal_postings_built_at_once(
    english_words: list[str],
) -> None:
    """New keys wait in a small block before joining the postings; candidates are the same."""
    one, many = SpellingIndex(), SpellingIndex()
    one.add(np.arange(len(english_words)), english_words)
    for start in range(0, len(english_words), 700):
        batch = english_words[start : start + 700]
        many.add(np.arange(start, start + len(batch)), batch)
    queries = SpellingQueries.of(["goverment", "restaurnt", "teh", "zzzz", ""])
    allow = Allow.of(np.arange(0, len(english_words), 3))
    for a, b in zip(one.candidates(queries, 32, allow), many.candidates(queries, 32, allow)):
        np.testing.assert_array_equal(a, b)


def test_empty_and_punctuation_keys_and_queries() -> None:
    sd = SoftDict({"...": 1.0, "": 2.0, "Germany": 3.0}, encoder=FakeEncoder())
    for query in ("!!", "", "Germny"):
        attention = sd.attend(query)
        assert np.all(np.isfinite(attention.scores)) and attention.weights.sum() == close(1)
    assert sd.attend("Germny").keys[0] == "Germany"
    assert all(s == 0 for k, s in zip(sd.attend("").keys, sd.attend("").spelling_scores))


# -- saving and loading -----------------------------------------------------------------------


def test_spelling_postings_are_saved_and_loaded(tmp_path: Path, large_store: SoftDict) -> None:
    queries = ["restaurnt", "goverment", "beautful"]
    large_store.attend(queries)
    large_store.save(tmp_path / "s")
    assert (tmp_path / "s" / "spelling_rows.npy").exists()
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder())
    assert loaded.lexical == large_store.lexical
    for a, b in zip(large_store.attend(queries), loaded.attend(queries)):
        assert a.keys == b.keys
        assert_close(a.weights, b.weights)
        assert a.tail_mass == close(b.tail_mass)  # the same sample: seeded alike
        assert a.sampled == b.sampled


def test_a_store_with_deleted_keys_rebuilds_its_postings_on_load(
    tmp_path: Path, english_words: list[str]
) -> None:
    sd = SoftDict(
        {word: float(i) for i, word in enumerate(english_words)},
        encoder=FakeEncoder(),
        index="flat",
        lexical=0.5,
        lexical_known=0.25,
    )
    del sd["restaurant"]
    sd.save(tmp_path / "s")
    assert not (tmp_path / "s" / "spelling_rows.npy").exists()
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder())
    assert (loaded.lexical, loaded.lexical_known) == (0.5, 0.25)
    a, b = sd.attend("restaurnt"), loaded.attend("restaurnt")
    assert a.keys == b.keys and "restaurant" not in b.keys
    # The head's weights rest on the sampled tail's estimate, whose sample is drawn by rows,
    # which the load compacts (the deleted key's row is gone): another sample, within its error.
    assert a.tail_mass is not None and b.tail_mass is not None
    assert_close(a.weights, b.weights, rtol=0.02)
    assert abs(a.tail_mass - b.tail_mass) <= 0.02


def answers_as_saved(loaded: SoftDict, expected: dict) -> None:
    """``loaded`` attends to a fixture's queries as the code that saved it did."""
    for attention, want in zip(loaded.attend(expected["queries"]), expected["attend"]):
        assert list(attention.keys[:10]) == want["keys"]
        assert_close(attention.weights[:10], want["weights"])
        assert_close(attention.scores[:10], want["scores"])
        assert attention.value == close(want["value"])


def test_a_store_saved_before_the_spelling_channel_answers_as_it_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A format 2 store (tests/fixtures/README.md) loads with lexical=0 and answers by meaning
    alone, as when it was saved (``softdict info`` says so); saved again, it keeps lexical=0;
    turned on, spelling finds."""
    from softdict._cli import main

    assert main(["info", str(FIXTURE / "countries_scalar")]) == 0
    assert "spelling     lexical 0," in capsys.readouterr().out
    expected = json.loads((FIXTURE / "expected.json").read_text())
    loaded = SoftDict.load(FIXTURE / "countries_scalar", encoder=FakeEncoder())
    assert loaded.lexical == 0.0 and "France" not in loaded
    answers_as_saved(loaded, expected)
    loaded.save(tmp_path / "again")
    again = SoftDict.load(tmp_path / "again", encoder=FakeEncoder())
    assert again.lexical == 0.0
    again.lexical = 1.0
    assert again.attend("Germny").keys[0] == "Germany"


def loaded_with_the_rule(fixture: str, capsys: pytest.CaptureFixture[str]) -> tuple[SoftDict, dict]:
    """The countries store of ``tests/fixtures/<fixture>`` (saved with the hand-set rule),
    loaded: ``softdict info`` names the rule, it loads with it, France deleted, and answers as
    the code that saved it did; with what that code answered."""
    from softdict._cli import main

    folder = FIXTURE.parent / fixture / "countries_scalar"
    assert main(["info", str(folder)]) == 0
    assert "combination rule-1, known words keep 0.0625" in capsys.readouterr().out
    expected = json.loads((folder.parent / "expected.json").read_text())
    loaded = SoftDict.load(folder, encoder=FakeEncoder())
    assert loaded.combination == "rule-1" and "France" not in loaded
    answers_as_saved(loaded, expected)
    return loaded, expected


def test_a_store_saved_with_the_hand_set_rule_answers_as_it_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A format 3 store (tests/fixtures/README.md) loads with combination="rule-1" and answers
    as when it was saved (``softdict info`` says so); saved again, it keeps the rule; switched,
    it answers with the learned combination."""
    loaded, expected = loaded_with_the_rule("format3", capsys)
    loaded.save(tmp_path / "again")
    again = SoftDict.load(tmp_path / "again", encoder=FakeEncoder())
    assert again.combination == "rule-1"
    assert again.attend("Switz").scores[0] == close(expected["attend"][-1]["scores"][0])
    again.combination = "learned-1"
    switched = again.attend("Switz")
    assert switched.keys[0] == "Switzerland" and switched.marks is not None


def test_a_store_saved_when_rule_1_was_the_default_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A format 4 store saved with the default of its day (tests/fixtures/README.md: it recorded
    ``rule-1``) loads with it and answers as when it was saved, "UK" included, which the
    default now answers otherwise; a new store of the same keys takes the default."""
    loaded, expected = loaded_with_the_rule("format4", capsys)
    fresh = SoftDict(dict(loaded.items()), encoder=FakeEncoder(), temperature=0.3)
    assert fresh.combination == "rule-8"
    changed = [
        now.keys[0] != then["keys"][0]
        for now, then in zip(fresh.attend(expected["queries"]), expected["attend"])
    ]
    assert any(changed)  # else the fixture would not tell the two combinations apart


# -- the table, on the bundled encoder -------------------------------------------------


@pytest.mark.integration
def test_misspelt_country_names_find_their_country_and_aliases_still_do(bundled_encoder) -> None:
    sd = SoftDict({c.name: c.alpha_2 for c in pycountry.countries}, encoder=bundled_encoder)
    table = README_QUERIES
    assert sd.lookup(list(table)) == list(table.values())
    for query, code in table.items():
        attention = sd.attend(query)
        assert sd[attention.keys[0]] == code
    # Meaning alone: the aliases, and none of the first three typos.
    sd.lexical = 0
    found = sd.lookup(list(table))
    assert found[-2:] == ["DE", "MM"]
    assert [a == b for a, b in zip(found[:3], list(table.values())[:3])] == [False] * 3


def test_the_default_reads_a_word_and_a_number_and_weighs_marks(bundled_encoder) -> None:
    """``rule-6``, the default (``rule-2``'s curve, ``rule-5``'s marks): a common word with a digit
    ("Korea2") is a word and a number, not a misspelling (``rule-1`` weighs it as one, 4
    against 1/4, and the digit pulls it to whatever is spelled alike); the README's seven
    queries still find their country; a query that is a key's initials or its start bears that
    mark and finds it."""
    countries = {c.name: c.alpha_2 for c in pycountry.countries}
    rule = SoftDict(countries, encoder=bundled_encoder, combination="rule-1")
    marked = SoftDict(countries, encoder=bundled_encoder)
    assert marked.combination == "rule-8"
    assert rule.attend("Korea2").spelling_weight == close(4.0)
    found = marked.attend("Korea2")
    assert found.spelling_weight == close(0.25) and "Korea" in found.keys[0]
    table = README_QUERIES
    assert marked.lookup(list(table)) == list(table.values())
    for query, key, mark in (("uk", "United Kingdom", "initials"), ("Bosnia", "BA", "start")):
        attention = marked.attend(query)
        assert key in (attention.keys[0], marked[attention.keys[0]])
        assert attention.marks is not None and mark in attention.marks[0]


@pytest.mark.integration
def test_the_default_reads_a_rare_short_word_as_a_misspelling(bundled_encoder) -> None:
    """``rule-5``, and ``rule-6``, the default: wordfreq counts "gam" and "gon" as English words
    (Zipf 2.77, 3.34), so under ``rule-4`` spelling weighed 1/16 for them and meaning answered at
    random among countries; from ``rule-5`` on a word of at most 3 letters is common only at
    Zipf 3.5, so they weigh spelling as misspellings and find Guam and Gabon. A short word common
    enough ("Owl", Zipf 3.87) keeps meaning's weight (typed in small letters, "owl", rule-8 reads
    it as a code as far as no country means it: ``test_short_codes``)."""
    countries = {c.name: c.alpha_2 for c in pycountry.countries}
    sd = SoftDict(countries, encoder=bundled_encoder)
    old = SoftDict(countries, encoder=bundled_encoder, combination="rule-4")
    assert sd.combination == "rule-8"
    for query, key in (("Gam", "Guam"), ("Gon", "Gabon")):
        found, before = sd.attend(query), old.attend(query)
        assert found.keys[0] == key and found.spelling_weight == close(4.0)
        assert before.keys[0] != key and before.spelling_weight == close(0.25)
    assert sd.attend("Owl").spelling_weight == close(0.25)
    assert sd.lookup(list(README_QUERIES)) == list(README_QUERIES.values())


def test_rule_5s_common_words_are_wordfreqs_short_words_at_zipf_3_5() -> None:
    """``text.common_words_strict_short`` against wordfreq's frequencies read here, and
    ``evidence.describe_strict_short`` against the description computed naively, on queries
    of short words, codes, digits and accents."""
    from softdict.spelling.evidence import describe, describe_strict_short
    from softdict.spelling.text import common_words, common_words_strict_short

    expected = frozenset(w for w in common_words() if len(w) > 3 or naive_zipf(w) >= 3.5)
    assert common_words_strict_short() == expected
    assert {"gam", "gon", "hun", "kor"}.isdisjoint(expected) and {"owl", "cat", "the"} <= expected
    assert 1_000 < len(common_words() - expected) < 5_000
    queries = [
        "Gam",
        "gon 2",
        "Hun Sen",
        "owl",
        "USD",
        "Guam",
        "kor-3",
        "Éire",
        "fao ASM",
        "",
        "42",
    ]
    for query in queries:
        assert describe_strict_short(query).tolist() == naive_description(query, True), query
        assert describe(query).tolist() == naive_description(query), query


def _starts_of_longer_words(words: list[str], limit: int) -> list[str]:
    """Words that another of ``words`` starts with ("metric" of "metrics"): under ``rule-2``
    the longer word bore the ``start`` mark and could outrank the word itself."""
    held = sorted(words)
    found = []
    for i, word in enumerate(held[:-1]):
        if len(word) >= 3 and held[i + 1].startswith(word):
            found.append(word)
    return found[:limit]


@pytest.mark.parametrize("large", [False, True])
def test_a_key_queried_by_its_own_text_comes_first(english_words: list[str], large: bool) -> None:
    """Under ``rule-3`` to ``rule-6``, the default, no key gains more from spelling and marks
    than a key spelled as the query, whose meaning is the best too when the text is the same:
    so a key's own text finds it first, over every key and past the exact size (where it must be
    among the spelling candidates). wordfreq's words that start a longer word, which bears
    marks."""
    words = english_words if large else english_words[:1500]
    sd = SoftDict(dict.fromkeys(words, 1.0), encoder=FakeEncoder(), temperature=0.1)
    assert sd.combination == "rule-8"
    chosen = _starts_of_longer_words(words, 150)
    assert len(chosen) >= 100
    for word, found in zip(chosen, sd.nearest(chosen, 2)):
        assert found[0][0] == word and found[0][1] > found[1][1]


@pytest.mark.integration
def test_a_word_finds_itself_before_longer_words_in_any_case(
    bundled_encoder, tmp_path: Path
) -> None:
    """What ``rule-3`` mends, on the bundled encoder (uncased: "ELECTION" embeds as "election"):
    under ``rule-2`` a longer key that starts with the query bore the ``start`` and
    ``abbreviation`` marks, which outweighed the ``same`` mark of the key itself ("metric" gave
    "metrics"; in capitals, which weigh those marks as a code's, "ELECTION" gave "elections").
    Under the default each word, as typed, in capitals or capitalised, finds itself; ``rule-2``
    missed some (so the two are told apart here), and a store that records it keeps it."""
    from wordfreq import top_n_list

    words = [w for w in top_n_list("en", 3000) if w.isalpha()]
    chosen = _starts_of_longer_words(words, 120)
    queries = [form for word in chosen for form in (word, word.upper(), word.title())]
    expected = [word for word in chosen for _ in range(3)]
    values = {word: float(i) for i, word in enumerate(words)}
    fixed = SoftDict(values, encoder=bundled_encoder)
    assert [found[0][0] for found in fixed.nearest(queries, 1)] == expected
    before = SoftDict(values, encoder=bundled_encoder, combination="rule-2")
    answers = before.nearest(queries, 1)
    missed = [q for q, found in zip(queries, answers) if found[0][0] != q.lower()]
    assert missed
    # Saved with rule-2, a store loads with it and answers as it did, until switched.
    before.save(tmp_path / "rule-2")
    loaded = SoftDict.load(tmp_path / "rule-2", encoder=bundled_encoder)
    assert loaded.combination == "rule-2"
    assert [found[0][0] for found in loaded.nearest(missed, 1)] == [
        found[0][0] for q, found in zip(queries, answers) if q in set(missed)
    ]
    loaded.combination = "rule-6"
    assert [found[0][0] for found in loaded.nearest(missed, 1)] == [q.lower() for q in missed]


def test_an_insert_interrupted_in_the_spelling_index_changes_nothing(
    english_words: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow parts of the spelling index run before the commit (cutting forms) or after it
    (building and merging postings): an interruption in either leaves a whole store."""
    sd = SoftDict({w: 1.0 for w in english_words[:EXACT_MAX_KEYS]}, encoder=FakeEncoder())

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(SpellingIndex, "prepare", interrupted)
        with pytest.raises(KeyboardInterrupt):
            sd["restaurantt"] = 2.0
    assert "restaurantt" not in sd and len(sd) == EXACT_MAX_KEYS
    with monkeypatch.context() as patch:
        # Past EXACT_MAX_KEYS the postings are built after the commit: interrupt that.
        patch.setattr(SpellingIndex, "_build_postings", interrupted)
        with pytest.raises(KeyboardInterrupt):
            sd.update({"restaurantt": 2.0, "goverment": 3.0})
    assert sd["restaurantt"] == 2.0 and len(sd) == EXACT_MAX_KEYS + 2
    sd["beautful"] = 4.0  # the next write builds them
    assert sd.attend("restaurnt").k < len(sd)  # the union of candidates, postings in place
    assert sd.nearest("goverment", 1)[0][0] == "goverment"


def test_short_words_with_no_3_gram_left_still_find_their_key(
    large_store: SoftDict, english_words: list[str]
) -> None:
    """A swap in a four-letter word leaves it no 3-gram in common with the word meant ("wrok",
    "work"); short queries also take the keys of their first letter and length, so the union
    still holds the best key by the combined score over every key."""
    for query in ("wrok", "hte", "tiem", "yaer", "mkae"):
        attention = large_store.attend(query)
        assert attention.k < len(large_store)
        combined = exact_combined(large_store, query, english_words)
        assert attention.keys[0] == english_words[int(np.argmax(combined))], query


def test_the_common_words_are_wordfreqs_and_kept_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made from wordfreq once, then read from the per-user cache; a damaged or unwritable
    cache only costs the reading of wordfreq again."""
    import wordfreq

    from softdict._cache import CACHE_ENV_VAR
    from softdict.spelling import text

    least = 10.0 ** (text.COMMON_WORD_MIN_ZIPF - 9)
    frequencies = wordfreq.get_frequency_dict("en", wordlist="large")
    expected = frozenset(w for w, f in frequencies.items() if f >= least)
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    try:
        text.common_words.cache_clear()  # as in a fresh process
        assert text.common_words() == expected and 40_000 < len(expected) < 70_000
        (kept,) = (tmp_path / "words").iterdir()

        def no_wordfreq(*args: object, **kwargs: object) -> None:
            raise AssertionError("read wordfreq although the cache holds the words")

        with monkeypatch.context() as patched:
            patched.setattr(wordfreq, "get_frequency_dict", no_wordfreq)
            text.common_words.cache_clear()
            assert text.common_words() == expected  # from the file
        kept.write_text(kept.read_text()[:1000])  # cut short: no end line
        text.common_words.cache_clear()
        assert text.common_words() == expected
        assert kept.read_text().endswith("\nend")  # written whole again
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        monkeypatch.setenv(CACHE_ENV_VAR, str(blocker / "cache"))
        text.common_words.cache_clear()
        assert text.common_words() == expected
    finally:
        text.common_words.cache_clear()


def test_threads_writing_one_cache_file_each_write_it_whole(tmp_path: Path) -> None:
    """The first lookups of several threads may write the same word list at once: each write
    succeeds and the file holds one writer's text whole (each thread writes a partial file of
    its own; with one per process, a thread moved another's unfinished file into place and its
    own move then failed)."""
    import threading

    from softdict._cache import write_whole

    path = tmp_path / "words.txt"
    texts = [f"{i}\n" * 20_000 for i in range(8)]
    failures: list[BaseException] = []

    def write(i: int) -> None:
        for _ in range(30):
            try:
                write_whole(path, texts[i])
            except OSError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and path.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["words.txt"]


# -- accents (rule-4 to rule-6) ----------------------------------------------------------------


def test_an_accented_form_strips_back_to_the_form_letter_by_letter() -> None:
    """``accented_form`` keeps a text's accents in its form and nothing else: the same length,
    each character the form's or one that strips back to it (what lets the character counts
    bound the similarity of accented forms too), as the naive statement of it gives; on
    pycountry's country and subdivision names, a fifth of which bear accents."""
    from _support import naive_accented_form

    from softdict.spelling import spelling_form
    from softdict.spelling.text import accented_form

    names = [c.name for c in pycountry.countries] + [s.name for s in pycountry.subdivisions]
    bearing = 0
    for name in names:
        form, kept = spelling_form(name), accented_form(name)
        assert len(kept) == len(form) and kept == naive_accented_form(name)
        assert [spelling_form(ch) or " " for ch in kept] == list(form)
        bearing += kept != form
    assert bearing > len(names) / 6
    assert accented_form("Kolār") == "kolār" and accented_form("Kolar") == "kolar"


def test_accents_never_raise_the_similarity_of_words_in_another_order() -> None:
    """The accented words of a query or key are compared in their forms' sorted order
    (``text.sorted_like``), so an accent typed lowers a similarity or leaves it, never raises it
    (every bound on unspelled keys assumes so). Sorted by themselves, "ávila costa" put
    "costa" first, as no form did, and typing the accent raised the similarity to "Costa Rica"
    from 0.374 to 0.446. Also on pycountry's names: each sorted accented form strips back to the
    sorted form letter by letter."""
    from softdict.spelling import spelling_form, token_sorted

    pairs = [
        ("Ávila Costa", "Costa Rica"),
        ("Århus Kommune", "Kommune Oslo"),
        ("b á", "x b"),
        ("á b", "bá"),
    ]
    for query, key in pairs:
        read, forms = library_measures(query, [key])
        assert read[0] <= forms[0], (query, key, read, forms)
        plain, _ = library_measures(spelling_form(query), [key])
        assert read[0] <= plain[0]
    from softdict.spelling.text import accented_form, sorted_like

    names = [c.name for c in pycountry.countries] + [s.name for s in pycountry.subdivisions]
    for name in names:
        form = spelling_form(name)
        kept = sorted_like(form, accented_form(name, form))
        assert [spelling_form(ch) or " " for ch in kept] == list(token_sorted(form)), name


def _accent_twins() -> list[tuple[str, str]]:
    """pycountry's subdivision names spelled alike but for accents, one bearing none:
    (accented, plain)."""
    from softdict.spelling import spelling_form
    from softdict.spelling.text import accented_form

    by_form: dict[str, list[str]] = {}
    for name in sorted({s.name for s in pycountry.subdivisions}):
        by_form.setdefault(spelling_form(name), []).append(name)
    twins = []
    for form, pair in by_form.items():
        plain = [name for name in pair if accented_form(name) == form]
        if len(pair) == 2 and len(plain) == 1:
            twins.append((pair[0] if plain[0] == pair[1] else pair[1], plain[0]))
    return twins


@pytest.mark.integration
def test_accent_twins_tied_come_in_the_keys_order_whatever_k(bundled_encoder) -> None:
    """Under ``rule-6`` a query typed without accents scores two keys spelled alike but for
    accents (pycountry's subdivisions, "Huíla" and "Huila") the same on both channels (the
    bundled encoder strips accents): ``nearest(q, 1)`` named one and ``nearest(q, 5)`` the
    other first, by how argpartition fell. Ties now go in the keys' order, so the best k are
    the first k of more. (``rule-7``, the default, breaks these ties: ``test_as_typed``.)"""
    twins = _accent_twins()
    names = sorted({s.name for s in pycountry.subdivisions})
    sd = SoftDict(dict.fromkeys(names, 1.0), encoder=bundled_encoder, combination="rule-6")
    position = {name: i for i, name in enumerate(names)}
    queries = [plain + "x" for _, plain in twins]
    ones, fives = sd.nearest(queries, 1), sd.nearest(queries, 5)
    tied = 0
    for (accented, plain), one, five in zip(twins, ones, fives):
        assert one == five[:1]
        top = dict(five)
        if top.get(accented) == top.get(plain) is not None:  # a tie: the earlier key first
            tied += 1
            first = next(key for key, _ in five if key in (accented, plain))
            assert position[first] < position[({accented, plain} - {first}).pop()]
    assert tied >= 5


@pytest.mark.parametrize("store", ["exact", "large"])
def test_a_query_typed_with_accents_prefers_the_key_that_bears_them(
    english_words: list[str], store: str
) -> None:
    """Under ``rule-4`` to ``rule-7`` a query that bore accents prefers, of two keys spelled alike
    but for accents (pycountry's subdivisions: "Huíla" and "Huila"), the one that bears them, typed
    as it is or with a letter added; ``rule-3`` scores both alike. A query without accents may have
    left them out: ``rule-6`` scores the two alike, ``rule-7`` (the default) the plain one
    ``AS_TYPED`` above. Over every key, and past the exact size (the union of
    candidates)."""
    from softdict.spelling.scores import AS_TYPED

    twins = _accent_twins()
    assert len(twins) >= 5
    names = sorted({s.name for s in pycountry.subdivisions})
    keys = names + (english_words if store == "large" else [])
    sd = SoftDict(dict.fromkeys(keys, 1.0), encoder=FakeEncoder(), temperature=0.1)
    assert sd.combination == "rule-8" and (store == "exact") == (len(sd) <= EXACT_MAX_KEYS)
    rule_3, rule_6 = sd.copy(), sd.copy()
    rule_3.combination, rule_6.combination = "rule-3", "rule-6"
    for accented, plain in twins:
        for query in (accented, accented + "x"):
            spelled = dict(zip(*_spelling_of(sd, query)))
            assert spelled[accented] > spelled[plain], (query, spelled)
            assert sd.nearest(query, 1)[0][0] == accented or query != accented
        spelled = dict(zip(*_spelling_of(rule_3, accented + "x")))
        assert spelled[accented] == spelled[plain]
        spelled = dict(zip(*_spelling_of(rule_6, plain + "x")))
        assert spelled[accented] == spelled[plain]
        spelled = dict(zip(*_spelling_of(sd, plain + "x")))
        assert spelled[accented] == close(spelled[plain] - AS_TYPED)


def _spelling_of(sd: SoftDict, query: str) -> tuple[tuple[str, ...], np.ndarray]:
    attention = sd.attend(query)
    return attention.keys, attention.spelling_scores


@pytest.mark.integration
def test_the_default_matches_the_words_of_a_name_in_any_order(bundled_encoder) -> None:
    """``rule-6`` (and ``rule-7``, the default): a name in another language puts its words in
    another order ("Îles Cook" for Cook Islands); ``rule-5``'s edit measure (OSA) read them in
    the typed order, so a key spelled alike in that order (Lesotho) overtook the one meaning
    ranked first. Of
    pycountry's French, Spanish and Portuguese names of several words, the default finds more
    countries first (177 against 166 of 209 when written), its spelling of a reordered name is
    the naive formula's, above ``rule-5``'s."""
    import gettext

    countries = [c.name for c in pycountry.countries]
    pairs = []
    for language in ("fr", "es", "pt"):
        translate = gettext.translation(
            "iso3166-1", pycountry.LOCALES_DIR, languages=[language]
        ).gettext
        pairs += [(translate(c), c) for c in countries if " " in translate(c) != c]
    sd = SoftDict(dict.fromkeys(countries, 1.0), encoder=bundled_encoder)
    rule_5 = sd.copy()
    rule_5.combination = "rule-5"
    assert sd.combination == "rule-8" and len(pairs) >= 150
    queries = [alias for alias, _ in pairs]
    found = {
        name: sum(row[0][0] == key for row, (_, key) in zip(d.nearest(queries, 1), pairs))
        for name, d in (("default", sd), ("rule-5", rule_5))
    }
    assert found["default"] >= found["rule-5"] + 5, found
    spelled = dict(zip(*_spelling_of(sd, "Îles Cook")))
    assert sd.nearest("Îles Cook", 1)[0][0] == "Cook Islands"
    assert spelled["Cook Islands"] == close(naive_spelling("Îles Cook", "Cook Islands", True, True))
    assert spelled["Cook Islands"] > naive_spelling("Îles Cook", "Cook Islands", accents=True)


@pytest.mark.integration
def test_the_bundled_encoder_cannot_tell_accents_and_rule_4_can(bundled_encoder) -> None:
    """The bundled encoder strips accents (an uncased WordPiece vocabulary): "Huíla" and "Huila"
    embed alike, so under ``rule-3`` they tie on both channels and a query typed with the
    accents is a coin toss. Under the default each accented twin (pycountry's subdivisions),
    typed as it is or with a letter added, finds itself, and spelling weighs it above its
    twin; a store saved with ``rule-3`` keeps it."""
    twins = _accent_twins()
    keys = sorted({c.name for c in pycountry.countries} | {n for pair in twins for n in pair})
    sd = SoftDict({key: float(i) for i, key in enumerate(keys)}, encoder=bundled_encoder)
    queries = [q for accented, _ in twins for q in (accented, accented + "x")]
    expected = [accented for accented, _ in twins for _ in range(2)]
    assert [found[0][0] for found in sd.nearest(queries, 1)] == expected
    tied = sd.copy()
    tied.combination = "rule-3"
    for accented, plain in twins:
        weights = dict(zip(tied.attend(accented + "x").keys, tied.attend(accented + "x").weights))
        assert weights[accented] == close(weights[plain])
