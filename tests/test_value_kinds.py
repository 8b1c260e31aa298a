"""One value-kind contract, run over every registered kind (the built-ins and the ``boolean``
plug-in of tests/_plugins.py), through the public ``softdict.values`` protocol and a SoftDict:
the blend equals the kind's naive formula on random weights, values round-trip (stage, append,
assign, keep, dump, restore), shapes and dtypes are the documented ones, and bad values raise
softdict's errors and change nothing."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _support import assert_close, close, same_value

from softdict import (
    InvalidValueError,
    SoftDict,
    SoftDictError,
    StoreFormatError,
    ValueKindError,
    ValueShapeError,
)
from softdict.values import FileReader, LossKind, ValueColumn, column_class, kind_names

# Collected before any test runs, so the kinds parametrised are exactly those registered by the
# package and by tests/_plugins.py (through conftest).
KINDS = kind_names()
VECTOR_LENGTH = 3
KEYS = ["apple", "banana", "chair", "red apple", "green chair", "sofa", "pear tree"]
LABELS = ["fruit", "furniture", {"id": 3, "tags": ["a"]}, None, 7, [1, 2], True]


def _draw(kind: str, rng: np.random.Generator, n: int) -> list[object]:
    """n random values of ``kind``, in the forms a user passes them."""
    if kind == "scalar":
        return [int(rng.integers(-50, 50)) if i % 2 else float(rng.normal(0, 10)) for i in range(n)]
    if kind == "vector":
        forms: list[Callable[[np.ndarray], object]] = [np.asarray, list, tuple]
        return [forms[i % 3](rng.normal(0, 5, VECTOR_LENGTH)) for i in range(n)]
    if kind == "categorical":
        return [LABELS[int(i)] for i in rng.integers(0, len(LABELS), n)]
    assert kind == "boolean"
    return [bool(flag) for flag in rng.random(n) < 0.5]


def _label_mass(weights: np.ndarray, values: list[object]) -> dict[str, float]:
    """Summed weight per label (by its JSON text), labels in order of first appearance."""
    mass: dict[str, float] = {}
    for w, label in zip(weights, values):
        text = json.dumps(label, sort_keys=True)
        mass[text] = mass.get(text, 0.0) + float(w)
    return mass


def naive_blend(kind: str, weights: np.ndarray, values: list[object]) -> object:
    """What each kind's documentation says one query's blend is, pair by pair in plain Python:
    Σ w_i v_i for numbers and vectors, the label with the largest summed weight (the first
    inserted on a tie) for labels, and the weight on True for the boolean plug-in."""
    if kind == "scalar":
        return sum(float(w) * float(v) for w, v in zip(weights, values))  # type: ignore[arg-type]
    if kind == "vector":
        total = np.zeros(VECTOR_LENGTH)
        for w, v in zip(weights, values):
            total += float(w) * np.array(v, dtype=float)
        return total
    if kind == "categorical":
        mass = _label_mass(weights, values)
        return json.loads(max(mass, key=lambda text: mass[text]))  # max keeps the first on ties
    assert kind == "boolean"
    return sum(float(w) for w, v in zip(weights, values) if v is True)


def assert_blend_equal(kind: str, got: object, expected: object) -> None:
    if kind == "vector":
        assert isinstance(got, np.ndarray) and got.shape == (VECTOR_LENGTH,)
        assert_close(got, expected)
    elif kind == "categorical":
        assert got == expected
    else:
        assert isinstance(got, float) and got == close(expected)


def column_of(kind: str, values: list[object]) -> ValueColumn:  # type: ignore[type-arg]
    """A column of ``kind`` holding ``values`` in slots 0..n-1, as a store fills one."""
    keys = [f"key {i}" for i in range(len(values))]
    column = column_class(kind).for_first_value(keys[0], values[0])
    column.append(column.stage(values, keys))
    return column


def random_weights(rng: np.random.Generator, m: int, c: int) -> np.ndarray:
    """m rows of attention weights over c values: softmax of random scores, and one one-hot row
    (a blend that must give the value itself)."""
    scores = rng.normal(0, 2, (m, c))
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    weights[0] = np.eye(c)[int(rng.integers(c))]
    return weights


def test_every_registered_kind_is_in_this_suite() -> None:
    assert set(KINDS) == {"scalar", "vector", "categorical", "boolean"}
    for kind in KINDS:
        assert issubclass(column_class(kind), ValueColumn) and column_class(kind).kind == kind


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", KINDS)
def test_blend_equals_the_naive_formula(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = _draw(kind, rng, 9)
    column = column_of(kind, values)
    # Slots shared by every query: a subset in a shuffled order, as a filtered lookup gives them.
    shared = rng.permutation(9)[:6]
    weights = random_weights(rng, 4, len(shared))
    blended = column.blend(weights, shared)
    for i, row in enumerate(weights):
        expected = naive_blend(kind, row, [values[s] for s in shared])
        assert_blend_equal(kind, column.result(blended, i), expected)
    # Each query its own slots (a top-k lookup): (m, k) weights over (m, k) slots.
    own = np.stack([rng.permutation(9)[:4] for _ in range(5)])
    weights = random_weights(rng, 5, 4)
    blended = column.blend(weights, own)
    for i, (row, slots) in enumerate(zip(weights, own)):
        expected = naive_blend(kind, row, [values[s] for s in slots])
        assert_blend_equal(kind, column.result(blended, i), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_explain_gives_each_labels_probability_or_nothing(kind: str) -> None:
    """A label store explains a blend as every stored label's summed weight, most likely first
    (labels no attended key holds at 0); other kinds' blends say it all."""
    rng = np.random.default_rng(7)
    values = _draw(kind, rng, 12)
    column = column_of(kind, values)
    slots = np.arange(5)
    weights = random_weights(rng, 3, 5)
    explained = column.explain(weights, slots, lambda: np.arange(12))
    assert len(explained) == 3
    if kind != "categorical":
        assert explained == [None, None, None]
        return
    stored = {json.dumps(v, sort_keys=True) for v in values}
    for row, distribution in zip(weights, explained):
        assert distribution is not None
        mass = _label_mass(row, values[:5])
        probabilities = [p for _, p in distribution.items()]
        assert {json.dumps(label, sort_keys=True) for label in distribution} == stored
        assert probabilities == sorted(probabilities, reverse=True)
        assert sum(probabilities) == close(1.0)
        for label in distribution:
            assert distribution[label] == close(mass.get(json.dumps(label, sort_keys=True), 0.0))
        assert distribution.most_likely() == naive_blend(kind, row, values[:5])


@pytest.mark.parametrize("kind", KINDS)
def test_a_lookup_is_the_naive_blend_of_its_attention(kind: str, fake_encoder) -> None:
    """Through a SoftDict: ``attend(q).value`` and ``lookup(q)`` are the naive formula over the
    attended keys' stored values and weights, and a batch lookup answers as one-by-one."""
    values = _draw(kind, np.random.default_rng(3), len(KEYS))
    sd = SoftDict(dict(zip(KEYS, values)), encoder=fake_encoder, value_kind=kind, temperature=0.5)
    queries = ["apple", "green sofa", "tree", "something else"]
    for query in queries:
        attention = sd.attend(query)
        assert set(attention.keys) == set(KEYS) and attention.tail_mass == 0
        expected = naive_blend(kind, attention.weights, [sd[key] for key in attention.keys])
        assert_blend_equal(kind, attention.value, expected)
        assert_blend_equal(kind, sd.lookup(query), expected)
        if kind == "categorical":
            assert attention.distribution is not None
            mass = _label_mass(attention.weights, [sd[key] for key in attention.keys])
            for label, p in attention.distribution.items():
                assert p == close(mass.get(json.dumps(label, sort_keys=True), 0.0))
        else:
            assert attention.distribution is None
    batch = sd.lookup(queries)
    if kind == "categorical":
        assert isinstance(batch, list) and batch == [sd.lookup(q) for q in queries]
    else:
        shape = (len(queries), VECTOR_LENGTH) if kind == "vector" else (len(queries),)
        assert isinstance(batch, np.ndarray) and batch.shape == shape
        assert batch.dtype == np.float64
        assert_close(batch, np.array([sd.lookup(q) for q in queries]))


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_dtypes(kind: str) -> None:
    rng = np.random.default_rng(11)
    column = column_of(kind, _draw(kind, rng, 6))
    assert len(column) == 6
    blended = column.blend(random_weights(rng, 4, 6), np.arange(6))
    if kind == "categorical":
        assert isinstance(blended, list) and len(blended) == 4
    else:
        assert isinstance(blended, np.ndarray) and blended.dtype == np.float64
        assert blended.shape == ((4, VECTOR_LENGTH) if kind == "vector" else (4,))
    calibration = column.calibration_values(np.array([4, 0, 2]))
    assert calibration.shape == ((3, VECTOR_LENGTH) if kind == "vector" else (3,))
    if column.loss is LossKind.SQUARED_ERROR:
        assert calibration.dtype == np.float64
    else:  # label codes: equal labels share one
        assert column.loss is LossKind.LABEL_LIKELIHOOD
        assert np.issubdtype(calibration.dtype, np.integer)


def expected_back(kind: str, value: object) -> object:
    """A value as ``get`` returns it: vectors as float64 arrays, everything else as given."""
    return np.asarray(value, dtype=float) if kind == "vector" else value


@pytest.mark.parametrize("kind", KINDS)
def test_values_round_trip_through_append_assign_and_keep(kind: str) -> None:
    rng = np.random.default_rng(5)
    values = _draw(kind, rng, 8)
    column = column_of(kind, values)
    assert all(same_value(column.get(i), expected_back(kind, v)) for i, v in enumerate(values))
    model = list(values)
    slots = np.array([6, 1])
    fresh = _draw(kind, rng, 2)
    column.assign(slots, column.stage(fresh, ["x", "y"]))
    for slot, value in zip(slots, fresh):
        model[slot] = value
    more = _draw(kind, rng, 3)
    column.append(column.stage(more, ["p", "q", "r"]))
    model += more
    order = np.array([10, 0, 6, 3, 1])  # compaction keeps these slots, in this order
    column.keep(order)
    model = [model[i] for i in order]
    assert len(column) == len(model)
    assert all(same_value(column.get(i), expected_back(kind, v)) for i, v in enumerate(model))


def as_files(dumped: dict[str, object]) -> dict[str, object]:
    """A dump as it comes back from disk: arrays through .npy bytes (no pickle), lists through
    JSON text."""
    read: dict[str, object] = {}
    for name, content in dumped.items():
        if isinstance(content, np.ndarray):
            buffer = io.BytesIO()
            np.save(buffer, content, allow_pickle=False)
            read[name] = buffer.getvalue()
        else:
            assert isinstance(content, list)
            read[name] = json.loads(json.dumps(content))
    return read


@pytest.mark.parametrize("kind", KINDS)
def test_dump_and_restore_round_trip(kind: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    values = _draw(kind, rng, 10)
    column = column_of(kind, values)
    slots = np.array([7, 2, 9, 0, 4, 5])  # the live slots, in store order, after some deletes
    files = as_files(column.dump(slots))  # type: ignore[arg-type]
    restored = column_class(kind).restore(FileReader(tmp_path, files), len(slots))  # type: ignore[arg-type]
    assert type(restored) is type(column) and len(restored) == len(slots)
    for i, slot in enumerate(slots):
        assert same_value(restored.get(i), expected_back(kind, values[slot]))
    # The restored column blends as the original did over the same values (ties included).
    weights = random_weights(rng, 4, len(slots))
    before, after = column.blend(weights, slots), restored.blend(weights, np.arange(len(slots)))
    for i in range(4):
        assert_blend_equal(kind, restored.result(after, i), column.result(before, i))
    with pytest.raises(StoreFormatError):
        column_class(kind).restore(FileReader(tmp_path, files), len(slots) + 1)  # type: ignore[arg-type]


# Per kind: values it refuses, and the error each raises (a store of vectors of length 3).
BAD_VALUES: dict[str, list[tuple[object, type[SoftDictError]]]] = {
    "scalar": [
        ("a string", ValueKindError),
        (True, ValueKindError),
        ([1.0], ValueKindError),
        (float("nan"), InvalidValueError),
        (float("inf"), InvalidValueError),
        (2**60, InvalidValueError),
    ],
    "vector": [
        ([1.0, 2.0], ValueShapeError),
        (np.zeros((VECTOR_LENGTH, 1)), ValueShapeError),
        ([1.0, float("nan"), 0.0], InvalidValueError),
        ("abc", ValueKindError),
        (5.0, ValueKindError),
        ([1, 2, 10**400], InvalidValueError),
    ],
    "categorical": [
        (object(), ValueKindError),
        (float("nan"), ValueKindError),
        ({"tags": {1, 2}}, ValueKindError),
    ],
    "boolean": [(1, ValueKindError), ("true", ValueKindError), (None, ValueKindError)],
}
BAD_CASES = [(kind, value, error) for kind in KINDS for value, error in BAD_VALUES[kind]]


@pytest.mark.parametrize(
    ("kind", "bad", "error"),
    BAD_CASES,
    ids=[f"{kind}-{type(bad).__name__}-{error.__name__}" for kind, bad, error in BAD_CASES],
)
def test_a_bad_value_raises_a_softdict_error_and_changes_nothing(
    kind: str, bad: object, error: type[SoftDictError], fake_encoder
) -> None:
    values = _draw(kind, np.random.default_rng(1), 4)
    column = column_of(kind, values[:3])
    with pytest.raises(error, match="'bad key'"):
        column.stage([values[3], bad], ["good key", "bad key"])
    assert len(column) == 3
    # A store's batch insert that holds it inserts nothing.
    sd = SoftDict(dict(zip(KEYS[:3], values[:3])), encoder=fake_encoder, value_kind=kind)
    with pytest.raises(error, match="'bad key'"):
        sd.update({"good key": values[3], "bad key": bad})
    assert list(sd) == KEYS[:3] and "good key" not in sd
    assert all(same_value(sd[key], expected_back(kind, v)) for key, v in zip(KEYS[:3], values))


def test_vectors_read_back_as_lists_are_staged_at_once_with_the_same_checks() -> None:
    """A batch of plain lists (as a Milvus store reads values back) is staged in one array; any
    value that is not a finite number of the right length still gets its own error."""
    column = column_class("vector").for_first_value("first", [0.0] * VECTOR_LENGTH)
    good = [[1, 2.5, -3.0], [0.0, 0, 1e300]]
    np.testing.assert_array_equal(column.stage(good, ["a", "b"]), np.array(good, dtype=float))
    for bad, error in [
        ([True, 1.0, 2.0], ValueKindError),
        (["1", 2, 3], ValueKindError),
        ([1.0, None, 2.0], ValueKindError),
        ([1, 2, 10**400], InvalidValueError),
        ([1.0, float("inf"), 0.0], InvalidValueError),
        ([1.0, 2.0], ValueShapeError),
    ]:
        with pytest.raises(error, match="'bad'"):
            column.stage([[1.0, 2.0, 3.0], bad], ["good", "bad"])
