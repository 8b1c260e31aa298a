"""On the real bundled encoder (all-MiniLM-L6-v2, offline): lookups go by meaning."""

from __future__ import annotations

import numpy as np
import pytest
from _support import assert_close, close

from softdict import CalibrationWarning, NoMatchError, SoftDict

pytestmark = pytest.mark.integration


def test_fruit_leans_to_apple_and_banana_and_almost_nothing_to_chair(bundled_encoder) -> None:
    sd = SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder)
    att = sd.attend("fruit")
    weight = dict(zip(att.keys, att.weights))
    assert weight["apple"] + weight["banana"] > 0.99
    assert weight["chair"] < 0.001
    assert weight["apple"] > weight["chair"]
    assert sd.lookup("fruit") == close(
        10 * weight["apple"] + 5 * weight["banana"] + 2 * weight["chair"]
    )
    # A warmer temperature blends more evenly, and still leaves chair almost out.
    sd.temperature = 0.1
    warm = dict(sd.attend("fruit").top(3))
    assert warm["apple"] > 0.1 and warm["chair"] < 0.05


def test_crimson_leans_to_red(bundled_encoder) -> None:
    # The primary colours. (MiniLM's single-word colour sense is coarse: with "purple" stored too,
    # crimson lands nearest purple, which is not wrong either.)
    colours = {"red": "red", "blue": "blue", "green": "green", "yellow": "yellow"}
    sd = SoftDict(colours, encoder=bundled_encoder)
    assert sd.lookup("crimson") == "red"
    att = sd.attend("crimson")
    assert att.keys[0] == "red"
    assert att.distribution.most_likely() == "red"
    assert att.distribution["red"] > 0.5


def test_batch_lookup_equals_single_lookups(bundled_encoder) -> None:
    sd = SoftDict({"apple": 10, "banana": 5, "chair": 2, "sofa": 1}, encoder=bundled_encoder)
    queries = ["fruit", "furniture", "something to sit on"]
    batch = sd.lookup(queries)
    assert batch.shape == (3,)
    assert_close(batch, [sd.lookup(q) for q in queries])


def test_vector_values_blend_by_meaning(bundled_encoder) -> None:
    # (sweetness, hardness) per key.
    sd = SoftDict(
        {"strawberry": [0.9, 0.1], "mango": [0.8, 0.2], "granite": [0.0, 1.0], "steel": [0.0, 0.9]},
        encoder=bundled_encoder,
    )
    sweet, hard = sd.lookup(["a ripe tropical fruit", "a hard rock"])
    assert sweet[0] > 0.7 and sweet[1] < 0.3
    assert hard[0] < 0.2 and hard[1] > 0.8


def test_categorical_fuzzy_matching_with_no_match(bundled_encoder) -> None:
    canonical = {
        "United States": "US",
        "United Kingdom": "GB",
        "Germany": "DE",
        "France": "FR",
        "Japan": "JP",
    }
    sd = SoftDict(canonical, encoder=bundled_encoder)
    assert sd.lookup(["USA", "Britain", "Deutschland"]) == ["US", "GB", "DE"]
    assert sd.lookup("my grocery list", min_score=0.5, default=None) is None
    with pytest.raises(NoMatchError):
        sd.lookup("my grocery list", min_score=0.5)


@pytest.mark.parametrize("similarity", ["cosine", "dot", "scaled_dot", "l2"])
def test_every_similarity_gives_the_same_default_weights_on_unit_embeddings(
    bundled_encoder, similarity
) -> None:
    cosine = SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder)
    other = SoftDict(
        {"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder, similarity=similarity
    )
    a, b = cosine.attend("fruit"), other.attend("fruit")
    assert a.keys == b.keys
    # The same cosines computed as dot products of other rows: equal to float32 noise, which
    # T = 0.05 turns into ~1e-5 in the weights.
    np.testing.assert_allclose(a.weights, b.weights, atol=1e-4)


def test_calibrating_the_readme_example_keeps_the_default(bundled_encoder) -> None:
    """The README's three keys are too few to choose a temperature by: calibrate keeps the
    measured default (it used to set 0.001, a hard pick of one key) and warns."""
    sd = SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder)
    with pytest.warns(CalibrationWarning):
        assert sd.calibrate() == 0.05
    assert sd.lookup("fruit") == pytest.approx(5.11, abs=0.01)
