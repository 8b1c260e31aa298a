"""A saved store's index rebuilt as another one (``SoftDict.load(path, index=...)``).

The saved index is read for its vectors alone, decoded where it kept codes, and they are added
to the new index under the same ids, with their codes' error carried (``code_error``): nothing
is embedded again. It is how a store keeps working when its index changes, and how one saved
with an index this version refuses to build (one that crashed the process, or ranked keys by
another similarity, before it was refused) is loaded at all: its vectors are still readable.
"""

from __future__ import annotations

import math
from typing import Any

import faiss
import numpy as np

from softdict._errors import ConfigError, short_repr
from softdict._files import FileReader
from softdict._rows import ROWS_AT_A_TIME
from softdict._similarity import Metric
from softdict.index._faiss import faiss_message
from softdict.index.base import IndexBackend
from softdict.index.factory import FactoryBackend, index_parts, unreadable_text
from softdict.index.growing import GrowingBackend
from softdict.index.registry import BackendSpec, backend_spec

__all__ = ["IndexChangeRefused", "check_reindex", "rebuilding_hint", "reindexed", "saved_backend"]


_BUILD_AGAIN = "build the store again from its keys"
_REGISTER = "if it is a plug-in backend, register it (register_backend) before loading the store"
# A decoded vector this close to the one added, relative to the largest, differs by float32
# rounding (a rotation's "RR16": 2.7e-6 of norms near 6.4), not by a code: no error to carry.
_ROUNDING = 1e-5


class IndexChangeRefused(ConfigError):
    """The index asked for cannot hold what the saved one holds: a ConfigError about the
    caller's ``index=``, not a fault of the store's files."""


def check_reindex(index: str, dim: int | None, metric: Metric) -> None:
    """ConfigError where ``index`` cannot hold a saved store's keys of ``dim`` dims (None: it
    holds none): a product quantiser that does not fit the dimension."""
    refused = None if dim is None else _refusal(index, dim, metric)
    if refused is not None:
        raise ConfigError(f"index={short_repr(index)} cannot hold this store's keys: {refused}")


def rebuilding_hint(
    option: str, dim: int | None, metric: Metric, meta: dict[str, Any] | None
) -> str:
    """What to do with a store saved with the index ``option`` (its saved ``meta``) that this
    version cannot load: load it with another index, register its plug-in backend, or, where it
    kept no vectors to read, build it again from its keys; "" where the index is not what
    stands in the way."""
    if _refusal(option, dim, metric) is None:
        return ""
    probe = None if dim is None else _parsed(option, dim)
    if isinstance(probe, str):
        return f"; {_REGISTER}"
    problem = None if probe is None else _unreadable(option, probe, meta or {})
    if problem is not None:
        return f"; nor can its index's vectors be read back ({problem}): {_BUILD_AGAIN}"
    return (
        "; to load this store, SoftDict.load(path, index='auto') (or another index) rebuilds "
        "its index from the vectors it kept"
    )


def saved_backend(
    option: str, dim: int, metric: Metric, meta: dict[str, Any], files: FileReader
) -> IndexBackend:
    """An empty backend that reads the index a store was saved with (``option``; its saved
    ``meta``), to be restored and read for its vectors: the one ``option`` names, or, for a
    FAISS factory string this version refuses, one that reads it without refusing
    (``_SavedFactory``), where it kept vectors to read (``_unreadable``)."""
    try:
        return backend_spec(option).create(dim, metric)
    except ConfigError as refused:
        why = str(refused)
    probe = _parsed(option, dim)
    if isinstance(probe, str):
        raise files.error(
            "manifest.json",
            f"names index={short_repr(option)}, which this process cannot read ({why}); "
            f"{_REGISTER}",
        )
    problem = _unreadable(option, probe, meta)
    if problem is not None:
        raise files.error(
            "index.faiss", f"keeps no vectors to read back ({problem}); {_BUILD_AGAIN}"
        )
    return GrowingBackend(dim, metric, lambda: _SavedFactory(dim, metric, option))


def _refusal(option: str, dim: int | None, metric: Metric) -> ConfigError | None:
    """Why this version does not build the index ``option`` for keys of ``dim`` dims (None:
    for no keys yet), or None where it does."""
    try:
        spec = backend_spec(option)
        if dim is not None:
            spec.create(dim, metric)
    except ConfigError as exc:
        return exc
    return None


def _parsed(option: str, dim: int) -> faiss.Index | str:
    """The index FAISS builds from ``option`` for ``dim`` dims, or why it builds none; a string
    that would crash its parser is not given to it (``unreadable_text``)."""
    problem = unreadable_text(option)
    if problem is not None:
        return problem
    try:
        return faiss.index_factory(dim, option)
    except RuntimeError as exc:
        return faiss_message(exc, "cannot be built")


def _unreadable(option: str, probe: faiss.Index, meta: dict[str, Any]) -> str | None:
    """Why the vectors a store saved with the factory string ``option`` (``probe``: what FAISS
    builds from it; its index's saved ``meta``) cannot be read back, or None. Before the index
    is built they are in embeddings.npy, whatever it is; a refine's are read from its refine
    index, whatever its base is (an LSH, an IVF fast-scan PQ)."""
    if meta.get("phase") == "exact":
        return None
    for part in index_parts(probe, bases=False):
        why = _keeps_no_vectors(part)
        if why is not None:
            return f"{short_repr(option)}: {why}"
    return None


def _keeps_no_vectors(part: object) -> str | None:
    """Why an index with this part (``index_parts``) keeps no vectors to read back, or None."""
    if isinstance(part, faiss.IndexIVFPQFastScan):
        # FAISS's reconstruct of a loaded one crashed the process (a segfault, faiss-cpu 1.15).
        return "an IVF fast-scan PQ's vectors cannot be read back once it is loaded"
    if isinstance(part, faiss.IndexLSH):
        return "an LSH keeps bits of the vectors, not the vectors"
    if isinstance(part, (faiss.ITQTransform, faiss.ITQMatrix)) or (
        isinstance(part, faiss.PCAMatrix) and part.eigen_power != 0
    ):
        # A loaded whitening PCA calls itself orthonormal, and gave vectors of norm 0.002 back
        # for keys of norm 3.7 (a review): it is refused by its kind, not by FAISS's error.
        return "its transform (an ITQ, a whitening PCA) cannot be undone"
    if isinstance(part, faiss.IndexLattice):
        return "a lattice's saved codes cannot be read back"
    return None


def reindexed(saved: IndexBackend, target: BackendSpec, files: FileReader) -> IndexBackend:
    """A ``target`` backend holding the restored ``saved`` backend's vectors under their ids.

    Raises:
        IndexChangeRefused: the saved index kept lossy codes, and ``target`` cannot record
            their error (``flat``, ``compressed``: backends that hold the vectors added).
    """
    ids = saved.ids()
    error = saved.code_error() if len(ids) else None
    if error is not None and error.radius <= _ROUNDING * error.norm:  # a padding, a rotation
        error = None
    if error is not None:
        try:  # on an empty one, before any vector is moved: a refusal costs nothing
            target.create(saved.dim, saved.metric).carry(error)
        except ConfigError:
            how_far = "not known" if math.isnan(error.radius) else f"up to {error.radius:.3g}"
            raise IndexChangeRefused(
                f"index={short_repr(target.name)} holds the vectors added, and the saved index "
                f"({saved.describe()}) kept lossy codes of them (their distance to the "
                f"vectors added: {how_far}), whose error cannot go with them; choose an index "
                f"that records it ('auto', 'hnsw', 'ivf', a FAISS factory string), or "
                f"{_BUILD_AGAIN}"
            ) from None
    backend = target.create(saved.dim, saved.metric)
    for start in range(0, len(ids), ROWS_AT_A_TIME):
        part = ids[start : start + ROWS_AT_A_TIME]
        try:
            vectors = saved.vectors(part)
        except RuntimeError as exc:  # FAISS: an index that keeps no vectors (LSH's bits)
            raise files.error(
                "index.faiss",
                f"keeps no vectors FAISS can give back ({saved.describe()}: "
                f"{faiss_message(exc, 'no reconstruct')}); {_BUILD_AGAIN}",
            ) from None
        backend.add(part, np.ascontiguousarray(vectors, dtype=np.float32))
    if error is not None:  # after the adds: a FAISS index built by them measures its own
        backend.carry(error)
    return backend


class _SavedFactory(FactoryBackend):
    """A saved factory index this version refuses to build, read for its vectors alone: it is
    not checked (``check_factory``), and an index of another metric (an HNSW-PQ that FAISS
    built for L2 under inner products) reads as well."""

    reads_any_metric = True

    def _checked(self, factory: str, dim: int, metric: Metric) -> int:
        return 0
