"""A Milvus store seen through several handles (as several processes see it: each handle keeps
its own directory and its own view of the store's shape), and the exact mapping's answers to
keys no store can hold, as the memory store gives them.

Found by a hostile-input probe: after one handle's ``clear`` every call on another failed for
good ("collection not found"), and a write through it could put a label into a store refilled
with numbers, or a 16-dim vector into an 8-dim collection (truncated), which made the store
unreadable to every process.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from _milvus import fresh_collection
from _support import FAKE_DIM, FakeEncoder, close, same_value

from softdict import (
    ConfigError,
    InvalidValueError,
    SoftDict,
    SoftDictError,
    StoreFormatError,
    StoreUnavailableError,
    ValueKindError,
    ValueShapeError,
)

pytestmark = pytest.mark.milvus


def handles(location: str, items: dict | None = None) -> tuple[SoftDict, SoftDict]:
    """Two handles on one new store holding ``items``."""
    collection = fresh_collection()
    first = SoftDict(items or {}, encoder=FakeEncoder(), store=location, collection=collection)
    return first, SoftDict(encoder=FakeEncoder(), store=location, collection=collection)


def test_keys_no_store_can_hold_are_absent_as_from_a_dict(milvus_store_location: str) -> None:
    memory = SoftDict({"apple": 1}, encoder=FakeEncoder())
    milvus, _ = handles(milvus_store_location, {"apple": 1})
    for sd in (memory, milvus):
        for key in (1, None, b"apple", "\ud800"):  # no str, or no valid Unicode
            assert key not in sd and sd.get(key, "none") == "none"
            with pytest.raises(KeyError):
                del sd[key]
        assert sd.lookup("apple", mask=["\ud800", "apple"]) == 1.0  # absent ones are ignored
        assert list(sd) == ["apple"]


def test_a_kind_fixed_to_vectors_takes_its_first_vector(milvus_store_location: str) -> None:
    """``value_kind="vector"`` made an empty column of no length: every insert failed."""
    sd = SoftDict(
        encoder=FakeEncoder(),
        store=milvus_store_location,
        collection=fresh_collection(),
        value_kind="vector",
    )
    sd["apple"] = [1.0, 2.0]
    assert same_value(sd["apple"], [1.0, 2.0])
    with pytest.raises(ValueShapeError, match="length 2"):
        sd["pear"] = [1.0, 2.0, 3.0]
    assert list(sd) == ["apple"]


def test_a_long_first_value_keeps_the_manifest_within_a_cluster_varchar(
    milvus_store_location: str,
) -> None:
    """The manifest row held the store's first value: a vector of 20,000 numbers made it 358 KB,
    which Milvus Lite took and a cluster's 65,535-byte VARCHAR refuses. A long first value is
    kept in a row of its own; another handle reads it from there."""
    from softdict.store.milvus._collection import MAX_VARCHAR

    first = np.arange(2_000, dtype=np.float64) / 7  # 37 KB of JSON
    writer, reader = handles(milvus_store_location)
    writer.update({"k" * 10_000: first, "second": first + 1})
    manifest = writer._store._meta.rows.read(["manifest"])["manifest"]
    assert len(manifest.encode()) < 16_384 < MAX_VARCHAR
    assert same_value(reader["second"], first + 1) and len(reader) == 2
    with pytest.raises(ValueShapeError, match="length 2000"):
        reader["third"] = first[:3]


def test_a_value_longer_than_a_cluster_json_field_is_refused(milvus_store_location: str) -> None:
    """Milvus Lite kept values whose JSON passed a cluster's 64 KB JSON field, so a store that
    worked on Lite failed on a cluster. Refused on both, with the store unchanged."""
    long_label, long_vector = "label " * 12_000, np.arange(5_000) / 7
    sd, _ = handles(milvus_store_location, {"apple": "label"})
    with pytest.raises(InvalidValueError, match="65,536 bytes"):
        sd.update({"pear": "label", "plum": long_label})
    assert list(sd) == ["apple"] and sd["apple"] == "label"
    long_dict = {"x": "y" * 70_000}  # a label measured whole, not by its length (1)
    for value in (long_label, long_vector, long_dict):  # as a store's first value
        empty, _ = handles(milvus_store_location)
        with pytest.raises(InvalidValueError, match="a Milvus store keeps values"):
            empty["plum"] = value
        assert len(empty) == 0


def test_a_copy_that_fails_part_of_the_way_leaves_the_target_empty(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy_to commits batch by batch: a key Milvus cannot hold in the third batch left the
    first two in the new collection, and a copy tried again was refused as into a store holding
    keys (a probe). The keys it wrote are deleted again, and the collection it made dropped,
    and a second try copies everything."""
    import functools

    import softdict._copies
    from softdict.store.copying import copy_into

    monkeypatch.setattr(softdict._copies, "copy_into", functools.partial(copy_into, batch=100))
    rng = np.random.default_rng(0)
    keys = [f"key {i}" for i in range(300)]
    keys[250] = "x" * 70_000  # more than a Milvus VARCHAR holds; memory holds it
    source = SoftDict(encoder=FakeEncoder(), lexical=0)
    source.add_embeddings(
        keys, rng.standard_normal((300, FAKE_DIM)), [float(i) for i in range(300)]
    )
    collection = fresh_collection()
    with pytest.raises(InvalidValueError, match="70,000 bytes"):
        source.copy_to(milvus_store_location, collection=collection)
    with pytest.raises(SoftDictError, match="no softdict store in the collection"):
        SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    assert len(source) == 300
    del source["x" * 70_000]
    copied = source.copy_to(milvus_store_location, collection=collection)
    assert list(copied) == list(source) and copied["key 299"] == 299.0


def test_a_copy_that_fails_takes_back_its_own_keys_only(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy into an existing empty collection that failed part of the way cleared it: the
    keys another handle wrote meanwhile, whose calls had returned, were gone (a probe: 2 runs
    of 3), and so was the kind it held. It deletes the keys it wrote, and nothing else."""
    import functools

    import softdict._copies
    from softdict.store.copying import copy_into

    monkeypatch.setattr(softdict._copies, "copy_into", functools.partial(copy_into, batch=100))
    collection = fresh_collection()
    other = SoftDict(
        encoder=FakeEncoder(), store=milvus_store_location, collection=collection, lexical=0
    )
    other["seed"] = 1.0
    del other["seed"]  # made and emptied: it keeps its kind
    rng = np.random.default_rng(0)
    keys = [f"key {i}" for i in range(300)]
    keys[250] = "x" * 70_000  # more than a Milvus VARCHAR holds
    source = SoftDict(encoder=FakeEncoder(), lexical=0)
    source.add_embeddings(keys, rng.standard_normal((300, FAKE_DIM)), np.arange(300.0))
    keys_of, theirs = source._store.keys_of, []

    def and_another_handle_writes(ids: np.ndarray) -> list[str]:
        theirs.append(f"theirs {int(ids[0])}")
        other[theirs[-1]] = 5.0  # returned: written
        return keys_of(ids)

    monkeypatch.setattr(source._store, "keys_of", and_another_handle_writes)
    with pytest.raises(InvalidValueError, match="70,000 bytes"):
        source.copy_to(milvus_store_location, collection=collection)
    fresh = SoftDict(encoder=FakeEncoder(), store=milvus_store_location, collection=collection)
    assert sorted(fresh) == sorted(theirs) and len(theirs) == 3
    assert fresh.value_kind == "scalar"
    # Into an existing collection that held nothing yet: the shape the failed copy recorded
    # (scalar values) is freed again, so that a store of labels can be copied there next.
    unshaped = fresh_collection()
    SoftDict(encoder=FakeEncoder(), store=milvus_store_location, collection=unshaped, lexical=0)
    monkeypatch.setattr(source._store, "keys_of", keys_of)
    with pytest.raises(InvalidValueError, match="70,000 bytes"):
        source.copy_to(milvus_store_location, collection=unshaped)
    labels = SoftDict({"apple": "fruit", "chair": "furniture"}, encoder=FakeEncoder(), lexical=0)
    copied = labels.copy_to(milvus_store_location, collection=unshaped)
    assert copied["chair"] == "furniture" and copied.value_kind == "categorical"


def test_a_projection_that_fails_to_be_written_leaves_the_one_in_force(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handle forgot its projection before writing the new one: a write that failed left
    it answering with none, while the store still named one (a review)."""
    sd, _ = handles(milvus_store_location, {"apple pie": 1.0, "lemon cake": 2.0})
    sd.query_projection = -np.eye(FAKE_DIM)

    def server_down(array: np.ndarray) -> None:
        raise StoreUnavailableError("the server went away")

    monkeypatch.setattr(sd._store._meta, "write_projection", server_down)
    with pytest.raises(StoreUnavailableError):
        sd.query_projection = 2 * np.eye(FAKE_DIM)
    np.testing.assert_array_equal(sd.query_projection, -np.eye(FAKE_DIM))
    assert sd.attend("apple pie").keys[0] == "lemon cake"


def test_a_store_refilled_with_another_kind_or_dimension_is_read_as_it_is_now(
    milvus_store_location: str,
) -> None:
    """A handle that had read a store of labels, which another handle cleared and filled with
    numbers, read the numbers as labels (a label for an answer, silently), and one that had read
    16-dim keys failed on 8-dim ones for good (numpy's own error): its shape was read once."""
    items = {"red fruit": "fruit", "green fruit": "fruit", "chair": "furniture"}
    first, second = handles(milvus_store_location, items)
    assert first.lookup("fruit") == "fruit"
    second.clear()
    numbers = {"red fruit": 0.0, "green fruit": 10.0, "chair": 100.0}
    second.update(numbers)
    memory = SoftDict(numbers, encoder=FakeEncoder())
    assert first.value_kind == "scalar" and first["chair"] == 100.0
    assert first.lookup("fruit") == close(memory.lookup("fruit"))
    second.clear()
    X = np.random.default_rng(0).standard_normal((2, 8))
    second.add_embeddings(["kiwi", "plum"], X, [3.0, 4.0])
    assert first.lookup_embeddings(X[1]) == close(second.lookup_embeddings(X[1]))
    with pytest.raises(ValueShapeError, match="expected \\(n, 8\\)"):
        first.lookup("kiwi")  # its encoder's 16 dims: refused as such, not by numpy


def test_a_handle_keeps_the_projection_it_opened_with(milvus_store_location: str) -> None:
    """Processes that have a store open keep their projection when another fits one: a handle
    that had not yet read it read the new one's rows against the old checksum ("fails its
    checksum", every lookup, for good), and one opened without any took the other's as soon as
    it set an unrelated option (its copy of the manifest, read again, named it)."""
    first, without = handles(milvus_store_location, {"apple pie": 1.0, "lemon cake": 2.0})
    first.query_projection = -np.eye(FAKE_DIM)
    collection = first._store._collection
    opened = SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    first.query_projection = 2 * np.eye(FAKE_DIM)  # its rows rewritten in place
    np.testing.assert_array_equal(opened.query_projection, -np.eye(FAKE_DIM))
    assert opened.attend("apple pie").keys[0] == "lemon cake"  # turned around: its own
    without.lexical = 1.0  # an option written: the manifest read again
    assert without.query_projection is None
    assert without.attend("apple pie").keys[0] == "apple pie"
    later = SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    np.testing.assert_array_equal(later.query_projection, 2 * np.eye(FAKE_DIM))


def test_pop_and_popitem_of_a_key_another_handle_deletes_meanwhile(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pop checked the key, read it and deleted it in three requests: another handle's delete
    in between made pop(key, default) raise KeyError (188-211 of 300 calls, a probe), and
    popitem() raise on a store that still held keys."""
    items = {"apple": 1.0, "pear": 2.0, "plum": 3.0, "fig": 4.0}
    first, second = handles(milvus_store_location, items)
    get, taken = first._store.get, {"plum", "pear", "fig"}

    def deleted_first(key: str) -> object:
        if key in taken:
            taken.discard(key)
            del second[key]  # another process's delete, just before this read
        return get(key)

    monkeypatch.setattr(first._store, "get", deleted_first)
    assert first.pop("plum", "gone") == "gone"
    with pytest.raises(KeyError):
        first.pop("pear")
    assert first.popitem() == ("apple", 1.0)  # "fig", the newest, went meanwhile
    assert len(second) == 0


def test_a_clear_through_another_handle_is_seen(
    milvus_store_location: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = handles(milvus_store_location, {"apple": 1, "pear": 2})
    first.lookup("apple")  # the first handle reads its directory
    second.clear()
    assert len(first) == 0 and list(first) == [] and "apple" not in first
    # Handled here: pymilvus logged each dropped collection met as an ERROR with a traceback.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert first.get("apple") is None
    first["kiwi"] = 3
    assert list(second) == ["kiwi"] and second.lookup("kiwi") == 3.0


def test_a_write_is_checked_against_the_store_another_handle_refilled(
    milvus_store_location: str,
) -> None:
    """Another kind, or another dimension, than the store held when this handle last read it
    is refused, and the store stays readable."""
    first, second = handles(milvus_store_location, {"apple": "fruit", "chair": "furniture"})
    second.clear()
    second["pear"] = 2.5
    with pytest.raises(ValueKindError, match="holds scalar values"):
        first["plum"] = "fruit"
    assert dict(first.items()) == {"pear": 2.5}

    first, second = handles(milvus_store_location)
    first.add_embeddings(["apple", "pear"], np.eye(2, FAKE_DIM), [1.0, 2.0])
    second.clear()
    second.add_embeddings(["kiwi"], np.ones((1, 8)), [3.0])
    with pytest.raises(ValueShapeError, match="expected \\(n, 8\\)"):
        first.add_embeddings(["plum"], np.ones((1, FAKE_DIM)), [4.0])
    assert list(first) == ["kiwi"] and first.lookup_embeddings(np.ones(8)) == 3.0


def test_setting_an_option_writes_it_even_at_the_value_this_handle_uses(
    milvus_store_location: str,
) -> None:
    """docs/milvus.md: open with an option to use it here; set it to write it for everyone,
    which did nothing where this handle used that value already."""
    collection = fresh_collection()
    SoftDict(
        {"apple": 1},
        encoder=FakeEncoder(),
        store=milvus_store_location,
        collection=collection,
        combination="rule-6",
        temperature=0.1,
    )
    mine = SoftDict(
        encoder=FakeEncoder(),
        store=milvus_store_location,
        collection=collection,
        combination="rule-7",
        temperature=0.5,
    )
    mine.combination, mine.temperature = "rule-7", 0.5
    later = SoftDict(encoder=FakeEncoder(), store=milvus_store_location, collection=collection)
    assert (later.combination, later.temperature) == ("rule-7", 0.5)


@pytest.mark.parametrize(
    "name", ["my prices.db", "prix-\u00e9t\u00e9.db", "a_file_name_longer_than_36_characters.db"]
)
def test_a_file_name_milvus_lite_refuses_is_a_config_error(tmp_path, name: str) -> None:
    """milvus-lite raised a bare RuntimeError for these (and the command line called it a bug
    in softdict); nothing is made."""
    with pytest.raises(ConfigError, match="ASCII letters, digits"):
        SoftDict(encoder=FakeEncoder(), store=f"milvus:{tmp_path / name}", collection="c")
    assert list(tmp_path.iterdir()) == []


def test_another_programs_sqlite_database_is_refused_and_left_as_it_was(tmp_path) -> None:
    """milvus-lite opened an application's own SQLite database and added its tables to it; a
    file that is no database at all it refused. Both are refused now, byte for byte unchanged."""
    import sqlite3

    database = tmp_path / "app.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        connection.execute("INSERT INTO users VALUES (1, 'ann')")
    connection.close()
    notes = tmp_path / "notes.db"
    notes.write_text("my notes, not a database\n")
    before = {path: path.read_bytes() for path in (database, notes)}
    with pytest.raises(StoreFormatError, match="SQLite database that Milvus Lite did not make"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder(), store=f"milvus:{database}", collection="c")
    with pytest.raises(StoreUnavailableError, match="Is it a Milvus Lite file"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder(), store=f"milvus:{notes}", collection="c")
    assert {path: path.read_bytes() for path in before} == before
    made = tmp_path / "made.db"  # and a file Milvus Lite made opens again, in this process
    SoftDict({"apple": 1.0}, encoder=FakeEncoder(), store=f"milvus:{made}", collection="c")
    assert len(SoftDict(encoder=FakeEncoder(), store=f"milvus:{made}", collection="c")) == 1


def test_a_build_into_an_empty_collection_records_the_combination_typed(
    milvus_lite_file: str, tmp_path
) -> None:
    """A collection a failed build left empty kept its own combination, and the one typed for
    the next build applied to that build's process alone."""
    from softdict._cli import main

    table = tmp_path / "prices.csv"
    table.write_text("name,price\napple,10\nchair,2\n")
    store, collection = "milvus:" + milvus_lite_file, fresh_collection()
    SoftDict(store=store, collection=collection)  # made empty, under the default combination
    arguments = ["build", str(table), "--key", "name", "--value", "price", "-o", store]
    assert main([*arguments, "--collection", collection, "--combination", "rule-3"]) == 0
    assert SoftDict(store=store, collection=collection).combination == "rule-3"


def test_a_lite_file_held_elsewhere_stays_refused_when_tried_again(tmp_path) -> None:
    """milvus-lite's refused server unlinks the lock file its holder took, so a second try in
    the refused process opened the file beside the holder, and both wrote it (a probe: 21 keys
    seen by one process, 41 by the other). softdict's own lock refuses every try."""
    import subprocess
    import sys
    from pathlib import Path

    store = f"milvus:{tmp_path / 'held.db'}"
    SoftDict({"apple": 1.0}, encoder=FakeEncoder(), store=store, collection="c")
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from _support import FakeEncoder
from softdict import SoftDict, StoreUnavailableError
for attempt in range(2):
    try:
        SoftDict(encoder=FakeEncoder(), store={store!r}, collection="c")
        print("opened", flush=True)
    except StoreUnavailableError as exc:
        print("refused:", exc, flush=True)
"""
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    lines = child.stdout.splitlines()
    assert len(lines) == 2 and all("open in another process" in line for line in lines), lines


def test_the_next_writer_deletes_the_rows_of_idle_writers(milvus_store_location: str) -> None:
    """Every process that wrote kept its counter row, which every lookup reads: thousands of
    short-lived writers would make each lookup read megabytes. A process's first write deletes
    those idle an hour (a day, where their write was left open); reads delete nothing."""
    import json
    import time

    first, second = handles(milvus_store_location, {"apple": 1.0})
    metadata = first._store._meta  # type: ignore[attr-defined]
    now = time.time()

    def row(age: float, open_write: int | None = None) -> str:
        return json.dumps(
            {"writes": 1, "changed": [[1, [5]]], "open": open_write, "time": now - age}
        )

    rows = {
        "writer:idle": row(2 * 3600),
        "writer:recent": row(60),
        "writer:open-for-hours": row(2 * 3600, 1),
        "writer:open-for-days": row(2 * 86400, 1),
        "writer:of-an-older-softdict": json.dumps({"writes": 1, "changed": [], "open": None}),
    }
    metadata.rows.write(rows)
    assert second.lookup("apple") == 1.0 and set(rows) <= set(metadata.writers())
    second["pear"] = 2.0
    left = set(metadata.writers())
    assert not left & {"writer:idle", "writer:open-for-days"}
    assert {"writer:recent", "writer:open-for-hours", "writer:of-an-older-softdict"} <= left
    assert list(first) == ["apple", "pear"] and first.lookup("pear") == close(2.0)


def test_the_command_line_leaves_a_milvus_store_as_it_found_it(
    milvus_lite_file: str,
    tmp_path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three probes of the command line on Milvus: query's --temperature and --lexical were
    written to the store for every later reader, even by a query that failed; query and info
    of a mistyped Lite path made that file; a build that failed left an empty collection that
    kept the attempt's options and encoder, and refused the next build's."""
    from softdict._cli import main

    table = tmp_path / "prices.csv"
    table.write_text("name,price\napple,10\nbanana,5\nchair,2\n")
    store, collection = "milvus:" + milvus_lite_file, fresh_collection()
    build = ["build", str(table), "--key", "name", "--value", "price", "-o", store]
    assert main([*build, "--collection", collection]) == 0
    query = ["query", store, "fruit", "--collection", collection]
    assert main([*query, "--temperature", "3", "--lexical", "0.3", "--json"]) == 0
    assert main([*query, "--temperature", "3", "--lexical", "-1"]) == 1
    capsys.readouterr()
    assert main(["info", store, "--collection", collection]) == 0
    assert "temperature 0.05" in capsys.readouterr().out
    assert SoftDict.open(store, collection=collection).lexical == 1.0

    typo = tmp_path / "typo.db"
    for command in (["query", f"milvus:{typo}", "fruit"], ["info", f"milvus:{typo}"]):
        assert main([*command, "--collection", collection]) == 1
        assert "no Milvus Lite file" in capsys.readouterr().err
    assert not typo.exists()

    long_label = tmp_path / "labels.csv"
    long_label.write_text(f"name,label\napple,fruit\nchair,{'x' * 70_000}\n")
    failed = fresh_collection()
    arguments = ["build", str(long_label), "--key", "name", "--value", "label", "-o", store]
    assert main([*arguments, "--collection", failed]) == 1
    assert "65,536 bytes" in capsys.readouterr().err
    with pytest.raises(StoreFormatError, match="no softdict store in the collection"):
        SoftDict.open(store, collection=failed)

    def interrupted(self: SoftDict, *args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(SoftDict, "update", interrupted)  # Ctrl-C while it encodes
    assert main([*build, "--collection", failed]) == 130
    with pytest.raises(StoreFormatError, match="no softdict store in the collection"):
        SoftDict.open(store, collection=failed)


def test_a_store_made_for_an_encoder_that_fails_to_load_is_not_left(
    milvus_store_location: str,
) -> None:
    """The collection was made before the encoder loaded, and stayed, empty, after it failed."""
    from softdict import EncoderError
    from softdict.encoders import register_encoder_name

    def weights_gone() -> FakeEncoder:
        raise FileNotFoundError("weights gone")

    register_encoder_name("test-milvus-weights-gone", weights_gone)
    collection = fresh_collection()
    with pytest.raises(EncoderError, match="weights gone"):
        SoftDict(
            store=milvus_store_location, collection=collection, encoder="test-milvus-weights-gone"
        )
    with pytest.raises(StoreFormatError, match="no softdict store in the collection"):
        SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    made = SoftDict(
        {"apple": 1.0}, encoder=FakeEncoder(), store=milvus_store_location, collection=collection
    )
    assert list(made) == ["apple"]


def test_a_copy_pairs_each_key_with_its_own_value_and_vector(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy() (as save and pickle) listed the ids, then the keys in a second listing: a write
    by another handle between the two (a probe: 3-13 corrupt copies in 20 s) paired keys with
    their neighbours' values and vectors, which save wrote with good checksums. Here the second
    listing is another moment's (rotated by one): a copy takes the keys of the ids it copies."""
    items = {f"key {i}": float(i) for i in range(12)}
    sd, _ = handles(milvus_store_location, items)
    store = sd._store
    moment = store.keys()
    monkeypatch.setattr(store, "keys", lambda: moment[1:] + moment[:1])
    copy = sd.copy()
    assert dict(copy.items()) == items
    assert all(copy.nearest(key, k=1)[0][0] == key for key in items)  # its own vector


def test_an_option_written_from_a_stale_manifest_leaves_the_keys_another_handle_wrote(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle set an option by reading the manifest and writing it back whole: read before
    another handle's first insert and written after it, it put back dim None, and every handle
    opened later saw no keys (a probe, 7 of 26 rounds unaided). The shape has its own row."""
    setter, writer = handles(milvus_store_location)
    meta = setter._store._meta
    stale = meta.read_manifest()  # read before the first insert...
    writer.update({f"key {i}": float(i) for i in range(20)})
    monkeypatch.setattr(meta, "read_manifest", lambda: stale)
    setter.temperature = 0.5  # ...written back after it
    monkeypatch.undo()
    collection = setter._store._collection
    later = SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    assert len(later) == 20 and later["key 7"] == 7.0 and later.temperature == 0.5
    assert later.nearest("key 7", k=1)[0][0] == "key 7"


def test_a_manifest_row_missing_for_a_moment_is_read_again(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Milvus Lite's upsert deletes a row a moment before it writes it again: a handle reading
    the manifest then called the store damaged (94-184 of 600 inserts, a probe). A process
    that makes a store writes that row up to 1.2 s after the collection (a cold Lite start): the
    row is looked for 2.5 s, here missed 6 times (1.3 s of waiting)."""
    sd, _ = handles(milvus_store_location, {"apple": 1.0})
    rows = sd._store._meta.rows
    read, misses = rows.read, [6]  # the old 6 tries saw 5 misses at most

    def missing_for_a_while(names):  # type: ignore[no-untyped-def]
        if "manifest" in names and misses[0]:
            misses[0] -= 1
            return {}
        return read(names)

    monkeypatch.setattr(rows, "read", missing_for_a_while)
    sd["pear"] = 2.0
    assert misses == [0] and list(sd) == ["apple", "pear"]


def test_two_threads_opening_one_new_lite_file_both_get_it(tmp_path) -> None:
    """This process's hold on a Lite file was checked and then taken with nothing between: a
    second thread opening the file at the same moment was told another process had it (a
    probe, every run). Opening one store from several threads is supported."""
    import threading

    store = f"milvus:{tmp_path / 'shared.db'}"
    barrier, opened, failed = threading.Barrier(2), {}, []

    def open_it(name: str) -> None:
        barrier.wait()
        try:
            opened[name] = SoftDict(encoder=FakeEncoder(), store=store, collection=name)
        except Exception as exc:  # what the test reports
            failed.append(exc)

    threads = [threading.Thread(target=open_it, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed and len(opened) == 2
    opened["a"]["apple"] = 1.0
    assert list(SoftDict(encoder=FakeEncoder(), store=store, collection="a")) == ["apple"]
