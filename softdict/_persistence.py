"""Saving and loading a store: a folder of self-describing files in open formats, never pickle.

A store folder holds:

    manifest.json     format name and version, config, counts, encoder identity, and the size
                      and SHA-256 of every other file; its own body is checksummed too
    keys.json         the keys, in iteration order
    rows.npy          each key's row (int64), in the same order
    live.npy          which rows hold a key (bool), deleted rows included until compaction
    embeddings.npy    the prepared key vectors by row (float32), for exact stores, or
    index.faiss       the FAISS index (vectors, training, graph), where rebuilding would be slow
    values.npy, value_is_int.npy      scalar values by row;  values.npy   vector values by row
    label_codes.npy, labels.json      categorical values: a code per row and the label table
    query_projection.npy              W_q learned by fit(), if any (float32, d x d)

Loading reads JSON and ``np.load(..., allow_pickle=False)``, so a store file cannot run code. The
FAISS file is parsed by FAISS's own reader; its checksum is verified first, which catches
corruption, not a deliberately crafted file: load FAISS files only from sources you trust.

Saving is atomic. Everything is written into a new sibling folder and flushed to disk, then the
old folder is renamed aside, the new one renamed into place, and the old one removed. A process
killed at any moment leaves either the old store or the new one whole: if it dies between the two
renames, ``load`` finds the complete new folder (or else the old one) and finishes the swap.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from softdict._config import SoftDictConfig, ValueKind
from softdict._encoders import BUNDLED_MODEL_NAME, TextEncoder, bundled_model_path, resolve_encoder
from softdict._errors import EncoderError, StoreFormatError
from softdict._index import KeyIndex, index_spec
from softdict._values import restore_column

if TYPE_CHECKING:
    from softdict._mapping import SoftDict

__all__ = ["FORMAT_VERSION", "load_store", "save_store"]

FORMAT_NAME = "softdict-store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# The encoder's fingerprint: its embedding of this text, recorded at save and compared at load.
PROBE_TEXT = "softdict encoder fingerprint: a quick brown fox jumps over the lazy dog"
# float32 inference on another CPU can differ in the last bits; a different model differs a lot.
_FINGERPRINT_TOLERANCE = 1e-3


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, allow_nan=False).encode()


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _siblings(path: Path, tag: str) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.{tag}-*"), key=lambda p: p.stat().st_mtime)


# -- saving ------------------------------------------------------------------------------------


def save_store(sd: SoftDict, path: str | os.PathLike[str]) -> None:
    """Write ``sd`` to the folder ``path`` atomically (see the module docstring)."""
    target = Path(path)
    if not target.parent.is_dir():
        raise StoreFormatError(
            f"cannot save to {target}: its parent folder {target.parent} does not exist"
        )
    replaces_other_data = target.exists() and not (target / MANIFEST).is_file()
    if replaces_other_data and (not target.is_dir() or any(target.iterdir())):
        raise StoreFormatError(
            f"cannot save to {target}: it exists and is not a softdict store, and saving "
            f"would replace it; choose another path or remove it yourself"
        )
    files = _store_files(sd)
    manifest_body = {
        "config": sd._config.model_dump(mode="json"),
        "count": len(sd),
        "rows": sd._index.size if sd._index is not None else 0,
        "dim": sd._index.dim if sd._index is not None else None,
        "value_kind": sd._values.kind.value if sd._values is not None else None,
        "encoder": _encoder_identity(sd),
        "index_file": "index.faiss" if "index.faiss" in files else None,
        "files": {
            name: {"bytes": len(data), "sha256": _sha256(data)} for name, data in files.items()
        },
    }
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "body_sha256": _sha256(_canonical(manifest_body)),
        "body": manifest_body,
    }
    token = uuid.uuid4().hex[:12]
    fresh = target.parent / f".{target.name}.new-{token}"
    fresh.mkdir()
    try:
        for name, data in files.items():
            _write_durably(fresh / name, data)
        # The manifest goes last: a folder with a valid manifest has every file it lists.
        _write_durably(fresh / MANIFEST, json.dumps(manifest, indent=1).encode())
        _fsync_dir(fresh)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    old = target.parent / f".{target.name}.old-{token}"
    if target.exists():
        os.rename(target, old)
    os.rename(fresh, target)
    _fsync_dir(target.parent)
    for leftover in [old, *_siblings(target, "old"), *_siblings(target, "new")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _store_files(sd: SoftDict) -> dict[str, bytes]:
    keys = list(sd._row_of)
    files = {
        "keys.json": _canonical(keys),
        "rows.npy": _npy_bytes(sd._rows_in_order()),
    }
    if sd._index is not None:
        live, vectors, faiss_bytes = sd._index.export()
        files["live.npy"] = _npy_bytes(live)
        if vectors is not None:
            files["embeddings.npy"] = _npy_bytes(vectors)
        if faiss_bytes is not None:
            files["index.faiss"] = faiss_bytes
    if sd._query_projection is not None:
        files["query_projection.npy"] = _npy_bytes(sd._query_projection)
    if sd._values is not None:
        for name, value in sd._values.export().items():
            files[f"{name}.json" if isinstance(value, list) else f"{name}.npy"] = (
                _canonical(value) if isinstance(value, list) else _npy_bytes(value)
            )
    return files


def _encoder_identity(sd: SoftDict) -> dict[str, Any]:
    encoder = sd._encoder
    fingerprint = encoder.encode_keys([PROBE_TEXT])[0]
    return {
        "name": encoder.name,
        "dim": int(fingerprint.shape[0]),
        "loadable_by_name": encoder.loadable_by_name,
        "probe_text": PROBE_TEXT,
        "fingerprint": [float(x) for x in fingerprint],
    }


# -- loading -----------------------------------------------------------------------------------


def _recover(target: Path) -> None:
    """Finish a save that was killed between its two renames."""
    if target.exists():
        return
    for candidate in reversed(_siblings(target, "new")):
        try:
            _check_files(candidate, _read_manifest(candidate)["body"])
        except StoreFormatError:
            continue
        os.rename(candidate, target)
        return
    olds = _siblings(target, "old")
    if olds:
        os.rename(olds[-1], target)


def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        raise StoreFormatError(
            f"{path} is missing: {folder} is not a softdict store (or its save never finished)"
        )
    try:
        manifest = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreFormatError(f"{path} is not valid JSON ({exc}); the file is corrupted") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise StoreFormatError(f"{path} is not a softdict manifest (no 'format': {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise StoreFormatError(f"{path} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise StoreFormatError(
            f"{folder} was saved in store format {version}, newer than this softdict reads "
            f"(up to {FORMAT_VERSION}); upgrade softdict to load it"
        )
    body = manifest.get("body")
    try:
        intact = isinstance(body, dict) and _sha256(_canonical(body)) == manifest.get("body_sha256")
    except (TypeError, ValueError):
        intact = False
    if not intact:
        raise StoreFormatError(f"{path} fails its checksum: the manifest is corrupted")
    return manifest


def _check_files(folder: Path, body: dict[str, Any]) -> dict[str, bytes]:
    contents = {}
    for name, expected in body["files"].items():
        path = folder / name
        if not path.is_file():
            raise StoreFormatError(f"{path} is missing; the store is incomplete")
        data = path.read_bytes()
        if len(data) != expected["bytes"]:
            raise StoreFormatError(
                f"{path} has {len(data)} bytes, the manifest says {expected['bytes']}: "
                f"the file is truncated or was replaced"
            )
        if _sha256(data) != expected["sha256"]:
            raise StoreFormatError(f"{path} fails its SHA-256 checksum: the file is corrupted")
        contents[name] = data
    return contents


def _load_npy(
    folder: Path, name: str, data: bytes, dtype: type, shape: tuple[int | None, ...]
) -> np.ndarray:
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise StoreFormatError(f"{folder / name} is not a readable .npy array ({exc})") from None
    if (
        array.dtype != np.dtype(dtype)
        or array.ndim != len(shape)
        or any(want is not None and got != want for got, want in zip(array.shape, shape))
    ):
        raise StoreFormatError(
            f"{folder / name} holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} "
            f"{tuple('n' if s is None else s for s in shape)}"
        )
    return array


def _load_json_list(folder: Path, name: str, data: bytes) -> list[Any]:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreFormatError(f"{folder / name} is not valid JSON ({exc})") from None
    if not isinstance(value, list):
        raise StoreFormatError(f"{folder / name} should hold a JSON list")
    return value


def load_store(cls: type[SoftDict], path: str | os.PathLike[str], encoder: object) -> SoftDict:
    """Read the store at ``path``; every problem is a ``StoreFormatError`` naming the file."""
    folder = Path(path)
    _recover(folder)
    if not folder.is_dir():
        raise StoreFormatError(f"no softdict store at {folder}: the folder does not exist")
    body = _read_manifest(folder)["body"]
    try:
        config = SoftDictConfig.model_validate(body["config"])
        count, rows_total, dim = int(body["count"]), int(body["rows"]), body["dim"]
        kind = ValueKind(body["value_kind"]) if body["value_kind"] is not None else None
        identity = body["encoder"]
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreFormatError(f"{folder / MANIFEST} lacks or garbles a field ({exc})") from None
    files = _check_files(folder, body)

    text_encoder = _matching_encoder(identity, encoder, config.query_cache_size)
    sd = cls.__new__(cls)
    sd._lock = threading.RLock()
    sd._config = config
    sd._index_spec = index_spec(config.index)
    sd._encoder = text_encoder
    sd._query_projection = None
    sd._reset()
    if "query_projection.npy" in files:
        if dim is None:
            raise StoreFormatError(
                f"{folder / 'query_projection.npy'} is present but the store has no dimension"
            )
        projection = _load_npy(
            folder, "query_projection.npy", files["query_projection.npy"], np.float32, (dim, dim)
        )
        if not np.all(np.isfinite(projection)):
            raise StoreFormatError(f"{folder / 'query_projection.npy'} holds NaN or infinity")
        sd._query_projection = projection

    keys = _load_json_list(folder, "keys.json", files["keys.json"])
    rows = _load_npy(folder, "rows.npy", files["rows.npy"], np.int64, (count,))
    if len(keys) != count or not all(isinstance(k, str) for k in keys) or len(set(keys)) != count:
        raise StoreFormatError(f"{folder / 'keys.json'} should hold {count} distinct strings")
    if count and (rows.min() < 0 or rows.max() >= rows_total or len(set(rows.tolist())) != count):
        raise StoreFormatError(f"{folder / 'rows.npy'} has rows out of range or repeated")
    if count == 0:
        return sd
    live = _load_npy(folder, "live.npy", files["live.npy"], np.bool_, (rows_total,))
    if int(live.sum()) != count or not live[rows].all():
        raise StoreFormatError(f"{folder / 'live.npy'} does not match the rows of the keys")
    vectors = None
    if "embeddings.npy" in files:
        vectors = _load_npy(
            folder, "embeddings.npy", files["embeddings.npy"], np.float32, (rows_total, dim)
        )
    elif "index.faiss" not in files:
        raise StoreFormatError(f"{folder} has neither embeddings.npy nor index.faiss")
    try:
        sd._index = KeyIndex.restore(
            dim, config.similarity, sd._index_spec, live, vectors, files.get("index.faiss")
        )
    except ValueError as exc:
        raise StoreFormatError(f"{folder / 'index.faiss'} does not fit the store: {exc}") from None
    assert kind is not None
    sd._values = restore_column(kind, _column_state(folder, files, kind, rows_total))
    sd._row_of = dict(zip(keys, rows.tolist()))
    key_of_row: list[str | None] = [None] * rows_total
    for key, row in sd._row_of.items():
        key_of_row[row] = key
    sd._key_of_row = key_of_row
    sd._dead = rows_total - count
    return sd


def _column_state(folder: Path, files: dict[str, bytes], kind: ValueKind, n: int) -> dict[str, Any]:
    def need(name: str) -> bytes:
        if name not in files:
            raise StoreFormatError(f"{folder / name} is missing for a {kind.value} store")
        return files[name]

    if kind is ValueKind.SCALAR:
        values = _load_npy(folder, "values.npy", need("values.npy"), np.float64, (n,))
        if not np.all(np.isfinite(values)):
            raise StoreFormatError(f"{folder / 'values.npy'} holds NaN or infinity")
        is_int = _load_npy(folder, "value_is_int.npy", need("value_is_int.npy"), np.bool_, (n,))
        return {"values": values, "value_is_int": is_int}
    if kind is ValueKind.VECTOR:
        values = _load_npy(folder, "values.npy", need("values.npy"), np.float64, (n, None))
        if not np.all(np.isfinite(values)):
            raise StoreFormatError(f"{folder / 'values.npy'} holds NaN or infinity")
        return {"values": values}
    codes = _load_npy(folder, "label_codes.npy", need("label_codes.npy"), np.int64, (n,))
    labels = _load_json_list(folder, "labels.json", need("labels.json"))
    if not all(isinstance(text, str) for text in labels) or (
        n and (codes.min() < 0 or codes.max() >= len(labels))
    ):
        raise StoreFormatError(f"{folder / 'label_codes.npy'} does not match labels.json")
    for text in labels:
        try:
            json.loads(text)
        except json.JSONDecodeError:
            raise StoreFormatError(
                f"{folder / 'labels.json'} holds a label that is not JSON"
            ) from None
    return {"label_codes": codes, "labels": labels}


def _matching_encoder(identity: dict[str, Any], encoder: object, cache_size: int) -> TextEncoder:
    """The encoder to use: the one given, checked against the store's, or the recorded one."""
    expected = f"{identity['name']!r} ({identity['dim']} dims)"
    if encoder is None:
        if not identity.get("loadable_by_name"):
            raise EncoderError(
                f"this store was built with the encoder {expected}, which softdict cannot load "
                f"by name; pass it: SoftDict.load(path, encoder=...)"
            )
        name = identity["name"]
        bundled = bundled_model_path() if name == BUNDLED_MODEL_NAME else None
        text_encoder = resolve_encoder(str(bundled or name), query_cache_size=cache_size)
        text_encoder.name = identity["name"]
    else:
        text_encoder = resolve_encoder(encoder, query_cache_size=cache_size)
    fingerprint = np.asarray(
        text_encoder.encode_keys([identity["probe_text"]])[0], dtype=np.float64
    )
    saved = np.asarray(identity["fingerprint"], dtype=np.float64)
    if fingerprint.shape != saved.shape or not np.allclose(
        fingerprint, saved, atol=_FINGERPRINT_TOLERANCE
    ):
        raise EncoderError(
            f"this store expects the encoder {expected}, but {text_encoder.name!r} "
            f"({fingerprint.shape[0]} dims) embeds the probe text differently; its embeddings "
            f"would not match the stored keys. Load with the encoder the store was built with"
        )
    return text_encoder
