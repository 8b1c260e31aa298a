"""A small Milvus store's key directory (``softdict.store.milvus._directory``): kept in each
process with every key, value and vector, and brought up to date after a write, here or in
another store object, by fetching the keys the writers' logs name (``_writers.changed_since``)
rather than reading every key again; where the logs cannot tell (a writer of an older softdict,
a write past ``CHANGES_KEPT`` keys), every key is read again."""

from __future__ import annotations

import json

import numpy as np
import pycountry
import pytest
from _milvus import fresh_collection
from _support import FakeEncoder, assert_close

from softdict import SoftDict
from softdict.store.milvus import _directory, _metadata
from softdict.store.milvus._writers import changed_since

NAMES = sorted(country.name for country in pycountry.countries)
ITEMS = {name: float(i) for i, name in enumerate(NAMES)}
QUERIES = ["Grmany", "Frnace", "Brazl", "Chiel", "Cuab", "New land"]


def _log(writes: int, changed: dict[int, list[int]], open_write: int | None = None) -> str:
    log = [[n, ids] for n, ids in changed.items()]
    return json.dumps({"writes": writes, "changed": log, "open": open_write})


def test_changed_since_reads_the_writers_logs() -> None:
    before = {"writer:a": _log(2, {1: [5], 2: [7]}), "writer:b": _log(1, {1: [9]})}
    now = {
        "writer:a": _log(4, {2: [7], 3: [3, 5], 4: [11]}),
        "writer:b": before["writer:b"],
        "writer:c": _log(1, {1: [1]}),  # a writer new since
    }
    np.testing.assert_array_equal(changed_since(before, now), [1, 3, 5, 11])
    assert changed_since(before, before).tolist() == []
    # Writes gone from a log, a writer without a log, a writer's row gone: they cannot tell.
    assert changed_since(before, {**now, "writer:a": _log(4, {4: [11]})}) is None
    assert changed_since(before, {**now, "writer:b": "2"}) is None
    assert changed_since({**before, "writer:d": _log(1, {1: [2]})}, now) is None
    # A write left open (in progress, or its writer killed) is fetched at every refresh, and
    # once more when it closes.
    opened = {"writer:a": _log(3, {2: [7], 3: [3, 5]}, open_write=3)}
    assert changed_since(opened, opened).tolist() == [3, 5]
    assert changed_since(opened, {"writer:a": _log(3, {2: [7], 3: [3, 5]})}).tolist() == [3, 5]


def _store(location: str, collection: str, **options: object) -> SoftDict:
    return SoftDict(store=location, collection=collection, encoder=FakeEncoder(), **options)


def _writer_and_reader(location: str) -> tuple[str, SoftDict, SoftDict]:
    """Two store objects of one new store of ``ITEMS``; the reader has read its directory."""
    collection = fresh_collection()
    writer = _store(location, collection)
    writer.update(ITEMS)
    reader = _store(location, collection)
    reader.lookup("Grmany")
    return collection, writer, reader


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a directory read every key."""
    calls: list[int] = []
    read = _directory.read_directory

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(_directory, "read_directory", counted)
    return calls


def _answers_as_read_afresh(sd: SoftDict, location: str, collection: str) -> None:
    """``sd`` holds what a store opened now reads, and answers as it does."""
    fresh = _store(location, collection)
    assert dict(sd) == dict(fresh) and list(sd) == list(fresh)
    mine, theirs = sd._store._keys.current(), fresh._store._keys.current()
    np.testing.assert_array_equal(mine.ids, theirs.ids)
    assert mine.keys == theirs.keys and np.array_equal(mine.by_order, theirs.by_order)
    assert mine.vectors is not None and theirs.vectors is not None
    np.testing.assert_array_equal(mine.vectors, theirs.vectors)
    for query in QUERIES:
        a, b = sd.attend(query), fresh.attend(query)
        assert a.keys == b.keys
        assert_close(a.weights, b.weights)
    assert_close(np.asarray(sd.lookup(QUERIES)), np.asarray(fresh.lookup(QUERIES)))


def test_a_write_elsewhere_fetches_only_the_keys_it_changed(
    milvus_store_location: str, reads: list[int]
) -> None:
    collection, writer, reader = _writer_and_reader(milvus_store_location)
    assert len(reads) == 1  # its first read
    writer["New land"] = 99.0  # a new key
    writer["Germany"] = -3.0  # a new value
    del writer["France"]
    writer.update({"Chile": 7.5, "Cuba": 0.5})
    asked = []
    get = reader._store._key_rows().client.get
    reader._store._key_rows().client.get = lambda *a, **k: asked.append(k["ids"]) or get(*a, **k)
    assert reader["Germany"] == -3.0 and "France" not in reader
    reader.lookup("Grmany")
    assert len(reads) == 1  # brought up to date, not read again
    changed = {row for ids in asked for row in ids}
    assert len(changed) == 5  # the five keys the writes touched, and nothing else
    _answers_as_read_afresh(reader, milvus_store_location, collection)
    del writer["Chile"]  # a write that leaves nothing to fetch
    reader.lookup("Grmany")
    _answers_as_read_afresh(reader, milvus_store_location, collection)
    # Its own writes too.
    reader["Brazil"] = 123.0
    del reader["Cuba"]
    reads.clear()
    _answers_as_read_afresh(reader, milvus_store_location, collection)
    assert reader._store._keys.cached is not None and len(reads) == 1  # the fresh store's


def test_without_a_log_every_key_is_read_again(
    milvus_store_location: str, reads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    collection, writer, reader = _writer_and_reader(milvus_store_location)
    # A writer of an older softdict counts its writes without a log.
    writer._store._meta.rows.write({"writer:older": "1"})
    writer["Germany"] = -3.0
    reader.lookup("Grmany")
    assert len(reads) == 2 and reader["Germany"] == -3.0
    # A write of more keys than a log keeps leaves a gap in it.
    monkeypatch.setattr(_metadata, "CHANGES_KEPT", 2)
    writer.update({"Chile": 7.5, "Cuba": 0.5, "Peru": 1.5})
    reader.lookup("Grmany")
    assert len(reads) == 3
    _answers_as_read_afresh(reader, milvus_store_location, collection)


def test_a_write_left_open_is_fetched_at_every_lookup(
    milvus_store_location: str, reads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that dies between its rows and closing its write (here: its last metadata
    request fails) leaves the write open: readers fetch its keys at every lookup, so none
    answers with the key it deleted, and none reads every key again."""
    collection, writer, reader = _writer_and_reader(milvus_store_location)
    meta = writer._store._meta
    write_counter = meta._write_counter

    def dying(open_write: int | None) -> None:
        if open_write is None:
            raise SystemExit("killed before closing its write")
        write_counter(open_write)
        reader.lookup("Grmany")  # the reader refreshes while the write is open, rows unchanged
        assert "Germany" in reader._store._keys.current().keys

    monkeypatch.setattr(meta, "_write_counter", dying)
    with pytest.raises(SystemExit):
        del writer["Germany"]
    for _ in range(2):
        assert "Germany" not in reader.attend("Germany").keys
        assert "Germany" not in reader._store._keys.current().keys
    assert len(reads) == 1
    _answers_as_read_afresh(reader, milvus_store_location, collection)
