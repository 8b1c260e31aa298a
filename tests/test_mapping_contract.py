"""One mapping contract, run over every index backend x every value kind (the built-ins and the
plug-ins of tests/_plugins.py): a SoftDict behaves like a plain dict."""

from __future__ import annotations

import copy
from collections.abc import Callable, ItemsView, KeysView, MutableMapping, ValuesView

import numpy as np
import pytest
from _milvus import MILVUS_KINDS, fresh_collection, milvus_location
from _support import VALUE_KIND_OPTION, VALUE_SAMPLES, FakeEncoder, close, same_value

from softdict import SoftDict, ValueKind

KEYS = ["apple", "banana", "chair", "red apple", "green chair"]
# The names users pass (at these sizes "ivf" and "ivf_sq8" still search exactly, as they would
# for a user), and the FAISS IVF backends trained from the first key, so they run FAISS here.
BACKENDS = [
    "auto",
    "flat",
    "hnsw",
    "ivf",
    "ivf_sq8",
    "HNSW16",
    "test-dict",
    "ivf-from-start",
    "ivf_sq8-from-start",
    "compressed-from-start",
]


@pytest.fixture(params=sorted(VALUE_SAMPLES))
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=[*BACKENDS, *MILVUS_KINDS])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store(make_store, backend: str, kind: str, request: pytest.FixtureRequest):
    """Build a store of this kind on this backend (or in Milvus, embedded or served)."""
    where = {}
    if backend.startswith("milvus"):
        where = {"store": milvus_location(request, backend)}

    def make(data=None) -> SoftDict:
        if where:
            where["collection"] = fresh_collection()
            return make_store(data, value_kind=VALUE_KIND_OPTION.get(kind), **where)
        return make_store(data, index=backend, value_kind=VALUE_KIND_OPTION.get(kind))

    return make


@pytest.fixture
def items(kind: str) -> list[tuple[str, object]]:
    return list(zip(KEYS, VALUE_SAMPLES[kind]))


def assert_matches_dict(sd: SoftDict, expected: dict[str, object]) -> None:
    assert len(sd) == len(expected)
    assert list(sd) == list(expected)
    assert list(sd.keys()) == list(expected.keys())
    for key, value in expected.items():
        assert key in sd
        assert same_value(sd[key], value)
    assert [k for k, _ in sd.items()] == list(expected)
    # reversed(), as a dict's and its views' (Python 3.8+): insertion order, reversed.
    assert list(reversed(sd)) == list(reversed(expected))
    assert list(reversed(sd.keys())) == list(reversed(expected.keys()))
    assert _same(list(reversed(sd.items())), list(reversed(expected.items())))
    assert _same(list(reversed(sd.values())), list(reversed(expected.values())))


def _outcome(function: Callable[..., object], *args: object) -> tuple[str, object]:
    """What a call gives: ("returned", its result, views as lists) or ("raised", the type)."""
    try:
        result = function(*args)
    except Exception as exc:
        return "raised", type(exc)
    for view in (KeysView, ItemsView, ValuesView):
        if isinstance(result, view):
            return f"returned a {view.__name__}", list(result)
    return "returned", result


def _same(a: object, b: object) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return same_value(a, b)


def test_mapping_methods_do_what_the_abcs_own_do(make_store, kind: str) -> None:
    """isinstance(sd, MutableMapping) holds by declaration; what can fail is behaviour. Each
    method MutableMapping provides, whether SoftDict inherits it or overrides it (``update``,
    which encodes in batches, ``pop``, ``clear``, ``in``), returns, raises and leaves
    the store as collections.abc's own implementation, built on the five abstract methods
    alone, does on an equal store. Two differ on purpose: ``popitem`` removes the newest item,
    as ``dict.popitem`` does (the ABC removes the first), and ``==`` compares a vector value
    as a whole (the ABC compares its elements and raises: ``test_vector_stores_compare``)."""
    items = list(zip(KEYS, VALUE_SAMPLES[kind]))
    (k0, v0), (k1, _), (k2, v2), _, (_, v4) = items
    calls: list[tuple[str, tuple[object, ...]]] = [
        ("__contains__", (k0,)),
        ("__contains__", ("pear",)),
        ("__contains__", (42,)),
        ("get", (k2,)),
        ("get", ("pear",)),
        ("get", ("pear", "none")),
        ("keys", ()),
        ("items", ()),
        ("values", ()),
        ("__eq__", (dict(items),)),
        ("__eq__", (dict(items[:2]),)),
        ("__ne__", (dict(items[::-1]),)),
        ("pop", (k1,)),
        ("pop", ("pear",)),
        ("pop", ("pear", "none")),
        ("setdefault", (k0, v4)),
        ("setdefault", ("pear", v2)),
        ("update", ([(k0, v2), ("pear", v0), (k1, v4)],)),
        ("update", ({"pear": v4},)),
        ("clear", ()),
    ]
    for name, args in calls:
        if kind == "vector" and name in ("__eq__", "__ne__"):
            continue
        ours, reference = (
            make_store(items, value_kind=VALUE_KIND_OPTION.get(kind)),
            make_store(items, value_kind=VALUE_KIND_OPTION.get(kind)),
        )
        assert isinstance(ours, MutableMapping)
        got = _outcome(getattr(ours, name), *args)
        expected = _outcome(getattr(MutableMapping, name), reference, *args)
        assert got[0] == expected[0] and _same(got[1], expected[1]), (name, args)
        assert _same(list(ours.items()), list(reference.items())), (name, args)
    sd = make_store(items, value_kind=VALUE_KIND_OPTION.get(kind))
    expected_items = dict(items)
    assert _same(sd.popitem(), expected_items.popitem())
    assert _same(list(sd.items()), list(expected_items.items()))


def test_set_get_len_iter_contains(store, items) -> None:
    sd = store()
    expected: dict[str, object] = {}
    for key, value in items:
        sd[key] = value
        expected[key] = value
        assert_matches_dict(sd, expected)
    assert "pear" not in sd
    assert 42 not in sd


def test_missing_key_raises_key_error_with_the_key(store, items) -> None:
    sd = store(items)
    with pytest.raises(KeyError) as info:
        sd["pear"]
    assert info.value.args == ("pear",)
    with pytest.raises(KeyError):
        del sd["pear"]
    assert sd.get("pear") is None
    assert sd.get("pear", 7) == 7


def test_update_like_dict_update(store, items) -> None:
    sd = store()
    sd.update(items[:2])
    sd.update(dict(items[2:4]))
    sd.update(**{items[4][0].replace(" ", "_"): items[4][1]})
    expected = dict(items[:4])
    expected[items[4][0].replace(" ", "_")] = items[4][1]
    assert_matches_dict(sd, expected)


def test_update_with_duplicate_keys_keeps_first_position_and_last_value(store, items) -> None:
    (k0, v0), (k1, v1), (_, v2) = items[:3]
    sd = store()
    sd.update([(k0, v0), (k1, v1), (k0, v2)])
    expected = dict([(k0, v0), (k1, v1), (k0, v2)])
    assert_matches_dict(sd, expected)


def test_overwrite_keeps_position(store, items) -> None:
    sd = store(items)
    sd[items[1][0]] = items[3][1]
    expected = dict(items)
    expected[items[1][0]] = items[3][1]
    assert_matches_dict(sd, expected)


def test_delete_and_reinsert_goes_to_the_end(store, items) -> None:
    sd = store(items)
    expected = dict(items)
    del sd[items[0][0]]
    del expected[items[0][0]]
    assert_matches_dict(sd, expected)
    sd[items[0][0]] = items[0][1]
    expected[items[0][0]] = items[0][1]
    assert_matches_dict(sd, expected)


def test_pop_popitem_setdefault_clear(store, items) -> None:
    sd = store(items)
    expected = dict(items)
    assert same_value(sd.pop(items[2][0]), expected.pop(items[2][0]))
    assert sd.pop("pear", "none") == "none"
    key, value = sd.popitem()
    expected_key, expected_value = expected.popitem()  # LIFO, like dict
    assert key == expected_key and same_value(value, expected_value)
    assert same_value(sd.setdefault(items[0][0], items[4][1]), items[0][1])
    assert_matches_dict(sd, expected)
    sd.clear()
    assert len(sd) == 0 and list(sd) == []
    with pytest.raises(KeyError):
        sd.popitem()


def test_equals_a_dict_with_the_same_items(make_store) -> None:
    sd = make_store({"apple": 1, "chair": 2.5})
    assert sd == {"apple": 1, "chair": 2.5}
    assert sd != {"apple": 1}


def test_vector_stores_compare(make_store) -> None:
    """A vector store equals a mapping with the same keys and equal vectors (compared whole),
    itself and its copy included, where the Mapping mixin raised (an array's truth value)."""
    sd = make_store({"apple": [1.0, 2.0], "chair": [3.0, 4.0]})
    assert sd == sd and sd == sd.copy()
    assert not sd.__ne__(sd.copy())  # != answers too, not only ==
    assert sd == {"apple": [1.0, 2.0], "chair": np.array([3.0, 4.0])}
    assert sd != {"apple": [1.0, 2.0], "chair": [3.0, 5.0]}
    assert sd != {"apple": [1.0, 2.0], "chair": [3.0, 4.0, 0.0]}  # another length
    assert sd != {"apple": [1.0, 2.0], "table": [3.0, 4.0]}
    assert sd != make_store({"apple": 1.0, "chair": 2.0}) and sd != [("apple", [1.0, 2.0])]
    # A value that makes no array (ragged) raised numpy's ValueError from ==.
    assert sd != {"apple": [1.0, [2.0]], "chair": [3.0, 4.0]}


def test_deleted_keys_never_contribute_and_survive_compaction(store, items) -> None:
    """Enough deletes to trigger compaction; the mapping and soft lookup stay consistent."""
    sd = store()
    keys = [f"word{i} thing{i % 7}" for i in range(300)]
    sd.update({key: items[i % len(items)][1] for i, key in enumerate(keys)})
    expected = {key: items[i % len(items)][1] for i, key in enumerate(keys)}
    for key in keys[:250]:
        del sd[key]
        del expected[key]
    assert_matches_dict(sd, expected)
    attention = sd.attend("word3 thing3")
    assert set(attention.keys) == set(expected)
    assert attention.weights.sum() == close(1.0)
    # Re-inserted keys are found again, with their new values.
    sd[keys[3]] = items[0][1]
    expected[keys[3]] = items[0][1]
    assert_matches_dict(sd, expected)
    assert sd.nearest(keys[3], k=1)[0][0] == keys[3]


def test_values_come_back_as_independent_copies(store, kind) -> None:
    immutable = {"scalar": 3.5, "boolean": True}
    mutable = {"vector": np.array([1.0, 2.0]), "categorical": {"id": [1, 2]}}.get(kind)
    if mutable is None:
        mutable = immutable[kind]
    sd = store({"apple": mutable})
    got = sd["apple"]
    if isinstance(got, np.ndarray):
        got[0] = 99.0
        mutable[0] = 42.0
    elif isinstance(got, dict):
        got["id"].append(99)
        mutable["id"].append(42)
    assert same_value(
        sd["apple"],
        {"vector": np.array([1.0, 2.0]), "categorical": {"id": [1, 2]}}.get(
            kind, immutable.get(kind)
        ),
    )


def test_emptied_store_accepts_a_new_kind(make_store) -> None:
    sd = make_store({"apple": 1})
    del sd["apple"]
    sd["apple"] = "label"
    assert sd["apple"] == "label"
    assert sd.value_kind is ValueKind.CATEGORICAL


@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy, SoftDict.copy])
def test_a_copy_is_independent_of_the_original(store, items, make_copy, backend) -> None:
    """Changing a copy (deletes, overwrites, inserts, enough to compact) never reaches the
    original, and the copy answers like it."""
    sd = store(items)
    sd.update({f"word{i} thing{i % 7}": items[i % len(items)][1] for i in range(150)})
    before = [(k, v) for k, v in sd.items()]
    nearest_before = sd.nearest("word3 thing3", k=4)
    twin = make_copy(sd)
    assert type(twin) is type(sd) and twin is not sd and twin.encoder is sd.encoder
    assert list(twin) == list(sd)
    if not backend.startswith("milvus"):  # a copy of a Milvus store is held in memory
        assert twin.index_description == sd.index_description
    assert twin.nearest("word3 thing3", k=4) == nearest_before
    for i in range(140):
        del twin[f"word{i} thing{i % 7}"]
    twin[items[0][0]] = items[1][1]
    twin["brand new"] = items[2][1]
    assert len(sd) == len(before) and all(
        key == k and same_value(value, v) for (key, value), (k, v) in zip(sd.items(), before)
    )
    assert sd.nearest("word3 thing3", k=4) == nearest_before
    assert all(key in twin for key, _ in twin.nearest("word3 thing3", k=4))


class _Tagged(SoftDict):
    """A subclass that keeps state of its own beside the store."""

    @property
    def unit(self) -> str:
        return self._unit

    @unit.setter
    def unit(self, value: str) -> None:
        self._unit = value


def test_a_copy_carries_what_was_set_on_the_store() -> None:
    """copy(), copy.copy and copy.deepcopy dropped a subclass's attributes (and a user's)
    without a word; they carry them now, shallow or deep as each copies."""
    sd = _Tagged({"apple": 1.0, "pear": 2.0}, encoder=FakeEncoder())
    sd.unit, sd.tags = "EUR", ["fruit"]
    sd.myself, sd.model = sd, sd.encoder  # the encoder is shared, never copied
    for make_copy, deep in ((copy.copy, False), (SoftDict.copy, False), (copy.deepcopy, True)):
        twin = make_copy(sd)
        assert type(twin) is _Tagged and (twin.unit, twin.tags) == ("EUR", ["fruit"])
        assert (twin.tags is not sd.tags) is deep
        assert twin.myself is (twin if deep else sd) and twin.model is sd.encoder
        assert twin.nearest("apple", k=1) == sd.nearest("apple", k=1)
        twin["plum"] = 3.0
        assert "plum" not in sd


def test_or_and_ior_follow_pep_584(make_store) -> None:
    sd = make_store({"apple": 1.0, "pear": 2.0})
    merged = sd | {"pear": 5.0, "plum": 3.0}
    assert list(merged.items()) == [("apple", 1.0), ("pear", 5.0), ("plum", 3.0)]
    assert list(sd.items()) == [("apple", 1.0), ("pear", 2.0)]
    left = {"plum": 3.0, "pear": 5.0} | sd  # the right operand wins, the left's order first
    assert type(left) is type(sd)
    assert list(left.items()) == [("plum", 3.0), ("pear", 2.0), ("apple", 1.0)]
    sd |= [("kiwi", 4.0)]
    assert sd["kiwi"] == 4.0 and len(sd) == 3
    with pytest.raises(TypeError):
        sd | 3  # type: ignore[operator]
