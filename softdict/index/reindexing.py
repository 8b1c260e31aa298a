"""A saved store's index rebuilt as another one (``SoftDict.load(path, index=...)``).

The saved index is read for its vectors alone, decoded where it kept codes, and they are added
to the new index under the same ids, with their codes' error carried (``code_error``): nothing
is embedded again. It is how a store keeps working when its index changes, and how one saved
with an index this version refuses to build (one that crashed the process, or ranked keys by
another similarity, before it was refused) is loaded at all: its vectors are still readable.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from softdict._errors import ConfigError
from softdict._files import FileReader
from softdict._rows import ROWS_AT_A_TIME
from softdict._similarity import Metric
from softdict.index._faiss import faiss_message
from softdict.index.base import IndexBackend
from softdict.index.factory import FactoryBackend, index_parts
from softdict.index.growing import GrowingBackend
from softdict.index.registry import BackendSpec, backend_spec

__all__ = ["IndexChangeRefused", "builds", "check_reindex", "reindexed", "saved_backend"]


class IndexChangeRefused(ConfigError):
    """The index asked for cannot hold what the saved one holds: a ConfigError about the
    caller's ``index=``, not a fault of the store's files."""


def check_reindex(index: str, dim: int | None, metric: Metric) -> None:
    """ConfigError where ``index`` cannot hold a saved store's keys of ``dim`` dims (None: it
    holds none): a product quantiser that does not fit the dimension."""
    if dim is None:
        return
    try:
        backend_spec(index).create(dim, metric)
    except ConfigError as exc:
        raise ConfigError(f"index={index!r} cannot hold this store's keys: {exc}") from None


def builds(option: str, dim: int | None, metric: Metric) -> bool:
    """Whether this version builds the index ``option`` for keys of ``dim`` dims."""
    try:
        spec = backend_spec(option)
        if dim is not None:
            spec.create(dim, metric)
    except ConfigError:
        return False
    return True


def saved_backend(
    option: str, dim: int, metric: Metric, meta: dict[str, Any], files: FileReader
) -> IndexBackend:
    """An empty backend that reads the index a store was saved with (``option``; its saved
    ``meta``), to be restored and read for its vectors: the one ``option`` names, or, for a
    FAISS factory string this version refuses, one that reads it without refusing
    (``_SavedFactory``)."""
    try:
        return backend_spec(option).create(dim, metric)
    except ConfigError as refused:
        why = str(refused)
    try:
        probe = faiss.index_factory(dim, option)
    except RuntimeError:
        raise files.error(
            "manifest.json",
            f"names index={option!r}, which this process cannot read ({why}); a plug-in "
            f"backend must be registered (register_backend) before its store is loaded",
        ) from None
    built = meta.get("phase") != "exact"  # else its vectors are in embeddings.npy
    if built and any(isinstance(part, faiss.IndexIVFPQFastScan) for part in index_parts(probe)):
        # FAISS's reconstruct of a loaded one crashed the process (a segfault, faiss-cpu 1.15).
        raise files.error(
            "index.faiss",
            f"is an IVF fast-scan PQ ({option!r}), whose vectors FAISS cannot give back once "
            f"loaded; build the store again from its keys",
        )
    return GrowingBackend(dim, metric, lambda: _SavedFactory(dim, metric, option))


def reindexed(saved: IndexBackend, target: BackendSpec, files: FileReader) -> IndexBackend:
    """A ``target`` backend holding the restored ``saved`` backend's vectors under their ids.

    Raises:
        IndexChangeRefused: the saved index kept lossy codes, and ``target`` cannot record
            their error (``flat``, ``compressed``: backends that hold the vectors added).
    """
    ids = saved.ids()
    error = saved.code_error() if len(ids) else None
    if error is not None:
        try:  # on an empty one, before any vector is moved: a refusal costs nothing
            target.create(saved.dim, saved.metric).carry(error)
        except ConfigError:
            raise IndexChangeRefused(
                f"index={target.name!r} holds the vectors added, and the saved index "
                f"({saved.describe()}) kept lossy codes of them: their error cannot go with "
                f"them; choose an index that keeps codes or grows ('auto', 'hnsw', a FAISS "
                f"factory string), or build the store again from its keys"
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
                f"{faiss_message(exc, 'no reconstruct')}); build the store again from its keys",
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
