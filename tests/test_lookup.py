"""Soft lookup on a seeded fake encoder: the store's output is exactly the attention formula.

The formula tests set ``lexical=0`` (meaning alone, the seed formula); test_spelling.py checks
the combined score against its own naive formula."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _support import FakeEncoder, assert_close, close

from softdict import (
    Attention,
    ConfigError,
    EmptyStoreError,
    NoMatchError,
    Similarity,
    SoftDict,
)
from softdict._attention import attention

KEYS = ["red apple", "green apple", "yellow banana", "wooden chair", "soft sofa", "red car"]


def reference(encoder: FakeEncoder, keys, values, queries, similarity="cosine", temperature=0.05):
    """softmax(sim(Q, K)/T)·V from the pure math module, on the encoder's own embeddings."""
    K = encoder.encode(list(keys))
    Q = encoder.encode(list(queries))
    return attention(
        Q, K, np.asarray(values, dtype=float), similarity=similarity, temperature=temperature
    )


@pytest.mark.parametrize("similarity", [s.value for s in Similarity])
@pytest.mark.parametrize("temperature", [0.05, 0.5, 3.0])
def test_scalar_lookup_is_the_attention_formula(similarity: str, temperature: float) -> None:
    values = [1.0, 2.0, 3.0, 10.0, 20.0, 5.0]
    sd = SoftDict(
        dict(zip(KEYS, values)),
        encoder=FakeEncoder(),
        similarity=similarity,
        temperature=temperature,
        lexical=0,
    )
    queries = ["apple", "red", "chair sofa"]
    expected, _ = reference(FakeEncoder(), KEYS, values, queries, similarity, temperature)
    assert_close(sd.lookup(queries), expected, atol=1e-6)
    for query, value in zip(queries, expected):
        got = sd.lookup(query)
        assert isinstance(got, float)
        assert got == close(value, abs=1e-6)


def test_vector_lookup_blends_vectors() -> None:
    values = np.arange(18, dtype=float).reshape(6, 3)
    sd = SoftDict(dict(zip(KEYS, values)), encoder=FakeEncoder(), lexical=0)
    expected, _ = reference(FakeEncoder(), KEYS, values, ["apple", "chair"])
    got = sd.lookup(["apple", "chair"])
    assert got.shape == (2, 3)
    assert_close(got, expected)
    assert_close(sd.lookup("apple"), expected[0])


def test_categorical_lookup_returns_the_label_with_most_weight() -> None:
    labels = ["fruit", "fruit", "fruit", "furniture", "furniture", "vehicle"]
    sd = SoftDict(dict(zip(KEYS, labels)), encoder=FakeEncoder(), temperature=0.5, lexical=0)
    _, weights = reference(
        FakeEncoder(), KEYS, np.zeros(6), ["apple", "chair sofa"], temperature=0.5
    )
    for query, w in zip(["apple", "chair sofa"], weights):
        mass = {
            label: w[[i for i, lab in enumerate(labels) if lab == label]].sum()
            for label in set(labels)
        }
        assert sd.lookup(query) == max(mass, key=mass.get)
        distribution = sd.attend(query).distribution
        assert list(distribution) == sorted(mass, key=mass.get, reverse=True)
        for label, p in mass.items():
            assert distribution[label] == close(p)
        assert sum(distribution.values()) == close(1.0)
    assert sd.lookup(["apple", "chair sofa"]) == ["fruit", "furniture"]


def test_attend_reports_keys_weights_scores_sorted() -> None:
    values = [1.0, 2.0, 3.0, 10.0, 20.0, 5.0]
    sd = SoftDict(dict(zip(KEYS, values)), encoder=FakeEncoder(), temperature=0.3)
    att = sd.attend("apple")
    assert isinstance(att, Attention)
    assert att.query == "apple" and att.k == 6 and att.tail_mass == 0.0
    assert sorted(att.keys) == sorted(KEYS)
    assert np.all(np.diff(att.weights) <= 0) and np.all(np.diff(att.scores) <= 0)
    assert att.weights.sum() == close(1.0)
    assert att.value == close(sum(w * values[KEYS.index(k)] for k, w in zip(att.keys, att.weights)))
    assert att.keys[:2] in (("red apple", "green apple"), ("green apple", "red apple"))
    assert "Attention(query='apple'" in repr(att)
    batch = sd.attend(["apple", "chair"])
    assert [a.query for a in batch] == ["apple", "chair"]


def test_nearest_returns_best_keys_and_scores() -> None:
    sd = SoftDict(dict(zip(KEYS, range(6))), encoder=FakeEncoder(), lexical=0)
    best = sd.nearest("red apple", k=3)
    assert best[0] == ("red apple", close(1.0))
    assert [key for key, _ in best][1:] in (["green apple", "red car"], ["red car", "green apple"])
    assert best[0][1] >= best[1][1] >= best[2][1]
    assert len(sd.nearest("apple", k=50)) == 6
    assert [len(r) for r in sd.nearest(["apple", "chair"], k=2)] == [2, 2]


@pytest.mark.parametrize("index", ["flat", "hnsw", "ivf", "Flat"])
@pytest.mark.parametrize("lexical", [0.0, 1.0])
def test_nearest_with_a_k_past_the_store_lists_every_allowed_key(
    index: str, lexical: float
) -> None:
    """Meaning alone asked the backend for k columns: k = 2**31 allocated 16 GiB (the process
    was killed), 10**20 raised numpy's TypeError (a probe). k is what may come back."""
    sd = SoftDict(dict(zip(KEYS, range(6))), encoder=FakeEncoder(), lexical=lexical, index=index)
    for k in (7, 2**31, 10**20):
        assert sorted(key for key, _ in sd.nearest("apple", k=k)) == sorted(KEYS)
        assert [key for key, _ in sd.nearest("apple", k=k, mask=KEYS[:2])] in (
            KEYS[:2],
            KEYS[1::-1],
        )


def test_a_batch_is_encoded_in_one_call_and_keys_never_again() -> None:
    encoder = FakeEncoder()
    sd = SoftDict(encoder=encoder, batch_size=1000)
    sd.update({key: float(i) for i, key in enumerate(KEYS)})
    assert encoder.calls == 1
    sd.lookup(["apple", "chair", "car"])
    assert encoder.calls == 2
    sd.lookup("sofa")
    sd.attend("banana")
    sd["red apple"] = 9.0  # overwriting a value does not re-embed its key
    sd.update({"red car": 1.0, "blue bike": 2.0})  # only the new key is encoded
    # Each call's texts go longest first (batching by length), so compare as multisets.
    expected = [*KEYS, "apple", "chair", "car", "sofa", "banana", "blue bike"]
    assert sorted(encoder.texts_encoded) == sorted(expected)


@pytest.mark.parametrize(
    "values",
    [[1.0, 2.0, 3.0, 10.0, 20.0, 5.0], [[float(i), 1.0 - i] for i in range(6)], list("aabbcc")],
    ids=["scalar", "vector", "labels"],
)
def test_a_batch_with_repeats_is_looked_up_once_per_distinct_text(values) -> None:
    """A table's column repeats its values: each distinct text is embedded and looked up once,
    and every row gets what its text gets alone (min_score's default included)."""
    encoder = FakeEncoder()
    sd = SoftDict(dict(zip(KEYS, values)), encoder=encoder, query_cache_size=0)
    rows = ["apple", "chair", "apple", "red car", "chair", "apple", "red car"]
    labels = isinstance(values[0], str)
    default = "none" if labels else (np.nan if np.ndim(values[0]) == 0 else [9.0, 9.0])

    def assert_same(batch: object, alone: object) -> None:
        if labels:
            assert batch == alone
        else:  # a batch is one matrix product, one query a matrix-vector product
            assert_close(np.asarray(batch, dtype=float), np.asarray(alone, dtype=float))

    before = len(encoder.texts_encoded)
    got = sd.lookup(rows)
    assert sorted(encoder.texts_encoded[before:]) == ["apple", "chair", "red car"]
    assert len(got) == len(rows)
    for row, answer in zip(rows, got):
        assert_same(answer, sd.lookup(row))
    # "red car" is a key; "apple" scores below 0.9.
    with_default = sd.lookup(rows, min_score=0.9, default=default)
    for row, answer in zip(rows, with_default):
        assert_same(answer, sd.lookup(row, min_score=0.9, default=default))
    with pytest.raises(NoMatchError, match="'apple'"):
        sd.lookup(rows, min_score=0.9)


@pytest.mark.parametrize(
    "values", [[[float(i), 1.0] for i in range(6)], list("aabbcc")], ids=["vector", "labels"]
)
def test_repeated_texts_get_their_own_attention_and_nearest_lists(values) -> None:
    """Each repeat's answer equals its text's, with arrays of its own: a caller changing one
    answer leaves the others alone."""
    sd = SoftDict(dict(zip(KEYS, values)), encoder=FakeEncoder())
    rows = ["apple", "car", "apple"]
    attentions = sd.attend(rows)
    assert [a.query for a in attentions] == rows
    first, again = attentions[0], attentions[2]
    assert first is not again and first.keys == again.keys
    mutable = 0
    for field in dataclasses.fields(Attention):
        mine, theirs = getattr(first, field.name), getattr(again, field.name)
        if isinstance(mine, np.ndarray):
            np.testing.assert_array_equal(mine, theirs)
        else:
            assert mine == theirs
        if isinstance(mine, (np.ndarray, dict)):
            mutable += 1
            assert mine is not theirs
    assert mutable >= 4  # weights, scores, meaning and spelling scores, and value or distribution
    nearest = sd.nearest(rows, k=2)
    assert nearest[0] == nearest[2] and nearest[0] is not nearest[2]
    alone = sd.nearest("apple", k=2)
    assert [key for key, _ in nearest[0]] == [key for key, _ in alone]
    assert [score for _, score in nearest[0]] == close([score for _, score in alone])


def test_repeated_rows_get_labels_of_their_own() -> None:
    """A label can be a JSON list or dict: a caller changing one row's label (or its
    attention's value or distribution) leaves the other rows' alone, as when each row was
    decoded on its own."""
    labels = [["fruit", "red"], {"kind": "fruit", "tags": ["green"]}, ["fruit"], "x", "y", "z"]
    sd = SoftDict(dict(zip(KEYS, labels)), encoder=FakeEncoder())
    rows = ["red apple", "green apple", "red apple", "green apple"]
    got = sd.lookup(rows)
    assert got == [sd.lookup(row) for row in rows]
    got[0].append("changed")
    got[1]["tags"].append("changed")
    assert got[2] == ["fruit", "red"] and got[3] == {"kind": "fruit", "tags": ["green"]}
    attentions = sd.attend(rows)
    attentions[0].value.append("changed")
    attentions[1].value["tags"].append("changed")
    assert attentions[2].value == ["fruit", "red"]
    assert attentions[3].value == {"kind": "fruit", "tags": ["green"]}
    assert attentions[2].distribution is not attentions[0].distribution
    first, again = (
        list(attentions[0].distribution.items()),
        list(attentions[2].distribution.items()),
    )
    assert [label for label, _ in again] == [label for label, _ in first]
    assert [p for _, p in again] == close([p for _, p in first])


def test_update_encodes_in_batches_of_batch_size() -> None:
    encoder = FakeEncoder()
    sd = SoftDict(encoder=encoder, batch_size=4)
    sd.update({f"key {i}": i for i in range(10)})
    assert encoder.calls == 3 and len(sd) == 10
    sd.lookup([f"query {i}" for i in range(9)])
    assert encoder.calls == 6


def test_repeated_queries_hit_a_bounded_cache() -> None:
    encoder = FakeEncoder()
    sd = SoftDict(dict(zip(KEYS, range(6))), encoder=encoder, query_cache_size=2)
    calls = encoder.calls
    sd.lookup("apple")
    sd.lookup("apple")
    sd.lookup(["apple", "apple"])
    assert encoder.calls == calls + 1
    sd.lookup("chair")
    sd.lookup("car")  # evicts "apple", the least recently used of three
    sd.lookup("car")
    assert encoder.calls == calls + 3
    sd.lookup("apple")
    assert encoder.calls == calls + 4
    sd.lookup(["car", "apple"])  # the two most recent: still cached
    assert encoder.calls == calls + 4
    sd.lookup("chair")  # evicted: two fit, no more
    assert encoder.calls == calls + 5


def test_cache_can_be_disabled() -> None:
    encoder = FakeEncoder()
    sd = SoftDict({"apple": 1}, encoder=encoder, query_cache_size=0)
    sd.lookup("fruit")
    sd.lookup("fruit")
    assert encoder.calls == 3


def test_min_score_and_default() -> None:
    sd = SoftDict(dict(zip(KEYS, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])), encoder=FakeEncoder())
    assert sd.lookup("red apple", min_score=0.9) == close(sd.lookup("red apple"))
    assert sd.lookup("spaceship", min_score=0.9, default=None) is None
    with pytest.raises(NoMatchError) as info:
        sd.lookup("spaceship", min_score=0.9)
    assert isinstance(info.value, KeyError)
    assert "spaceship" in str(info.value) and "min_score=0.9" in str(info.value)
    # In a batch, only the queries below min_score get the default.
    got = sd.lookup(["red apple", "spaceship"], min_score=0.9, default=float("nan"))
    assert got[0] == close(sd.lookup("red apple")) and np.isnan(got[1])
    with pytest.raises(NoMatchError, match="spaceship"):
        sd.lookup(["red apple", "spaceship"], min_score=0.9)


def test_min_score_default_in_categorical_and_vector_batches() -> None:
    labels = SoftDict(dict(zip(KEYS, "aabbcc")), encoder=FakeEncoder())
    assert labels.lookup(["red apple", "spaceship"], min_score=0.9, default=None)[1] is None
    vectors = SoftDict({k: [float(i), 1.0] for i, k in enumerate(KEYS)}, encoder=FakeEncoder())
    got = vectors.lookup(["red apple", "spaceship"], min_score=0.9, default=[0.0, 0.0])
    np.testing.assert_array_equal(got[1], [0.0, 0.0])


def test_top_k_attends_to_the_k_best_and_bounds_the_tail() -> None:
    values = [1.0, 2.0, 3.0, 10.0, 20.0, 5.0]
    sd = SoftDict(dict(zip(KEYS, values)), encoder=FakeEncoder(), top_k=2, temperature=0.5)
    exact = SoftDict(dict(zip(KEYS, values)), encoder=FakeEncoder(), temperature=0.5)
    att, full = sd.attend("apple"), exact.attend("apple")
    assert att.k == 2 and att.keys == full.keys[:2]
    top = np.exp((full.scores[:2] - full.scores[0]) / 0.5)
    assert_close(att.weights, top / top.sum())
    true_tail = full.weights[2:].sum()
    # Top-k attention gives the rest nothing (no estimate); the bound says what full attention
    # would give them, and holds on this exact index.
    assert att.tail_mass is None and att.tail_interval is None and att.sampled == 0
    assert att.tail_bound is not None and true_tail <= att.tail_bound < 1.0
    assert sd.lookup("apple") == close(
        float(att.weights @ [values[KEYS.index(k)] for k in att.keys])
    )


def test_embeddings_api_matches_the_formula() -> None:
    rng = np.random.default_rng(0)
    K, Q = rng.standard_normal((5, 4)), rng.standard_normal((3, 4))
    values = rng.standard_normal(5)
    sd = SoftDict(encoder=FakeEncoder(), similarity="scaled_dot", temperature=1.0)
    sd.add_embeddings([f"k{i}" for i in range(5)], K, values)
    expected, weights = attention(Q, K, values, similarity="scaled_dot", temperature=1.0)
    assert_close(sd.lookup_embeddings(Q), expected)
    assert sd.lookup_embeddings(Q[0]) == close(expected[0])
    attentions = sd.attend_embeddings(Q)
    assert len(attentions) == 3 and attentions[0].query is None
    assert sd.attend_embeddings(Q[1]).keys == attentions[1].keys
    assert_close(sorted(attentions[1].weights), sorted(weights[1]))
    # add_embeddings on an existing key replaces its embedding and value.
    sd.add_embeddings(["k0"], -K[:1], [100.0])
    assert sd["k0"] == 100.0 and len(sd) == 5
    K2, values2 = K.copy(), values.copy()
    K2[0], values2[0] = -K[0], 100.0
    expected2, _ = attention(Q, K2, values2, similarity="scaled_dot", temperature=1.0)
    assert_close(sd.lookup_embeddings(Q), expected2)


def test_lookup_on_an_empty_store() -> None:
    sd = SoftDict(encoder=FakeEncoder())
    for call in (
        lambda: sd.lookup("x"),
        lambda: sd.attend("x"),
        lambda: sd.nearest("x"),
        lambda: sd.lookup_embeddings(np.zeros((1, 16))),
    ):
        with pytest.raises(EmptyStoreError, match="insert keys first"):
            call()
    assert isinstance(EmptyStoreError("x"), LookupError)


def test_empty_query_batch_gives_an_empty_result() -> None:
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    assert sd.lookup([]).shape == (0,)


def test_attention_names_each_key_with_its_own_weight_and_score() -> None:
    """Keys, weights and scores of an Attention belong together, on the path that scores every
    key and on the top-k path, before and after deletes leave empty slots."""
    values = [1.0, 2.0, 3.0, 10.0, 20.0, 5.0]
    for options in ({}, {"top_k": 4}):
        sd = SoftDict(
            dict(zip(KEYS, values)), encoder=FakeEncoder(), temperature=0.3, lexical=0, **options
        )
        for _ in range(2):
            attention = sd.attend("red apple car")
            query = FakeEncoder().encode(["red apple car"])
            for key, score in zip(attention.keys, attention.scores):
                expected = Similarity.COSINE.scores(query, FakeEncoder().encode([key]))[0, 0]
                assert score == close(expected)
            assert attention.value == close(
                sum(w * sd[k] for k, w in zip(attention.keys, attention.weights))
            )
            sd.pop("green apple", None)  # leaves an empty slot for the second round


def test_attentions_and_distributions_compare_by_what_they_hold() -> None:
    """``==`` on two Attentions raised numpy's "truth value of an array is ambiguous" (but for
    a store of one key), and on a Distribution with a dict label TypeError (a probe)."""
    sd = SoftDict({"red apple": 1.0, "green apple": 2.0, "blue chair": 3.0}, encoder=FakeEncoder())
    first = sd.attend("apple")
    assert first == sd.attend("apple") and first in [sd.attend("apple")]
    assert first != sd.attend("chair") and first != "apple"
    with pytest.raises(TypeError, match="unhashable"):
        hash(first)
    labels = SoftDict({"a": {"id": 1}, "b": "y"}, encoder=FakeEncoder())
    distribution = labels.attend("a").distribution
    assert distribution is not None and distribution == labels.attend("a").distribution
    assert distribution != labels.attend("b").distribution and distribution != {"y": 1.0}
    plain = SoftDict({"a": "x", "b": "y"}, encoder=FakeEncoder()).attend("a").distribution
    assert plain == {label: p for label, p in plain.items()}


def test_a_result_shows_long_texts_cut_short_and_top_takes_a_count() -> None:
    """repr of an Attention over a key of 100,000 characters was 200 KB long, and of a
    Distribution with a label of a megabyte a megabyte; top(-1) gave every key but the last
    (a slice) and top(1.5) raised a raw TypeError."""
    long_key, long_label = "k" * 100_000, "L" * 1_000_000
    sd = SoftDict({long_key: long_label, "short": "x"}, encoder=FakeEncoder())
    attention = sd.attend(long_key)
    assert len(repr(attention)) < 500 and len(repr(attention.distribution)) < 500
    assert attention.top(1)[0][0] == long_key and len(attention.top(0)) == 0
    assert [key for key, _ in attention.top(5)] == list(attention.keys)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="n must be a whole number >= 0"):
            attention.top(bad)  # type: ignore[arg-type]
