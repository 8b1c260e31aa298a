"""Plug-ins written the way a user would write one: one class each, plus one registration.

* ``DictBackend``: exact search in plain numpy with its own id -> vector map (registered as
  ``index="test-dict"``); it passes the same conformance suite as the real backends.
* ``BooleanColumn``: True/False values, blended as the probability of True (registered as
  ``value_kind="boolean"``); the mapping contract runs over it like the built-in kinds.
* ``HashingEncoder``: a character-trigram hashing encoder with query and document entry points
  (registered as ``encoder="test-hashing"``), loadable by name, so saved stores reload it.

They import only public names (``softdict.index``, ``softdict.values``, ``softdict.encoders``).

Also ``ivf-from-start`` and ``ivf_sq8-from-start``: the real IVF backends trained from the first
insert (not after 2,000 keys), so the mapping contract runs FAISS IVF on small stores; and
``compressed-from-start``, the compressed backend reading its codes from the first key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from softdict.encoders import register_encoder_name
from softdict.index import (
    Allow,
    BackendDump,
    Capabilities,
    FileReader,
    IndexBackend,
    Metric,
    metric_scores,
    register_backend,
    top_of_scores,
)
from softdict.index.compressed import CompressedBackend
from softdict.index.growing import GrowingBackend
from softdict.index.ivf import IVFBackend
from softdict.values import (
    BatchValue,
    LossKind,
    StoreFiles,
    Value,
    ValueColumn,
    register_value_kind,
)


class DictBackend(IndexBackend):
    """Every vector in a dict by id; each search scores them all."""

    def __init__(self, dim: int, metric: Metric) -> None:
        super().__init__(dim, metric)
        self._vectors: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._vectors)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(exact=True)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        for id_, vector in zip(ids.tolist(), vectors):
            self._vectors[id_] = np.array(vector, dtype=np.float32)

    def remove(self, ids: np.ndarray) -> None:
        for id_ in ids.tolist():
            self._vectors.pop(id_, None)

    def ids(self) -> np.ndarray:
        return np.array(sorted(self._vectors), dtype=np.int64)

    def score_all(self, queries: np.ndarray, allow: Allow | None = None):  # type: ignore[no-untyped-def]
        held = sorted(self._vectors)
        if allow is not None:
            allowed = set(allow.ids.tolist())
            held = [id_ for id_ in held if id_ in allowed]
        ids = np.array(held, dtype=np.int64)
        matrix = np.stack([self._vectors[i] for i in held]) if held else np.zeros((0, self.dim))
        return metric_scores(queries, matrix.astype(np.float32), self.metric), ids

    def search(self, queries: np.ndarray, k: int, allow: Allow | None = None):  # type: ignore[no-untyped-def]
        scores, ids = self.score_all(queries, allow)
        best, columns = top_of_scores(scores, k)
        return best, np.where(columns >= 0, ids[np.maximum(columns, 0)] if len(ids) else -1, -1)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        return np.stack([self._vectors[i] for i in ids.tolist()])

    def describe(self) -> str:
        return "test-dict"

    def memory_bytes(self) -> int:
        return sum(v.nbytes + 8 for v in self._vectors.values())

    def dump(self) -> BackendDump:
        ids = np.array(sorted(self._vectors), dtype=np.int64)
        vectors = self.vectors(ids) if len(ids) else np.zeros((0, self.dim), np.float32)
        return BackendDump({}, {"dict_ids.npy": ids, "dict_vectors.npy": vectors})

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        ids = files.npy("dict_ids.npy", np.int64, (None,))
        self.add(ids, files.finite_npy("dict_vectors.npy", np.float32, (len(ids), self.dim)))


class BooleanColumn(ValueColumn[np.ndarray]):
    """True/False; a lookup returns the attention mass on True (a float in [0, 1])."""

    kind = "boolean"
    loss = LossKind.SQUARED_ERROR

    def __init__(self) -> None:
        self._flags = np.zeros(0, dtype=np.bool_)

    @classmethod
    def accepts(cls, value: object) -> bool:
        return isinstance(value, (bool, np.bool_))

    def __len__(self) -> int:
        return len(self._flags)

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> np.ndarray:
        for key, value in zip(keys, values):
            if not self.accepts(value):
                raise self.kind_error(key, value)
        return np.array(values, dtype=np.bool_)

    def append(self, staged: np.ndarray) -> None:
        self._flags = np.concatenate([self._flags, staged])

    def assign(self, slots: np.ndarray, staged: np.ndarray) -> None:
        self._flags[slots] = staged

    def get(self, slot: int) -> Value:
        return bool(self._flags[slot])

    def keep(self, slots: np.ndarray) -> None:
        self._flags = self._flags[slots]

    def blend(self, weights: np.ndarray, slots: np.ndarray) -> BatchValue:
        flags = self._flags.astype(np.float64)
        if slots.ndim == 1:
            return np.asarray(weights @ flags[slots])
        return np.einsum("mk,mk->m", weights, flags[slots])

    def result(self, blended: BatchValue, i: int) -> Value:
        return float(blended[i])  # type: ignore[arg-type]

    def calibration_values(self, slots: np.ndarray) -> np.ndarray:
        return self._flags[slots].astype(np.float64)

    def dump(self, slots: np.ndarray) -> StoreFiles:
        return {"booleans.npy": self._flags[slots]}

    @classmethod
    def restore(cls, files: FileReader, n: int) -> BooleanColumn:
        column = cls()
        column.append(files.npy("booleans.npy", np.bool_, (n,)))
        return column


class HashingEncoder:
    """Character trigrams hashed into 32 dims; queries and documents share the space."""

    name = "test-hashing"
    DIM = 32

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            padded = f"  {text.lower()} "
            for j in range(len(padded) - 2):
                digest = hashlib.blake2b(padded[j : j + 3].encode(), digest_size=4).digest()
                out[i, int.from_bytes(digest, "little") % self.DIM] += 1.0
        return out

    def encode_query(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)

    def encode_document(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


register_backend("test-dict", DictBackend)
for _encoding, _name in (("Flat", "ivf-from-start"), ("SQ8", "ivf_sq8-from-start")):
    register_backend(
        _name,
        lambda dim, metric, encoding=_encoding: GrowingBackend(
            dim, metric, lambda: IVFBackend(dim, metric, encoding), switch_at=1
        ),
    )
register_value_kind(BooleanColumn)
register_encoder_name("test-hashing", HashingEncoder)
# Codes from the first key, and a session made as soon as a sixteenth of the rows wait outside it:
# the compressed backend's codes are read at the sizes of the conformance suites.
register_backend(
    "compressed-from-start",
    lambda dim, metric: CompressedBackend(dim, metric, open_rows=0, codes_from=0),
)
