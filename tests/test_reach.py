"""Spelling only where it can add (softdict.spelling.reach): a large store's spelling candidates
are the keys that spelling every key of the pool would choose, and the keys left unspelled in a
union or a sampled tail score exactly what they would spelled.

Keys are real names (pycountry's subdivisions, wordfreq's English words); queries are some of
them with one deterministic edit, codes and short words.
"""

from __future__ import annotations

import numpy as np
import pycountry
import pytest
from _support import COMBINATIONS, assert_close

from softdict.spelling import SpellingIndex, SpellingQueries
from softdict.spelling.combination import combination_for
from softdict.spelling.reach import best_by_gain
from softdict.spelling.terms import QueryTerms, query_terms

N = 64


@pytest.fixture(scope="module")
def keys() -> list[str]:
    from wordfreq import top_n_list

    places = sorted({s.name for s in pycountry.subdivisions})[:1500]
    words = [w for w in top_n_list("en", 3000) if w.isalpha()][:1500]
    return places + words


@pytest.fixture(scope="module")
def index(keys: list[str]) -> SpellingIndex:
    spelling = SpellingIndex()
    spelling.add(np.arange(len(keys)), keys)
    return spelling


def queries_of(keys: list[str]) -> list[str]:
    """Keys with one edit in the middle (dropped, swapped, doubled letters), codes, short
    words, and text that matches nothing."""
    edited = []
    for j, key in enumerate(keys[::97]):
        i = len(key) // 2
        edit = j % 3
        if edit == 0:
            edited.append(key[:i] + key[i + 1 :])
        elif edit == 1 and i > 0:
            edited.append(key[: i - 1] + key[i] + key[i - 1] + key[i + 1 :])
        else:
            edited.append(key[:i] + key[i] + key[i:])
    return [*edited, "BW", "ab", "usa", "new yrok", "the", "1234", "!!", "zzqx"]


def queries_and_terms(
    keys: list[str], combination: str
) -> tuple[list[str], SpellingQueries, QueryTerms]:
    """``queries_of(keys)``, as the spelling channel takes them, and their terms."""
    texts = queries_of(keys)
    terms = query_terms(combination_for(combination, 1 / 16), texts, 1.0, 1.0)
    return texts, SpellingQueries.of(texts), terms


def exact_gains(
    index: SpellingIndex, queries: SpellingQueries, terms: QueryTerms, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every key of ``ids`` (c,) spelled: similarity and gain (m, c)."""
    similarity = index.similarity(queries, ids)
    marks = index.marks(queries, ids) if terms.weighs_marks else None
    return similarity, terms.gain(similarity, marks)


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_candidates_are_those_of_spelling_every_key_of_the_pool(
    keys: list[str], index: SpellingIndex, combination: str
) -> None:
    texts, queries, terms = queries_and_terms(keys, combination)
    every = np.arange(len(keys))
    ids, similarity = index.best_of_pools(queries, [every] * len(texts), N, terms)
    full_similarity, full_gain = exact_gains(index, queries, terms, every)
    for i, text in enumerate(texts):
        chosen = ids[i]
        assert np.all(chosen >= 0) and len(set(chosen.tolist())) == N, text
        assert not np.isnan(similarity[i]).any(), text  # every candidate is spelled
        assert_close(similarity[i], full_similarity[i, chosen])
        # The N best by gain, then by similarity, of every key spelled: the same but for ties.
        best = np.lexsort((-full_similarity[i], -full_gain[i]))[:N]
        assert_close(np.sort(full_gain[i, chosen]), np.sort(full_gain[i, best]))
        assert_close(np.sort(full_similarity[i, chosen]), np.sort(full_similarity[i, best]))


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_keys_left_unspelled_score_exactly_what_they_would_spelled(
    keys: list[str], index: SpellingIndex, combination: str
) -> None:
    texts, queries, terms = queries_and_terms(keys, combination)
    rng = np.random.default_rng(0)
    ids = np.stack([rng.choice(len(keys), 500, replace=False) for _ in texts])
    ids[:, -20:] = -1  # padding
    meaning = np.where(ids >= 0, rng.uniform(-0.2, 0.9, ids.shape), -np.inf)
    similarity, marks = index.spelling_of(queries, ids, terms)
    assert (marks is None) == (not terms.weighs_marks)
    full_similarity = np.full(ids.shape, np.nan)
    full_marks = np.zeros_like(marks) if marks is not None else None
    for i in range(len(texts)):
        found = ids[i] >= 0
        one = queries.subset(np.array([i]))
        full_similarity[i, found] = index.similarity(one, ids[i, found])[0]
        if full_marks is not None:
            full_marks[i, found] = index.marks(one, ids[i, found])[0]
    assert np.array_equal(
        terms.score(meaning, similarity, marks), terms.score(meaning, full_similarity, full_marks)
    )
    spelled = ~np.isnan(similarity)
    assert_close(similarity[spelled], full_similarity[spelled])
    assert np.all(np.isnan(similarity[ids < 0]))
    # Many keys drawn at random are spelled nothing like the query, and are left unspelled.
    assert np.isnan(similarity[ids >= 0]).mean() > 0.3


def test_best_by_gain_spells_only_what_the_choice_needs() -> None:
    rng = np.random.default_rng(1)
    spelled_keys = could_gain = 0
    for trial in range(200):
        c = int(rng.integers(1, 3000))
        n = int(rng.integers(1, 100))
        upper = np.where(rng.random(c) < 0.5, 0.0, rng.exponential(1.0, c))
        gain = upper * rng.random(c) ** 3  # each key's gain is at most its upper bound
        asked: list[np.ndarray] = []

        def exact(
            positions: np.ndarray, asked: list[np.ndarray] = asked, gain: np.ndarray = gain
        ) -> tuple[np.ndarray, np.ndarray]:
            asked.append(positions)
            return gain[positions] / 10, gain[positions]

        similarity, found = best_by_gain(upper, n, exact)
        spelled = np.concatenate(asked) if asked else np.zeros(0, dtype=int)
        assert len(set(spelled.tolist())) == len(spelled)  # no key spelled twice
        kth = np.sort(gain)[-min(n, c)]
        # Every key of a gain above the n-th best is spelled, with its exact gain ...
        assert np.all(np.isin(np.flatnonzero(gain > kth), spelled)), trial
        assert np.array_equal(found[spelled], gain[spelled])
        assert np.array_equal(similarity[spelled], gain[spelled] / 10)
        # ... the n best gains found are the n best, and no unspelled key claims more.
        assert np.array_equal(np.sort(found)[-min(n, c) :], np.sort(gain)[-min(n, c) :])
        left = np.setdiff1d(np.arange(c), spelled)
        assert np.all(np.isnan(similarity[left]))
        assert np.all(found[left] == np.where(upper[left] <= 0, 0.0, -np.inf))
        # Keys are spelled highest upper bound first; where it is 0 only when fewer than n
        # keys gain anything (then every key is, to choose the rest by similarity).
        if len(spelled) and len(left):
            assert upper[spelled].min() >= upper[left].max()
        if np.count_nonzero(gain > 0) < min(n, c):
            assert not len(left), trial
        else:
            assert np.all(upper[spelled] > 0)
        spelled_keys += len(spelled)
        could_gain += int(np.count_nonzero(upper > 0))
    assert spelled_keys < 0.75 * could_gain  # 0.59 with this seed
