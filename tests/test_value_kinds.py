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


def naive_tie_order(label: object) -> tuple[int, object, str]:
    """Where ``label`` goes among labels of equal weight, as docs/values.md says: numbers by
    value, then strings in code-point order, then any other label by its JSON text."""
    text = json.dumps(label, sort_keys=True, ensure_ascii=False)
    if isinstance(label, (int, float)) and not isinstance(label, bool):
        return (0, label, text)
    if isinstance(label, str):
        return (1, label, text)
    return (2, text, text)


def naive_label_order(mass: dict[str, float]) -> list[object]:
    """Labels (given by JSON text) most weight first, equal weights in the tie order."""
    return sorted(
        (json.loads(text) for text in mass),
        key=lambda label: (-mass[json.dumps(label, sort_keys=True)], naive_tie_order(label)),
    )


def naive_blend(kind: str, weights: np.ndarray, values: list[object]) -> object:
    """What each kind's documentation says one query's blend is, pair by pair in plain Python:
    Σ w_i v_i for numbers and vectors, the label with the largest summed weight (the first in
    the tie order on a tie) for labels, and the weight on True for the boolean plug-in."""
    if kind == "scalar":
        return sum(float(w) * float(v) for w, v in zip(weights, values))  # type: ignore[arg-type]
    if kind == "vector":
        total = np.zeros(VECTOR_LENGTH)
        for w, v in zip(weights, values):
            total += float(w) * np.array(v, dtype=float)
        return total
    if kind == "categorical":
        return naive_label_order(_label_mass(weights, values))[0]
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
        # JSON would turn these dict keys into strings: the label would not come back as given.
        ({1: "a"}, ValueKindError),
        ({"outer": [{"x": {None: 2}}]}, ValueKindError),
        ((True, {2.5: "b"}), ValueKindError),
        # Past 64 bits: a Milvus store could not hold it (its JSON reader refused it with an
        # error of an unreachable server); past Python's 4,300 digits, json.dumps cannot write it.
        (2**64, ValueKindError),
        (-(2**63) - 1, ValueKindError),
        ({"n": [1, 2**64]}, ValueKindError),
        (10**5000, ValueKindError),
        # A vector: said "not a number, a vector or a JSON-serialisable label" (a probe).
        (np.array([1.0, 2.0]), ValueKindError),
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
    if kind == "categorical" and isinstance(bad, np.ndarray):  # another kind, called that
        with pytest.raises(error, match=f"but this store holds {kind} values"):
            sd["bad key"] = bad


@pytest.mark.parametrize("fails_in", ["append", "assign"])
def test_a_plug_in_column_that_raises_in_a_commit_leaves_the_store_as_it_was(
    fails_in: str, fake_encoder, tmp_path: Path
) -> None:
    """A plug-in's append that raised (here after appending half) left the index holding the
    new keys and the store listing none of them: attention over 5 keys of a 3-key store, and a
    save that load refused, over a good one (a hostile-input probe)."""
    from _plugins import BooleanColumn

    from softdict.values import register_value_kind

    class Flaky(BooleanColumn):
        kind = f"test-flaky-{fails_in}"
        failing = False

        def append(self, staged: np.ndarray) -> None:
            if Flaky.failing and fails_in == "append":
                super().append(staged[:1])
                raise RuntimeError("append failed")
            super().append(staged)

        def assign(self, slots: np.ndarray, staged: np.ndarray) -> None:
            if Flaky.failing and fails_in == "assign":
                raise RuntimeError("assign failed")
            super().assign(slots, staged)

    register_value_kind(Flaky)
    if fails_in == "append":  # a first insert, into a backend made for it
        Flaky.failing = True
        empty = SoftDict(encoder=fake_encoder, value_kind=Flaky.kind)
        with pytest.raises(RuntimeError, match="failed"):
            empty.update({"apple": True, "pear": False})
        Flaky.failing = False
        empty.update({"plum": True})
        assert list(empty) == ["plum"] and empty.attend("plum").k == 1
    items = {"apple": True, "pear": False, "chair": True}
    sd = SoftDict(items, encoder=fake_encoder, value_kind=Flaky.kind, lexical=0)
    before = sd.lookup("apple pear")
    sd.save(tmp_path / "good")
    Flaky.failing = True
    with pytest.raises(RuntimeError, match="failed"):
        sd.update({"plum": True, "fig": False, "pear": True})  # two fresh keys, one kept
    Flaky.failing = False
    assert dict(sd.items()) == items and sd.attend("apple").k == 3
    assert_close(sd.lookup("apple pear"), before)
    sd.save(tmp_path / "good", replace=True)
    assert dict(SoftDict.load(tmp_path / "good", encoder=fake_encoder).items()) == items
    sd.update({"plum": True})
    assert list(sd) == [*items, "plum"] and sd.attend("apple").k == 4


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


# -- labels: the table holds only labels some key holds, and ties depend on nothing else ---------


def test_a_dict_label_with_keys_json_would_change_is_refused_with_what_to_do(
    fake_encoder,
) -> None:
    """JSON keeps only string keys: {1: "a"} would come back as {"1": "a"}, so it is refused,
    as a store's first value too, and nothing is stored."""
    sd = SoftDict(encoder=fake_encoder)
    with pytest.raises(ValueKindError, match=r"'k'.*\b1\b.*string keys"):
        sd["k"] = {1: "a"}
    assert len(sd) == 0 and sd.value_kind is None
    sd["k"] = {"1": "a"}  # the label it would have become, given as such, is kept as it is
    assert sd["k"] == {"1": "a"}
    with pytest.raises(ValueKindError, match="string keys"):
        sd.update({"j": "fine", "k": [{"x": {2: 0}}]})
    assert list(sd) == ["k"] and sd["k"] == {"1": "a"}


def test_a_label_of_64_bit_integers_is_kept_and_a_larger_one_refused(fake_encoder) -> None:
    """The largest and smallest 64-bit integers are labels as any number is; one past them is
    refused saying to store it as a string, and the store is unchanged."""
    sd = SoftDict(encoder=fake_encoder, value_kind="categorical")
    sd.update({"max": 2**63 - 1, "min": -(2**63), "nested": {"id": [2**63 - 1]}})
    assert sd["max"] == 2**63 - 1 and sd["min"] == -(2**63) and sd["nested"] == {"id": [2**63 - 1]}
    with pytest.raises(ValueKindError, match=r"'big'.*65 bits.*as a string"):
        sd.update({"ok": 1, "big": 2**64})
    assert list(sd) == ["max", "min", "nested"]


def test_numpy_numbers_are_the_labels_they_hold(fake_encoder) -> None:
    """A label read from a pandas column or an array (np.int64, np.bool_, np.float32, inside a
    list or dict too) is the Python number it holds: it shares a code and a probability with
    that number. A numpy number JSON cannot hold as it is (past 64 bits, NaN, complex, a date)
    is refused as the Python one is, and nothing is stored."""
    sd = SoftDict(encoder=fake_encoder, value_kind="categorical")
    sd.update(
        {
            "a": np.int64(3),
            "b": 3,
            "c": np.bool_(True),
            "d": [np.float32(0.5), np.uint8(7)],
            "e": {"id": np.int32(-2)},
        }
    )
    got = [sd[key] for key in "abcde"]
    assert got == [3, 3, True, [0.5, 7], {"id": -2}]
    assert [type(value) for value in got[:3]] == [int, int, bool]
    distribution = sd.attend("a").distribution
    assert distribution[np.int64(3)] == distribution[3] > 0
    assert np.longdouble(3) not in distribution  # a label no store holds: not found, no error
    for bad in [
        np.uint64(2**64 - 1),
        [np.uint64(2**63)],
        np.float64("nan"),
        np.complex64(1j),
        np.datetime64("2020-01-01"),
        np.longdouble(1.5),  # its item() is itself: json.dumps recursed until Python's limit
        [np.longdouble(1.5)],
    ]:
        with pytest.raises(ValueKindError, match="'bad'"):
            sd.update({"ok": 1, "bad": bad})
    assert list(sd) == list("abcde")


def test_a_label_saved_in_an_earlier_form_shares_its_code_with_the_same_label_written_now(
    tmp_path: Path, fake_encoder
) -> None:
    """An earlier version wrote a dict with int keys in numeric order ('{"9": "b", "10": "a"}');
    today's writes sort the keys as strings. Loaded, the label read back and written again
    under other keys is one label: it wins the blend with every key's weight, and the
    distribution lists it once. A saved label that is not JSON softdict writes (NaN) is refused."""
    from test_persistence import resign

    label = {"10": "a", "9": "b"}
    sd = SoftDict(encoder=fake_encoder, temperature=1e6)
    sd.update({"old 1": label, "old 2": label, "x": "z"})
    sd.save(tmp_path / "s")
    resign(tmp_path / "s", "labels.json", json.dumps(['{"9": "b", "10": "a"}', '"z"']).encode())
    loaded = SoftDict.load(tmp_path / "s", encoder=fake_encoder)
    assert loaded["old 1"] == label
    loaded.update({"new 1": loaded["old 1"], "new 2": label, "y 1": "z", "y 2": "z"})
    assert loaded._store._column.table_size == 2  # one entry each: the dict and "z"
    assert loaded.lookup("old 1") == label  # 4 keys of 7 at equal weights, not 2 and 2
    distribution = loaded.attend("old 1").distribution
    assert distribution is not None and len(distribution) == 2
    # At T = 1e6 cosines (within 2 of each other) move a weight by at most 2e-6 of itself.
    assert distribution[label] == close(4 / 7, rel=1e-5)
    resign(tmp_path / "s", "labels.json", b'["NaN", "\\"z\\""]')
    with pytest.raises(StoreFormatError, match=r"labels\.json"):
        SoftDict.load(tmp_path / "s", encoder=fake_encoder)


def test_a_label_no_slot_holds_leaves_the_table() -> None:
    """Overwriting slots with ever-new labels (a status with a time in it), or keeping fewer
    slots, does not grow the label table, which every blend sums over: it never holds more
    labels than slots."""
    column = column_of("categorical", ["a", "b", "c", "d"])
    model: list[object] = ["a", "b", "c", "d"]
    for i in range(300):
        slot = i % 4
        label = f"status at {i}"
        column.assign(np.array([slot]), column.stage([label], ["k"]))
        model[slot] = label
        assert column.table_size <= len(column)
    assert [column.get(i) for i in range(4)] == model
    column.append(column.stage(["z", "a"], ["p", "q"]))
    column.keep(np.array([4, 1]))
    assert [column.get(i) for i in range(2)] == ["z", model[1]]
    assert column.table_size == 2
    weights = np.array([[0.25, 0.75], [0.5, 0.5]])
    blended = column.blend(weights, np.arange(2))
    for i, row in enumerate(weights):
        assert blended[i] == naive_blend("categorical", row, ["z", model[1]])


def test_dump_depends_only_on_the_values_dumped() -> None:
    """Two columns holding the same values in their slots, one reached through overwrites and
    compaction, dump the same files."""
    rng = np.random.default_rng(4)
    values = _draw("categorical", rng, 12)
    fresh = column_of("categorical", values)
    worn = column_of("categorical", [*_draw("categorical", rng, 5), "gone", {"old": 1}])
    worn.assign(np.arange(5), worn.stage(values[:5], [f"k{i}" for i in range(5)]))
    worn.append(worn.stage(["dropped", *values[5:]], [f"n{i}" for i in range(8)]))
    worn.keep(np.array([0, 1, 2, 3, 4, *range(8, 15)]))
    slots = rng.permutation(12)
    mine, theirs = worn.dump(slots), fresh.dump(slots)
    assert mine.keys() == theirs.keys()
    for name, content in mine.items():
        if isinstance(content, np.ndarray):
            np.testing.assert_array_equal(content, theirs[name])
        else:
            assert content == theirs[name]


def _live_labels_answer(sd: SoftDict, query: np.ndarray) -> tuple[object, list[object]]:
    attention = sd.attend_embeddings(query)
    assert not isinstance(attention, list) and attention.distribution is not None
    return sd.lookup_embeddings(query), list(attention.distribution)


@pytest.mark.parametrize("seed", range(6))
def test_label_ties_depend_only_on_the_live_items(seed: int, fake_encoder, tmp_path: Path) -> None:
    """A store reached through inserts, overwrites, re-embeddings and deletes (compaction
    included) answers exactly as one built fresh from its items, in their order or reversed,
    and as it does after save and load: ties between labels go by the labels alone. Every key
    has the same vector, and the temperature is so high that float32 noise in their scores (a
    kernel's remainder lanes) leaves every exponential 1: every weight is exactly 1/n, and a
    label's mass is its count of keys over n (equal counts tie exactly)."""
    rng = np.random.default_rng(seed)
    vector = rng.standard_normal(8).astype(np.float32)
    pool = ["furniture", "fruit", "Fruit", 7, 7.5, None, True, [1, 2], {"id": 3}]
    options = {"value_kind": "categorical", "temperature": 1e6}
    worn = SoftDict(encoder=fake_encoder, **options)
    keys = [f"key {i}" for i in range(24)]
    for step in range(600):
        key, label = keys[int(rng.integers(len(keys)))], pool[int(rng.integers(len(pool)))]
        action = rng.random()
        if key in worn and action < 0.35:
            del worn[key]
        elif key in worn and action < 0.7:
            worn[key] = label  # a new value, the key keeps its vector and place
        else:
            worn.add_embeddings([key], vector[None, :], [label])  # new, or re-embedded
        if step % 60 != 59 or len(worn) < 2:
            continue
        items = list(worn.items())
        counts = _label_mass(np.ones(len(items)), [value for _, value in items])
        expected = naive_label_order(counts)
        assert _live_labels_answer(worn, vector) == (expected[0], expected)
        for order in (items, items[::-1]):
            fresh = SoftDict(encoder=fake_encoder, **options)
            fresh.add_embeddings(
                [key for key, _ in order],
                np.repeat(vector[None, :], len(order), axis=0),
                [value for _, value in order],
            )
            assert _live_labels_answer(fresh, vector) == (expected[0], expected)
        worn.save(tmp_path / f"at {step}")
        loaded = SoftDict.load(tmp_path / f"at {step}", encoder=fake_encoder)
        assert _live_labels_answer(loaded, vector) == (expected[0], expected)
