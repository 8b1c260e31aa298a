"""Saving and loading a store: a folder of self-describing files in open formats, never pickle.

A store folder (format 4) holds:

    manifest.json     format name and version, config, counts, the next id, the encoder's
                      identity, the index's state, and the size and SHA-256 of every other file;
                      its own body is checksummed too
    keys.json         the keys, in iteration order
    ids.npy           each key's id (int64), in the same order
    query_projection.npy              W_q learned by fit(), if any (float32, d x d)
    the value column's files, aligned with keys.json (softdict.values):
        values.npy, value_is_int.npy      scalar values;  values.npy   vector values
        label_codes.npy, labels.json      categorical values: a code per key and the label table
    the index backend's files (softdict.index):
        embeddings.npy, embedding_ids.npy        exact search: the prepared vectors and their ids
        index.faiss, index_ids.npy, index_live.npy   a FAISS index, the id of each of its rows,
                                                      and which rows hold a key
    the spelling channel's 3-gram postings, in stores of more than 10,000 keys or where a lookup
    built them, unless deleted keys wait to be compacted (softdict.spelling):
        spelling_indptr.npy, spelling_rows.npy, spelling_lengths.npy

Format 3 is format 4 before the learned combination of meaning and spelling: it is read with
``combination="rule-1"``, the hand-set rule it answered with. Format 2 is format 3 before the
spelling channel: it is read with ``lexical=0`` too. Either way a store answers as it did when it
was saved, until its owner changes those options.

Format 1 (softdict 0.1.0) kept everything by row, deleted rows included; it is read by
translating it to format 2's state on load (meaning alone too), and saved again as format 4.

Loading reads JSON and ``np.load(..., allow_pickle=False)``, so a store file cannot run code. The
FAISS file is parsed by FAISS's own reader; its checksum is verified first, which catches
corruption, not a deliberately crafted file: load FAISS files only from sources you trust.

Saving is atomic. Everything is written into a new sibling folder and flushed to disk, then the
old folder is renamed aside, the new one renamed into place, and the old one removed. A process
killed at any moment leaves either the old store or the new one whole: if it dies between the two
renames, ``load`` finishes the swap (see ``_recover``, which brings back nothing else), as does
``recover_store`` (``softdict info`` and ``build``). A store path that is a symbolic link is saved
to and loaded from the link's target.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np

from softdict._encoder_match import matching_encoder
from softdict._errors import ConfigError, StoreFormatError, short_repr
from softdict._files import (
    FileReader,
    StoreFiles,
    canonical_json,
    encode_file,
    fsync_dir,
    store_folder,
    write_durably,
)
from softdict._folder_lock import LOCK_TIMEOUT, locked, permission_refused
from softdict._manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    FormatOneBody,
    FormatTwoBody,
    check_files,
    check_part_names,
    config_as_loaded,
    read_manifest,
    replacing_refused,
    sha256,
)
from softdict.encoders import EncoderIdentity, TextEncoder
from softdict.index import backend_spec
from softdict.index.reindexing import IndexChangeRefused, check_reindex, rebuilding_hint
from softdict.store.base import Store, StoreState
from softdict.store.memory import MemoryStore

__all__ = [
    "FORMAT_VERSION",
    "LOCK_TIMEOUT",
    "MANIFEST",
    "load_store",
    "read_manifest",
    "recover_store",
    "restore_snapshot",
    "save_store",
]


# The token T of a swap's folders: the 12 hex digits ``_swap_in`` writes, no other (a load took
# a user's hidden folder ".prices.old-2023" for a swap's and deleted it).
_TOKEN = re.compile(r"[0-9a-f]{12}")


def _siblings(path: Path, tag: str) -> list[Path]:
    """The ``.NAME.<tag>-T`` folders of a swap of this store, oldest first, matched exactly: as
    a glob pattern, a store named ``s[12]`` took ``.s1.new-T`` for its own and deleted it."""
    prefix = f".{path.name}.{tag}-"
    found = [
        entry
        for entry in path.parent.iterdir()
        if entry.name.startswith(prefix) and _TOKEN.fullmatch(entry.name[len(prefix) :])
    ]
    dated = []
    for entry in found:
        with suppress(FileNotFoundError):  # renamed or removed meanwhile by another's save
            dated.append((entry.stat().st_mtime, entry))
    return [entry for _, entry in sorted(dated, key=lambda pair: pair[0])]


# -- saving ------------------------------------------------------------------------------------


def save_store(
    store: Store,
    identity: EncoderIdentity,
    path: str | os.PathLike[str],
    timeout: float = LOCK_TIMEOUT,
    replace: bool = True,
) -> None:
    """Write ``store`` (embedded by the encoder of that ``identity``) to the folder ``path``
    atomically, holding the folder's lock (``_folder_lock.locked``); with ``replace`` False,
    refusing a store already there. The caller fingerprints its encoder before it takes the
    store's own lock: encoding the probe text may be slow, and lookups wait for that lock."""
    target = store_folder(path, "save to")
    # Taken before the folder's lock: the snapshot takes the longest.
    state, part_files = store.snapshot()
    with locked(target, timeout, writing=True), permission_refused("save to", target):
        # Under the lock: a store saved here since the caller looked stays, as does one whose save
        # was cut short between its renames, finished first as a load would (a probe lost it).
        _recover(target)
        # First what no save may replace: a folder of another program's manifest.json was
        # said to hold a store, which replace=True would replace.
        refused = replacing_refused(target)
        if refused:
            raise StoreFormatError(
                f"cannot save to {target}: {refused}, and saving replaces the whole folder; "
                f"choose another path, or move what it holds out first"
            )
        if not replace and (target / MANIFEST).is_file():
            raise StoreFormatError(f"cannot save to {target}: it holds a store and replace=False "
                                   f"(the command line's --force replaces it)")  # fmt: skip
        _save_locked(target, state, part_files, dataclasses.asdict(identity))


def _save_locked(
    target: Path, state: StoreState, part_files: StoreFiles, identity: dict[str, Any]
) -> None:
    check_part_names(target, part_files)
    contents: dict[str, Any] = {"keys.json": state.keys, "ids.npy": state.ids, **part_files}
    if state.projection is not None:
        contents["query_projection.npy"] = state.projection
    files = {name: encode_file(content) for name, content in contents.items()}
    manifest_body = {
        "config": state.config.model_dump(mode="json"),
        "count": len(state.keys),
        "dim": state.dim,
        "value_kind": state.value_kind,
        "next_id": state.next_id,
        "encoder": identity,
        "index": state.index_meta,
        # Whether a store stood at the path when this one was written: recovery finishes an
        # interrupted swap only when that proves it was in flight (see _recover).
        "replaces_store": target.exists(),
        "files": {
            name: {"bytes": len(data), "sha256": sha256(data)} for name, data in files.items()
        },
    }
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "body_sha256": sha256(canonical_json(manifest_body)),
        "body": manifest_body,
    }
    _swap_in(target, files, json.dumps(manifest, indent=1).encode())


def _swap_in(target: Path, files: dict[str, bytes], manifest: bytes) -> None:
    """Write ``files`` and the manifest into a new folder, then rename it into ``target``. A
    system error (a full disk, a name too long, a folder that cannot be renamed) is a
    ``StoreFormatError`` and leaves the store that stood at ``target`` as it was."""
    token = uuid.uuid4().hex[:12]
    fresh = target.parent / f".{target.name}.new-{token}"
    try:
        fresh.mkdir()
        for name, data in files.items():
            write_durably(fresh / name, data)
        # The manifest goes last: a folder with a valid manifest has every file it lists.
        write_durably(fresh / MANIFEST, manifest)
        fsync_dir(fresh)
    except BaseException as exc:
        shutil.rmtree(fresh, ignore_errors=True)
        if isinstance(exc, OSError):
            raise _not_saved(target, exc) from None
        raise
    old = target.parent / f".{target.name}.old-{token}"
    moved = False
    try:
        if target.exists():
            os.rename(target, old)
            moved = True
        os.rename(fresh, target)
    except OSError as exc:
        # Put the store back. Where even that fails, both folders stay, and the next load
        # finishes the swap (``_recover``): the new folder is whole.
        with suppress(OSError):
            if moved:
                os.rename(old, target)
            shutil.rmtree(fresh, ignore_errors=True)
        raise _not_saved(target, exc) from None
    fsync_dir(target.parent)
    for leftover in [old, *_siblings(target, "old"), *_siblings(target, "new")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _not_saved(target: Path, exc: OSError) -> StoreFormatError:
    return StoreFormatError(
        f"cannot save to {target}: {exc.strerror or exc} ({exc.filename or target}); the store "
        f"already there, if any, is unchanged: free some space, or choose another path or a "
        f"shorter name"
    )


# -- loading -----------------------------------------------------------------------------------


def recover_store(path: str | os.PathLike[str], timeout: float = LOCK_TIMEOUT) -> bool:
    """Finish a save to ``path`` that was killed between its two renames, as ``load_store``
    does, holding the store's lock; whether one was finished."""
    try:
        folder = store_folder(path, "recover")
    except StoreFormatError:  # no folder to hold a store: the caller's save or load says why
        return False
    if not (_siblings(folder, "new") or _siblings(folder, "old")):
        return False  # no swap folder beside it: no save was cut short, and no lock is needed
    with locked(folder, timeout, writing=False):
        return _recover(folder)


def _recover(target: Path) -> bool:
    """Finish a save that was killed between its two renames, and only such a save; whether
    one was finished.

    A save writes ``.NAME.new-T``, renames ``NAME`` to ``.NAME.old-T`` (if there was one),
    renames ``.NAME.new-T`` to ``NAME``, and removes ``.NAME.old-T``. With ``NAME`` missing,
    swap T was in flight exactly when ``.NAME.new-T`` exists and either ``.NAME.old-T`` exists
    or the new manifest says no store stood there: it is finished forward when the new folder
    is whole, else backward. Anything else beside a missing store is not brought back (the
    store may have been deleted since). With ``NAME`` present, ``.NAME.old-*`` folders are what
    finished swaps failed to clean up, and ``.NAME.new-*`` ones saves killed before their first
    rename (each as large as the store): both are removed, under the lock no save holds.
    """
    if target.exists():
        for leftover in [*_siblings(target, "old"), *_siblings(target, "new")]:
            shutil.rmtree(leftover, ignore_errors=True)
        return False
    for fresh in reversed(_siblings(target, "new")):
        token = fresh.name.rsplit("-", 1)[-1]
        old = fresh.with_name(f".{target.name}.old-{token}")
        try:
            body: FormatOneBody | FormatTwoBody | None = read_manifest(fresh).body
            check_files(fresh, body.files)  # type: ignore[union-attr]
        except StoreFormatError:
            body = None
        if old.exists():
            kept, dropped = (fresh, old) if body is not None else (old, fresh)
            os.rename(kept, target)
            shutil.rmtree(dropped, ignore_errors=True)  # the swap is finished: its leftover
            return True
        if getattr(body, "replaces_store", None) is False:
            os.rename(fresh, target)
            return True
    return False


def load_store(
    path: str | os.PathLike[str],
    encoder: object,
    timeout: float = LOCK_TIMEOUT,
    *,
    accept_variant: bool = False,
    index: str | None = None,
) -> tuple[MemoryStore, TextEncoder]:
    """Read the store at ``path``; every problem is a ``StoreFormatError`` naming the file.
    ``index``: the index to rebuild the saved one as (None: the saved one); ConfigError if it
    names none or cannot hold the store's keys.

    The store's lock is held while recovering and reading the files into memory, and released
    before the encoder loads."""
    if index is not None:
        if not isinstance(index, str):
            raise ConfigError(f"index must be a str or None, got {short_repr(index, 60)}")
        backend_spec(index)  # ConfigError for an unknown one, before anything is read
    # Checked before the lock, whose file would make a missing parent folder. A missing store in
    # a folder is found under the lock: a save of it may be between its renames.
    folder = store_folder(path, "load")
    with locked(folder, timeout, writing=False), permission_refused("load", folder):
        _recover(folder)
        if not folder.is_dir():
            why = "a file, not a store's folder" if folder.exists() else "the folder does not exist"
            raise StoreFormatError(f"no softdict store at {folder}: {why}")
        manifest = read_manifest(folder)
        body = manifest.body
        if isinstance(body, FormatOneBody):
            state, files, identity = _read_format_1(folder, body)
        else:
            state, files, identity = _read_format_2(folder, body)
        state = dataclasses.replace(state, config=config_as_loaded(state.config, manifest.version))
    saved_index, metric = None, state.config.similarity.metric
    if index is not None and index != state.config.index:
        check_reindex(index, state.dim, metric)  # before the encoder loads, which takes time
        saved_index = state.config.index
        state = dataclasses.replace(state, config=state.config.replace(index=index))
    text_encoder = matching_encoder(
        identity, encoder, state.config.query_cache_size, accept_variant
    )
    try:
        store = MemoryStore.restore(state, files, saved_index)
    except IndexChangeRefused:
        raise
    except ConfigError as exc:
        hint = ""
        if saved_index is None:
            hint = rebuilding_hint(state.config.index, state.dim, metric, state.index_meta)
        raise StoreFormatError(
            f"{folder / MANIFEST} holds options this softdict lacks: {exc}{hint}"
        ) from None
    return store, text_encoder


def restore_snapshot(
    state: StoreState, files: StoreFiles, identity: EncoderIdentity
) -> tuple[MemoryStore, TextEncoder]:
    """A store and its encoder from a snapshot held in memory (an unpickled SoftDict): the
    encoder is loaded by its recorded name and checked against its fingerprint."""
    text_encoder = matching_encoder(identity, None, state.config.query_cache_size)
    return MemoryStore.restore(state, FileReader(Path("<pickle>"), dict(files))), text_encoder


def _read_common(
    folder: Path, body: FormatOneBody | FormatTwoBody
) -> tuple[FileReader, list[str], EncoderIdentity]:
    """What both formats share: the checked files, the keys, the encoder's identity."""
    identity = body.encoder.identity()
    files = FileReader(folder, check_files(folder, body.files))
    keys = files.json_list("keys.json")
    count = body.count
    if len(keys) != count or not all(isinstance(k, str) for k in keys) or len(set(keys)) != count:
        raise files.error("keys.json", f"should hold {count} distinct strings")
    return files, keys, identity


def _projection(files: FileReader, dim: int | None) -> np.ndarray | None:
    if not files.has("query_projection.npy"):
        return None
    # A store emptied by clear() keeps its projection: its first keys are checked against it.
    projection = files.finite_npy("query_projection.npy", np.float32, (dim, dim))
    if projection.shape[0] != projection.shape[1]:
        raise files.error("query_projection.npy", "should be a square matrix")
    return projection


def _read_format_2(
    folder: Path, body: FormatTwoBody
) -> tuple[StoreState, FileReader, EncoderIdentity]:
    files, keys, identity = _read_common(folder, body)
    count, dim, next_id = body.count, body.dim, body.next_id
    ids = files.npy("ids.npy", np.int64, (count,))
    if count and (ids.min() < 0 or ids.max() >= next_id or len(np.unique(ids)) != count):
        raise files.error("ids.npy", "has ids that are negative, repeated or not below next_id")
    state = StoreState(
        body.config, keys, ids, next_id, dim, body.value_kind, body.index, _projection(files, dim)
    )
    return state, files, identity


# Format 1 files that are not per-row value arrays (every other .npy file held one row per row).
_FORMAT_1_NOT_VALUES = {"rows.npy", "live.npy", "embeddings.npy", "query_projection.npy"}


def _read_format_1(
    folder: Path, body: FormatOneBody
) -> tuple[StoreState, FileReader, EncoderIdentity]:
    """Format 1 kept values and vectors by row, deleted rows included: take the live rows, in
    key order, and make each key's row its id (rows were never reused before compaction)."""
    files, keys, identity = _read_common(folder, body)
    config, count, rows_total = body.config, body.count, body.rows
    dim, kind = body.dim, body.value_kind
    rows = files.npy("rows.npy", np.int64, (count,))
    if count and (rows.min() < 0 or rows.max() >= rows_total or len(set(rows.tolist())) != count):
        raise files.error("rows.npy", "has rows out of range or repeated")
    projection = _projection(files, dim)
    if count == 0:
        return (
            StoreState(config, [], rows, rows_total, dim, kind, None, projection),
            files,
            identity,
        )
    live = files.npy("live.npy", np.bool_, (rows_total,))
    if int(live.sum()) != count or not live[rows].all():
        raise files.error("live.npy", "does not match the rows of the keys")
    translated: dict[str, bytes | np.ndarray] = {}
    for name in body.files:
        if name.endswith(".npy") and name not in _FORMAT_1_NOT_VALUES:
            translated[name] = files.npy_rows(name, rows_total)[rows]
        elif name.endswith(".json") and name != "keys.json":
            translated[name] = files.raw(name)
    live_rows = np.flatnonzero(live)
    if files.has("embeddings.npy"):
        vectors = files.npy("embeddings.npy", np.float32, (rows_total, dim))
        translated["embeddings.npy"] = vectors[live_rows]
        translated["embedding_ids.npy"] = live_rows
        index_meta: dict[str, Any] = {"phase": "exact"}
    elif files.has("index.faiss"):
        translated["index.faiss"] = files.raw("index.faiss")
        translated["index_ids.npy"] = np.arange(rows_total, dtype=np.int64)
        translated["index_live.npy"] = live
        index_meta = {"phase": "built"}
    else:
        raise StoreFormatError(f"{folder} has neither embeddings.npy nor index.faiss")
    state = StoreState(config, keys, rows, rows_total, dim, kind, index_meta, projection)
    return state, FileReader(folder, translated), identity
