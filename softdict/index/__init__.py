"""Index backends: where key vectors live and how a query finds the keys it attends to.

``IndexBackend`` (in ``base``) is the protocol; each implementation is one file, and this module
registers them under the names ``index=`` accepts. A new backend is one file plus one call to
``register_backend``.

================= ============================================= ==============================
index=            backend                                       file
================= ============================================= ==============================
"auto"            exact numpy up to 10,000 keys, then HNSW-Flat ``growing`` (``exact``,
                                                                ``hnsw``)
"flat"            exact numpy                                   ``exact``
"compressed"      exact numpy and 4-bit codes of every key,     ``compressed`` (``_codes``)
                  read first
"compressed_8bit" the same with 8-bit codes                     ``compressed`` (``_codes``)
"projected"       exact numpy up to 150,000 keys, then 4-bit     ``projected`` (``_projection``)
                  codes of a 128-dim projection, read first
"hnsw"            FAISS IndexHNSWFlat                           ``hnsw``
"ivf"             FAISS IndexIVFFlat (exact until 2,000 keys)   ``growing``, ``ivf``
"ivf_sq8"         FAISS IndexIVFScalarQuantizer, 8 bits a       ``growing``, ``ivf``
                  dimension
other             a FAISS index_factory string                  ``growing``, ``factory``
================= ============================================= ==============================
"""

from __future__ import annotations

from softdict._attention import top_of_scores
from softdict._config import EXACT_MAX_KEYS
from softdict._errors import ConfigError
from softdict._files import FileReader, StoreFiles
from softdict._similarity import Metric, metric_scores
from softdict.index.base import Allow, BackendDump, Capabilities, IndexBackend
from softdict.index.compressed import CompressedBackend
from softdict.index.exact import ExactBackend
from softdict.index.factory import FactoryBackend, parse_error
from softdict.index.growing import GrowingBackend
from softdict.index.hnsw import HNSWBackend
from softdict.index.ivf import IVFBackend
from softdict.index.projected import ProjectedBackend
from softdict.index.registry import (
    BackendSpec,
    backend_names,
    backend_spec,
    register_backend,
    register_fallback,
)

__all__ = [
    "Allow",
    "BackendDump",
    "BackendSpec",
    "Capabilities",
    "FileReader",
    "IndexBackend",
    "Metric",
    "StoreFiles",
    "backend_names",
    "backend_spec",
    "metric_scores",
    "register_backend",
    "top_of_scores",
]


def _ivf(encoding: str) -> BackendSpec:
    name = "ivf" if encoding == "Flat" else f"ivf_{encoding.lower()}"
    return BackendSpec(
        name,
        lambda dim, metric: GrowingBackend(dim, metric, lambda: IVFBackend(dim, metric, encoding)),
        f"{name} (nprobe>=16)",
    )


def _factory(option: str) -> BackendSpec:
    problem = parse_error(option)
    if problem is not None:
        raise ConfigError(f"FAISS: {problem}")
    return BackendSpec(
        option,
        lambda dim, metric: GrowingBackend(
            dim, metric, lambda: FactoryBackend(dim, metric, option)
        ),
        option,
    )


register_backend(
    "auto",
    lambda dim, metric: GrowingBackend(
        dim,
        metric,
        lambda: HNSWBackend(dim, metric),
        EXACT_MAX_KEYS + 1,
        name="auto",
        large_kind="hnsw",
        # "auto" built IVF indexes until its recall on real text was measured (0.62 at k=1024).
        earlier_large=lambda: IVFBackend(dim, metric),
    ),
    description="auto: exact",
)
register_backend("flat", lambda dim, metric: ExactBackend(dim, metric, name="flat"))
register_backend("compressed", CompressedBackend, description="compressed")
register_backend(
    "compressed_8bit",
    lambda dim, metric: CompressedBackend(dim, metric, bits=8, name="compressed_8bit"),
    description="compressed_8bit",
)
register_backend("projected", ProjectedBackend, description="projected")
register_backend("hnsw", HNSWBackend, description="hnsw (M=32, efSearch=128)")
for _encoding in ("Flat", "SQ8"):
    _spec = _ivf(_encoding)
    register_backend(_spec.name, _spec.create, description=_spec.description)
register_fallback(_factory)
