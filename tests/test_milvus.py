"""The Milvus store (``store="milvus:..."``) against the in-memory store and the naive formula,
on Milvus Lite embedded and served by its binary on 127.0.0.1 (``tests/_milvus.py``): lookups of
every kind, masks in each of their filter forms, the spelling channel, fit, calibrate, copying
both ways, reopening, errors, cluster limits, the command line, two processes sharing a served
store, and a server killed in the middle of an update.

Keys are real names (pycountry's countries); the fast tests embed them with the seeded fake
encoder, and one integration test with the bundled model.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pycountry
import pytest
from _milvus import MilvusServer, fresh_collection
from _support import FAKE_DIM, FakeEncoder, assert_close, close, same_value

from softdict import (
    ConfigError,
    EncoderError,
    InvalidValueError,
    SoftDict,
    StoreFormatError,
    StoreUnavailableError,
)
from softdict._cli import main
from softdict._config import SoftDictConfig
from softdict.store.milvus import _client, _collection, _directory, _ids, backend
from softdict.store.milvus._metadata import FORMAT_VERSION

pytestmark = pytest.mark.milvus

COUNTRIES = sorted(country.name for country in pycountry.countries)[:150]
# Values of each kind, from the same real data: a number, a vector, a label.
NUMERIC = {country.name: int(country.numeric) for country in pycountry.countries}
QUERIES = ["republic of korea", "united states", "guinea", "island", "saint kitts", "kingdom"]


def items_of(kind: str) -> dict[str, object]:
    if kind == "scalar":
        return {name: NUMERIC[name] for name in COUNTRIES}
    if kind == "vector":
        return {name: [NUMERIC[name] / 100.0, len(name)] for name in COUNTRIES}
    return {name: name[0] for name in COUNTRIES}  # categorical: the first letter


@pytest.fixture(params=["kept", "in-milvus"])
def vectors_where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where a small store's vectors are scored: kept in this process (the default up to
    10,000 keys), or in Milvus, as in a large store (the search, filters and limits)."""
    if request.param == "in-milvus":
        monkeypatch.setattr(_directory, "EXACT_MAX_KEYS", 0)
    return request.param


def twins(location: str, kind: str = "scalar", **options) -> tuple[SoftDict, SoftDict]:
    """The same store in memory and in Milvus."""
    encoder = FakeEncoder()
    items = items_of(kind)
    memory = SoftDict(items, encoder=encoder, **options)
    milvus = SoftDict(
        items, encoder=encoder, store=location, collection=fresh_collection(), **options
    )
    return memory, milvus


def assert_same_values(a: object, b: object) -> None:
    if isinstance(a, (list, tuple)) and a and not isinstance(a[0], float):
        assert a == b
    else:
        assert_close(np.asarray(a, float), np.asarray(b, float))


@pytest.mark.parametrize("kind", ["scalar", "vector", "categorical"])
def test_lookups_match_the_memory_store(
    milvus_store_location: str, kind: str, vectors_where: str
) -> None:
    memory, milvus = twins(milvus_store_location, kind)
    assert list(milvus) == list(memory) and len(milvus) == len(memory)
    assert all(same_value(milvus[key], memory[key]) for key in COUNTRIES)
    assert_same_values(milvus.lookup(QUERIES), memory.lookup(QUERIES))
    mine, theirs = milvus.attend(QUERIES[0]), memory.attend(QUERIES[0])
    assert mine.keys == theirs.keys and mine.k == theirs.k == len(COUNTRIES)
    assert_close(mine.weights, theirs.weights, atol=1e-6)
    mine_near, their_near = milvus.nearest(QUERIES[1], k=4), memory.nearest(QUERIES[1], k=4)
    assert [key for key, _ in mine_near] == [key for key, _ in their_near]
    assert [s for _, s in mine_near] == close([s for _, s in their_near], abs=1e-6)


def test_lookups_match_the_naive_formula(milvus_store_location: str) -> None:
    """softmax(q·K/T)·V with cosine, computed here from the encoder's embeddings."""
    _, milvus = twins(milvus_store_location, lexical=0.0)
    encoder = FakeEncoder()
    keys = encoder.encode(COUNTRIES).astype(np.float64)
    queries = encoder.encode(QUERIES).astype(np.float64)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    logits = queries @ keys.T / milvus.temperature
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    expected = weights @ np.array([NUMERIC[name] for name in COUNTRIES], dtype=float)
    assert_close(milvus.lookup(QUERIES), expected)


@pytest.mark.parametrize(
    "mask",
    [
        COUNTRIES[:3],  # a handful: scored here from their vectors
        COUNTRIES[:40],  # "id in [...]"
        COUNTRIES[5:],  # most keys: "id not in" the complement
        lambda key: key.startswith("B"),  # a predicate over every key
    ],
    ids=["few", "in", "not-in", "predicate"],
)
def test_masks_in_each_filter_form(
    milvus_store_location: str, mask, vectors_where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "IN_LIST_MAX", 64)  # a long list's complement, at this size
    memory, milvus = twins(milvus_store_location, top_k=10)
    for query in QUERIES[:3]:
        mine, theirs = milvus.attend(query, mask=mask), memory.attend(query, mask=mask)
        assert mine.keys == theirs.keys
        assert_close(mine.weights, theirs.weights, atol=1e-6)


def test_min_score_top_k_and_the_estimated_tail(
    milvus_store_location: str, vectors_where: str
) -> None:
    memory, milvus = twins(milvus_store_location, top_k=5)
    assert milvus.lookup("zzzz qqqq", min_score=0.99, default=None) is None
    assert_same_values(milvus.lookup(QUERIES), memory.lookup(QUERIES))
    assert milvus.attend(QUERIES[0]).k == 5
    # Above EXACT_MAX_KEYS the tail is sampled; here the store is small, so force the head.
    memory, milvus = twins(milvus_store_location, max_k=16, lexical=0.0)
    assert_same_values(milvus.lookup(QUERIES), memory.lookup(QUERIES))


def test_a_misspelt_query_finds_its_key_through_spelling(milvus_store_location: str) -> None:
    memory, milvus = twins(milvus_store_location)
    for typo, meant in [("Grmany", "Germany"), ("Austrailia", "Australia"), ("Brazl", "Brazil")]:
        if meant not in COUNTRIES:
            continue
        assert milvus.attend(typo).keys[0] == memory.attend(typo).keys[0] == meant


def test_fit_and_calibrate_as_in_memory(milvus_store_location: str) -> None:
    memory, milvus = twins(milvus_store_location)
    # Lower-cased names alone embed as their keys (the fake encoder folds case): nothing to
    # learn, and a fit that lowers no held-out loss is not kept. An article before them is.
    pairs = [("the " + name.lower(), name) for name in COUNTRIES[::3]]
    for sd in (memory, milvus):
        assert sd.fit(pairs, max_steps=50).kept
    np.testing.assert_allclose(milvus.query_projection, memory.query_projection, atol=1e-4)
    assert_same_values(milvus.lookup(QUERIES), memory.lookup(QUERIES))
    assert milvus.calibrate(sample_size=100) == close(memory.calibrate(sample_size=100))


def test_label_ties_and_calibration_as_in_memory(
    milvus_store_location: str, vectors_where: str
) -> None:
    """Labels of equal summed weight go by the labels alone (docs/values.md), in Milvus as in
    memory, whatever each store went through: here the Milvus store overwrote and deleted keys
    whose labels no key holds now, and the memory store is built fresh from its items. Keys
    share one vector and the temperature is high, so every weight is exactly 1/n. Calibrating
    on labels compares each key's label with its neighbours' labels, read in separate requests,
    and chooses as in memory."""
    encoder = FakeEncoder()
    vector = np.ones((1, FAKE_DIM), np.float32)
    options = {"value_kind": "categorical", "temperature": 1e6}
    milvus = SoftDict(
        encoder=encoder, store=milvus_store_location, collection=fresh_collection(), **options
    )
    for key, label in [("a", "zebra"), ("b", "ant"), ("c", 7), ("d", "yak")]:
        milvus.add_embeddings([key], vector, [label])
    milvus["b"] = "moth"  # "ant" leaves, as does 7 with "c"
    del milvus["c"]
    milvus.add_embeddings(["e"], vector, [{"id": 1}])
    items = list(milvus.items())
    for order in (items, items[::-1]):
        memory = SoftDict(encoder=encoder, **options)
        memory.add_embeddings(
            [key for key, _ in order], np.repeat(vector, len(order), 0), [v for _, v in order]
        )
        assert milvus.lookup_embeddings(vector[0]) == memory.lookup_embeddings(vector[0])
        mine, theirs = milvus.attend_embeddings(vector[0]), memory.attend_embeddings(vector[0])
        assert not isinstance(mine, list) and not isinstance(theirs, list)
        assert mine.distribution is not None and theirs.distribution is not None
        assert list(mine.distribution.items()) == list(theirs.distribution.items())
    memory, milvus = twins(milvus_store_location, "categorical")
    assert milvus.calibrate(sample_size=100) == close(memory.calibrate(sample_size=100))


def test_copy_to_milvus_and_back_keeps_everything(milvus_store_location: str) -> None:
    encoder = FakeEncoder()
    memory = SoftDict(items_of("vector"), encoder=encoder, temperature=0.1, lexical=0.5)
    memory.query_projection = np.eye(FAKE_DIM, dtype=np.float32)[::-1]
    collection = fresh_collection()
    milvus = memory.copy_to(milvus_store_location, collection=collection)
    back = SoftDict.open(milvus_store_location, collection=collection, encoder=encoder).copy_to()
    for sd in (milvus, back):
        assert list(sd) == list(memory)
        assert all(np.array_equal(sd[key], memory[key]) for key in COUNTRIES)
        np.testing.assert_array_equal(sd.query_projection, memory.query_projection)
        assert (sd.temperature, sd.lexical) == (0.1, 0.5)
        assert_same_values(sd.lookup(QUERIES), memory.lookup(QUERIES))
    with pytest.raises(ConfigError, match="empty store"):
        memory.copy_to(milvus_store_location, collection=collection)


def test_copy_to_of_an_index_milvus_lacks_makes_no_lite_file(tmp_path: Path) -> None:
    """The index was checked after connecting, which made the Lite file: a refused copy left an
    empty database (and its lock files) where none was."""
    memory = SoftDict(encoder=FakeEncoder(), index="HNSW8")
    memory["a"] = 1.0
    with pytest.raises(ConfigError, match="'HNSW8' is not available in a Milvus store"):
        memory.copy_to(f"milvus:{tmp_path / 'app.db'}", collection="c")
    assert list(tmp_path.iterdir()) == []


def test_copy_to_an_empty_collection_needs_the_copys_options(milvus_store_location: str) -> None:
    """An existing empty collection keeps its options: a copy into one made with others would
    answer otherwise in every other process (and with top_k or temperature left as None in the
    copy, in this one too). It is refused, naming them; one made with the same options but for
    this process's own (batch_size) takes the copy."""
    encoder = FakeEncoder()
    memory = SoftDict(items_of("scalar"), encoder=encoder, temperature=0.1)
    for name, value in (("combination", "rule-4"), ("top_k", 8), ("temperature", 0.3)):
        made = fresh_collection()
        options = {"temperature": 0.1, name: value}
        SoftDict(encoder=encoder, store=milvus_store_location, collection=made, **options)
        with pytest.raises(ConfigError, match=f"other options: {name}={value!r} "):
            memory.copy_to(milvus_store_location, collection=made)
        reopened = SoftDict.open(milvus_store_location, collection=made, encoder=encoder)
        assert len(reopened) == 0
    alike = fresh_collection()
    SoftDict(
        encoder=encoder, store=milvus_store_location, collection=alike, temperature=0.1,
        batch_size=7,
    )  # fmt: skip
    copied = memory.copy_to(milvus_store_location, collection=alike)
    again = SoftDict.open(milvus_store_location, collection=alike, encoder=encoder)
    assert dict(again) == dict(memory) and again.temperature == copied.temperature == 0.1


def test_reopening_sees_the_store_with_its_options(milvus_store_location: str) -> None:
    encoder = FakeEncoder()
    collection = fresh_collection()
    first = SoftDict(
        {"apple": 1.0},
        encoder=encoder,
        store=milvus_store_location,
        collection=collection,
        temperature=0.2,
    )
    again = SoftDict(encoder=encoder, store=milvus_store_location, collection=collection)
    assert dict(again) == {"apple": 1.0} and again.temperature == 0.2
    again["pear"] = 2.0
    assert list(first) == ["apple", "pear"] and first["pear"] == 2.0 and len(first) == 2
    del first["apple"]
    assert "apple" not in again and again.nearest("apple", k=5)[0][0] == "pear"
    # Options given when opening are this process's; the ones a store is made with are fixed.
    hotter = SoftDict(
        encoder=encoder, store=milvus_store_location, collection=collection, temperature=0.5
    )
    assert hotter.temperature == 0.5 and again.temperature == 0.2
    hotter.lexical = 0.25  # set: written to the store for whoever opens it next
    later = SoftDict.open(milvus_store_location, collection=collection, encoder=encoder)
    assert (later.temperature, later.lexical) == (0.2, 0.25)
    with pytest.raises(ConfigError, match=r"other options: similarity='dot' \(it has 'cosine'\)"):
        SoftDict(
            encoder=encoder, store=milvus_store_location, collection=collection, similarity="dot"
        )
    # Its value kind was inferred (the option None): naming the kind it holds is no conflict,
    # another kind is.
    scalar = SoftDict(
        encoder=encoder, store=milvus_store_location, collection=collection, value_kind="scalar"
    )
    assert scalar["pear"] == 2.0
    with pytest.raises(ConfigError, match="value_kind='categorical'"):
        SoftDict(
            encoder=encoder,
            store=milvus_store_location,
            collection=collection,
            value_kind="categorical",
        )


def test_an_option_named_at_its_default_overrides_the_stored_one(
    milvus_store_location: str,
) -> None:
    """Opening a store made under an earlier default combination with the default combination
    named uses the default in this process: a named option could not be told from the default
    left alone, and the store's own was kept silently. Leaving it out keeps the store's; an
    option named as None (top_k) leaves the store's too."""
    encoder = FakeEncoder()
    collection = fresh_collection()
    SoftDict(
        {"apple": 1.0},
        encoder=encoder,
        store=milvus_store_location,
        collection=collection,
        combination="rule-4",
        lexical=0.25,
        top_k=8,
    )
    default = SoftDictConfig()
    named = SoftDict(
        encoder=encoder,
        store=milvus_store_location,
        collection=collection,
        combination=default.combination.value,
        lexical=default.lexical,
        top_k=None,
    )
    assert named.combination == default.combination.value and named.lexical == default.lexical
    assert named.top_k == 8
    kept = SoftDict(encoder=encoder, store=milvus_store_location, collection=collection)
    assert (kept.combination, kept.lexical, kept.top_k) == ("rule-4", 0.25, 8)
    # A fixed option named at its default must be the store's, as any other value must.
    flat = fresh_collection()
    SoftDict(encoder=encoder, store=milvus_store_location, collection=flat, index="flat")
    with pytest.raises(ConfigError, match="index='auto'"):
        SoftDict(encoder=encoder, store=milvus_store_location, collection=flat, index="auto")
    reopened = SoftDict(encoder=encoder, store=milvus_store_location, collection=flat)
    assert reopened._store.config.index == "flat"


def test_a_store_of_format_1_keeps_the_hand_set_rule(milvus_store_location: str) -> None:
    """A store written before the learned combination (softdict-milvus format 1, whose config
    names none) answered with the hand-set rule, and opens with it."""
    from pymilvus import MilvusClient

    collection = fresh_collection()
    items = {name: float(i) for i, name in enumerate(COUNTRIES[:40])}
    made = SoftDict(
        items,
        encoder=FakeEncoder(),
        store=milvus_store_location,
        collection=collection,
        combination="learned-1",
    )
    assert made.combination == "learned-1"
    client = MilvusClient(milvus_store_location.removeprefix("milvus:"))
    meta = collection + "__softdict"
    manifest = json.loads(client.get(meta, ids=["manifest"], output_fields=["text"])[0]["text"])
    manifest["format_version"] = 1
    del manifest["config"]["combination"]
    text = json.dumps(manifest)
    client.upsert(meta, [{"name": "manifest", "text": text, "unused": [0.0, 0.0]}])
    old = SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    assert old.combination == "rule-1"
    assert old.index_description.endswith("softdict-milvus 1)")  # as stored, not this code's
    rule = SoftDict(items, encoder=FakeEncoder(), combination="rule-1")
    assert old.attend("Germny").scores[:5] == close(rule.attend("Germny").scores[:5])


def test_a_combination_this_softdict_does_not_know_asks_for_an_upgrade(
    milvus_store_location: str,
) -> None:
    """A collection whose manifest names a combination this softdict does not know was made by
    a newer softdict: opening it says to upgrade, not to make the store again."""
    from pymilvus import MilvusClient

    collection = fresh_collection()
    SoftDict({"Germany": 1.0, "France": 2.0}, encoder=FakeEncoder(), store=milvus_store_location,
             collection=collection)  # fmt: skip
    client = MilvusClient(milvus_store_location.removeprefix("milvus:"))
    meta = collection + "__softdict"
    manifest = json.loads(client.get(meta, ids=["manifest"], output_fields=["text"])[0]["text"])
    manifest["config"]["combination"] = "rule-9"
    text = json.dumps(manifest)
    client.upsert(meta, [{"name": "manifest", "text": text, "unused": [0.0, 0.0]}])
    with pytest.raises(StoreFormatError, match=r"'rule-9'.*newer softdict.*upgrade softdict"):
        SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())


class _OtherEncoder(FakeEncoder):
    name = "another-encoder"

    def encode(self, texts: list[str]) -> np.ndarray:
        return -super().encode(texts)


def test_another_encoder_or_schema_is_refused(milvus_store_location: str) -> None:
    collection = fresh_collection()
    SoftDict(
        {"apple": 1.0}, encoder=FakeEncoder(), store=milvus_store_location, collection=collection
    )
    with pytest.raises(EncoderError, match="embeds the probe text differently"):
        SoftDict.open(milvus_store_location, collection=collection, encoder=_OtherEncoder())
    from pymilvus import MilvusClient

    client = MilvusClient(milvus_store_location.removeprefix("milvus:"))
    foreign = fresh_collection("foreign")
    client.create_collection(foreign, dimension=8)
    with pytest.raises(StoreFormatError, match="not a softdict store"):
        SoftDict(encoder=FakeEncoder(), store=milvus_store_location, collection=foreign)
    with pytest.raises(StoreFormatError, match="no softdict store"):
        SoftDict.open(milvus_store_location, collection=fresh_collection())


def test_a_hash_collision_is_refused_and_changes_nothing(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sd = SoftDict(
        {"apple": 1.0},
        encoder=FakeEncoder(),
        store=milvus_store_location,
        collection=fresh_collection(),
    )
    real = _ids.key_id
    monkeypatch.setattr(_ids, "key_id", lambda key: real("apple") if key == "pear" else real(key))
    with pytest.raises(InvalidValueError, match="same id"):
        sd.update({"plum": 3.0, "pear": 2.0})
    assert dict(sd) == {"apple": 1.0} and "pear" not in sd


def test_a_server_that_is_down_is_a_softdict_error() -> None:
    with pytest.raises(StoreUnavailableError, match="cannot be reached"):
        SoftDict(encoder=FakeEncoder(), store="milvus:http://127.0.0.1:9", collection="x")
    with pytest.raises(ConfigError, match=r"must end in \.db"):
        SoftDict(encoder=FakeEncoder(), store="milvus:./prices", collection="x")
    with pytest.raises(ConfigError, match="collection"):
        SoftDict(encoder=FakeEncoder(), store="milvus:./prices.db")


def test_credentials_reach_pymilvus_and_no_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token from the environment and a password in the URI go to pymilvus; the errors and
    descriptions a user sees hide both."""
    import pymilvus
    from pymilvus.exceptions import MilvusException

    given: dict[str, object] = {}

    def refusing(**kwargs: object) -> None:
        given.update(kwargs)
        raise MilvusException(code=2, message=f"cannot connect to {kwargs} ({kwargs['uri']})")

    monkeypatch.setattr(pymilvus, "MilvusClient", refusing)
    monkeypatch.setenv(_client.TOKEN_VARIABLE, "api-key-123")
    uri = "https://ann:s3cret@milvus.example:19530/prices_db"
    with pytest.raises(StoreUnavailableError, match="cannot be reached") as caught:
        SoftDict(encoder=FakeEncoder(), store=f"milvus:{uri}", collection="x")
    assert given == {"uri": uri, "token": "api-key-123"}
    message = str(caught.value)
    assert "s3cret" not in message and "api-key-123" not in message
    assert "https://ann:***@milvus.example:19530/prices_db" in message
    assert _client.shown("http://127.0.0.1:19530") == "http://127.0.0.1:19530"
    assert _client.shown("./prices.db") == "./prices.db"
    assert _client.shown("http://u:p@[::1]:19530") == "http://u:***@[::1]:19530"


def test_a_connection_the_server_dropped_is_replaced_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """pymilvus hands a new client the shared connection a server dropped while it was idle
    (milvus-lite does after a minute or two): that first attempt fails, the second connects. A
    Lite file this process never opened is not tried again: another process holds it."""
    import pymilvus
    from pymilvus.exceptions import MilvusException

    attempts: list[str] = []
    failing = [True]

    class DroppedOnce:
        def __init__(self, uri: str) -> None:
            attempts.append(uri)
            if failing[0]:
                failing[0] = False
                raise MilvusException(code=2, message="Fail connecting to server")

    monkeypatch.setattr(pymilvus, "MilvusClient", DroppedOnce)
    assert isinstance(_client.connect("http://127.0.0.1:19530"), DroppedOnce)
    assert attempts == ["http://127.0.0.1:19530"] * 2
    lite = str(tmp_path / "held.db")
    attempts.clear()
    failing[0] = True
    with pytest.raises(StoreUnavailableError, match="one process at a time"):
        _client.connect(lite)
    assert attempts == [lite]
    _client.connect(lite)  # opened here now: a later failure is tried again
    attempts.clear()
    failing[0] = True
    assert isinstance(_client.connect(lite), DroppedOnce) and attempts == [lite] * 2


@pytest.mark.parametrize(
    "name", ['c"; drop', "it's", "two words", "2prices", "prices-eu", "prix_é", "p" * 256]
)
def test_an_invalid_collection_name_is_refused_before_any_request(
    name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The name is checked against Milvus's rule first: the server below does not exist, so a
    request sent would be a StoreUnavailableError, not a ConfigError naming the rule."""
    for store in ("milvus:http://127.0.0.1:9", "milvus:./never-made.db"):
        with pytest.raises(ConfigError, match="start with a letter or an underscore"):
            SoftDict(encoder=FakeEncoder(), store=store, collection=name)
    with pytest.raises(ConfigError, match="letters, digits and underscores"):
        SoftDict(encoder=FakeEncoder()).copy_to("milvus:http://127.0.0.1:9", collection=name)
    assert not Path("never-made.db").exists()
    assert capfd.readouterr().err == ""


def test_requests_stay_within_the_cluster_limits(
    milvus_store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the limits made tiny, every search and get keeps to them, and the answers stay."""
    monkeypatch.setattr(_directory, "EXACT_MAX_KEYS", 0)  # scored in Milvus, not here
    memory, milvus = twins(milvus_store_location, top_k=20, lexical=0.0)
    expected = memory.lookup(QUERIES * 3)
    monkeypatch.setattr(backend, "MAX_TOPK", 7)
    monkeypatch.setattr(_collection, "RESULTS_PER_SEARCH", 20)
    monkeypatch.setattr(_collection, "MAX_NQ", 2)
    monkeypatch.setattr(_collection, "IDS_PER_REQUEST", 5)
    client = milvus._store._client  # the test looks at the requests themselves
    searches, gets = [], []
    search, get = client.search, client.get

    def counted_search(*args, **kwargs):
        searches.append((len(kwargs["data"]), kwargs["limit"]))
        return search(*args, **kwargs)

    def counted_get(*args, **kwargs):
        gets.append(len(kwargs["ids"]))
        return get(*args, **kwargs)

    monkeypatch.setattr(client, "search", counted_search)
    monkeypatch.setattr(client, "get", counted_get)
    assert_same_values(milvus.lookup(QUERIES * 3), expected)
    assert searches and all(nq <= 2 and k <= 7 and nq * k <= 20 for nq, k in searches)
    assert gets and max(gets) <= 5


def test_command_line_builds_queries_and_describes(
    milvus_lite_file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "prices.csv"
    table.write_text("name,price\napple,10\nbanana,5\nchair,2\n")
    store = "milvus:" + milvus_lite_file
    collection = fresh_collection()
    assert (
        main(
            [
                "build",
                str(table),
                "--key",
                "name",
                "--value",
                "price",
                "-o",
                store,
                "--collection",
                collection,
            ]
        )
        == 0
    )
    assert main(["query", store, "fruit", "--collection", collection, "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[-1])["keys"][0]["key"] == "banana"
    assert main(["info", store, "--collection", collection]) == 0
    info = capsys.readouterr().out
    assert "keys         3" in info
    assert f"softdict-milvus {FORMAT_VERSION})" in info  # the stored format, on the index line
    assert main(["query", store, "fruit"]) == 1  # no --collection
    assert "--collection" in capsys.readouterr().err


# -- several processes -----------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from _support import FakeEncoder
    from softdict import SoftDict

    sd = SoftDict(encoder=FakeEncoder(), store={store!r}, collection={collection!r})
    for i in range({count}):
        sd.update({{f"{prefix} {{i}} " + str(j): float(i) for j in range({batch})}})
        print(i, flush=True)
    print("done", len(sd), flush=True)
    """
)


def _child(store: str, collection: str, prefix: str, count: int, batch: int = 1):
    code = _CHILD.format(
        tests=str(Path(__file__).parent),
        store=store,
        collection=collection,
        prefix=prefix,
        count=count,
        batch=batch,
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_lite_file_open_in_another_process_is_refused_clearly(tmp_path: Path) -> None:
    store = f"milvus:{tmp_path / 'held.db'}"
    SoftDict({"apple": 1.0}, encoder=FakeEncoder(), store=store, collection="c")
    child = _child(store, "c", "other", 1)
    _, err = child.communicate(timeout=300)
    assert child.returncode != 0
    assert "StoreUnavailableError" in err and "one process at a time" in err


def test_two_processes_share_a_served_store(milvus_server: MilvusServer) -> None:
    store, collection = "milvus:" + milvus_server.uri, fresh_collection()
    mine = SoftDict(encoder=FakeEncoder(), store=store, collection=collection)
    child = _child(store, collection, "child", 20)
    for i in range(20):
        mine[f"parent {i} 0"] = float(i)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    keys = set(mine)
    assert {f"child {i} 0" for i in range(20)} <= keys and {
        f"parent {i} 0" for i in range(20)
    } <= keys
    assert len(mine) == 40
    # The other process's keys are found by meaning and by spelling.
    assert mine.attend("child 7 0", mask=lambda key: key.startswith("child")).keys[0] == "child 7 0"
    assert mine.attend("chlid 7 0").keys[0] == "child 7 0"


def test_a_server_killed_mid_update_loses_nothing_reported_written(tmp_path: Path) -> None:
    server = MilvusServer(tmp_path / "killed.db").start()
    store, collection = "milvus:" + server.uri, fresh_collection()
    child = _child(store, collection, "key", 1000, batch=50)
    reported = []
    try:
        assert child.stdout is not None
        while len(reported) < 5:
            reported.append(int(child.stdout.readline()))
        server.stop(signal.SIGKILL)
        child.wait(timeout=120)
        assert child.returncode != 0  # its next update failed: the server was gone
        assert "StoreUnavailableError" in child.stderr.read()  # type: ignore[union-attr]
        # Everything a returned update reported (and perhaps part of the one in flight).
        server = MilvusServer(tmp_path / "killed.db", server.port).start()
        sd = _reopened(store, collection)
        for i in reported:
            for j in range(50):
                assert sd[f"key {i} {j}"] == float(i)
    finally:
        child.kill()
        server.stop()


def _reopened(store: str, collection: str) -> SoftDict:
    """The store after its server restarted. pymilvus keeps one connection per URI and
    recovers it on the first call that fails, so the first open may fail: softdict says so
    (StoreUnavailableError, "try again"), and the caller tries again."""
    for _ in range(5):
        try:
            return SoftDict.open(store, collection=collection, encoder=FakeEncoder())
        except StoreUnavailableError:
            time.sleep(1)
    return SoftDict.open(store, collection=collection, encoder=FakeEncoder())


@pytest.mark.integration
def test_bundled_encoder_on_real_names(milvus_lite_file: str, bundled_encoder) -> None:
    """The bundled model on pycountry's subdivisions: Milvus answers as memory does."""
    names = sorted({sub.name for sub in pycountry.subdivisions})[:2000]
    items = {name: float(i) for i, name in enumerate(names)}
    memory = SoftDict(items, encoder=bundled_encoder)
    milvus = memory.copy_to("milvus:" + milvus_lite_file, collection=fresh_collection())
    queries = ["bavaria", "cornwal", "province of quebec", "tokyo prefecture"]
    assert_same_values(milvus.lookup(queries), memory.lookup(queries))
    assert [milvus.attend(q).keys[:3] for q in queries] == [
        memory.attend(q).keys[:3] for q in queries
    ]
