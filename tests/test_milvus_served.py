"""A large Milvus store, served by Milvus (``softdict.store.milvus``): past ``EXACT_MAX_KEYS``
keys this process keeps no key. Spelling candidates come from the keys' 3-gram field, the
sampled tail from random id ranges, and iteration and predicate masks read the keys for the
call alone; a write by another store object costs no re-read; a collection made before the
3-gram field keeps its key directory.

The stores here hold 150 real names (pycountry) and count as large from ``LARGE_AT`` keys on
(both the directory's and retrieval's threshold are lowered), so that every served path runs
on a store the fake encoder embeds in a moment.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pycountry
import pytest
from _milvus import MilvusServer, fresh_collection
from _support import FakeEncoder, assert_close

from softdict import SoftDict, StoreUnavailableError, _retrieval
from softdict.spelling import SpellingIndex, SpellingQueries, spelling_form
from softdict.spelling.text import accented_form
from softdict.store.milvus import _collection, _collector, _directory, _hits
from softdict.store.milvus import backend as backend_module
from softdict.store.milvus._spelling import FormCache, MilvusSpelling

pytestmark = pytest.mark.milvus

LARGE_AT = 50
NAMES = sorted(country.name for country in pycountry.countries)[:150]
ITEMS = {name: float(i) for i, name in enumerate(NAMES)}
# The last two bear accents, which the default combination (rule-6, as rule-4) reads.
TYPOS = [
    "Grmany",
    "Brazl",
    "Austrailia",
    "Cuab",
    "Argentna",
    "Bolvia",
    "Chiel",
    "Côte d'Ivoirx",
    "Curaçax",
]


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores of more than ``LARGE_AT`` keys count as large: served by Milvus, and attended to
    as a head of keys plus a sampled tail."""
    monkeypatch.setattr(_directory, "EXACT_MAX_KEYS", LARGE_AT)
    monkeypatch.setattr(_retrieval, "EXACT_MAX_KEYS", LARGE_AT)


def twins(location: str) -> tuple[SoftDict, SoftDict]:
    """The same store in memory and in Milvus; at most 32 keys sampled, so that the tail is
    sampled rather than scored whole (as it is past a few thousand keys)."""
    options = {"encoder": FakeEncoder(), "max_sample": 32}
    memory = SoftDict(ITEMS, **options)
    milvus = SoftDict(ITEMS, store=location, collection=fresh_collection(), **options)
    return memory, milvus


def test_a_large_store_answers_as_in_memory_and_keeps_no_key(
    milvus_store_location: str, large: None
) -> None:
    memory, milvus = twins(milvus_store_location)
    store = milvus._store
    assert isinstance(store.spelling, MilvusSpelling)
    for typo in TYPOS:
        mine, theirs = milvus.attend(typo), memory.attend(typo)
        assert mine.keys[0] == theirs.keys[0]
        assert mine.sampled is not None and mine.sampled > 0  # the tail was sampled
    assert list(milvus.lookup(TYPOS)) == pytest.approx(list(memory.lookup(TYPOS)), rel=0.05)

    def starts_b(key: str) -> bool:
        return key.startswith("B")

    masked = milvus.attend("Bolvia", mask=starts_b)
    assert masked.keys == memory.attend("Bolvia", mask=starts_b).keys
    assert all(key.startswith("B") for key in masked.keys)
    assert list(milvus) == list(memory) and len(milvus) == len(NAMES)
    assert store._keys.cached is None  # nothing per key was kept


def test_spelling_candidates_from_milvus_are_the_memory_stores(
    milvus_store_location: str, large: None
) -> None:
    """The pool Milvus returns holds every key sharing a 3-gram (fewer than its 2,048), so after
    the exact rescoring the candidates are those of the memory store's postings."""
    _, milvus = twins(milvus_store_location)
    queries = SpellingQueries.of(TYPOS)
    served = milvus._store.spelling
    held = SpellingIndex()
    held.add(np.arange(len(NAMES)), NAMES)
    for n in (1, 8, 32):
        mine, my_scores = served.candidates(queries, n, None)
        theirs, their_scores = held.candidates(queries, n, None)
        np.testing.assert_array_equal(my_scores, their_scores)
        for i in range(len(TYPOS)):
            # Keys scoring above the n-th candidate are the same keys (ties may differ).
            above = my_scores[i] > my_scores[i, -1]
            keys_mine = set(milvus._store.keys_of(mine[i, above]))
            assert keys_mine == {NAMES[j] for j in theirs[i, above]}


def test_a_short_query_finds_keys_sharing_no_3_gram(
    milvus_store_location: str, large: None
) -> None:
    """ "cbua" shares no 3-gram with "cuba": the neighbour features of its first letter and
    length find it, as the memory store's short neighbours do."""
    _, milvus = twins(milvus_store_location)
    ids, _ = milvus._store.spelling.candidates(SpellingQueries.of(["cbua"]), 8, None)
    assert "Cuba" in milvus._store.keys_of(ids[0][ids[0] >= 0])


# Codes of NAMES that share no 3-gram with their key: initials, and letters in order.
CODES = ["CAR", "BAH", "DR", "Blgm", "cstrc"]


def test_keys_a_mark_could_lift_are_proposed_as_in_memory(
    milvus_store_location: str, large: None
) -> None:
    """ "CAR" is the initials of the Central African Republic, "cstrc" has Costa Rica's letters
    in order: neither shares a 3-gram with its key. Under a combination that weighs marks, the
    pair features (first character, character) find the keys that begin with the query's first
    character and hold its characters, and the candidates are the memory store's."""
    from softdict.spelling.combination import combination_for
    from softdict.spelling.terms import query_terms

    memory, milvus = twins(milvus_store_location)
    assert milvus.combination == "rule-8" and milvus._store._rows.pairs
    queries = SpellingQueries.of(CODES)
    served = milvus._store.spelling
    held = SpellingIndex()
    held.add(np.arange(len(NAMES)), NAMES)
    # Both combinations that weigh marks by the rule's curve: their bounds on what the marks
    # add differ (``QueryTerms.most_gain``), and both must propose the memory store's keys.
    for name in ("rule-2", "rule-3"):
        terms = query_terms(combination_for(name, 1 / 16), CODES, 1.0, 1.0)
        for n in (1, 8):
            mine, my_scores = served.candidates(queries, n, None, terms)
            theirs, their_scores = held.candidates(queries, n, None, terms)
            np.testing.assert_array_equal(my_scores, their_scores)
            for i in range(len(CODES)):
                # Keys scoring above the n-th candidate are the same keys (ties may differ).
                above = my_scores[i] > my_scores[i, -1]
                keys_mine = set(milvus._store.keys_of(mine[i, above]))
                assert keys_mine == {NAMES[j] for j in theirs[i, above]}
        found = served.candidates(queries, 8, None, terms)[0][0]
        assert "Central African Republic" in milvus._store.keys_of(found[found >= 0])
    for code in CODES:
        assert milvus.attend(code).keys[0] == memory.attend(code).keys[0]


def test_a_format_3_store_does_not_search_pair_features(
    milvus_store_location: str, large: None
) -> None:
    """A collection made before format 4 has rows without their pair features: it opens, says
    so (``pairs``), and its spelling candidates come from the 3-grams and neighbours alone."""
    import json

    from pymilvus import MilvusClient

    from softdict.spelling.combination import combination_for
    from softdict.spelling.terms import query_terms

    _, milvus = twins(milvus_store_location)
    collection = milvus._store._collection
    client = MilvusClient(milvus_store_location.removeprefix("milvus:"))
    meta = collection + "__softdict"
    manifest = json.loads(client.get(meta, ids=["manifest"], output_fields=["text"])[0]["text"])
    assert manifest["format_version"] == 5
    manifest["format_version"] = 3
    client.upsert(meta, [{"name": "manifest", "text": json.dumps(manifest), "unused": [0.0, 0.0]}])
    old = SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    assert not old._store._rows.pairs
    assert old.attend("Grmany").keys[0] == "Germany"
    terms = query_terms(combination_for("rule-3", 1 / 16), ["CAR"], 1.0, 1.0)
    found = old._store.spelling.candidates(SpellingQueries.of(["CAR"]), 8, None, terms)[0][0]
    assert "Central African Republic" not in old._store.keys_of(found[found >= 0])


def test_the_sampled_tail_is_uniform_by_id_ranges(milvus_store_location: str, large: None) -> None:
    _, milvus = twins(milvus_store_location)
    backend = milvus._store.backend
    query = np.zeros(backend.dim, dtype=np.float32)
    rng = np.random.default_rng(0)
    counts: Counter[int] = Counter()
    draws, calls, per_call = 0, 300, 20
    for _ in range(calls):
        ids, probability = backend.sample_near(query, per_call, rng, None, 0.1)
        np.testing.assert_array_equal(probability, np.full(len(ids), 1 / len(NAMES)))
        counts.update(ids.tolist())
        draws += len(ids)
    assert set(counts) <= set(milvus._store.ids().tolist())
    assert abs(draws / calls - per_call) < 0.15 * per_call
    # Each key's count against its expectation: chi-square on 149 degrees of freedom, whose
    # mean is 149 and standard deviation 17.3; range draws are no less spread than binomial.
    expected = draws / len(NAMES)
    observed = np.array([counts.get(i, 0) for i in milvus._store.ids().tolist()])
    assert ((observed - expected) ** 2 / expected).sum() < 149 + 6 * 17.3


def test_a_sample_comes_with_its_scores_in_one_request(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scored draw is the draw ``sample_near`` makes from the same generator, with each key's
    score as ``score_ids`` gives it, in one search; a range holding a request's limit of keys
    (the store grew far past the count the draw was sized by) is an error, not a sample."""
    _, milvus = twins(milvus_store_location)
    backend = milvus._store.backend
    query = backend.vectors(milvus._store.ids()[:1])[0]
    searches = []
    search = backend.rows.client.search
    monkeypatch.setattr(
        backend.rows.client, "search", lambda *a, **k: searches.append(1) or search(*a, **k)
    )
    ids, probability, scores = backend.sample_scored(query, 40, np.random.default_rng(3), None, 0.1)
    assert len(searches) == 1 and scores is not None and len(ids) > 0
    drawn, drawn_probability = backend.sample_near(query, 40, np.random.default_rng(3), None, 0.1)
    order = np.argsort(ids)
    np.testing.assert_array_equal(ids[order], np.sort(drawn))
    np.testing.assert_array_equal(probability, drawn_probability)
    assert_close(scores, backend.score_ids(query[None, :], ids)[0])
    monkeypatch.setattr(_collection, "MAX_TOPK", 5)
    with pytest.raises(StoreUnavailableError, match="grew during the lookup"):
        backend.sample_scored(query, 40, np.random.default_rng(3), None, 0.1)


def test_a_write_elsewhere_costs_no_reread(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, milvus = twins(milvus_store_location)
    collection = milvus._store._collection
    other = SoftDict.open(milvus_store_location, collection=collection, encoder=FakeEncoder())
    milvus.attend("Grmany")
    other["Germany, reunited"] = 1990.0

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("a lookup read every key")

    monkeypatch.setattr(_collection.KeyRows, "scan", no_scan)
    assert milvus.attend("Germany reunitd").keys[0] == "Germany, reunited"
    assert len(milvus) == len(NAMES) + 1


def test_values_come_back_with_the_requests(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served lookup blends the values that came back with its searches, samples and
    vectors: no request for values alone."""
    memory, milvus = twins(milvus_store_location)
    asked: list[list[str]] = []
    get = _collection.KeyRows.get

    def spied(self: _collection.KeyRows, ids: np.ndarray, fields: list[str]) -> list[dict]:
        asked.append(fields)
        return get(self, ids, fields)

    monkeypatch.setattr(_collection.KeyRows, "get", spied)
    for typo in TYPOS:
        assert milvus.lookup(typo) == pytest.approx(memory.lookup(typo), rel=0.05)
    assert asked and ["value"] not in asked


def test_the_head_widens_with_the_store_as_its_tail_is_uniform(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Milvus store's sampled tail is uniform, so its head holds ``HEAD_SHARE`` of the keys
    where that is more than max_k: with and without the spelling channel (a share large enough
    for 150 keys to show it; at most 4 times max_k)."""
    monkeypatch.setattr(backend_module, "HEAD_SHARE", 1 / 16)
    searched: list[int] = []
    search = backend_module.MilvusBackend.search

    def spied(self, queries, k, allow=None):  # type: ignore[no-untyped-def]
        searched.append(k)
        return search(self, queries, k, allow)

    monkeypatch.setattr(backend_module.MilvusBackend, "search", spied)
    for max_k, head in [(4, len(NAMES) // 16), (2, 8)]:
        milvus = SoftDict(
            ITEMS,
            store=milvus_store_location,
            collection=fresh_collection(),
            encoder=FakeEncoder(),
            max_sample=32,
            max_k=max_k,
        )
        searched.clear()
        milvus.lookup_embeddings(FakeEncoder().encode(TYPOS[:2]))
        attention = milvus.attend(TYPOS[2])
        # The text lookup's head search is one of its searches (the others find candidates).
        assert searched[0] == head and head in searched[1:]
        assert attention.sampled is not None and attention.sampled > 0


def test_hits_read_by_column_are_pymilvus_own(milvus_store_location: str) -> None:
    """A search's ids, scores, keys and JSON values read by column (``_hits``) are what
    pymilvus gives hit by hit, for values of every JSON shape, in every query of a batch; a
    plain list of hits (no columns) is read hit by hit, with the same answers."""
    from pymilvus import DataType, MilvusClient

    uri = milvus_store_location.removeprefix("milvus:")
    client = MilvusClient(uri)
    name = fresh_collection()
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("key", DataType.VARCHAR, max_length=200)
    schema.add_field("value", DataType.JSON)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=4)
    params = client.prepare_index_params()
    params.add_index("vector", index_type="FLAT", metric_type="IP")
    client.create_collection(
        name, schema=schema, index_params=params, consistency_level="Strong"
    )  # (its searches see the insert below, as a softdict store's do)
    shapes = [
        1,
        -(2**62),
        0.1 + 0.2,
        1e-300,
        "Côte d'Ivoire",
        "日本",
        None,
        True,
        [1.5, [2, "x"]],
        {"a": {"b": [None, 3]}},
        "",
        [],
        {},
    ]
    rng = np.random.default_rng(7)
    rows = [
        {
            "id": i,
            "key": NAMES[i],
            "value": {"v": shapes[i % len(shapes)]},
            "vector": rng.normal(size=4).astype(np.float32).tolist(),
        }
        for i in range(60)
    ]
    client.insert(name, rows)
    queries = rng.normal(size=(3, 4)).astype(np.float32).tolist()
    try:
        for fields in (["key", "value"], ["value"], []):
            for hits in client.search(name, data=queries, limit=40, output_fields=fields):
                expected = (
                    [hit["id"] for hit in hits],
                    [hit["distance"] for hit in hits],
                    {field: [hit["entity"][field] for hit in hits] for field in fields},
                )
                assert len(expected[0]) == 40
                # pymilvus's own hits are read by column here, not by the fallback
                assert _hits._read_by_column(hits, fields) == expected
                plain = [dict(hit) for hit in hits]
                assert _hits.hit_columns(plain, fields) == expected
    finally:
        client.drop_collection(name)


def test_a_lookup_of_embeddings_is_brought_no_keys(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys come back with a lookup's rows only where it may score spelling (its queries are
    texts); a lookup of embeddings answers the same without them."""
    memory, milvus = twins(milvus_store_location)
    asked: list[list[str]] = []
    search = _collection.KeyRows._search_vectors

    def spied(self: _collection.KeyRows, queries, k, expression, fields):  # type: ignore[no-untyped-def]
        asked.append(fields)
        return search(self, queries, k, expression, fields)

    monkeypatch.setattr(_collection.KeyRows, "_search_vectors", spied)
    milvus.lookup(TYPOS[0])
    assert asked and all(fields == ["key", "value"] for fields in asked)
    asked.clear()
    embeddings = FakeEncoder().encode(TYPOS)
    assert_close(
        milvus.lookup_embeddings(embeddings), memory.lookup_embeddings(embeddings), rtol=0.05
    )
    assert asked and all(fields == ["value"] for fields in asked)
    asked.clear()
    milvus.lookup(TYPOS[1])  # and texts again bring their keys
    assert asked and all(fields == ["key", "value"] for fields in asked)


def test_the_collector_waits_for_a_lookup_and_runs_after(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup's requests run with the cyclic collector paused (``_collector``); it runs again
    after, and one the application paused stays paused."""
    _, milvus = twins(milvus_store_location)
    running: list[bool] = []
    search = _collection.KeyRows.search

    def spied(self: _collection.KeyRows, *args: object, **kwargs: object) -> object:
        running.append(gc.isenabled())
        return search(self, *args, **kwargs)

    monkeypatch.setattr(_collection.KeyRows, "search", spied)
    assert gc.isenabled()
    milvus.lookup(TYPOS[0])
    assert running and not any(running)
    assert gc.isenabled()
    gc.disable()
    try:
        milvus.lookup(TYPOS[1])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_pause_is_shared_by_overlapping_lookups() -> None:
    """Two threads in the pause at once: the collector runs again when the last one leaves."""
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with _collector.collector_paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with _collector.collector_paused():
        thread.start()
        assert entered.wait(10)
    assert not gc.isenabled()  # the other thread is still inside
    release.set()
    thread.join(10)
    assert gc.isenabled()
    with _collector.collector_paused(), _collector.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


_DELETER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from _support import FakeEncoder, assert_close
    from softdict import SoftDict
    sd = SoftDict.open({store!r}, collection={collection!r}, encoder=FakeEncoder())
    for key in {keys!r}:
        del sd[key]
        print(key, flush=True)
    """
)


def test_a_writer_killed_mid_delete_leaves_no_deleted_key_answered(
    milvus_server: MilvusServer, large: None
) -> None:
    """Another process deletes keys one by one and is killed (perhaps between a delete and its
    write counter): a served reader answers with none of the deleted keys, having kept none."""
    store, collection = "milvus:" + milvus_server.uri, fresh_collection()
    milvus = SoftDict(
        ITEMS, encoder=FakeEncoder(), store=store, collection=collection, max_sample=32
    )
    assert milvus.attend("Grmany").keys[0] == "Germany"  # read before the deletes
    code = _DELETER.format(
        tests=str(Path(__file__).parent), store=store, collection=collection, keys=NAMES[::3]
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    reported = [child.stdout.readline().strip() for _ in range(10)]
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    gone = set(NAMES) - set(milvus)  # the reported deletes, and perhaps the one in flight
    assert set(reported) <= gone and len(milvus) == len(NAMES) - len(gone)
    for key in sorted(gone):
        assert not set(milvus.attend(key).keys) & gone
    assert not set(milvus.attend(sorted(gone)[0][:-1]).keys) & gone  # spelling too


class _Rows:
    """Key rows by id, counting the ids asked for."""

    def __init__(self, keys: dict[int, str]) -> None:
        self.keys = keys
        self.asked: list[int] = []

    def get(self, ids: np.ndarray, fields: list[str]) -> list[dict]:
        self.asked += ids.tolist()
        return [{"id": i, "key": self.keys[i]} for i in ids.tolist() if i in self.keys]


def _spelled(text: str) -> tuple[str, str]:
    return spelling_form(text), accented_form(text)


def test_the_form_cache_is_bounded_and_fetches_what_it_lacks() -> None:
    """The cache keeps each key's form and accented form ("Côte d'Ivoire" bears accents)."""
    rows = _Rows({i: name for i, name in enumerate(NAMES)})
    cache = FormCache(lambda: rows, limit=10)  # type: ignore[arg-type, return-value]
    assert cache.remember([(0, NAMES[0]), (1, NAMES[1])]) == {
        0: _spelled(NAMES[0]),
        1: _spelled(NAMES[1]),
    }
    assert cache.forms_of([1, 2, 3]) == {i: _spelled(NAMES[i]) for i in (1, 2, 3)}
    assert rows.asked == [2, 3]  # 1 was kept
    cache.remember([(i, NAMES[i]) for i in range(20, 30)])
    assert len(cache) == 10  # the least recently used went first
    rows.asked.clear()
    cache.forms_of([1, 29])
    assert rows.asked == [1]
    cache.note([7], [NAMES[7]])  # kept as its text, spelled when asked for, never fetched
    assert cache.forms_of([7]) == {7: _spelled(NAMES[7])} and rows.asked == [1]
    assert len(cache) == 10
    cache.note([7, 29], [NAMES[7], NAMES[29]])  # kept and spelled: noted again, still spelled
    spelled = {i: _spelled(NAMES[i]) for i in (7, 29)}
    assert cache._kept[7] == spelled[7] and cache.forms_of([7, 29]) == spelled
    assert rows.asked == [1]
    del rows.keys[5]  # deleted since its id was found
    with pytest.raises(StoreUnavailableError, match="changed during the lookup"):
        cache.forms_of([5])
    ivory = NAMES.index("Côte d'Ivoire")
    assert cache.forms_of([ivory]) == {ivory: ("cote d ivoire", "côte d ivoire")}


def _format_2_collection(self: _collection.KeyRows) -> None:
    """A key collection as softdict made them before format 3: no 3-gram field."""
    from pymilvus import DataType

    schema = self.client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("key", DataType.VARCHAR, max_length=_collection.MAX_VARCHAR)
    schema.add_field("order", DataType.INT64)
    schema.add_field("value", DataType.JSON)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
    params = self.client.prepare_index_params()
    params.add_index("vector", index_type="FLAT", metric_type="IP")
    self.client.create_collection(self.name, schema=schema, index_params=params)
    self.check_schema(self.name)


def test_a_collection_without_3_grams_keeps_its_directory(
    milvus_store_location: str, large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(_collection.KeyRows, "create", _format_2_collection)
        memory, milvus = twins(milvus_store_location)
    store = milvus._store
    assert store._key_rows().grams is False
    assert isinstance(store.spelling, SpellingIndex)
    for typo in TYPOS:
        assert milvus.attend(typo).keys[0] == memory.attend(typo).keys[0]
    milvus["Atlantis"] = 0.0  # written without 3-grams, and found through the directory
    assert milvus.attend("Atlantys").keys[0] == "Atlantis"
    assert store._keys.cached is not None
