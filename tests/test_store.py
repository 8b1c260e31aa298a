"""The store conformance suite: what every ``Store`` implementation must do, tested through the
protocol alone (today the in-memory store; a store in a vector database runs the same suite).

Writes are staged then committed; a staged write that raises changes nothing; keys keep their
insertion order; ids, values and keys agree; masks become ``Allow`` filters; snapshots hold all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _milvus import MILVUS_KINDS, fresh_collection, milvus_location
from _support import FakeEncoder, assert_close

from softdict import (
    EmptyStoreError,
    InvalidValueError,
    KeyTypeError,
    ValueKindError,
    ValueShapeError,
)
from softdict._config import SoftDictConfig
from softdict._files import FileReader, encode_file
from softdict._rows import counting, every_slot
from softdict.store import MemoryStore, Store, open_store

ENCODER = FakeEncoder()


@pytest.fixture(params=["memory", *MILVUS_KINDS])
def make(request: pytest.FixtureRequest) -> Callable[..., Store]:
    """A factory of empty stores of one kind: in memory, or in Milvus (embedded, served)."""
    if request.param == "memory":
        return lambda **options: open_store("memory", SoftDictConfig.build(**options))
    location = milvus_location(request, request.param)
    return lambda **options: open_store(
        location, SoftDictConfig.build(**options), collection=fresh_collection()
    )


def vectors(*keys: str) -> dict[str, np.ndarray]:
    return dict(zip(keys, ENCODER.encode(list(keys))))


def insert(store: Store, items: dict[str, object]) -> None:
    staged = store.stage(items)
    staged = store.stage(items, vectors(*staged.missing))
    store.commit(staged)


@pytest.fixture
def fruit(make) -> Store:
    store = make()
    insert(store, {"red apple": 1.0, "green pear": 2.0, "old chair": 3.0})
    return store


def state(store: Store) -> tuple:
    keys = store.keys()  # a snapshot list: a Store itself is not iterable
    return keys, [store.get(k) for k in keys], store.ids().tolist(), len(store)


def test_a_staged_write_changes_nothing_until_committed(fruit: Store) -> None:
    before = state(fruit)
    staged = fruit.stage({"blue car": 4.0, "red apple": 9.0})
    assert staged.missing == ["blue car"] and staged.kept == ["red apple"]
    assert state(fruit) == before
    with pytest.raises(ValueError, match="no embedding"):
        fruit.commit(staged)
    assert state(fruit) == before


@pytest.mark.parametrize(
    ("items", "error"),
    [
        ({"blue car": "a label"}, ValueKindError),
        ({"blue car": float("nan")}, InvalidValueError),
        ({"blue car": 1.0, "red apple": [1.0]}, ValueKindError),
    ],
)
def test_a_bad_value_is_refused_at_staging(fruit: Store, items: dict, error: type) -> None:
    before = state(fruit)
    with pytest.raises(error):
        fruit.stage(items, vectors(*items))
    assert state(fruit) == before


def test_a_bad_embedding_is_refused_at_staging(fruit: Store) -> None:
    before = state(fruit)
    with pytest.raises(ValueShapeError, match="16-dim"):
        fruit.stage({"blue car": 4.0}, {"blue car": np.ones(3)})
    with pytest.raises(InvalidValueError, match="NaN"):
        fruit.stage({"blue car": 4.0}, {"blue car": np.full(16, np.nan)})
    assert state(fruit) == before


def test_inserts_keep_order_and_overwrites_keep_position(fruit: Store) -> None:
    insert(fruit, {"green pear": 5.0, "blue car": 4.0})
    assert fruit.keys() == ["red apple", "green pear", "old chair", "blue car"]
    assert fruit.get("green pear") == 5.0 and fruit.newest_key() == "blue car"
    assert len(fruit) == 4 and "blue car" in fruit and "pear" not in fruit
    assert len(set(fruit.ids().tolist())) == 4
    assert fruit.value_kind == "scalar" and fruit.dim == 16


def test_a_replaced_embedding_moves_the_key_and_keeps_its_position(fruit: Store) -> None:
    old_ids = dict(zip(fruit.keys(), fruit.ids().tolist()))
    turned = {"green pear": -ENCODER.encode(["green pear"])[0]}
    fruit.commit(fruit.stage({"green pear": 7.0}, turned, replace_vectors=True))
    new_ids = dict(zip(fruit.keys(), fruit.ids().tolist()))
    assert fruit.keys() == ["red apple", "green pear", "old chair"]
    if isinstance(fruit, MemoryStore):  # its backends take new ids in increasing order
        assert new_ids["green pear"] > max(old_ids.values())
    assert new_ids["red apple"] == old_ids["red apple"]
    query = fruit.prepare_queries(turned["green pear"][None, :])
    _, found = fruit.backend.search(query, 1)
    assert fruit.keys_of(found[0]) == ["green pear"] and fruit.get("green pear") == 7.0


def test_remove_compact_and_clear(fruit: Store) -> None:
    fruit.remove("green pear")
    with pytest.raises(KeyError):
        fruit.get("green pear")
    with pytest.raises(KeyError):
        fruit.remove("green pear")
    before = state(fruit)
    fruit.compact()
    assert state(fruit) == before
    _, found = fruit.backend.search(fruit.prepare_queries(ENCODER.encode(["pear"])), 5)
    assert sorted(fruit.keys_of(found[0][found[0] >= 0])) == ["old chair", "red apple"]
    fruit.clear()
    assert len(fruit) == 0 and fruit.keys() == [] and fruit.value_kind is None
    with pytest.raises(KeyError):
        fruit.newest_key()
    insert(fruit, {"a label key": "fruit"})  # emptied: the kind is free again
    assert fruit.value_kind == "categorical"


def test_ids_keys_and_values_agree(fruit: Store) -> None:
    insert(fruit, {f"key {i}": float(i) for i in range(100)})
    for key in [f"key {i}" for i in range(0, 100, 3)]:
        fruit.remove(key)
    ids = fruit.ids()
    assert fruit.keys_of(ids) == fruit.keys()
    column, slots = fruit.values_of(ids)
    keys = fruit.keys()
    assert [column.get(int(s)) for s in slots] == [fruit.get(k) for k in keys]
    reordered = ids[::-1]
    assert fruit.keys_of(reordered) == fruit.keys()[::-1]
    padded = np.array([[ids[0], -1]])  # padding points at some slot; its weight is 0
    assert fruit.values_of(padded)[1].shape == (1, 2)


def test_masks_become_allow_filters(fruit: Store) -> None:
    by_key = dict(zip(fruit.keys(), fruit.ids().tolist()))
    allow = fruit.allow(["old chair", "not stored", "red apple", "red apple"])
    assert allow is not None and allow.ids.tolist() == sorted(
        [by_key["old chair"], by_key["red apple"]]
    )
    allow = fruit.allow(lambda key: key.startswith("g"))
    assert allow is not None and allow.ids.tolist() == [by_key["green pear"]]
    assert fruit.allow(None) is None
    with pytest.raises(EmptyStoreError, match="allows none"):
        fruit.allow(["pear"])
    with pytest.raises(KeyTypeError, match="pass \\[key\\]"):
        fruit.allow("red apple")  # type: ignore[arg-type]


def test_queries_are_checked_projected_and_prepared(fruit: Store) -> None:
    raw = ENCODER.encode(["apple"])
    prepared = fruit.prepare_queries(raw)
    assert_close(np.linalg.norm(prepared, axis=1), 1.0)  # cosine
    with pytest.raises(ValueShapeError):
        fruit.prepare_queries(np.ones((1, 5)))
    fruit.projection = -np.eye(16)
    assert_close(fruit.prepare_queries(raw), -prepared)


def test_a_snapshot_holds_everything(fruit: Store, tmp_path: Path) -> None:
    insert(fruit, {f"key {i}": float(i) for i in range(40)})
    fruit.remove("key 3")
    fruit.projection = 2 * np.eye(16)
    snapshot, files = fruit.snapshot()
    assert snapshot.keys == fruit.keys() and snapshot.next_id > max(snapshot.ids.tolist())
    if isinstance(fruit, MemoryStore):  # a remote store's snapshot is a local copy: new ids
        assert snapshot.ids.tolist() == fruit.ids().tolist()
    assert (snapshot.dim, snapshot.value_kind) == (16, "scalar")
    np.testing.assert_array_equal(snapshot.projection, 2 * np.eye(16))
    reader = FileReader(tmp_path, {name: encode_file(c) for name, c in files.items()})
    restored = MemoryStore.restore(snapshot, reader)
    assert state(restored)[:2] == state(fruit)[:2] and len(restored) == len(fruit)
    query = fruit.prepare_queries(ENCODER.encode(["key 7"]))
    found = [store.backend.search(query, 5)[1][0] for store in (restored, fruit)]
    assert restored.keys_of(found[0]) == fruit.keys_of(found[1])


def test_memory_stores_take_no_location_or_collection() -> None:
    from softdict import ConfigError, SoftDict

    with pytest.raises(ConfigError, match="collection= is for stores such as"):
        SoftDict(encoder=ENCODER, collection="prices")
    with pytest.raises(ConfigError, match="no location"):
        SoftDict(encoder=ENCODER, store="memory:somewhere")
    with pytest.raises(ConfigError, match=r"SoftDict\.load"):
        SoftDict.open("memory")


def test_counting_is_0_to_n_read_only_whatever_was_asked_before() -> None:
    """``counting(n)``, the rows of a selection of every key, is 0..n-1 from one shared array
    that grows when a longer one is asked for: read-only, so no caller can change another's."""
    for n in (0, 5, 3, 70_000, 10, 140_001):
        rows = counting(n)
        assert rows.dtype == np.int64 and np.array_equal(rows, np.arange(n))
        assert not rows.flags.writeable


def test_every_slot_tells_0_to_n_from_counting_or_by_its_values() -> None:
    """A blend reads every value without a gather where the slots are 0..n-1: a view
    ``counting`` gave is told without reading it, any other array by its values; a view that
    starts later, runs backwards or is shorter is not every slot."""
    assert every_slot(counting(10), 10) and every_slot(counting(40)[:10], 10)
    assert every_slot(np.arange(10), 10) and every_slot(np.arange(0, dtype=np.int64), 0)
    assert not every_slot(counting(10), 9) and not every_slot(counting(20)[1:11], 10)
    assert not every_slot(counting(10)[::-1], 10)
    assert not every_slot(np.array([0, 1, 2, 4]), 4)
