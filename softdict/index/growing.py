"""The auto policy: exact search in numpy while a store is small, then a FAISS backend.

``index="auto"`` stays exact up to 10,000 keys (where exact attention is as fast as any index,
benchmarks/scale.py) and then builds an HNSW graph: on real text its neighbours are the true
nearest (recall@k >= 0.95, benchmarks/real_scale.py) where IVF's were not (0.62 at k = 1024).
Stores that "auto" built as IVF before (saved without the ``large`` entry) load as IVF and stay
so until they shrink back to exact search. Trainable indexes (``"ivf"``, ``"ivf_sq8"``,
factory strings that need training) use the same policy with their own threshold: they cannot be
built before there are enough keys to train on, and until then exact search answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from softdict._files import FileReader
from softdict._similarity import Metric, squared_norms
from softdict.index._code_error import CodeError
from softdict.index._faiss import FaissBackend
from softdict.index.base import Allow, BackendDump, Capabilities, IndexBackend
from softdict.index.exact import ExactBackend

__all__ = ["GrowingBackend"]


class GrowingBackend(IndexBackend):
    """An ``ExactBackend`` until it holds ``switch_at`` keys, then the FAISS backend that
    ``make_large`` creates, built from the exact backend's vectors.

    Args:
        name: shown in ``describe`` as "<name>: exact" / "<name>: <large>"; None shows the large
            backend's own description in both phases.
        large_kind: recorded when the large phase is saved, so that a later version whose
            ``make_large`` builds another kind still loads it.
        earlier_large: the large backend of stores saved without a ``large_kind`` (before it was
            recorded); None: ``make_large``'s.
    """

    def __init__(
        self,
        dim: int,
        metric: Metric,
        make_large: Callable[[], FaissBackend],
        switch_at: int | None = None,
        *,
        name: str | None = None,
        large_kind: str | None = None,
        earlier_large: Callable[[], FaissBackend] | None = None,
    ) -> None:
        super().__init__(dim, metric)
        self._make_large = make_large
        self._large = make_large()  # created now: a factory string is checked against dim here
        self._switch_at = self._large.min_train_size() if switch_at is None else switch_at
        self._small: ExactBackend | None = ExactBackend(dim, metric)
        self.name = name
        self._large_kind, self._kind_of_large = large_kind, large_kind
        self._earlier_large = earlier_large
        # The exact phase's vectors after a shrink are the large index's decoded ones: its
        # error stays with them (softdict.index._code_error; None: the vectors added).
        self._carried: CodeError | None = None

    @property
    def _active(self) -> IndexBackend:
        return self._small if self._small is not None else self._large

    def __len__(self) -> int:
        return len(self._active)

    @property
    def capabilities(self) -> Capabilities:
        return self._active.capabilities

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._active.add(ids, vectors)
        if self._small is not None and len(self._small) >= self._switch_at:
            self._switch()

    def _switch(self) -> None:
        """Move the vectors into the large backend, or, if FAISS cannot build it from this many
        keys after all, stay exact until there are twice as many."""
        assert self._small is not None
        ids = self._small.ids()
        try:
            # A FaissBackend whose index cannot be built changes nothing before it raises.
            self._large.add(ids, self._small.vectors(ids))
        except RuntimeError:  # FAISS: too few training points for this index
            self._switch_at = 2 * len(self._small)
            return
        if self._carried is not None:
            self._large.carry(self._carried)
        self._small, self._carried = None, None

    def remove(self, ids: np.ndarray) -> None:
        self._active.remove(ids)
        if self._small is None and len(self._large) < self._switch_at // 2:
            # Fewer than half the keys it was built for: exact search again (it is exact, and an
            # index this small cannot be retrained when it compacts). Half, not all: a store
            # hovering at the threshold does not rebuild the index on every insert and delete.
            ids = self._large.ids()
            small = ExactBackend(self.dim, self.metric)
            small.add(ids, self._large.vectors(ids) if len(ids) else np.zeros((0, self.dim)))
            self._carried = self._large.code_error()
            self._large, self._small = self._make_large(), small
            self._kind_of_large = self._large_kind

    def ids(self) -> np.ndarray:
        return self._active.ids()

    def search(
        self, queries: np.ndarray, k: int, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        return self._active.search(queries, k, allow)

    def score_all(
        self, queries: np.ndarray, allow: Allow | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        return self._active.score_all(queries, allow)

    def sample(
        self, count: int, rng: np.random.Generator, allow: Allow | None = None
    ) -> np.ndarray:
        return self._active.sample(count, rng, allow)

    def sample_near(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if head is None:
            return self._active.sample_near(query, count, rng, allow, temperature)
        return self._active.sample_near(query, count, rng, allow, temperature, head)

    def sample_scored(
        self,
        query: np.ndarray,
        count: int,
        rng: np.random.Generator,
        allow: Allow | None,
        temperature: float,
        head: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if head is None:
            return self._active.sample_scored(query, count, rng, allow, temperature)
        return self._active.sample_scored(query, count, rng, allow, temperature, head)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        return self._active.vectors(ids)

    def code_error(self) -> CodeError | None:
        return self._carried if self._small is not None else self._large.code_error()

    def carry(self, earlier: CodeError) -> None:
        if self._small is None:
            self._large.carry(earlier)
        else:
            self._carried = (self._carried or CodeError()).carried(earlier)

    def score_ids(self, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return self._active.score_ids(queries, ids)

    def describe(self) -> str:
        if self.name is None:
            return self._large.describe()
        return f"{self.name}: {'exact' if self._small is not None else self._large.describe()}"

    def memory_bytes(self) -> int:
        return self._active.memory_bytes()

    def dump(self) -> BackendDump:
        inner = self._active.dump()
        meta: dict[str, Any] = {"phase": "exact" if self._small is not None else "built"}
        if self._small is not None:  # null: the vectors added (a store saved before: not said)
            meta["code_error"] = None if self._carried is None else self._carried.meta()
        if self._small is None and self._kind_of_large is not None:
            meta["large"] = self._kind_of_large
        return BackendDump({**meta, **inner.meta}, inner.files)

    def restore(self, meta: dict[str, Any], files: FileReader) -> None:
        phase = meta.get("phase")
        if phase == "exact":
            assert self._small is not None
            self._small.restore(meta, files)
            if "code_error" in meta:
                saved = meta["code_error"]
                self._carried = None if saved is None else CodeError.from_meta(saved)
                if saved is not None and self._carried is None:
                    raise files.error("manifest.json", "has an invalid index code_error")
            elif self._large.builds_lossy_codes() and not _unit_vectors(self._small):
                # Saved before the error was kept: its vectors may be an index's decoded ones
                # (a store that shrank; a cosine one was refused as edited, a key of norm
                # 1.0058), how far from those added is not known.
                self._carried = CodeError(math.nan, 0.0)
        elif phase == "built":
            kind = meta.get("large")
            if kind is None and self._earlier_large is not None:
                self._large, self._kind_of_large = self._earlier_large(), None
            elif kind != self._large_kind:
                raise files.error(
                    "manifest.json",
                    f"has an index of kind {kind!r} where this version builds {self._large_kind!r}",
                )
            self._large.restore(meta, files)
            self._small = None
        else:
            raise files.error("manifest.json", f"has an unknown index phase {phase!r}")


def _unit_vectors(small: ExactBackend) -> bool:
    """Whether every vector of ``small`` is a unit one or zero (to float32's rounding), as a
    cosine store's prepared vectors are and no index's decoded ones stay."""
    ids = small.ids()
    if not len(ids):
        return True
    lengths = np.sqrt(squared_norms(small.vectors(ids)))
    return bool(np.all((np.abs(lengths - 1.0) <= 1e-5) | (lengths == 0)))
