"""Any FAISS ``index_factory`` string, e.g. ``index="IVF1024,PQ48"`` or ``"HNSW16"``.

The string is parsed when the SoftDict is created; whether it fits the embeddings (a product
quantiser needs d divisible by its code count) is known only once their dimension is, so
``check_factory`` runs when the store creates its backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import faiss
import numpy as np

from softdict._errors import ConfigError, short_repr
from softdict._similarity import Metric
from softdict.index._code_error import keeps_exact_vectors
from softdict.index._faiss import (
    FaissBackend,
    SearchPlan,
    SearchRequest,
    faiss_message,
    faiss_metric,
)
from softdict.index.base import Capabilities
from softdict.index.exact import SCAN_ANY_SIZE
from softdict.index.hnsw import sparse_or_graph
from softdict.index.ivf import ivf_params
from softdict.index.registry import BackendRefused

__all__ = ["FactoryBackend", "check_factory", "index_parts", "parse_error", "unreadable_text"]


# FAISS's parser crashed the process (a segfault) on a string of about 20,000 characters; the
# longest factory strings in FAISS's documentation are a few dozen.
_MAX_FACTORY_LENGTH = 1_000


def unreadable_text(name: str) -> str | None:
    """Why FAISS must not be given ``name`` to parse, or None."""
    if len(name) > _MAX_FACTORY_LENGTH:
        return (
            f"it is {len(name):,} characters long, and a factory string at most "
            f"{_MAX_FACTORY_LENGTH:,}"
        )
    if "\x00" in name:
        return "it holds a NUL character, where FAISS would stop reading it"
    return None


def parse_error(name: str) -> str | None:
    """Why FAISS cannot parse ``name``, or None if it can (parsed at 8 dims: a string that does
    not fit 8 dims, such as a product quantiser with 48 codes, parses; its fit is checked when
    the real dimension is known).

    Raises:
        BackendRefused: FAISS parses it into an index softdict cannot use (``_unusable``), or
            it is not given to FAISS (``unreadable_text``).
    """
    unreadable = unreadable_text(name)
    if unreadable:
        raise BackendRefused(f"index={short_repr(name)} is not given to FAISS: {unreadable}")
    try:
        probe = faiss.index_factory(8, name)
    except RuntimeError as exc:
        if "could not parse" in str(exc):
            return faiss_message(exc, "could not parse it")
        return None
    unusable = _unusable(probe)
    if unusable:
        raise BackendRefused(
            f"index={short_repr(name)} is a FAISS index softdict cannot use: {unusable}"
        )
    return None


def index_parts(index: faiss.Index, *, bases: bool = True) -> Iterator[object]:
    """Every index and transform in ``index``, outermost first: through the pre-transforms, a
    refine's base (``bases``: else only the refine index, which its vectors are read from) and
    refine index, and an IDMap (downcast proxies, valid while ``index`` is)."""
    inner = faiss.downcast_index(index)
    yield inner
    if isinstance(inner, faiss.IndexPreTransform):
        for i in range(inner.chain.size()):
            yield faiss.downcast_VectorTransform(inner.chain.at(i))
        yield from index_parts(inner.index, bases=bases)
    elif isinstance(inner, faiss.IndexRefine):
        if bases:
            yield from index_parts(inner.base_index)
        yield from index_parts(inner.refine_index, bases=bases)
    elif isinstance(inner, faiss.IndexIDMap):
        yield from index_parts(inner.index, bases=bases)


def _unusable(index: faiss.Index) -> str | None:
    """Why an index FAISS builds cannot hold keys, or None: a part softdict cannot serve
    (``_cannot_serve``), a graph of fewer than 2 links per node ("HNSW0" aborted the process at
    its second insert, "HNSW1" crashed it at its first, and so did "PCA8,HNSW1": wrapped ones
    are looked at too), or an IVF of no cells (every lookup divided by zero)."""
    for part in index_parts(index):
        refused = _cannot_serve(part)
        if refused:
            return refused
        if isinstance(part, faiss.IndexHNSW):
            try:
                links = part.hnsw.nb_neighbors(0)
            except RuntimeError:
                links = 0
            if links < 4:  # 2·M links at the graph's base level
                return "an HNSW graph needs at least 2 links per node (HNSW2 or more)"
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and ivf.nlist < 1:
        return "an IVF index needs at least 1 cell (IVF1 or more)"
    return None


def _cannot_serve(part: object) -> str | None:
    """Why softdict cannot serve an index with this ``part`` (``index_parts``), or None. softdict
    scores every key against its stored vector by the store's similarity, so the index must
    keep vectors it can give back: an LSH keeps bits and ranks by Hamming distance, an ITQ or
    whitening transform cannot be undone, an IVF fast-scan PQ crashes giving them back once
    loaded, a refine over anything but flat codes aborts the process, a lattice's save cannot
    be read back, an NSG graph takes no keys once built, and an IDMap wants ids softdict keeps
    itself. (An L2norm is kept: its decoded vectors are the unit ones, and their gap to the
    vectors added is measured as any code's is.)"""
    if isinstance(part, faiss.IndexIDMap):
        return "softdict keeps its own ids: drop the 'IDMap' prefix"
    if isinstance(part, faiss.IndexNSG):
        return "an NSG graph cannot take keys once it is built; use an HNSW graph ('HNSW32')"
    if isinstance(part, faiss.IndexLSH):
        return "an LSH index ranks keys by the Hamming distance of bits, not by their similarity"
    if isinstance(part, faiss.IndexIVFPQFastScan):
        # FAISS's reconstruct of a loaded one crashed the process (a segfault, faiss-cpu 1.15).
        return (
            "an IVF fast-scan PQ cannot give the keys' vectors back once it is loaded; use the "
            "same string without 'fs' (e.g. 'IVF1024,PQ48'), or a fast-scan PQ without IVF"
        )
    if isinstance(part, faiss.IndexLattice):
        return "a lattice index ('ZnLattice') saves no codes FAISS can read back"
    if isinstance(part, faiss.IndexRefine) and not isinstance(
        faiss.downcast_index(part.refine_index), faiss.IndexFlatCodes
    ):
        # A refine over fast-scan codes, a transform, an IVF or another refine: FAISS threw
        # inside OpenMP at the first lookup, and the process aborted.
        return (
            "a refine step needs flat codes to score keys by ('Flat', 'SQ8', 'PQ16'), "
            "not an index of its own"
        )
    if isinstance(part, (faiss.ITQTransform, faiss.ITQMatrix)):
        return "an ITQ transform cannot give the keys' vectors back"
    if isinstance(part, faiss.PCAMatrix) and part.eigen_power != 0:
        # A whitening PCA: FAISS cannot undo it, and the first add failed half done.
        return "a whitening PCA ('PCAW') cannot give the keys' vectors back; use 'PCA'"
    return None


def _centres(index: faiss.Index) -> bool:
    """Whether ``index`` transforms vectors by a PCA (which subtracts their mean) anywhere."""
    return any(
        isinstance(part, (faiss.PCAMatrix, faiss.CenteringTransform)) for part in index_parts(index)
    )


def check_factory(name: str, dim: int, metric: Metric = Metric.L2) -> int:
    """How many keys building ``name`` for ``dim`` dims and ``metric`` needs; ConfigError if
    it cannot be."""
    try:
        probe = faiss.index_factory(dim, name, faiss_metric(metric))
    except RuntimeError as exc:
        raise ConfigError(
            f"index={short_repr(name)} cannot be built for {dim}-dim embeddings "
            f"({faiss_message(exc, '')}); choose parameters that fit {dim} dimensions"
        ) from None
    unusable = _unusable(probe)
    if unusable:
        raise ConfigError(f"index={short_repr(name)} cannot hold keys: {unusable}")
    if metric is Metric.INNER_PRODUCT and _centres(probe):
        # A PCA subtracts the keys' mean: the inner products it ranks keys by are not theirs,
        # so a search found other keys than the best (top_k=3: none of the true three) while
        # its keys, rescored, claimed a small bound.
        raise ConfigError(
            f"index={short_repr(name)} ranks keys by inner products of vectors less their mean "
            f"(a PCA), which are not the store's; use similarity='l2', a rotation ('OPQ16', "
            f"'RR64'), or no transform"
        )
    if probe.metric_type != faiss_metric(metric):
        # "HNSW32,PQ16" is built for L2 whatever it is asked: its saved form then failed the
        # load's check of the store's metric, and its search ranked dot products by distance.
        raise ConfigError(
            f"index={short_repr(name)} is built by FAISS for L2 distances only, and this store "
            f"scores by inner product; use similarity='l2', or another index (e.g. 'HNSW32,SQ8')"
        )
    if probe.is_trained:
        return 0
    ivf = faiss.try_extract_index_ivf(probe)
    # k-means wants ~39 points per centroid; product quantisers want 256 per code.
    return max(256, 39 * ivf.nlist) if ivf is not None else 1_000


class FactoryBackend(FaissBackend):
    """The index a FAISS factory string describes."""

    def __init__(self, dim: int, metric: Metric, factory: str) -> None:
        super().__init__(dim, metric)
        self.factory = factory
        self._min_train = self._checked(factory, dim, metric)

    def _checked(self, factory: str, dim: int, metric: Metric) -> int:
        """``check_factory``: how many keys building it needs; ConfigError if it cannot hold
        keys (``softdict.index.reindexing`` reads a saved one this version refuses)."""
        return check_factory(factory, dim, metric)

    def min_train_size(self) -> int:
        return self._min_train

    def builds_lossy_codes(self) -> bool:
        return not keeps_exact_vectors(faiss.index_factory(self.dim, self.factory))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            exact=self._is_flat(),
            cost_grows_with_k=isinstance(self._index, faiss.IndexHNSW),
            scan_max_keys=SCAN_ANY_SIZE if self._is_flat() else 0,
        )

    def _is_flat(self) -> bool:
        return isinstance(self._index, faiss.IndexFlat)

    def _new_index(self, training: np.ndarray) -> faiss.Index:
        index = faiss.index_factory(self.dim, self.factory, faiss_metric(self.metric))
        ivf = faiss.try_extract_index_ivf(index)
        for part in (index, ivf):
            quantised = faiss.downcast_index(part) if part is not None else None
            if isinstance(quantised, (faiss.IndexPQ, faiss.IndexIVFPQ)):
                # Polysemous training orders a product quantiser's codes for searches by
                # Hamming distance, which softdict never makes (polysemous_ht stays 0); it took
                # 12 s of a PQ4's training on 3,000 vectors, and changes no distance.
                quantised.do_polysemous_training = False
        if not index.is_trained:
            index.train(training)
        if ivf is not None:
            ivf.make_direct_map(True)  # lets compaction reconstruct vectors by row
        return index

    def _fits(self, index: faiss.Index) -> bool:
        expected = faiss.index_factory(self.dim, self.factory, faiss_metric(self.metric))
        loaded = faiss.downcast_index(index)
        # The factory may build a generic class (IndexFlat) whose saved form reads back as a
        # specialised one (IndexFlatIP), or the other way round.
        return isinstance(loaded, type(expected)) or isinstance(expected, type(loaded))

    def _search_plan(self, index: faiss.Index, request: SearchRequest) -> SearchPlan:
        refine = faiss.downcast_index(index)
        if isinstance(refine, faiss.IndexRefine):
            # Its base searches with the base's parameters, the selector among them; the refine
            # step only orders what the base found.
            base = faiss.downcast_index(refine.base_index)
            planned, params = self._search_plan(base, request)
            if planned is not base:  # an HNSW base's flat storage: a refine searches the graph
                planned, params = self._search_plan(base, replace(request, fraction=1.0))
            return index, faiss.IndexRefineSearchParameters(
                k_factor=refine.k_factor, base_index_params=params
            )
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            return index, ivf_params(ivf, ivf.nprobe, request)
        if isinstance(index, faiss.IndexHNSW):
            return sparse_or_graph(index, request, index.hnsw.efSearch)
        selector = request.selector
        return index, faiss.SearchParameters(sel=selector) if selector is not None else None

    def _flat_vectors(self) -> np.ndarray | None:
        if not self._is_flat():
            return None
        assert self._index is not None
        size = self._rows.size
        return faiss.rev_swig_ptr(self._index.get_xb(), size * self.dim).reshape(size, self.dim)

    def describe(self) -> str:
        return self.factory
