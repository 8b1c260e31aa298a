"""The bundled all-MiniLM-L6-v2 on ONNX Runtime: the same embeddings as sentence-transformers,
without torch on the lookup path.

A text is tokenised by the ``tokenizers`` library from the bundled ``tokenizer.json`` (truncated
at the model's ``max_seq_length``, 256 tokens), run through an ONNX export of the bundled
weights, mean-pooled over its tokens and unit-normalised inside the exported graph: the three
modules the model's ``modules.json`` lists (Transformer, Pooling with mean tokens, Normalize).

The ONNX file is exported from the bundled weights once, offline, on first use, into a per-user
cache folder (``$SOFTDICT_CACHE_DIR``, else ``$XDG_CACHE_HOME/softdict``, else
``~/.cache/softdict``), in a folder named by a hash of the weights, the tokenizer and the
versions of the exporting libraries. Why lazily, not shipped: the file is 90 MB, and it is
made from weights another package ships. The export runs in a child process (torch and the
exporter stay out of this one), under a file lock so that two processes exporting at once make
one file, written to a temporary name and renamed into place, so a crash never leaves a partial
file under the final name. It took about 5 s and 0.9 GB here, once.

The int8 variant (``encoder="bundled-int8"``) is that export with ONNX Runtime's dynamic
quantisation: int8 weights, activations quantised per batch at run time. It is faster and not
identical: its figures are in the README. Its file is made beside the float32 one, from it,
the first time it is asked for.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from softdict._cache import CACHE_ENV_VAR, cache_root, source_key, write_whole
from softdict._errors import EncoderError
from softdict._runtime import usable_cores

__all__ = ["CACHE_ENV_VAR", "VARIANTS", "OnnxEncoder", "cache_root", "exported_model"]

# Bump when the exported graph changes (inputs, outputs, pooling), so old exports are not used.
_EXPORT_FORMAT = 1
# Libraries whose versions can change the exported files (onnxruntime's quantiser makes int8's).
_EXPORTERS = ("torch", "transformers", "onnx", "onnxruntime")
# The runtime variants of a model, by the file each runs in the export's cache folder.
_FILES = {"fp32": "model.onnx", "int8": "model-int8.onnx"}
VARIANTS = tuple(_FILES)
# Threads for one inference: 2 on this project's 2-core machines (more only contend).
_THREADS = min(2, usable_cores())

# By model folder and variant: a second store on the bundled model does not load another session.
_SESSIONS: dict[tuple[Path, str], tuple[Any, Any]] = {}
_SESSION_LOCK = threading.Lock()


@functools.cache
def _export_key(model_dir: Path) -> str:
    """A name for the export of ``model_dir``: its weights' and tokenizer's hashes, and the
    exporting libraries' versions. Computed once per process: hashing the 90 MB of weights took
    about 0.07 s, and a process that runs both variants (``SoftDict.load(...,
    accept_variant=True)``) asks twice."""
    files = [model_dir / "model.safetensors", model_dir / "tokenizer.json"]
    return source_key(f"format {_EXPORT_FORMAT}", files, _EXPORTERS)


def exported_model(model_dir: Path, variant: str = "fp32") -> Path:
    """The ONNX file of the sentence-transformers model in ``model_dir``, in ``variant`` ("fp32"
    or "int8"), exported now if the cache does not hold it yet."""
    folder = cache_root() / "onnx" / _export_key(model_dir)
    target = folder / _FILES[variant]
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        with FileLock(str(folder / "export.lock")):
            # Another process may have made either file while this one waited for the lock.
            float32 = folder / _FILES["fp32"]
            if not float32.is_file():
                _make([str(model_dir)], float32, "exporting the bundled model to ONNX")
                write_whole(
                    folder / "export.json",
                    json.dumps({"model_dir": str(model_dir), "format": _EXPORT_FORMAT}),
                )
            if not target.is_file():
                _make(["--int8", str(float32)], target, "quantising the bundled model to int8")
    except OSError as exc:
        raise EncoderError(
            f"cannot write the ONNX export of the bundled model under {folder} ({exc}). "
            f"Set {CACHE_ENV_VAR} to a writable folder (it is made once, about 90 MB)"
        ) from exc
    return target


def _make(arguments: list[str], target: Path, what: str) -> None:
    """Run ``_onnx_export`` in a child process, writing a temporary name, then rename it into
    place: a crash leaves no partial file under the final name."""
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    module = "softdict.encoders._onnx_export"
    command = [sys.executable, "-m", module, *arguments, str(partial)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not partial.is_file():
            message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no message"
            raise EncoderError(
                f"{what} failed (exit {done.returncode}): {message}. Reinstall softdict "
                f"(`pip install softdict`, which brings onnx, onnxruntime and torch), or pass "
                f"encoder= another model"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _session(model_dir: Path, variant: str) -> tuple[Any, Any]:
    """(tokenizer, ONNX Runtime session) of the model in ``model_dir`` in ``variant``, loaded
    once per process (and exported first if the cache does not hold it)."""
    with _SESSION_LOCK:
        if (model_dir, variant) not in _SESSIONS:
            path = exported_model(model_dir, variant)
            import onnxruntime
            from tokenizers import Tokenizer

            config = json.loads((model_dir / "sentence_bert_config.json").read_text())
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            tokenizer.enable_truncation(int(config["max_seq_length"]))
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = _THREADS
            options.inter_op_num_threads = 1
            # ONNX Runtime's worker threads spin for a while after each run by default, and a
            # lookup scores its keys right after embedding the query: the spinning thread took
            # a core from numpy's and FAISS's, and the scoring after it ran 5x slower.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            try:
                session = onnxruntime.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # a damaged cache file: export it again next time
                path.unlink(missing_ok=True)
                raise EncoderError(
                    f"the cached ONNX export {path} could not be loaded ({exc}); it was removed "
                    f"and will be exported again on the next use"
                ) from exc
            _SESSIONS[model_dir, variant] = (tokenizer, session)
        return _SESSIONS[model_dir, variant]


class OnnxEncoder:
    """The bundled sentence-transformers model in ``model_dir`` on ONNX Runtime: unit-norm
    float32 embeddings, equal to sentence-transformers' (cosine >= 0.99999) in the "fp32"
    variant, near them in "int8" (its figures are in the README)."""

    def __init__(self, model_dir: Path, variant: str = "fp32") -> None:
        if variant not in _FILES:
            raise EncoderError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
        self.model_dir = model_dir
        self.variant = variant
        self._tokenizer, self._session = _session(model_dir, variant)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._session.get_outputs()[0].shape[1]), np.float32)
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return np.asarray(self._session.run(None, inputs)[0], dtype=np.float32)
