"""Every bad input gets a softdict error that says what to do, and leaves the store unchanged."""

from __future__ import annotations

import datetime
import math
import re
import sys
from fractions import Fraction

import numpy as np
import pytest
from _support import FAKE_DIM, FakeEncoder, same_value

from softdict import (
    ConfigError,
    EmptyStoreError,
    EncoderError,
    InvalidValueError,
    KeyTypeError,
    NoMatchError,
    SoftDict,
    SoftDictError,
    StoreBusyError,
    StoreFormatError,
    ValueKind,
    ValueKindError,
    ValueShapeError,
)


def snapshot(sd: SoftDict) -> tuple:
    """Everything observable about a store: items in order, and what a few lookups return."""
    items = [(k, sd[k]) for k in sd]
    soft = [sd.attend(q) for q in ("apple", "chair")] if len(sd) else []
    return items, [(a.keys, a.weights.tolist(), np.asarray(a.value).tolist()) for a in soft]


def assert_unchanged(sd: SoftDict, before: tuple) -> None:
    items, soft = snapshot(sd)
    assert [k for k, _ in items] == [k for k, _ in before[0]]
    assert all(same_value(a, b) for (_, a), (_, b) in zip(items, before[0]))
    assert soft == before[1]


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (NoMatchError, KeyError),
        (EmptyStoreError, LookupError),
        (KeyTypeError, TypeError),
        (ValueKindError, TypeError),
        (ValueShapeError, ValueError),
        (InvalidValueError, ValueError),
        (ConfigError, ValueError),
        (EncoderError, ValueError),
        (StoreFormatError, ValueError),
        (StoreBusyError, TimeoutError),
    ],
)
def test_every_error_is_a_softdict_error_and_its_builtin(error: type, builtin: type) -> None:
    assert issubclass(error, SoftDictError) and issubclass(error, builtin)


def test_no_match_error_message_is_not_quoted_like_a_key_error() -> None:
    assert str(NoMatchError("no key scored")) == "no key scored"


@pytest.fixture
def scalar_store() -> SoftDict:
    return SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=FakeEncoder())


@pytest.mark.parametrize("key", [3, None, b"apple", ("a",), 1.5])
def test_non_string_key_is_refused(scalar_store: SoftDict, key: object) -> None:
    before = snapshot(scalar_store)
    with pytest.raises(KeyTypeError, match="keys must be str"):
        scalar_store[key] = 1  # type: ignore[index]
    with pytest.raises(KeyTypeError, match="item #1"):
        scalar_store.update([("pear", 1), (key, 2)])
    assert_unchanged(scalar_store, before)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan"), 2**60])
def test_nan_infinite_or_inexact_scalar_is_refused(scalar_store: SoftDict, bad: object) -> None:
    before = snapshot(scalar_store)
    with pytest.raises(InvalidValueError, match="apple"):
        scalar_store["apple"] = bad
    with pytest.raises(InvalidValueError):
        scalar_store.update({"pear": 1.0, "plum": bad})
    assert_unchanged(scalar_store, before)


@pytest.mark.parametrize("bad", ["fruit", [1.0, 2.0], {"a": 1}, None, True])
def test_value_of_another_kind_is_refused(scalar_store: SoftDict, bad: object) -> None:
    before = snapshot(scalar_store)
    with pytest.raises(ValueKindError, match="holds scalar values"):
        scalar_store["pear"] = bad
    assert_unchanged(scalar_store, before)


def test_vector_of_another_length_or_with_nan_is_refused() -> None:
    sd = SoftDict({"apple": [1.0, 2.0], "chair": [0.0, 1.0]}, encoder=FakeEncoder())
    before = snapshot(sd)
    with pytest.raises(ValueShapeError, match="length 2"):
        sd["pear"] = [1.0, 2.0, 3.0]
    with pytest.raises(ValueShapeError):
        sd["pear"] = np.ones((2, 1))
    with pytest.raises(InvalidValueError, match="NaN"):
        sd.update({"pear": [1.0, 1.0], "plum": [np.nan, 1.0]})
    with pytest.raises(ValueKindError, match="vector"):
        sd["pear"] = 3.0
    with pytest.raises(ValueKindError):
        sd["pear"] = ["a", "b"]
    with pytest.raises(ValueKindError):
        sd["pear"] = np.array(["a", "b"])
    assert_unchanged(sd, before)


def test_a_label_nested_too_deep_for_json_is_refused_on_a_new_store_too() -> None:
    """json.dumps raises RecursionError on a label nested some thousand lists deep: a store
    holding labels refused it, but the first insert, which infers the kind, let it escape."""
    deep: list[object] = []
    innermost = deep
    for _ in range(sys.getrecursionlimit()):
        innermost.append([])
        innermost = innermost[0]  # type: ignore[assignment]
    with pytest.raises(ValueKindError, match=r"key 'a' is a list .*JSON-serialisable label"):
        SoftDict({"a": deep, "b": "y"}, encoder=FakeEncoder())
    sd = SoftDict(encoder=FakeEncoder())
    with pytest.raises(ValueKindError, match="JSON-serialisable label"):
        sd["a"] = deep
    assert len(sd) == 0
    sd["b"] = "y"
    with pytest.raises(ValueKindError, match="JSON-serialisable label"):
        sd["a"] = deep
    assert list(sd.items()) == [("b", "y")]


def test_numbers_in_an_inferred_label_store_are_refused() -> None:
    sd = SoftDict({"apple": "fruit"}, encoder=FakeEncoder())
    for bad in [3, 2.5, [1.0, 2.0]]:
        with pytest.raises(ValueKindError, match="categorical"):
            sd["pear"] = bad
    labels = SoftDict({"apple": "fruit"}, encoder=FakeEncoder(), value_kind="categorical")
    labels["pear"] = 3  # with value_kind="categorical", numbers are labels
    assert labels["pear"] == 3


def test_unserialisable_label_is_refused() -> None:
    sd = SoftDict({"apple": "fruit", "chair": "furniture"}, encoder=FakeEncoder())
    before = snapshot(sd)
    for bad in [object(), {1, 2}, {"x": math.nan}, b"bytes", complex(1, 2)]:
        with pytest.raises(ValueKindError, match="JSON"):
            sd["pear"] = bad
    assert_unchanged(sd, before)


def test_failing_batch_update_inserts_nothing(scalar_store: SoftDict) -> None:
    before = snapshot(scalar_store)
    with pytest.raises(InvalidValueError):
        scalar_store.update({"pear": 1.0, "apple": 99.0, "plum": math.nan})
    with pytest.raises(ValueKindError):
        scalar_store.update([("pear", 1.0), ("banana", 3.0), ("plum", "x")])
    # As dict.update: an item of another length is a ValueError, one that is no sequence a
    # TypeError (a str of two characters is a pair, as it is for a dict).
    with pytest.raises(ValueShapeError, match="item #1 has length 4"):
        scalar_store.update([("pear", 1.0), "plum"])
    with pytest.raises(KeyTypeError, match="item #1 is 5, which is not a sequence"):
        scalar_store.update([("pear", 1.0), 5])
    assert_unchanged(scalar_store, before)


def test_failing_first_insert_leaves_the_store_empty_and_its_kind_free() -> None:
    sd = SoftDict(encoder=FakeEncoder())
    with pytest.raises(ValueKindError):
        sd.update({"apple": 1.0, "chair": "furniture"})
    assert len(sd) == 0 and sd.value_kind is None
    sd["chair"] = "furniture"
    assert sd.value_kind is ValueKind.CATEGORICAL


@pytest.mark.parametrize("temperature", [0, -1.0, math.nan, math.inf, "hot"])
def test_bad_temperature_is_refused(temperature: object) -> None:
    with pytest.raises(ConfigError, match="temperature"):
        SoftDict(encoder=FakeEncoder(), temperature=temperature)  # type: ignore[arg-type]
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder(), temperature=0.5)
    with pytest.raises(ConfigError, match="temperature"):
        sd.temperature = temperature  # type: ignore[assignment]
    assert sd.temperature == 0.5


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("similarity", "euclid"),
        ("top_k", 0),
        ("index", "magic"),
        ("value_kind", "blob"),
        ("query_cache_size", -1),
        ("batch_size", 0),
        ("store", "mongo:./x"),
        ("store", 3),
    ],
)
def test_bad_option_is_refused_naming_it(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=option):
        SoftDict(encoder=FakeEncoder(), **{option: value})


class Unconvertible:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no array from me")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")

    @classmethod
    def throw(cls) -> None:
        raise cls


class WrongEncoder:
    """Returns whatever output it was told to, to test every way an encoder can go wrong."""

    def __init__(self, output) -> None:
        self.output = output

    def encode(self, texts: list[str]):
        return self.output(texts)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (lambda texts: np.zeros((len(texts) + 1, 4)), "one row per text"),
        (lambda texts: np.zeros(len(texts)), "one row per text"),
        (lambda texts: np.zeros((len(texts), 0)), "one row per text"),
        (lambda texts: np.full((len(texts), 4), np.nan), "NaN"),
        (lambda texts: [["a"] * 4 for _ in texts], "dtype <U1 \\(text\\)"),
        (lambda texts: [[1.0] * (i + 1) for i in range(len(texts))], "cannot be read as numbers"),
        # float32 would drop the imaginary part, or a time's unit, without a word.
        (lambda texts: np.full((len(texts), 4), 1 + 2j), "complex"),
        (lambda texts: np.ones((len(texts), 4), "timedelta64[s]"), "durations"),
        (lambda texts: np.ones((len(texts), 4), "datetime64[s]"), "times: convert"),
        (lambda texts: np.ones((len(texts), 4), bool), "booleans"),
        (lambda texts: 1 / 0, "ZeroDivisionError"),
        (lambda texts: [[10**400] * 4 for _ in texts], "beyond float32 range"),
        # An object that refuses to be an array (a torch tensor that requires grad does).
        (lambda texts: Unconvertible(), "cannot be read as an array \\(RuntimeError: no array"),
        # An exception whose message cannot be read: reported by its type alone.
        (lambda texts: Unprintable.throw(), "failed on 2 text\\(s\\) \\(Unprintable\\)"),
    ],
)
def test_encoder_returning_bad_output_is_refused(output, message: str) -> None:
    sd = SoftDict(encoder=WrongEncoder(output))
    with pytest.raises(EncoderError, match=message):
        sd.update({"apple": 1.0, "chair": 2.0})
    assert len(sd) == 0


def test_encoder_changing_dimension_is_refused_and_store_unchanged() -> None:
    dims = iter([4, 5])
    sd = SoftDict(encoder=WrongEncoder(lambda texts: np.ones((len(texts), next(dims)))))
    sd["apple"] = 1.0
    with pytest.raises(EncoderError, match="5-dim"):
        sd["chair"] = 2.0
    assert list(sd) == ["apple"]


def test_encoder_object_without_encode_is_refused() -> None:
    with pytest.raises(EncoderError, match="encode"):
        SoftDict(encoder=42)


def test_query_errors(scalar_store: SoftDict) -> None:
    before = snapshot(scalar_store)
    with pytest.raises(KeyTypeError):
        scalar_store.lookup(3)  # type: ignore[arg-type]
    with pytest.raises(KeyTypeError, match="query #1"):
        scalar_store.lookup(["fruit", None])  # type: ignore[list-item]
    with pytest.raises(KeyTypeError, match="one value, not a sequence: pass it as a str"):
        scalar_store.lookup(np.array("fruit"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="min_score"):
        scalar_store.lookup("fruit", min_score=math.nan)
    with pytest.raises(ValueShapeError, match="default must be a number"):
        scalar_store.lookup(["fruit", "tree"], min_score=0.5, default=None)
    with pytest.raises(ConfigError, match="k must be"):
        scalar_store.nearest("fruit", k=0)
    with pytest.raises(ValueShapeError, match=f"\\(n, {FAKE_DIM}\\)"):
        scalar_store.lookup_embeddings(np.zeros((2, FAKE_DIM + 1)))
    with pytest.raises(InvalidValueError):
        scalar_store.lookup_embeddings(np.full((1, FAKE_DIM), np.inf))
    assert_unchanged(scalar_store, before)


def test_add_embeddings_errors(scalar_store: SoftDict) -> None:
    before = snapshot(scalar_store)
    with pytest.raises(ValueShapeError, match="one embedding and one value per key"):
        scalar_store.add_embeddings(["pear", "plum"], np.zeros((2, FAKE_DIM)), [1.0])
    with pytest.raises(ValueShapeError, match="expected"):
        scalar_store.add_embeddings(["pear"], np.zeros((1, 3)), [1.0])
    with pytest.raises(InvalidValueError):
        scalar_store.add_embeddings(["pear"], np.full((1, FAKE_DIM), np.nan), [1.0])
    with pytest.raises(InvalidValueError):
        scalar_store.add_embeddings(["pear"], np.zeros((1, FAKE_DIM)), [math.inf])
    assert_unchanged(scalar_store, before)


@pytest.mark.parametrize(
    ("embeddings", "message"),
    [
        ("fruit", r"dtype <U5 \(text\)"),
        ([["a"] * FAKE_DIM], r"dtype <U1 \(text\)"),
        ([[0.0] * FAKE_DIM, [0.0] * (FAKE_DIM - 1)], "cannot be read as numbers"),
        ([{"a": 1.0}], "hold dict objects, which are no numbers"),
        (np.full((1, FAKE_DIM), 1 + 1j), "complex128 .*imaginary part"),
        (np.ones((1, FAKE_DIM), dtype="m8[s]"), "timedelta64.*durations"),
        (np.ones((1, FAKE_DIM), dtype="M8[s]"), "datetime64.*times"),
        (np.ones((1, FAKE_DIM), dtype=bool), r"dtype bool \(booleans: pass .astype\(float\)"),
        (np.full((1, FAKE_DIM), True, dtype=object), r"hold booleans: pass .astype\(float\)"),
        (np.full((1, FAKE_DIM), "1.5", dtype=object), "hold str objects, which are no numbers"),
        (np.full((1, FAKE_DIM), None, dtype=object), "hold NoneType objects"),
        (np.full((1, FAKE_DIM), np.complex128(1 + 5j), dtype=object), "hold complex numbers"),
    ],
    ids=[
        "str",
        "text",
        "ragged",
        "dicts",
        "complex",
        "timedelta64",
        "datetime64",
        "bool",
        "object bools",
        "object strs",
        "object Nones",
        "object numpy complex",
    ],
)
def test_embeddings_that_are_not_real_numbers_are_refused(
    scalar_store: SoftDict, embeddings: object, message: str
) -> None:
    """Text, a ragged list or objects are no embeddings: a ValueShapeError saying what an
    embedding is, where numpy's ValueError or TypeError escaped; complex numbers, times and
    booleans, which numpy casts (dropping the imaginary part or the unit, or making a mask 0
    and 1), are refused the same way."""
    before = snapshot(scalar_store)
    expected = f"{message}.*real numbers in one array: \\(n, d\\)"
    with pytest.raises(ValueShapeError, match=f"^embeddings .*{expected}") as info:
        scalar_store.add_embeddings(["pear"], embeddings, [1.0])  # type: ignore[arg-type]
    assert str(info.value).count("real numbers in one array") == 1  # said once, not wrapped
    with pytest.raises(ValueShapeError, match=f"^query embeddings .*{expected}"):
        scalar_store.lookup_embeddings(embeddings)  # type: ignore[arg-type]
    with pytest.raises(ValueShapeError, match=f"^query embeddings .*{expected}"):
        scalar_store.attend_embeddings(embeddings)  # type: ignore[arg-type]
    assert_unchanged(scalar_store, before)


def test_embeddings_with_an_int_beyond_float32_are_refused(scalar_store: SoftDict) -> None:
    """A Python int that no float holds (10**400) raised OverflowError from numpy's cast; it is
    refused as a value out of range, as 1e39 is, and nothing changes."""
    before = snapshot(scalar_store)
    huge = [[10**400] * FAKE_DIM]
    for call in (
        lambda: scalar_store.add_embeddings(["pear"], huge, [1.0]),
        lambda: scalar_store.lookup_embeddings(huge),
        lambda: scalar_store.attend_embeddings(huge),
    ):
        with pytest.raises(InvalidValueError, match=r"beyond float32 range.*must be finite"):
            call()
    assert_unchanged(scalar_store, before)


@pytest.mark.parametrize(
    ("keys", "values", "error", "message"),
    [
        ("ab", [1.0, 2.0], KeyTypeError, r"a sequence of keys, got str \('ab'\); pass a list"),
        (7, [1.0], KeyTypeError, r"a sequence of keys, got int \(7\)"),
        (["pear"], 1.0, ValueShapeError, r"one value per key, got float \(1\.0\)"),
        (["p", "q"], "xy", ValueShapeError, r"one value per key, got str \('xy'\)"),
        (["pear"], np.array(2.0), ValueShapeError, r"one value per key, got ndarray"),
    ],
    ids=["keys str", "keys int", "values float", "values str", "values 0-d array"],
)
def test_add_embeddings_refuses_one_key_or_one_value_for_a_list(
    scalar_store: SoftDict, keys: object, values: object, error: type, message: str
) -> None:
    """A str where the keys go was read as its characters (two keys "a" and "b"), a str where
    the values go as its characters, and a number raised a raw TypeError; each is refused and
    nothing changes."""
    before = snapshot(scalar_store)
    with pytest.raises(error, match=f"^add_embeddings takes {message}"):
        scalar_store.add_embeddings(keys, np.ones((2, FAKE_DIM)), values)  # type: ignore[arg-type]
    assert_unchanged(scalar_store, before)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ("apple", r"iterable of keys or a predicate key -> bool, got str; .*pass \[key\]"),
        (5, "iterable of keys or a predicate key -> bool, got int"),
        (np.array([True, False]), r"mask items must be keys \(str\), got bool_? \(.*predicate"),
        (["apple", 3], r"mask items must be keys \(str\), got int \(3\)"),
    ],
    ids=["str", "int", "bool array", "an int among keys"],
)
def test_a_mask_that_is_no_keys_or_predicate_is_refused(
    scalar_store: SoftDict, mask: object, message: str
) -> None:
    """A boolean array (a row filter from numpy or pandas) passed as a mask was read as an
    iterable of keys whose items, being no str, were dropped: "allows none of the keys"."""
    for call in (scalar_store.lookup, scalar_store.attend):
        with pytest.raises(KeyTypeError, match=message):
            call("apple", mask=mask)  # type: ignore[arg-type]
    keys = np.array(["apple", "chair"])  # numpy str items are keys
    assert scalar_store.attend("apple", mask=keys).keys == ("apple", "chair")


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        (lambda key: 1 / 0, r"predicate raised ZeroDivisionError on the key 'apple'"),
        (lambda: True, r"predicate raised TypeError on the key 'apple'"),
        (lambda key: np.array([1, 2]), r"predicate answered a ndarray for the key 'apple'"),
    ],
    ids=["raises", "takes no key", "answers an array"],
)
def test_a_mask_predicate_that_fails_is_a_config_error(
    scalar_store: SoftDict, predicate: object, message: str
) -> None:
    """The predicate's own error came out as it was (ZeroDivisionError, numpy's "truth value
    of an array is ambiguous"); now it is a softdict error naming the key, chained to it."""
    before = list(scalar_store.items())
    for call in (scalar_store.lookup, scalar_store.attend, scalar_store.nearest):
        with pytest.raises(ConfigError, match=message) as raised:
            call("apple", mask=predicate)  # type: ignore[operator]
        assert raised.value.__cause__ is not None
    assert list(scalar_store.items()) == before
    assert scalar_store.attend("apple", mask=lambda key: key != "chair").keys[0] == "apple"


def test_a_mask_predicate_that_writes_to_the_store_attends_to_the_keys_still_held() -> None:
    """A predicate that added or deleted a key (the store's lock lets its own thread in) raised
    Python's raw "dictionary changed size during iteration" mid-lookup."""
    sd = SoftDict({"red apple": 1.0, "green apple": 3.0, "chair": 2.0}, encoder=FakeEncoder())

    def adds(key: str) -> bool:
        sd["zz"] = 5.0
        return True

    assert set(sd.attend("apple", mask=adds).keys) == {"red apple", "green apple", "chair"}
    assert sd["zz"] == 5.0  # the predicate's own write stands

    def deletes(key: str) -> bool:
        sd.pop("green apple", None)
        return key != "chair"

    attention = sd.attend("apple", mask=deletes)
    assert set(attention.keys) == {"red apple", "zz"} and "green apple" not in sd


@pytest.mark.parametrize("answer", ["False", b"", float("nan"), np.float64(0.0)])
def test_a_mask_predicate_that_answers_text_or_a_float_is_a_config_error(
    scalar_store: SoftDict, answer: object
) -> None:
    """Any answer was read by its truth: the text "False" (a table's cell) let every key
    through, and so did NaN, without a word."""
    for call in (scalar_store.lookup, scalar_store.attend, scalar_store.nearest):
        with pytest.raises(ConfigError, match="it must answer True or False"):
            call("apple", mask=lambda key: answer)
    # What Python reads as true or false plainly still is: None, a regex's match, numpy's bools.
    assert scalar_store.attend("apple", mask=lambda key: re.match("ch", key)).keys == ("chair",)
    assert scalar_store.attend("apple", mask=lambda key: np.bool_(key == "chair")).keys == (
        "chair",
    )
    assert (
        "chair" not in scalar_store.attend("apple", mask=lambda k: None if k == "chair" else 1).keys
    )


# What each refusal of a complex number or a time says to do instead.
IMAGINARY, SECONDS, NOT_NUMBERS = "imaginary part", "float of seconds", "times are not numbers"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (1 + 2j, IMAGINARY),
        (np.complex128(1 + 2j), IMAGINARY),
        (np.timedelta64(5, "s"), SECONDS),
        (datetime.timedelta(seconds=5), SECONDS),
        (np.datetime64("2020-01-01"), NOT_NUMBERS),
    ],
    ids=["complex", "complex128", "timedelta64", "timedelta", "datetime64"],
)
def test_complex_numbers_and_times_are_no_scalar_values(
    scalar_store: SoftDict, bad: object, message: str
) -> None:
    """numpy counts a timedelta64 as an integer (a raw TypeError escaped from the scalar
    column); complex numbers and times are refused with what to do instead, as a value, as a
    store's first value and as a batch default."""
    before = snapshot(scalar_store)
    with pytest.raises(ValueKindError, match=message):
        scalar_store["pear"] = bad
    with pytest.raises(ValueShapeError, match="default must be a number"):
        scalar_store.lookup(["apple", "chair"], min_score=2.0, default=bad)
    assert_unchanged(scalar_store, before)
    empty = SoftDict(encoder=FakeEncoder())
    with pytest.raises(ValueKindError, match=message):
        empty["pear"] = bad
    assert len(empty) == 0 and empty.value_kind is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.array([1 + 2j, 3]), IMAGINARY),
        ([1 + 2j, 3.0], IMAGINARY),
        (np.array([1, 2], dtype="m8[s]"), SECONDS),
        ([np.timedelta64(1, "s"), np.timedelta64(2, "s")], SECONDS),
        (np.array(["2020-01-01", "2021-01-01"], dtype="M8[D]"), NOT_NUMBERS),
    ],
    ids=["complex array", "complex list", "timedelta64 array", "timedelta64 list", "datetime64"],
)
def test_complex_and_time_vectors_are_refused_not_cast(bad: object, message: str) -> None:
    """A complex array was cast to its real part and a timedelta64 array to its count of units,
    without a word: both are refused with what to do instead, as a value, as a store's first
    value (with and without value_kind="vector") and as a batch default."""
    sd = SoftDict({"apple": [1.0, 2.0], "chair": [0.0, 1.0]}, encoder=FakeEncoder())
    before = snapshot(sd)
    with pytest.raises(ValueKindError, match=message):
        sd["pear"] = bad
    with pytest.raises(ValueKindError, match=message):
        sd.add_embeddings(["pear"], np.ones((1, FAKE_DIM)), [bad])
    with pytest.raises(ValueShapeError, match="default must be a vector of length 2"):
        sd.lookup(["apple", "chair"], min_score=2.0, default=bad)
    assert_unchanged(sd, before)
    for kind in (None, "vector"):
        empty = SoftDict(encoder=FakeEncoder(), value_kind=kind)
        with pytest.raises(ValueKindError, match=message):
            empty["pear"] = bad
        assert len(empty) == 0


def test_text_keys_after_embeddings_of_another_dimension_are_refused() -> None:
    sd = SoftDict(encoder=FakeEncoder())
    sd.add_embeddings(["a"], np.ones((1, 3)), [1.0])
    with pytest.raises(ValueShapeError, match="3-dim"):
        sd["apple"] = 2.0
    with pytest.raises(ValueShapeError, match="3-dim"):
        sd.lookup("apple")
    assert list(sd) == ["a"]


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda sd: sd.__setitem__("pear", Fraction(10**400, 3)), InvalidValueError),
        (lambda sd: sd.lookup("apple", min_score=10**400), ConfigError),
        (lambda sd: sd.lookup(["apple"], min_score=1.0, default=10**400), ValueShapeError),
        (lambda sd: sd.update(5), KeyTypeError),
        (lambda sd: sd.update(None), KeyTypeError),
    ],
    ids=["huge fraction", "huge min_score", "huge default", "update(5)", "update(None)"],
)
def test_numbers_beyond_float64_and_non_iterables_get_softdict_errors(call, error) -> None:
    """A number no float64 holds (10**400) and an update argument that is no mapping nor
    iterable get softdict errors that say so, where OverflowError and TypeError escaped; the
    store is unchanged."""
    sd = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=FakeEncoder())
    before = snapshot(sd)
    with pytest.raises(error):
        call(sd)
    assert_unchanged(sd, before)


LONG = np.longdouble(1) + np.longdouble(2) ** -60  # no float64 holds it (where numpy's is longer)


@pytest.mark.parametrize(
    ("value", "vector"),
    [
        (2**53 + 1, [2**53 + 1, 1]),
        (np.int64(2**62), np.array([2**62, 1], np.int64)),
        (np.uint64(2**64 - 1), np.array([2**64 - 1, 1], np.uint64)),
        (Fraction(1, 3), [Fraction(1, 3), 1]),
        pytest.param(
            LONG,
            np.array([1, 2], np.longdouble) + LONG - 1,
            marks=pytest.mark.skipif(
                np.finfo(np.longdouble).nmant <= 52, reason="numpy's longdouble is a float64 here"
            ),
        ),
    ],
    ids=["int", "int64", "uint64", "Fraction", "longdouble"],
)
def test_a_number_a_float64_would_round_is_refused_as_a_value_and_a_default(
    value: object, vector: object
) -> None:
    """Scalar stores refused integers beyond 2**53 (past which float64 skips integers), but
    stored a longdouble or Fraction(1, 3) rounded; vector stores stored all of them rounded,
    and a batch's default was rounded into its array. All are refused now; a longdouble or a
    fraction that a float64 holds exactly is kept."""
    scalars = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=FakeEncoder())
    vectors = SoftDict({"apple": [1.0, 2.0], "chair": [3.0, 4.0]}, encoder=FakeEncoder())
    for sd, bad in ((scalars, value), (vectors, vector)):
        before = snapshot(sd)
        with pytest.raises(InvalidValueError, match=r"stops holding every integer|can only round"):
            sd["pear"] = bad
        with pytest.raises(ValueShapeError, match="its float64 array would round default"):
            sd.lookup(["zzz"], min_score=0.99, default=bad)
        assert_unchanged(sd, before)
    scalars["pear"], vectors["pear"] = Fraction(3, 2), [2**53, np.longdouble(0.5)]
    assert scalars["pear"] == 1.5 and vectors["pear"].tolist() == [2.0**53, 0.5]
    vectors["plum"] = [1e300, -(2.0**60)]  # floats are floats, however large
    nan = np.longdouble("nan")  # a batch's miss marker, whatever its type
    assert np.isnan(scalars.lookup(["zzz"], min_score=0.99, default=nan)[0])


@pytest.mark.parametrize("bad", ["bad\udce9", "\ud800", "fine then \udfff"])
def test_text_that_is_not_valid_unicode_is_refused_before_it_can_break_a_save(
    tmp_path, bad: str
) -> None:
    """A lone surrogate (what bytes.decode(errors="surrogateescape") leaves) cannot be written
    as UTF-8: as a key or a label it would make every later save fail, as a query the
    tokenizer would raise. All three are refused at the door, naming the position."""
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    labels = SoftDict({"apple": "fruit"}, encoder=FakeEncoder())
    before, before_labels = snapshot(sd), snapshot(labels)
    with pytest.raises(InvalidValueError, match="lone surrogate"):
        sd[bad] = 2.0
    with pytest.raises(InvalidValueError, match="item #1"):
        sd.update([("pear", 1.0), (bad, 2.0)])
    with pytest.raises(InvalidValueError, match="key"):
        sd.add_embeddings([bad], np.ones((1, FAKE_DIM)), [2.0])
    with pytest.raises(InvalidValueError, match="the label of key 'pear'"):
        labels["pear"] = bad
    with pytest.raises(InvalidValueError, match="the label of key 'pear'"):
        labels["pear"] = {"name": ["ok", bad]}  # anywhere inside a label
    with pytest.raises(InvalidValueError, match=r"query.*cannot be encoded.*before looking it up"):
        sd.lookup(bad)
    with pytest.raises(InvalidValueError, match="query #1"):
        sd.attend(["apple", bad])
    assert_unchanged(sd, before)
    assert_unchanged(labels, before_labels)
    sd.save(tmp_path / "s")  # and the store still saves
    labels.save(tmp_path / "l")


def test_an_integer_too_long_to_print_gets_a_softdict_error_of_a_line(
    scalar_store: SoftDict,
) -> None:
    """Messages wrote the number whole: past Python's 4,300-digit limit that raised a raw
    ValueError ("Exceeds the limit ... for integer string conversion"), and 10**400 made a
    message of 401 digits."""
    big = 10**5000
    before = list(scalar_store.items())
    calls = [
        lambda: scalar_store.__setitem__("k", big),
        lambda: scalar_store.lookup(["apple", "zz"], min_score=0.99, default=big),
        lambda: scalar_store.lookup("apple", min_score=big, default=None),
        lambda: scalar_store.nearest("apple", k=big),
        lambda: SoftDict(encoder=FakeEncoder(), temperature=big),
        lambda: scalar_store.fit([(big, "apple")]),
    ]
    for call in calls:
        with pytest.raises(SoftDictError) as raised:
            call()
        assert "5,001 digits" in str(raised.value) and len(str(raised.value)) < 400
    with pytest.raises(SoftDictError, match="an integer of 401 digits or so, beyond 2"):
        scalar_store["k"] = 10**400
    assert list(scalar_store.items()) == before


def test_a_masked_array_with_masked_entries_is_refused_as_a_vector_or_embeddings() -> None:
    """np.asarray keeps the data under a mask: [1, 99] with 99 masked (missing) was stored as
    [1, 99], and masked embeddings were indexed as if whole."""
    sd = SoftDict({"apple": [1.0, 2.0]}, encoder=FakeEncoder())
    with pytest.raises(InvalidValueError, match="masked array with masked"):
        sd["pear"] = np.ma.array([1.0, 99.0], mask=[False, True])
    embeddings = np.ma.array(np.ones((1, FAKE_DIM)), mask=np.eye(1, FAKE_DIM, dtype=bool))
    with pytest.raises(InvalidValueError, match="masked array with masked"):
        sd.add_embeddings(["pear"], embeddings, [[1.0, 2.0]])
    assert list(sd) == ["apple"] and list(sd["apple"]) == [1.0, 2.0]
    sd["pear"] = np.ma.array([3.0, 4.0])  # nothing masked: the data as it is
    assert list(sd["pear"]) == [3.0, 4.0]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (np.zeros((2, 2)), "this one is 2-D"),
        (np.array([True, False]), "this one is of dtype bool"),
        (np.array([]), "this one is empty"),
    ],
)
def test_an_array_no_kind_takes_is_refused_saying_why_not_that_labels_are_held(
    value: np.ndarray, why: str
) -> None:
    """A first value no kind takes was refused with "this store holds categorical values
    (fixed by its first insert...)", of a store that held nothing, fixed nothing, and whose
    advice (separate SoftDicts) did not help."""
    sd = SoftDict(encoder=FakeEncoder())
    with pytest.raises(ValueKindError, match=f"which no kind of value takes; .*{why}.*tolist") as e:
        sd["apple"] = value
    assert "holds categorical" not in str(e.value) and sd.value_kind is None
    labels = SoftDict(encoder=FakeEncoder(), value_kind="categorical")
    with pytest.raises(ValueKindError, match=r"pass value\.tolist\(\)"):
        labels["apple"] = np.array([1, 2])
    inferred = SoftDict({"apple": "red"}, encoder=FakeEncoder())
    with pytest.raises(ValueKindError, match="make it with value_kind='categorical'"):
        inferred["pear"] = 3


def test_a_longdouble_default_past_float64s_range_is_refused_for_a_batch(
    scalar_store: SoftDict,
) -> None:
    """np.longdouble(1e400) converts to infinity without an OverflowError: a batch returned
    inf in its place, with a stray RuntimeWarning. An infinity given as such still fits."""
    with pytest.raises(ValueShapeError, match="default must be a number"):
        scalar_store.lookup(["apple", "zz"], min_score=0.99, default=np.longdouble("1e400"))
    found = scalar_store.lookup(["apple", "zz"], min_score=0.999, default=float("inf"))
    assert found[1] == float("inf")


@pytest.mark.parametrize("index", ["HNSW0", "HNSW1", "IVF0,Flat", "PCA8,HNSW1"])
def test_a_factory_index_that_cannot_hold_keys_is_refused_when_the_store_is_made(
    index: str,
) -> None:
    """FAISS builds these: "HNSW1" crashed the process at the first insert (a segfault),
    "HNSW0" aborted it at the second, and "IVF0,Flat" divided by zero at every lookup."""
    with pytest.raises(ConfigError, match="needs at least"):
        SoftDict(encoder=FakeEncoder(), index=index)


@pytest.mark.parametrize(
    ("index", "why"),
    [("Flat" + " " * 30_000, "30,004 characters long"), ("Flat\x00x", "a NUL character")],
)
def test_a_factory_string_faiss_cannot_read_safely_is_refused(index: str, why: str) -> None:
    """FAISS's parser crashed the process (a segfault) on a string of ~20,000 characters, and
    read "Flat\x00x" as "Flat"; the message shows the string cut short."""
    with pytest.raises(ConfigError, match=why) as refused:
        SoftDict(encoder=FakeEncoder(), index=index)
    assert len(str(refused.value)) < 500


def test_the_advice_given_for_an_array_works_when_followed() -> None:
    """A label store whose kind came from its first value advised value.tolist() for a 1-D array
    of numbers, which it then refused (a list of numbers would have made a vector store); an
    empty store advised value.tolist() "as a label (a JSON list)" for a 0-D array, whose
    tolist() is a number."""
    empty = SoftDict(encoder=FakeEncoder())
    with pytest.raises(ValueKindError, match=r"0-D; for the number it holds, pass value\.item"):
        empty["apple"] = np.array(5.0)
    empty["apple"] = np.array(5.0).item()
    assert empty["apple"] == 5.0
    inferred = SoftDict({"apple": "red"}, encoder=FakeEncoder())
    vector = np.array([1.0, 2.0])
    with pytest.raises(ValueKindError, match=r"tolist\(\) to a store made with value_kind="):
        inferred["pear"] = vector
    with pytest.raises(ValueKindError):
        inferred["pear"] = vector.tolist()  # as the advice says: this store takes none
    labels = SoftDict({"apple": "red"}, encoder=FakeEncoder(), value_kind="categorical")
    labels["pear"] = vector.tolist()
    with pytest.raises(ValueKindError, match=r"value\.item\(\) to a store made with value_kind="):
        inferred["plum"] = np.array(3)
    labels["plum"] = np.array(3).item()
    grid = np.zeros((2, 2))
    with pytest.raises(ValueKindError, match=r"pass value\.tolist\(\)$"):
        inferred["fig"] = grid
    inferred["fig"] = grid.tolist()
    assert labels["pear"] == [1.0, 2.0] and labels["plum"] == 3 and inferred["fig"] == grid.tolist()
