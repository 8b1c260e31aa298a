"""``SoftDict.load(path, index=...)``: a saved store's index rebuilt as another one from the
vectors it kept, nothing embedded again.

Before it, a store saved with an index a later version refuses (one that crashed the process,
or ranked keys by something else than their similarity) could not be loaded at all: its keys
and values were lost to its owner (``fixtures/refused_index``, saved by the code before).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _support import FakeEncoder, assert_close
from test_lossy_indexes import exact_attention
from test_lossy_indexes import store_of as stored

import softdict.index.factory as factory
import softdict.index.reindexing as reindexing
from softdict import ConfigError, SoftDict, StoreFormatError

DIM = 16
N = 1200  # past every index's training size here (a product quantiser's 1,000)
FIXTURE = Path(__file__).parent / "fixtures" / "refused_index"


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_saved_store_changes_its_index_at_load_and_answers_exactly(tmp_path: Path) -> None:
    store, keys, values = stored("HNSW8")
    store.save(tmp_path / "s")
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="flat")
    assert loaded.index_description == "flat"
    assert dict(loaded.items()) == dict(store.items())
    for query in keys[:5]:
        attention = loaded.attend_embeddings(query)
        assert attention.weight_error == 0.0  # the vectors added, scored exactly
        truth = exact_attention("cosine", loaded.temperature, query, keys, values)
        assert_close(attention.value, truth)
    # A later save records the new index; the saved folder was not touched by the load.
    loaded.save(tmp_path / "t")
    assert SoftDict.load(tmp_path / "t", encoder=FakeEncoder()).index_description == "flat"


def test_vectors_moved_in_parts_stay_with_their_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vectors move ``ROWS_AT_A_TIME`` at a time; after deletes the ids have gaps."""
    store, keys, _ = stored("HNSW8")
    for i in range(0, N, 3):
        del store[f"k{i}"]
    store.save(tmp_path / "s")
    monkeypatch.setattr(reindexing, "ROWS_AT_A_TIME", 7)
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="flat")
    left = np.array([i for i in range(N) if i % 3])
    assert dict(loaded.items()) == dict(store.items())
    for i in left[:40]:
        best = int(np.argmax(loaded.attend_embeddings(keys[i]).weights))
        assert loaded.attend_embeddings(keys[i]).keys[best] == f"k{i}"  # found by its vector


def test_a_lossy_store_rebuilt_keeps_its_codes_error_and_its_bound_holds(tmp_path: Path) -> None:
    """The vectors moved are the codes' decoded ones: the new index reports their error (at a
    temperature where the bound is far from 1, which any answer would meet)."""
    store, keys, values = stored("SQ4", temperature=2.0)
    store.save(tmp_path / "s")
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="HNSW8")
    for query in keys[:5]:
        attention = loaded.attend_embeddings(query)
        source = store.attend_embeddings(query).weight_error
        assert 0.5 > attention.weight_error >= source * (1 - 1e-12) and source > 0
        truth = exact_attention("cosine", loaded.temperature, query, keys, values)
        assert abs(attention.value - truth) <= attention.weight_error * np.ptp(values) + 1e-9
    # An index of exact vectors saved the error it carries, and dropped it on load: the same
    # answers came back with a bound of 0 (and so did a copy).
    loaded.save(tmp_path / "t")
    again = SoftDict.load(tmp_path / "t", encoder=FakeEncoder())
    for other in (again, loaded.copy()):
        for query in keys[:3]:
            assert (
                other.attend_embeddings(query).weight_error
                == loaded.attend_embeddings(query).weight_error
            )


@pytest.mark.parametrize("index", ["flat", "compressed"])
def test_an_index_that_holds_the_vectors_added_refuses_decoded_ones(
    tmp_path: Path, index: str
) -> None:
    store, _, _ = stored("SQ4")
    store.save(tmp_path / "s")
    before = folder_bytes(tmp_path / "s")
    with pytest.raises(ConfigError, match=r"lossy codes.*'auto'"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index=index)
    assert folder_bytes(tmp_path / "s") == before


def test_a_store_saved_with_an_index_now_refused_loads_rebuilt() -> None:
    """Saved by the code before PCA8 under cosine was refused (``fixtures/README.md``)."""
    with pytest.raises(StoreFormatError, match=r"PCA.*index='auto'.*rebuilds"):
        SoftDict.load(FIXTURE / "pca_cosine", encoder=FakeEncoder())
    loaded = SoftDict.load(FIXTURE / "pca_cosine", encoder=FakeEncoder(), index="auto")
    expected = json.loads((FIXTURE / "expected.json").read_text())["items"]
    assert dict(loaded.items()) == expected
    # Its vectors are the PCA's decoded ones, how far from those added was not saved: the
    # answers say nothing is known of their weights.
    query = np.random.default_rng(1).standard_normal(DIM).astype(np.float32)
    assert loaded.attend_embeddings(query).weight_error == 1.0
    assert loaded.index_description == "auto: exact"


def saved_as_once_allowed(
    monkeypatch: pytest.MonkeyPatch, folder: Path, index: str, similarity: str, n: int = N
) -> None:
    """A store saved with ``index`` as a version that did not refuse it would have saved it."""
    with monkeypatch.context() as allowing:
        allowing.setattr(factory, "_cannot_serve", lambda part: None)
        stored(index, similarity, n=n)[0].save(folder)


def test_a_saved_ivf_fast_scan_is_refused_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAISS's reconstruct of a loaded IVF fast-scan PQ crashed the process (a segfault)."""
    saved_as_once_allowed(monkeypatch, tmp_path / "s", "IVF8,PQ4x4fs", "l2")
    with pytest.raises(StoreFormatError, match=r"index\.faiss keeps no vectors.*fast-scan"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="auto")
    with pytest.raises(StoreFormatError, match="nor can its index's vectors be read back"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder())  # says so before index= is tried
    # Saved before it was built, its vectors are the ones added: those it gives back.
    saved_as_once_allowed(monkeypatch, tmp_path / "small", "IVF8,PQ4x4fs", "l2", n=100)
    small = SoftDict.load(tmp_path / "small", encoder=FakeEncoder(), index="auto")
    assert len(small) == 100
    assert small.attend_embeddings(np.ones(DIM, dtype=np.float32)).weight_error == 0.0


@pytest.mark.parametrize(
    ("index", "why"),
    [
        ("ITQ8,LSH", "cannot be undone"),
        # A loaded whitening PCA calls itself orthonormal: FAISS gave vectors of norm 0.002
        # back for keys of norm 3.7, without an error.
        ("PCAW8,Flat", "cannot be undone"),
        ("LSH", "bits of the vectors"),  # FAISS gave signs back
    ],
)
def test_a_saved_index_that_keeps_no_vectors_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: str, why: str
) -> None:
    saved_as_once_allowed(monkeypatch, tmp_path / "s", index, "l2")
    with pytest.raises(StoreFormatError, match=f"keeps no vectors to read back.*{why}"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="auto")


def test_a_refine_over_flat_codes_is_read_from_them_whatever_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its vectors are read from the refine index: an LSH or IVF fast-scan base is not read
    (they were declared lost, to be built again from keys that add_embeddings had not)."""
    saved_as_once_allowed(monkeypatch, tmp_path / "s", "IVF8,PQ4x4fs,RFlat", "l2")
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="auto")
    _, keys, values = stored("flat", "l2")  # the same keys and values (the same seed)
    assert dict(loaded.items()) == dict(zip([f"k{i}" for i in range(N)], values.tolist()))
    attention = loaded.attend_embeddings(keys[0])
    assert attention.weight_error == 0.0
    assert_close(attention.value, exact_attention("l2", loaded.temperature, keys[0], keys, values))


def test_a_saved_index_whose_reading_fails_is_a_store_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where FAISS raises reading the vectors back (a kind not known to keep none)."""
    from softdict.index._faiss import FaissBackend

    stored("HNSW8")[0].save(tmp_path / "s")

    def refusing(self: FaissBackend, ids: np.ndarray) -> np.ndarray:
        raise RuntimeError("Error in void faiss::X() at X.cpp:1: reconstruct not implemented")

    monkeypatch.setattr(FaissBackend, "vectors", refusing)
    with pytest.raises(StoreFormatError, match=r"FAISS can give back \(HNSW8: reconstruct not"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="flat")


@pytest.mark.parametrize("index", ["Pad32,Flat", "RR16,Flat"])
def test_a_transform_that_loses_nothing_moves_to_an_exact_index(tmp_path: Path, index: str) -> None:
    """A padding decodes each vector as added, a rotation within float32 rounding (2.7e-6 of
    norms near 6): "flat" takes them, where the rotation was refused as lossy codes."""
    store, keys, values = stored(index, "dot")
    store.save(tmp_path / "s")
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index="flat")
    attention = loaded.attend_embeddings(keys[0])
    assert attention.weight_error == 0.0
    assert_close(attention.value, exact_attention("dot", loaded.temperature, keys[0], keys, values))


@pytest.mark.parametrize(
    ("index", "match"),
    [
        (5, "index must be a str"),
        ("no such index", "neither one of"),
        ("PQ7", "cannot hold this store's keys"),
    ],
)
def test_an_index_that_cannot_be_built_is_a_config_error(
    tmp_path: Path, index: object, match: str
) -> None:
    store, _, _ = stored("flat", n=50)
    store.save(tmp_path / "s")
    before = folder_bytes(tmp_path / "s")
    with pytest.raises(ConfigError, match=match):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index=index)  # type: ignore[arg-type]
    assert folder_bytes(tmp_path / "s") == before


def test_a_plug_in_store_loads_only_with_its_backend_registered(tmp_path: Path) -> None:
    from softdict.index import ExactBackend, register_backend

    register_backend("reindex-test-plug-in", lambda dim, metric: ExactBackend(dim, metric))
    store = SoftDict(encoder=FakeEncoder(), index="reindex-test-plug-in")
    store.add_embeddings(["a", "b"], np.eye(2, DIM, dtype=np.float32), [1.0, 2.0])
    store.save(tmp_path / "s")
    from softdict.index import registry

    del registry._NAMED["reindex-test-plug-in"]
    for index in (None, "auto"):  # a plain load points to the registry, not to index=
        with pytest.raises(StoreFormatError, match=r"plug-in backend, register it") as refused:
            SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), index=index)
        assert "rebuilds" not in str(refused.value)
