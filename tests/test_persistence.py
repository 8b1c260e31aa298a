"""save/load: lossless round trips, atomic saves under SIGKILL, refusal of every bad file."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import faiss
import numpy as np
import pytest
from _support import VALUE_KIND_OPTION, VALUE_SAMPLES, FakeEncoder, assert_close, close, same_value

from softdict import (
    ConfigError,
    EncoderError,
    SoftDict,
    StoreBusyError,
    StoreFormatError,
    ValueKindError,
)
from softdict._cli import main

TESTS = Path(__file__).resolve().parent


class OtherEncoder(FakeEncoder):
    """Same dimension as FakeEncoder, different embeddings: a wrong encoder for a store."""

    name = "other"

    def encode(self, texts: list[str]) -> np.ndarray:
        return super().encode(texts)[:, ::-1].copy()


def assert_same_store(a: SoftDict, b: SoftDict, queries=("apple", "red chair", "x")) -> None:
    assert list(a) == list(b)
    for key in a:
        assert same_value(a[key], b[key])
    for q in queries:
        x, y = a.attend(q), b.attend(q)
        assert x.keys == y.keys and x.k == y.k
        assert_close(x.weights, y.weights)


@pytest.mark.parametrize("kind", sorted(VALUE_SAMPLES))
def test_round_trip_every_value_kind(tmp_path: Path, kind: str) -> None:
    keys = ["apple", "green apple", "red chair", "sofa", "car"]
    sd = SoftDict(dict(zip(keys, VALUE_SAMPLES[kind])), encoder=FakeEncoder(), temperature=0.3)
    del sd["sofa"]  # a deleted row travels as a tombstone
    sd.save(tmp_path / "store")
    loaded = SoftDict.load(tmp_path / "store", encoder=FakeEncoder())
    assert_same_store(sd, loaded)
    assert loaded.temperature == 0.3 and loaded.value_kind == sd.value_kind
    loaded["sofa"] = VALUE_SAMPLES[kind][3]  # and the loaded store keeps working
    assert same_value(loaded["sofa"], VALUE_SAMPLES[kind][3])


@pytest.mark.parametrize(
    "index", ["flat", "hnsw", "ivf", "ivf_sq8", "IVF16,PQ4", "compressed-from-start"]
)
def test_round_trip_every_backend_with_deletes(tmp_path: Path, index: str) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 16)).astype(np.float32)
    sd = SoftDict(encoder=FakeEncoder(), index=index, top_k=20)
    sd.add_embeddings([f"k{i}" for i in range(3000)], X, np.arange(3000.0))
    for i in range(0, 300, 3):
        del sd[f"k{i}"]
    sd.save(tmp_path / "store")
    files = {p.name for p in (tmp_path / "store").iterdir()}
    assert ("index.faiss" in files) == (index not in ("flat", "compressed-from-start"))
    assert ("embedding_codes.npy" in files) == (index == "compressed-from-start")
    loaded = SoftDict.load(tmp_path / "store", encoder=FakeEncoder())
    assert loaded.index_description == sd.index_description
    a, b = sd.attend_embeddings(X[:20]), loaded.attend_embeddings(X[:20])
    for x, y in zip(a, b):
        assert x.keys == y.keys
        assert "k0" not in y.keys and "k3" not in y.keys
    assert_close(sd.lookup_embeddings(X[:50]), loaded.lookup_embeddings(X[:50]))


def test_empty_store_round_trip(tmp_path: Path) -> None:
    SoftDict(encoder=FakeEncoder()).save(tmp_path / "s")
    loaded = SoftDict.load(tmp_path / "s", encoder=FakeEncoder())
    assert len(loaded) == 0
    loaded["apple"] = 1.0
    assert loaded["apple"] == 1.0


@pytest.mark.parametrize("kind", sorted(VALUE_SAMPLES))
def test_store_files_are_open_formats_never_pickle(tmp_path: Path, kind: str) -> None:
    """Every file is .npy (read without pickle, no object arrays) or JSON, and those open
    formats alone hold the store: its keys, their embeddings and their values."""
    keys = ["apple", "green apple", "red chair", "sofa", "car"]
    values = VALUE_SAMPLES[kind]
    SoftDict(
        dict(zip(keys, values)), encoder=FakeEncoder(), value_kind=VALUE_KIND_OPTION.get(kind)
    ).save(tmp_path / "s")
    arrays, documents = [], []
    for path in sorted((tmp_path / "s").iterdir()):
        assert path.suffix in (".npy", ".json"), path.name
        assert not path.read_bytes().startswith(b"\x80"), path.name  # a pickle stream's opcode
        if path.suffix == ".npy":
            array = np.load(path, allow_pickle=False)
            assert not array.dtype.hasobject, path.name
            arrays.append(array)
        else:
            documents.append(json.loads(path.read_text(encoding="utf-8")))

    def held(array: np.ndarray) -> bool:
        return any(a.shape == array.shape and a == close(array) for a in arrays)

    assert keys in documents
    embeddings = FakeEncoder().encode(keys)
    assert held(embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True))  # cosine: unit rows
    if kind == "categorical":  # labels as JSON texts, which an array refers to by code

        def labels_in(document: list[str]) -> set[str]:
            try:  # (an entry that is not a JSON text is a TypeError or ValueError)
                return {json.dumps(json.loads(text), sort_keys=True) for text in document}
            except (TypeError, ValueError):
                return set()

        labels = {json.dumps(v, sort_keys=True) for v in values}
        assert any(labels <= labels_in(d) for d in documents if isinstance(d, list))
    elif kind == "boolean":
        assert held(np.array(values, dtype=bool))
    else:  # numbers: one row per key
        assert held(np.array([np.asarray(v, dtype=float) for v in values]))


def test_loading_with_the_wrong_encoder_is_refused(tmp_path: Path) -> None:
    SoftDict({"apple": 1.0}, encoder=FakeEncoder()).save(tmp_path / "s")
    with pytest.raises(EncoderError, match="expects the encoder 'fake-bag-of-words' \\(16 dims\\)"):
        SoftDict.load(tmp_path / "s", encoder=OtherEncoder())
    with pytest.raises(EncoderError, match="cannot load by name; pass it"):
        SoftDict.load(tmp_path / "s")


class Shrunk(FakeEncoder):
    """A model whose embeddings are 10^-4 long: any two such agreed within an absolute
    tolerance of 10^-3, and a store built on one loaded with another."""

    def __init__(self, model: type[FakeEncoder]) -> None:
        self.model = model()

    def encode(self, texts: list[str]) -> np.ndarray:
        return 1e-4 * self.model.encode(texts)


def test_the_fingerprint_compares_encoders_whatever_their_scale(tmp_path: Path) -> None:
    SoftDict({"apple": 1.0}, encoder=Shrunk(FakeEncoder)).save(tmp_path / "s")
    assert len(SoftDict.load(tmp_path / "s", encoder=Shrunk(FakeEncoder))) == 1
    with pytest.raises(EncoderError, match="embeds the probe text differently"):
        SoftDict.load(tmp_path / "s", encoder=Shrunk(OtherEncoder))


@pytest.mark.integration
def test_bundled_encoder_is_recorded_and_reloaded(tmp_path: Path, bundled_encoder) -> None:
    sd = SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder)
    sd.save(tmp_path / "s")
    loaded = SoftDict.load(tmp_path / "s")  # no encoder: the recorded one
    assert loaded.encoder.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert loaded.lookup("fruit") == close(sd.lookup("fruit"))
    with pytest.raises(EncoderError, match="all-MiniLM-L6-v2"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder())


def saved_store(tmp_path: Path, kind: str = "scalar") -> Path:
    keys = ["apple", "green apple", "red chair", "sofa", "car"]
    sd = SoftDict(dict(zip(keys, VALUE_SAMPLES[kind])), encoder=FakeEncoder())
    sd.save(tmp_path / "s")
    return tmp_path / "s"


def store_file_names() -> list[str]:
    names = set()
    for kind in VALUE_SAMPLES:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            names |= {(kind, p.name) for p in saved_store(Path(tmp), kind).iterdir()}
    return sorted(names)


@pytest.mark.parametrize(("kind", "name"), store_file_names())
@pytest.mark.parametrize("damage", ["truncate", "bitflip", "delete", "empty"])
def test_every_damaged_file_is_refused_naming_it(
    tmp_path: Path, kind: str, name: str, damage: str
) -> None:
    folder = saved_store(tmp_path, kind)
    path = folder / name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "bitflip":
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(flipped))
    elif damage == "delete":
        path.unlink()
    else:
        path.write_bytes(b"")
    with pytest.raises(StoreFormatError) as info:
        SoftDict.load(folder, encoder=FakeEncoder())
    assert name in str(info.value)


def folder_names(parent: Path) -> list[str]:
    """What a folder holds besides the stores' lock files (.NAME.lock), which stay by design."""
    return sorted(p.name for p in parent.iterdir() if not p.name.endswith(".lock"))


def rewrite_manifest(folder: Path, change) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    body = json.dumps(manifest["body"], sort_keys=True, ensure_ascii=False).encode()
    manifest["body_sha256"] = hashlib.sha256(body).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_ids_that_do_not_match_the_index_are_refused(tmp_path: Path) -> None:
    """Checksums catch corruption; a folder whose files agree with the manifest but not with
    each other (ids.npy against the index's ids) is refused too, naming the file."""
    folder = saved_store(tmp_path)
    ids = np.load(folder / "ids.npy") + 1  # distinct, below the new next_id, but not the index's
    buffer = io.BytesIO()
    np.save(buffer, ids)
    (folder / "ids.npy").write_bytes(buffer.getvalue())

    def change(manifest: dict) -> None:
        body = manifest["body"]
        body["next_id"] = int(ids.max()) + 1
        data = buffer.getvalue()
        body["files"]["ids.npy"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    rewrite_manifest(folder, change)
    with pytest.raises(StoreFormatError, match=r"ids\.npy does not match the index"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_a_key_that_is_no_unicode_text_is_refused_on_load(tmp_path: Path) -> None:
    """keys.json written with a lone surrogate's escape ("\\ud800"), its checksum made to
    match: the key loaded, and the next save raised a raw UnicodeEncodeError."""
    folder = saved_store(tmp_path)
    keys = json.loads((folder / "keys.json").read_text())
    keys[0] = "\ud800"
    data = json.dumps(keys).encode()  # ensure_ascii: the lone surrogate as an escape
    assert b"\\ud800" in data
    (folder / "keys.json").write_bytes(data)

    def change(manifest: dict) -> None:
        entry = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        manifest["body"]["files"]["keys.json"] = entry

    rewrite_manifest(folder, change)
    with pytest.raises(StoreFormatError, match=r"keys\.json holds text that is not valid Unicode"):
        SoftDict.load(folder, encoder=FakeEncoder())
    # The same surrogate as UTF-8 bytes (ED A0 80), which json.loads of bytes let through.
    data = data.replace(b"\\ud800", "\ud800".encode("utf-8", "surrogatepass"))
    (folder / "keys.json").write_bytes(data)
    rewrite_manifest(folder, change)
    with pytest.raises(StoreFormatError, match=r"keys\.json is not valid JSON"):
        SoftDict.load(folder, encoder=FakeEncoder())


@pytest.mark.parametrize(
    "garble",
    [
        lambda body: body["encoder"].pop("probe_text"),
        lambda body: body["encoder"].update(surprise=1),
        lambda body: body.update(encoder="fake"),
        lambda body: body["encoder"].update(fingerprint=None),
        lambda body: body.pop("next_id"),
        lambda body: body.update(index="built"),
        lambda body: body.update(dim="16"),
        lambda body: body.update(next_id=2**70),  # every later insert raised OverflowError
        lambda body: body["encoder"].update(dim=15),  # its fingerprint has 16 numbers: loaded
    ],
    ids=[
        "no probe text",
        "unknown field",
        "a string",
        "no fingerprint",
        "no next_id",
        "index a string",
        "dim a string",
        "next_id past int64",
        "encoder dim against its fingerprint",
    ],
)
def test_a_garbled_manifest_field_is_a_store_format_error(tmp_path: Path, garble) -> None:
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda manifest: garble(manifest["body"]))
    with pytest.raises(StoreFormatError, match=r"manifest\.json lacks or garbles a field"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_newer_format_version_is_refused(tmp_path: Path) -> None:
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda m: m.update(format_version=99))
    with pytest.raises(StoreFormatError, match="format 99, newer than this softdict reads"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_a_combination_this_softdict_does_not_know_asks_for_an_upgrade(tmp_path: Path) -> None:
    """A store whose (intact) manifest names a combination added after this softdict was saved
    by a newer one: the error says to upgrade, not that the file is damaged."""
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda m: m["body"]["config"].update(combination="rule-9"))
    with pytest.raises(StoreFormatError, match=r"'rule-9'.*newer softdict.*upgrade softdict"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_inconsistent_manifest_is_refused(tmp_path: Path) -> None:
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda m: m["body"].update(count=4))
    with pytest.raises(StoreFormatError, match=r"rows\.npy|keys\.json"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_missing_store_and_non_store_folders(tmp_path: Path) -> None:
    with pytest.raises(StoreFormatError, match="does not exist"):
        SoftDict.load(tmp_path / "nothing", encoder=FakeEncoder())
    (tmp_path / "table.csv").write_text("key,value\napple,1\n")  # a file, not a folder
    with pytest.raises(StoreFormatError, match=r"table\.csv: a file, not a store's folder$"):
        SoftDict.load(tmp_path / "table.csv", encoder=FakeEncoder())
    assert (tmp_path / "table.csv").read_text() == "key,value\napple,1\n"
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 precious")
    with pytest.raises(StoreFormatError, match=r"manifest\.json is missing"):
        SoftDict.load(tmp_path / "photos", encoder=FakeEncoder())
    with pytest.raises(StoreFormatError, match="not a softdict store"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder()).save(tmp_path / "photos")
    assert (tmp_path / "photos" / "cat.jpg").read_bytes() == b"\xff\xd8 precious"


def test_a_path_that_cannot_hold_a_store_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    """A load from a missing folder creates nothing (its lock file had made the folders); a path
    under a file, one the system refuses, and one that is no text are softdict errors for save
    and load alike (they were NotADirectoryError, ValueError, OSError and TypeError)."""
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    with pytest.raises(StoreFormatError, match=r"parent folder .*typo.sub does not exist"):
        SoftDict.load(tmp_path / "typo" / "sub" / "prices", encoder=FakeEncoder())
    assert not any(tmp_path.iterdir())  # no folder made, no lock file
    with pytest.raises(StoreFormatError, match="the folder does not exist"):
        SoftDict.load(tmp_path / "prices", encoder=FakeEncoder())
    # Only the lock file, which stays by design: that no store is there is found under the lock
    # (a save of it may be between its renames).
    assert folder_names(tmp_path) == []
    (tmp_path / "notes.txt").write_text("x")
    for call in (sd.save, lambda p: SoftDict.load(p, encoder=FakeEncoder())):
        with pytest.raises(StoreFormatError, match=r"parent folder .*notes\.txt is a file"):
            call(tmp_path / "notes.txt" / "store")
        with pytest.raises(StoreFormatError, match="NUL"):
            call(str(tmp_path / "a\0b"))
        with pytest.raises(StoreFormatError, match="cannot"):
            call(tmp_path / ("z" * 300))  # past the system's 255 bytes a name
        for not_text in (str(tmp_path / "s").encode(), None, 5):
            with pytest.raises(ConfigError, match=r"a str or an os\.PathLike"):
                call(not_text)
        with pytest.raises(ConfigError, match="the path is empty"):  # it was the current folder
            call("")
    assert folder_names(tmp_path) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "x"
    sd.save(tmp_path / "s")
    with pytest.raises(ConfigError, match="accept_variant must be True or False"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), accept_variant="no")  # truthy


def test_a_save_never_deletes_what_else_is_in_the_store_folder(tmp_path: Path) -> None:
    """A save replaces the whole folder: a store saved inside another one, or a note put in it,
    was deleted by the next save of the outer store."""
    outer = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    outer.save(tmp_path / "s")
    SoftDict({"x": 2.0}, encoder=FakeEncoder()).save(tmp_path / "s" / "inner")
    outer["pear"] = 3.0
    with pytest.raises(StoreFormatError, match=r"holds 'inner' \(1 entry in all\).*move what"):
        outer.save(tmp_path / "s")
    assert list(SoftDict.load(tmp_path / "s" / "inner", encoder=FakeEncoder())) == ["x"]
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple"]
    shutil.rmtree(tmp_path / "s" / "inner")
    outer.save(tmp_path / "s")  # only the store's own files: replaced as before
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple", "pear"]


@pytest.mark.parametrize("manifest", ["foreign", "damaged", "link"])
def test_a_save_never_replaces_a_folder_whose_manifest_is_not_a_readable_softdict_one(
    tmp_path: Path, manifest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any manifest.json counted as a store's: a web app's folder (manifest.json, index.html,
    src/) was replaced whole by a save, and so was a store's folder whose manifest had one
    damaged byte, with the notes a user kept beside it. Which entries a store wrote cannot be
    told from such a manifest: the save is refused, and build refuses before it reads."""
    folder = tmp_path / "s"
    if manifest == "foreign":
        folder.mkdir()
        (folder / "manifest.json").write_text('{"name": "my web app", "start_url": "/"}')
        (folder / "index.html").write_text("<html></html>")
    else:
        SoftDict({"apple": 1.0}, encoder=FakeEncoder()).save(folder)
        if manifest == "damaged":
            text = (folder / "manifest.json").read_text()
            (folder / "manifest.json").write_text(text.replace('"count": 1', '"count": 2'))
        else:
            (tmp_path / "real.json").write_text((folder / "manifest.json").read_text())
            (folder / "manifest.json").unlink()
            (folder / "manifest.json").symlink_to(tmp_path / "real.json")
    (folder / "notes.txt").write_text("keep me")
    before = sorted(entry.name for entry in folder.iterdir())
    for replace in (True, False):  # replace=False said "it holds a store" of a web app's folder
        with pytest.raises(StoreFormatError, match=r"not a readable softdict manifest|not a soft"):
            SoftDict({"pear": 2.0}, encoder=FakeEncoder()).save(folder, replace=replace)
    assert sorted(entry.name for entry in folder.iterdir()) == before
    assert (folder / "notes.txt").read_text() == "keep me"
    (tmp_path / "t.csv").write_text("name,price\napple,1\n")
    build = ["build", str(tmp_path / "t.csv"), "--key", "name", "--value", "price", "-o"]
    for force in (["--force"], []):  # without --force it said "holds a store; pass --force"
        assert main([*build, str(folder), *force, "--encoder", "/no/such/model"]) == 1
        assert f"cannot build into {folder}: " in capsys.readouterr().err  # not the encoder's
    assert (folder / "notes.txt").read_text() == "keep me"


def test_saving_over_a_store_replaces_it_and_leaves_no_debris(tmp_path: Path) -> None:
    SoftDict({"apple": 1.0}, encoder=FakeEncoder()).save(tmp_path / "s")
    SoftDict({"chair": 2.0}, encoder=FakeEncoder()).save(tmp_path / "s")
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["chair"]
    assert folder_names(tmp_path) == ["s"]


def store_at(tmp_path: Path, name: str, items: dict, *, replacing: bool = False) -> Path:
    """A store folder as a save writes it; ``replacing``: as if a store stood at its path."""
    folder = tmp_path / name
    if replacing:
        SoftDict({"placeholder": 0.0}, encoder=FakeEncoder()).save(folder)
    SoftDict(items, encoder=FakeEncoder()).save(folder)
    return folder


def test_a_save_killed_between_its_renames_is_finished_on_load(tmp_path: Path) -> None:
    old = store_at(tmp_path, "s", {"apple": 1.0})
    new = store_at(tmp_path, "new", {"chair": 2.0}, replacing=True)
    os.rename(old, tmp_path / ".s.old-aaaaaaaaaaaa")  # the first rename happened...
    os.rename(new, tmp_path / ".s.new-aaaaaaaaaaaa")  # ...the second did not
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["chair"]
    assert folder_names(tmp_path) == ["s"]  # the leftover is cleaned
    # With the new folder damaged, the swap goes back: the old store returns.
    os.rename(tmp_path / "s", tmp_path / ".s.old-cccccccccccc")
    (tmp_path / ".s.new-cccccccccccc").mkdir()
    (tmp_path / ".s.new-cccccccccccc" / "keys.json").write_text("[")
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["chair"]


def test_a_save_with_replace_false_sees_a_store_whose_save_was_cut_short(tmp_path: Path) -> None:
    """With the store between the renames of a killed save, save(replace=False) took the path
    for free, saved, and its swap's cleanup deleted both folders: the store was lost (a probe)."""
    old = store_at(tmp_path, "s", {"apple": 1.0})
    new = store_at(tmp_path, "new", {"chair": 2.0}, replacing=True)
    os.rename(old, tmp_path / ".s.old-aaaaaaaaaaaa")
    os.rename(new, tmp_path / ".s.new-aaaaaaaaaaaa")
    with pytest.raises(StoreFormatError, match="it holds a store and replace=False"):
        SoftDict({"other": 0.0}, encoder=FakeEncoder()).save(tmp_path / "s", replace=False)
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["chair"]
    assert folder_names(tmp_path) == ["s"]


@pytest.mark.parametrize("name", ["prices[v2].store", "s*", "s?", "s1.old-beef"])
def test_a_name_that_reads_as_a_pattern_is_recovered_and_touches_no_other_store(
    tmp_path: Path, name: str
) -> None:
    """A store's swap folders are found by their exact names, not by a glob pattern: a name
    with ``[ ] * ?`` (or one that looks like another store's swap folder) is recovered after a
    save killed between its renames, and saving it does not clean up another store's
    unfinished save (a store "s[12]" used to match ".s1.new-T" and delete it)."""
    old = store_at(tmp_path, name, {"apple": 1.0})
    new = store_at(tmp_path, "new", {"chair": 2.0}, replacing=True)
    os.rename(old, tmp_path / f".{name}.old-aaaaaaaaaaaa")
    os.rename(new, tmp_path / f".{name}.new-aaaaaaaaaaaa")
    assert list(SoftDict.load(tmp_path / name, encoder=FakeEncoder())) == ["chair"]
    assert folder_names(tmp_path) == [name]
    # Another store's save killed between its renames, then this store saved again.
    other_old = store_at(tmp_path, "s1", {"pear": 3.0})
    other_new = store_at(tmp_path, "other", {"plum": 4.0}, replacing=True)
    os.rename(other_old, tmp_path / ".s1.old-bbbbbbbbbbbb")
    os.rename(other_new, tmp_path / ".s1.new-bbbbbbbbbbbb")
    SoftDict({"fig": 5.0}, encoder=FakeEncoder()).save(tmp_path / name)
    assert list(SoftDict.load(tmp_path / "s1", encoder=FakeEncoder())) == ["plum"]
    assert list(SoftDict.load(tmp_path / name, encoder=FakeEncoder())) == ["fig"]


def _failing_on_call(function, failing: int, error: OSError):
    """``function``, raising ``error`` on its ``failing``-th call (1-based) instead."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(args)
        if len(calls) == failing:
            raise error
        return function(*args, **kwargs)

    return wrapped


@pytest.mark.parametrize(
    "where, failing",
    [("write_durably", 1), ("write_durably", 3), ("rename", 1), ("rename", 2)],
)
def test_a_save_that_fails_on_a_system_error_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, failing: int
) -> None:
    """A full disk while writing, or a folder that cannot be renamed (the store's own, or the
    new one into its place), is a StoreFormatError that says what to do; the store that stood
    there loads as before, and no copy is left beside it."""
    import errno

    import softdict._persistence as persistence

    folder = store_at(tmp_path, "s", {"apple": 1.0})
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))
    if where == "rename":
        monkeypatch.setattr(persistence.os, "rename", _failing_on_call(os.rename, failing, error))
    else:
        wrapped = _failing_on_call(persistence.write_durably, failing, error)
        monkeypatch.setattr(persistence, "write_durably", wrapped)
    with pytest.raises(StoreFormatError, match=r"cannot save to .*is unchanged"):
        SoftDict({"chair": 2.0, "table": 3.0}, encoder=FakeEncoder()).save(folder)
    monkeypatch.undo()
    assert folder_names(tmp_path) == ["s"]
    assert list(SoftDict.load(folder, encoder=FakeEncoder())) == ["apple"]


def test_a_name_too_long_to_save_is_a_clear_error(tmp_path: Path) -> None:
    """A name the file system takes for the store but not for its swap folder (".NAME.new-T",
    18 characters longer) is refused with a StoreFormatError, leaving nothing behind but the
    lock file, which stays by design."""
    longest = os.pathconf(tmp_path, "PC_NAME_MAX")  # 255 on the usual file systems
    folder = tmp_path / ("n" * (longest - 17))  # its lock file fits; ".NAME.new-T" does not
    with pytest.raises(StoreFormatError, match=r"cannot save to .*shorter name"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder()).save(folder)
    assert folder_names(tmp_path) == []


def test_a_first_save_killed_before_its_rename_is_finished_on_load(tmp_path: Path) -> None:
    fresh = store_at(tmp_path, "fresh", {"apple": 1.0})  # no store stood there: nothing to move
    os.rename(fresh, tmp_path / ".s.new-bbbbbbbbbbbb")
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple"]


def test_a_deleted_store_does_not_come_back(tmp_path: Path) -> None:
    """Leftovers beside a store prove no interrupted save once the store has been deleted: a
    finished swap's old folder, or a save killed before its first rename."""
    folder = store_at(tmp_path, "s", {"chair": 2.0})
    older = store_at(tmp_path, "older", {"apple": 1.0})
    os.rename(older, tmp_path / ".s.old-dddddddddddd")  # a finished swap whose cleanup was killed
    assert list(SoftDict.load(folder, encoder=FakeEncoder())) == ["chair"]
    assert not (
        tmp_path / ".s.old-dddddddddddd"
    ).exists()  # cleaned once the swap is known finished
    os.rename(store_at(tmp_path, "o2", {"apple": 1.0}), tmp_path / ".s.old-eeeeeeeeeeee")
    stale = store_at(tmp_path, "stale", {"pear": 3.0}, replacing=True)
    os.rename(stale, tmp_path / ".s.new-ffffffffffff")  # killed before its first rename
    shutil.rmtree(folder)  # the user deletes the store
    with pytest.raises(StoreFormatError, match="does not exist"):
        SoftDict.load(folder, encoder=FakeEncoder())
    assert not folder.exists()


def test_a_store_path_that_is_a_symlink_is_saved_through_the_link(tmp_path: Path) -> None:
    real = store_at(tmp_path, "real", {"apple": 1.0})
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    SoftDict({"chair": 2.0}, encoder=FakeEncoder()).save(link)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert list(SoftDict.load(real, encoder=FakeEncoder())) == ["chair"]
    assert list(SoftDict.load(link, encoder=FakeEncoder())) == ["chair"]
    assert folder_names(tmp_path) == ["link", "real"]


SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from _support import FakeEncoder
    from softdict import SoftDict

    stores = [
        SoftDict({{f"a{{i}}": float(i) for i in range(300)}}, encoder=FakeEncoder()),
        SoftDict({{f"b{{i}}": -float(i) for i in range(500)}}, encoder=FakeEncoder()),
    ]
    stores[0].save({path!r})
    print("ready", flush=True)
    i = 0
    while True:
        stores[i % 2].save({path!r})
        i += 1
    """
)


def test_sigkill_at_any_moment_of_a_save_leaves_a_whole_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    script = SAVER.format(tests=str(TESTS), path=str(path))
    a = {f"a{i}": float(i) for i in range(300)}
    b = {f"b{i}": -float(i) for i in range(500)}
    rng = np.random.default_rng(0)
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(float(rng.uniform(0.0, 0.3)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        loaded = dict(SoftDict.load(path, encoder=FakeEncoder()).items())
        assert loaded in (a, b)


FORMAT1 = TESTS / "fixtures" / "format1"


@pytest.mark.parametrize(
    "name", ["scalar_auto_exact", "vector_hnsw_topk", "labels_l2_projection", "scalar_ivf_factory"]
)
def test_stores_saved_in_format_1_load_and_answer_the_same(tmp_path: Path, name: str) -> None:
    """Stores saved by softdict 0.1.0 (tests/fixtures/README.md) load, keep their items and
    options, answer as they did, and save again in the current format."""
    expected = json.loads((FORMAT1 / "expected.json").read_text())[name]
    loaded = SoftDict.load(FORMAT1 / name, encoder=FakeEncoder())
    assert list(loaded) == list(expected["items"])
    for key, value in expected["items"].items():
        got = loaded[key]
        assert same_value(got, np.array(value) if isinstance(got, np.ndarray) else value)
    assert (loaded.temperature, loaded.top_k) == (expected["temperature"], expected["top_k"])
    assert loaded.index_description == expected["index"]
    if name == "scalar_ivf_factory":
        attentions = loaded.attend_embeddings(np.load(FORMAT1 / "ivf_queries.npy"))
    else:
        attentions = loaded.attend(["red apple", "old chair", "fast car", "green"])
    for attention, want in zip(attentions, expected["attend"]):
        # Keys with equal embeddings ("apple chair", "chair apple") tie exactly; the order of a
        # tie is float noise, so each key's weight is compared, not the order of the keys.
        assert attention.k == want["k"] and sorted(attention.keys) == sorted(want["keys"])
        weight_of = dict(zip(attention.keys, attention.weights))
        assert_close([weight_of[key] for key in want["keys"]], want["weights"])
        # Format 1's tail_mass was the bound. Top-k attention now estimates no tail, and reports
        # the bound only where it holds (an exact index).
        if loaded.top_k is None:
            assert attention.tail_mass == want["tail_mass"] == 0.0  # exact: nothing left out
        else:
            assert attention.tail_mass is None
            if attention.tail_bound is not None:
                assert_close(attention.tail_bound, want["tail_mass"])
        if want["distribution"] is None:
            assert_close(np.asarray(attention.value, float), want["value"])
        else:
            # Labels tied in probability (keys of equal embeddings) win by float noise: any of
            # the tied labels is the answer, and each label keeps its probability.
            best = max(p for _, p in want["distribution"])
            tied = [label for label, p in want["distribution"] if p == close(best)]
            assert attention.value in tied and want["value"] in tied
            for label, p in want["distribution"]:
                assert attention.distribution[label] == close(p)
    loaded.save(tmp_path / "again")
    again = SoftDict.load(tmp_path / "again", encoder=FakeEncoder())
    assert_same_store(loaded, again)


def test_an_empty_store_saved_in_format_1_loads() -> None:
    loaded = SoftDict.load(FORMAT1 / "empty", encoder=FakeEncoder())
    assert len(loaded) == 0 and loaded.value_kind is None


def test_pickle_round_trips_by_encoder_name_without_weights() -> None:
    """A store on an encoder that loads by name pickles its contents and that name, and comes
    back whole; one on an encoder object is refused with a pointer to save and load."""
    sd = SoftDict(
        {f"key {i}": float(i) for i in range(50)}, encoder="test-hashing", top_k=5, temperature=0.2
    )
    del sd["key 7"]
    sd.query_projection = np.eye(32)[::-1]
    loaded = pickle.loads(pickle.dumps(sd))
    assert list(loaded.items()) == list(sd.items())
    assert (loaded.top_k, loaded.temperature, loaded.encoder.name) == (5, 0.2, "test-hashing")
    np.testing.assert_array_equal(loaded.query_projection, sd.query_projection)
    assert loaded.attend("key 3").keys == sd.attend("key 3").keys
    with pytest.raises(EncoderError, match=r"sd\.save\(path\)"):
        pickle.dumps(SoftDict({"apple": 1.0}, encoder=FakeEncoder()))


def test_a_pickle_made_before_the_copies_moved_out_of_mapping_still_loads() -> None:
    """Pickles name the function that rebuilds a SoftDict: ``softdict._mapping._unpickle``
    before it moved to ``softdict._copies``, where pickles made since name it."""
    sd = SoftDict({"apple": 1.0, "chair": 2.0}, encoder="test-hashing")
    made = pickle.dumps(sd, protocol=0)  # names by text: one can be written as before
    assert b"softdict._copies\n_unpickle" in made
    before = made.replace(b"softdict._copies\n_unpickle", b"softdict._mapping\n_unpickle")
    assert dict(pickle.loads(before)) == dict(sd)


class _Priced(SoftDict):
    """A subclass with state of its own, at module level so that pickle finds it."""


def test_pickle_carries_what_was_set_on_the_store() -> None:
    """A pickle held the store's contents alone: a subclass's attributes were lost."""
    sd = _Priced({"apple": 1.0}, encoder="test-hashing")
    sd.currency, sd._rates = "EUR", {"USD": 1.1}
    loaded = pickle.loads(pickle.dumps(sd))
    assert type(loaded) is _Priced and (loaded.currency, loaded._rates) == ("EUR", {"USD": 1.1})
    assert loaded["apple"] == 1.0
    sd.model = sd.encoder  # the encoder travels by name only: an attribute holding it is refused
    with pytest.raises(EncoderError, match="attribute 'model' holds the encoder"):
        pickle.dumps(sd)


@pytest.mark.integration
def test_a_pickled_store_on_the_bundled_encoder_carries_no_weights(bundled_encoder) -> None:
    sd = SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder)
    data = pickle.dumps(sd)
    assert len(data) < 50_000  # the model's weights are about 90 MB
    assert pickle.loads(data).lookup("fruit") == close(sd.lookup("fruit"))


LOOP_SAVER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from _support import FakeEncoder
    from softdict import SoftDict

    stores = [
        SoftDict({{f"{name}a{{i}}": float(i) for i in range(300)}}, encoder=FakeEncoder()),
        SoftDict({{f"{name}b{{i}}": -float(i) for i in range(500)}}, encoder=FakeEncoder()),
    ]
    stores[0].save({path!r})
    print("ready", flush=True)
    end = time.monotonic() + {seconds}
    i = 0
    while time.monotonic() < end:
        stores[i % 2].save({path!r})
        i += 1
    print(i, flush=True)
    """
)


def start_saver(path: Path, name: str, seconds: float) -> subprocess.Popen[bytes]:
    script = LOOP_SAVER.format(tests=str(TESTS), path=str(path), name=name, seconds=seconds)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_loads_never_race_a_save_in_another_process(tmp_path: Path) -> None:
    """While another process saves two stores to one path as fast as it can, every load here
    gets one of them, whole: the lock keeps a load out of a save's renames and files."""
    path = tmp_path / "store"
    saver = start_saver(path, "x", seconds=4.0)
    seen = set()
    try:
        for _ in range(60):
            keys = list(SoftDict.load(path, encoder=FakeEncoder()))
            assert len(keys) in (300, 500) and len({k[:2] for k in keys}) == 1
            seen.add(keys[0][:2])
            time.sleep(0.02)
    finally:
        saver.wait(timeout=60)
    assert seen == {"xa", "xb"}  # the saves really ran during the loads


def test_two_processes_saving_one_path_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "store"
    first = start_saver(path, "p", seconds=2.0)
    second = start_saver(path, "q", seconds=2.0)
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    keys = list(SoftDict.load(path, encoder=FakeEncoder()))
    assert len(keys) in (300, 500) and len({k[:2] for k in keys}) == 1  # one save, whole
    assert folder_names(tmp_path) == ["store"]  # no save was left half done


def test_a_lock_held_too_long_is_a_store_busy_error(tmp_path: Path) -> None:
    from filelock import FileLock

    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    sd.save(tmp_path / "s")
    with FileLock(tmp_path / ".s.lock"):  # as another process saving it would
        with pytest.raises(StoreBusyError, match="another process"):
            SoftDict.load(tmp_path / "s", encoder=FakeEncoder(), timeout=0.2)
        with pytest.raises(StoreBusyError):
            SoftDict({"chair": 2.0}, encoder=FakeEncoder()).save(tmp_path / "s", timeout=0.2)
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple"]


def test_a_save_told_not_to_replace_a_store_keeps_it(tmp_path: Path) -> None:
    """save(replace=False) refuses a store already at the path (a StoreFormatError that says
    so), leaves it as it was, and saves where no store is."""
    SoftDict({"apple": 1.0}, encoder=FakeEncoder()).save(tmp_path / "s")
    other = SoftDict({"chair": 2.0}, encoder=FakeEncoder())
    with pytest.raises(StoreFormatError, match="holds a store and replace=False"):
        other.save(tmp_path / "s", replace=False)
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple"]
    other.save(tmp_path / "t", replace=False)
    assert list(SoftDict.load(tmp_path / "t", encoder=FakeEncoder())) == ["chair"]
    with pytest.raises(ConfigError, match="replace must be True or False"):
        other.save(tmp_path / "s", replace="no")  # type: ignore[arg-type]  # truthy
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple"]
    other.save(tmp_path / "s")  # the default replaces it, as before
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["chair"]


def resign(folder: Path, name: str, data: bytes) -> None:
    """Replace a store file and re-sign the manifest for it, as a deliberate edit would: the
    checksums then pass, and only the checks behind them can refuse the file."""
    (folder / name).write_bytes(data)

    def change(manifest: dict) -> None:
        manifest["body"]["files"][name] = {
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }

    rewrite_manifest(folder, change)


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("garble", "field"),
    [
        (lambda body: body.update(files=[1, 2]), "files"),
        (lambda body: body["files"].update({"keys.json": [1]}), "files.keys.json"),
        (lambda body: body.pop("files"), "files"),
        (lambda body: body["encoder"].pop("fingerprint"), "encoder.fingerprint"),
        (lambda body: body.update(encoder="fake"), "encoder"),
        (lambda body: body["encoder"].update(fingerprint=["a", "b"]), "encoder.fingerprint"),
        (lambda body: body["config"].update(query_cache_size=10**15), "query_cache_size"),
        (lambda body: body.update(count=-1), "count"),
    ],
    ids=[
        "files a list",
        "an entry a list",
        "no files",
        "no fingerprint",
        "encoder a string",
        "fingerprint of strings",
        "a query cache of 1e15",
        "a negative count",
    ],
)
def test_a_manifest_is_checked_against_its_schema(tmp_path: Path, garble, field: str) -> None:
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda manifest: garble(manifest["body"]))
    with pytest.raises(StoreFormatError, match="lacks or garbles a field") as info:
        SoftDict.load(folder, encoder=FakeEncoder())
    assert field in str(info.value)


@pytest.mark.parametrize("name", ["/etc/hostname", "../outside.json", "sub/keys.json", ".."])
def test_a_manifest_cannot_list_a_file_outside_the_store(tmp_path: Path, name: str) -> None:
    (tmp_path / "outside.json").write_text("[]")
    folder = saved_store(tmp_path)
    rewrite_manifest(
        folder, lambda m: m["body"]["files"].update({name: {"bytes": 2, "sha256": "0" * 64}})
    )
    with pytest.raises(StoreFormatError, match="not a file of the store folder"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_a_link_inside_a_store_is_not_followed(tmp_path: Path) -> None:
    folder = saved_store(tmp_path)
    real = tmp_path / "elsewhere.json"
    os.replace(folder / "keys.json", real)
    (folder / "keys.json").symlink_to(real)
    with pytest.raises(StoreFormatError, match=r"keys\.json is a link"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_json_nested_too_deeply_is_a_store_format_error(tmp_path: Path) -> None:
    folder = saved_store(tmp_path)
    resign(folder, "keys.json", b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(StoreFormatError, match=r"keys\.json is JSON nested too deeply"):
        SoftDict.load(folder, encoder=FakeEncoder())
    (folder / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(StoreFormatError, match=r"manifest\.json is JSON nested too deeply"):
        SoftDict.load(folder, encoder=FakeEncoder())
    deep: object = "label"
    for _ in range(100_000):
        deep = [deep]
    sd = SoftDict({"apple": "fruit"}, encoder=FakeEncoder())
    with pytest.raises(ValueKindError, match="JSON"):
        sd["pear"] = deep  # nor can one be inserted


def test_a_huge_file_in_a_stores_place_is_refused_unread(tmp_path: Path) -> None:
    """The size is compared with the manifest first: a 6 GiB (sparse) file is not read."""
    folder = saved_store(tmp_path)
    with open(folder / "values.npy", "r+b") as handle:
        handle.truncate(6 * 2**30)
    with pytest.raises(StoreFormatError, match=f"values.npy has {6 * 2**30} bytes"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_loaded_values_are_checked_like_inserted_ones(tmp_path: Path) -> None:
    folder = saved_store(tmp_path)  # apple 1 (an int), green apple 2.5, ...
    values = np.load(folder / "values.npy")
    resign(folder, "values.npy", npy(np.where(np.arange(len(values)) == 0, 1.5, values)))
    with pytest.raises(StoreFormatError, match=r"value_is_int\.npy flags values as integers"):
        SoftDict.load(folder, encoder=FakeEncoder())
    resign(folder, "values.npy", npy(np.where(np.arange(len(values)) == 0, 2.0**60, values)))
    with pytest.raises(StoreFormatError, match="beyond 2"):
        SoftDict.load(folder, encoder=FakeEncoder())
    (tmp_path / "b").mkdir()
    folder = saved_store(tmp_path / "b")
    vectors = np.load(folder / "embeddings.npy")
    vectors[1, 3] = np.nan
    resign(folder, "embeddings.npy", npy(vectors))
    with pytest.raises(StoreFormatError, match=r"embeddings\.npy holds NaN"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_a_manifest_that_contradicts_itself_is_refused(tmp_path: Path) -> None:
    """A deliberate edit, checksums recomputed: what no save writes is refused, naming the
    file. A store fixed to vector values that records scalar ones; a cosine store with a key
    vector 10^30 times a unit one (which would outscore every other key)."""
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda m: m["body"]["config"].update(value_kind="vector"))
    with pytest.raises(StoreFormatError, match=r"manifest\.json fixes value_kind 'vector'"):
        SoftDict.load(folder, encoder=FakeEncoder())
    (tmp_path / "b").mkdir()
    folder = saved_store(tmp_path / "b")
    vectors = np.load(folder / "embeddings.npy")
    resign(folder, "embeddings.npy", npy(vectors * np.float32(1.0005)))  # within the margin
    assert len(SoftDict.load(folder, encoder=FakeEncoder())) == 5
    vectors[2] *= np.float32(1e30)
    resign(folder, "embeddings.npy", npy(vectors))
    with pytest.raises(
        StoreFormatError, match=r"embeddings\.npy holds a key vector of norm 1e\+30"
    ):
        SoftDict.load(folder, encoder=FakeEncoder())
    # A dot store's keys: at most 1e18 long, as inserts are (their scores overflowed float32).
    dot = SoftDict(encoder=FakeEncoder(), similarity="dot")
    dot.add_embeddings(["a", "b"], np.eye(2, 16) * 1e17, [1.0, 2.0])
    dot.save(tmp_path / "dot")
    vectors = np.load(tmp_path / "dot" / "embeddings.npy")
    vectors[1] *= np.float32(1e13)
    resign(tmp_path / "dot", "embeddings.npy", npy(vectors))
    with pytest.raises(StoreFormatError, match=r"norm 1e\+30, where this store's keys are at"):
        SoftDict.load(tmp_path / "dot", encoder=FakeEncoder())


def test_absurd_options_are_refused_when_given_too() -> None:
    with pytest.raises(ConfigError, match="query_cache_size"):
        SoftDict(encoder=FakeEncoder(), query_cache_size=10**15)


@pytest.mark.parametrize(
    ("index", "impostor"),
    [
        ("hnsw", lambda d: faiss.IndexFlatL2(d)),  # another kind and another metric
        ("hnsw", lambda d: faiss.IndexHNSWFlat(d, 32, faiss.METRIC_L2)),  # the metric only
        ("ivf", lambda d: faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)),  # the kind
    ],
)
def test_a_faiss_index_of_another_kind_or_metric_is_refused(tmp_path: Path, index, impostor):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2100, 16)).astype(np.float32)
    sd = SoftDict(encoder=FakeEncoder(), index=index)
    sd.add_embeddings([f"k{i}" for i in range(2100)], X, np.zeros(2100))
    sd.save(tmp_path / "s")
    fake = impostor(16)
    fake.add(X)
    resign(tmp_path / "s", "index.faiss", faiss.serialize_index(fake).tobytes())
    with pytest.raises(StoreFormatError, match=r"index\.faiss is not a .* index with this store"):
        SoftDict.load(tmp_path / "s", encoder=FakeEncoder())


@pytest.mark.parametrize("name", ["ids.npy", "manifest.json", "../escaped.npy", "sub/x.npy"])
def test_a_plug_in_that_names_a_file_not_its_own_is_refused_before_anything_is_written(
    name: str, tmp_path: Path
) -> None:
    """A plug-in column's "ids.npy" replaced the store's own, and "../escaped.npy" was written
    beside the store folder: each save reported success, over a good store, and load refused
    it (a hostile-input probe). Refused now, the good store as it was."""
    from _plugins import BooleanColumn

    from softdict.values import register_value_kind

    class Naming(BooleanColumn):
        kind = f"test-naming-{name}"
        naming = False

        def dump(self, slots: np.ndarray) -> dict:
            return {name: self._flags[slots]} if Naming.naming else super().dump(slots)

    register_value_kind(Naming)
    folder = tmp_path / "stores" / "store"
    folder.parent.mkdir()
    sd = SoftDict({"apple": True, "pear": False}, encoder=FakeEncoder(), value_kind=Naming.kind)
    sd.save(folder)
    saved = {path.name: path.read_bytes() for path in folder.iterdir()}
    Naming.naming = True
    sd["plum"] = True
    with pytest.raises(StoreFormatError, match=f"names the file {name!r}"):
        sd.save(folder, replace=True)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == saved
    assert sorted(path.name for path in folder.parent.iterdir()) == [".store.lock", "store"]
    Naming.naming = False
    assert dict(SoftDict.load(folder, encoder=FakeEncoder()).items()) == {
        "apple": True,
        "pear": False,
    }


def test_a_save_killed_before_its_first_rename_leaves_nothing_after_the_next_load(
    tmp_path: Path,
) -> None:
    """A save killed while it wrote its files left its half-written folder beside the store,
    as large as the store, until the next save (a probe); a load now removes it."""
    store_at(tmp_path, "s", {"apple": 1.0})
    half = tmp_path / ".s.new-aaaaaaaaaaaa"
    half.mkdir()
    (half / "keys.json").write_text('["apple", "pe')
    assert list(SoftDict.load(tmp_path / "s", encoder=FakeEncoder())) == ["apple"]
    assert folder_names(tmp_path) == ["s"]


def test_a_blank_value_kind_is_refused_and_a_store_saved_with_one_loads(tmp_path: Path) -> None:
    """value_kind="" fixed no kind where the store was made and named a kind at load: the store
    worked and saved, and then never loaded ("fixes value_kind '' but records 'scalar'"). It is
    refused now, and a store saved with one loads as it was made, its kind not fixed."""
    for blank in ("", "  "):
        with pytest.raises(ConfigError, match="value_kind"):
            SoftDict(encoder=FakeEncoder(), value_kind=blank)
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda manifest: manifest["body"]["config"].update(value_kind=""))
    loaded = SoftDict.load(folder, encoder=FakeEncoder())
    keys = ["apple", "green apple", "red chair", "sofa", "car"]  # saved_store's
    assert dict(loaded.items()) == dict(zip(keys, VALUE_SAMPLES["scalar"]))
    loaded.clear()
    loaded["label"] = "a label"  # no kind fixed: emptied, it takes the next value's
    assert loaded.value_kind == "categorical"


@pytest.mark.parametrize("version", [3, 2])
def test_a_format_version_altered_outside_the_checksum_is_refused(
    tmp_path: Path, version: int
) -> None:
    """format_version lies outside the checksummed body: one byte changed (4 to 3) loaded the
    store with the hand-set rule, to 2 with meaning alone too, without a word."""
    folder = saved_store(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format_version"] = version
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreFormatError, match=f"says store format {version}, but .* altered"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_a_body_lacking_its_formats_options_is_refused(tmp_path: Path) -> None:
    """The other way: a format 4 manifest without the combination (its checksum made to match)
    loaded with the default combination, not the one saved."""
    folder = saved_store(tmp_path)
    rewrite_manifest(folder, lambda manifest: manifest["body"]["config"].pop("combination"))
    with pytest.raises(StoreFormatError, match="lacks 'combination'"):
        SoftDict.load(folder, encoder=FakeEncoder())


def test_links_in_a_loop_a_dot_path_and_a_file_it_may_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links in a loop raised pathlib's raw RuntimeError; save(".") in an empty folder made the
    lock file "..lock" there and then refused the folder as no store; a store file or folder
    this process may not read (mode 000, for a user other than root) raised a raw
    PermissionError."""
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    for call in (sd.save, lambda p: SoftDict.load(p, encoder=FakeEncoder())):
        with pytest.raises(StoreFormatError, match="symbolic links point at each other"):
            call(tmp_path / "loop1")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    sd.save(".")
    assert dict(SoftDict.load(tmp_path / "here", encoder=FakeEncoder()).items()) == {"apple": 1}
    assert not any(entry.name.endswith(".lock") for entry in (tmp_path / "here").iterdir())
    read_bytes = Path.read_bytes

    def refused(path: Path) -> bytes:
        if path.name == "manifest.json":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refused)
    with pytest.raises(StoreFormatError, match=r"permission to read or write .*manifest\.json"):
        SoftDict.load(tmp_path / "here", encoder=FakeEncoder())
    with pytest.raises(StoreFormatError, match=r"permission to read or write .*manifest\.json"):
        sd.save(tmp_path / "here")


def test_opening_a_saved_folder_points_to_load(tmp_path: Path) -> None:
    """SoftDict.open(folder) said only that no kind of store had that name."""
    folder = saved_store(tmp_path)
    for uri in (str(folder), "./s"):
        with pytest.raises(ConfigError, match=r"no known kind of store.*SoftDict\.load\(path\)"):
            SoftDict.open(uri, encoder=FakeEncoder())
    with pytest.raises(ConfigError, match="no known kind of store") as raised:
        SoftDict.open("nosuchscheme", encoder=FakeEncoder())
    assert "load" not in str(raised.value)


def test_a_load_keeps_a_users_folder_named_like_a_swap_folder(tmp_path: Path) -> None:
    """Any hex after ".NAME.old-" counted as a swap's token: a load deleted a user's hidden
    folder ".s.old-2023" beside the store. A swap's token is 12 hex digits."""
    folder = saved_store(tmp_path)
    for name in (".s.old-2023", ".s.new-abc"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mine.txt").write_text("keep me")
    assert len(SoftDict.load(folder, encoder=FakeEncoder())) == 5
    SoftDict.load(folder, encoder=FakeEncoder()).save(folder)
    for name in (".s.old-2023", ".s.new-abc"):
        assert (tmp_path / name / "mine.txt").read_text() == "keep me"
