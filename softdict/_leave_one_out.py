"""Leave-one-out losses for ``calibrate`` (``softdict._calibration``): what each sampled key sees
when it is left out of the store (``LeftOutScores``), its values in the units the loss counts
(``ValueSide``), and the per-key losses of attention over every other key (``all_keys_losses``)
or over each key's first k candidates (``prefix_losses``), for many temperatures in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from softdict._attention import top_of_scores
from softdict.values.base import LossKind

__all__ = ["LeftOutScores", "ValueSide", "all_keys_losses", "prefix_losses"]

# Bytes of gathered candidate values held at once (the loop over queries is chunked to this).
_CHUNK_BYTES = 64 * 2**20

_FLOOR = 1e-12  # probability floor: a label given no mass costs -log(1e-12), not infinity


@dataclass(frozen=True)
class LeftOutScores:
    """What each sampled key sees when it is left out of the store: its scores against the others.

    Attributes:
        top_scores: (m, c) the best scores among the other keys, best first; -inf pads.
        top_ids: (m, c) their ids; -1 pads.
        all_scores: (m, n) scores against every key, -inf for the key itself, where the store
            attends to every key; None where attention runs over the top candidates (large or
            approximate stores), whose first ``attended`` are then "all".
        all_ids: (n,) the ids of ``all_scores``' columns; None with it.
        attended: how many candidates "all keys" means for the top path (the store's max_k).
    """

    top_scores: np.ndarray
    top_ids: np.ndarray
    all_scores: np.ndarray | None
    all_ids: np.ndarray | None
    attended: int

    @classmethod
    def from_all_scores(
        cls, scores: np.ndarray, own_columns: np.ndarray, column_ids: np.ndarray, depth: int
    ) -> LeftOutScores:
        """From scores against every key, whose ids are ``column_ids`` (modified: each sampled
        key's own column, ``own_columns``, becomes -inf)."""
        scores[np.arange(len(own_columns)), own_columns] = -np.inf
        top_scores, top_columns = top_of_scores(scores, depth)
        top_ids = np.where(top_columns >= 0, column_ids[np.maximum(top_columns, 0)], -1)
        return cls(top_scores, top_ids, scores, column_ids, depth)

    @classmethod
    def from_search(
        cls, scores: np.ndarray, ids: np.ndarray, own_ids: np.ndarray, attended: int
    ) -> LeftOutScores:
        """From an index search one deeper than needed: each key's own id is dropped (or, where
        an approximate index missed it, the last candidate)."""
        depth = scores.shape[1] - 1
        order = np.argsort(ids == own_ids[:, None], axis=1, kind="stable")[:, :depth]
        return cls(
            np.take_along_axis(scores, order, axis=1),
            np.take_along_axis(ids, order, axis=1),
            None,
            None,
            min(attended, depth),
        )

    def found_any(self) -> np.ndarray:
        """Which sampled keys have at least one other key to attend to (an approximate index
        may, in principle, find none; such keys cannot be predicted and are left out)."""
        return np.asarray(self.top_ids[:, 0] >= 0)

    def subset(self, keep: np.ndarray) -> LeftOutScores:
        """The same, for the sampled keys marked in ``keep``."""
        all_scores = self.all_scores[keep] if self.all_scores is not None else None
        return LeftOutScores(
            self.top_scores[keep], self.top_ids[keep], all_scores, self.all_ids, self.attended
        )


@dataclass(frozen=True)
class ValueSide:
    """The values leave-one-out predicts, in the units its loss counts them in.

    Numbers are taken as their deviation from the sampled keys' mean, over each dimension's
    spread there: a squared error does not change when a constant is added to every value, and
    neither may the temperature chosen (values of 1.7e12 + a few thousand, times in epoch
    milliseconds, kept their differences only to float32's 1.7e12 / 2^24 ≈ 10^5 in ``at``, and
    calibrate chose the grid's edge). Each dimension is first divided by its largest magnitude,
    so that no square or difference overflows float64 (squares past about 1e154 do); a
    constant dimension is 0 everywhere (predicted exactly anyway). Labels stay codes, and
    ``scale`` is None.
    """

    own: np.ndarray  # the sampled keys' values: (m, d_v) deviations over their spread, or codes
    of_ids: Callable[[np.ndarray], np.ndarray]  # any keys' stored values, by id
    scale: np.ndarray | None  # each dimension's spread, over its peak (None for labels)
    peak: np.ndarray | None = None  # each dimension's largest magnitude over the sampled keys
    center: np.ndarray | None = None  # each dimension's mean over the sampled keys, over peak

    @classmethod
    def build(
        cls, own: np.ndarray, of_ids: Callable[[np.ndarray], np.ndarray], loss: LossKind
    ) -> ValueSide:
        if loss is LossKind.LABEL_LIKELIHOOD:
            return cls(own, of_ids, None)
        own = own.astype(np.float64).reshape(len(own), -1)
        peak = np.abs(own).max(axis=0, initial=0.0)
        peak = np.where(peak > 0, peak, 1.0)
        center = (own / peak).mean(axis=0)
        deviation = own / peak - center  # within [-2, 2]
        spread = deviation.std(axis=0)
        scale = np.where(spread > 0, spread, 1.0)
        return cls(deviation / scale, of_ids, scale, peak, center)

    @property
    def width(self) -> int:
        """Numbers per value (1 for a label code)."""
        return 1 if self.scale is None else int(self.own.shape[1])

    def at(self, ids: np.ndarray) -> np.ndarray:
        """Values of ``ids`` (any shape): label codes, or float32 deviations over their spread
        (``build``) with a value axis appended (float32 halves the work; losses only rank
        temperatures)."""
        stored = self.of_ids(ids)
        if self.scale is None:
            return stored
        assert self.peak is not None and self.center is not None
        with np.errstate(over="ignore"):  # to infinity, clipped below
            scaled = (stored.reshape(*ids.shape, -1) / self.peak - self.center) / self.scale
        # A key outside the sample may lie past float32's range in these units: clipped there.
        limit = np.finfo(np.float32).max
        return np.clip(scaled, -limit, limit).astype(np.float32)

    def losses(self, chunk: slice, prediction: np.ndarray) -> np.ndarray:
        """Each key's loss in ``chunk``: ``prediction`` is the attention mass on its own label
        (negative log-likelihood), or its blended value (mean squared error)."""
        if self.scale is None:
            return -np.log(np.maximum(prediction, _FLOOR))
        return np.mean((prediction - self.own[chunk]) ** 2, axis=1)


def _query_chunks(n_queries: int, values_per_query: int) -> list[slice]:
    """Slices of the sampled keys, so that a chunk holds about _CHUNK_BYTES of floats."""
    step = max(1, _CHUNK_BYTES // (8 * max(values_per_query, 1)))
    return [slice(start, start + step) for start in range(0, n_queries, step)]


def all_keys_losses(
    left_out: LeftOutScores, values: ValueSide, temperatures: np.ndarray
) -> np.ndarray:
    """Losses (temperatures, keys) of attention over every other key."""
    assert left_out.all_scores is not None
    assert left_out.all_ids is not None
    n_rows = left_out.all_scores.shape[1]
    every_value = values.at(left_out.all_ids)
    losses = np.empty((len(temperatures), len(values.own)))
    for chunk in _query_chunks(len(values.own), n_rows):
        scores = left_out.all_scores[chunk]
        # Shifted once per chunk; float32 exponentials are twice as fast, and a loss compared
        # across temperatures needs no more precision than that.
        shifted = (scores - scores.max(axis=1, keepdims=True)).astype(np.float32)
        own_label = None if values.scale is not None else every_value == values.own[chunk, None]
        for t, temperature in enumerate(temperatures):
            with np.errstate(over="ignore"):
                e = np.exp(shifted * np.float32(1 / temperature))
            total = e.sum(axis=1, dtype=np.float64)
            if own_label is not None:
                prediction = np.sum(e, axis=1, where=own_label, dtype=np.float64) / total
            else:
                prediction = (e @ every_value).astype(np.float64) / total[:, None]
            losses[t, chunk] = values.losses(chunk, prediction)
    return losses


def prefix_losses(
    left_out: LeftOutScores,
    values: ValueSide,
    temperatures: np.ndarray,
    prefixes: Sequence[int],
    needed: np.ndarray,
) -> np.ndarray:
    """Losses (temperatures, prefixes, keys) of attention over each key's first k candidates,
    for each k in ``prefixes`` where ``needed`` (temperatures, prefixes); NaN elsewhere.

    The softmax over a prefix is its exp-weights over their running sum, so one pass along the
    candidates serves every k, and a pass stops at the longest prefix it needs.
    """
    order = np.argsort(prefixes)
    ends = np.asarray(prefixes)[order]
    n_candidates = left_out.top_scores.shape[1]
    losses = np.full((len(temperatures), len(prefixes), len(values.own)), np.nan)
    for chunk in _query_chunks(len(values.own), n_candidates * values.width):
        scores, ids = left_out.top_scores[chunk], left_out.top_ids[chunk]
        found = ids >= 0
        # Candidates are sorted best first, so column 0 holds each row's maximum; pads are -inf
        # and get weight 0.
        shifted = (scores - scores[:, :1]).astype(np.float32)
        # Padding looks up each key's first candidate, which exists (see found_any); weight 0.
        gathered = values.at(np.where(found, ids, ids[:, :1]))
        own_label = None
        if values.scale is None:
            own_label = (gathered == values.own[chunk, None]) & found
        for t, temperature in enumerate(temperatures):
            last = max((end for end, need in zip(ends, needed[t, order]) if need), default=0)
            if last == 0:
                continue
            with np.errstate(over="ignore"):
                e = np.exp(shifted[:, :last] * np.float32(1 / temperature))
            if own_label is not None:
                total = np.cumsum(e, axis=1, dtype=np.float64)
                own_mass = np.cumsum(e * own_label[:, :last], axis=1, dtype=np.float64)
                for position, end in zip(order, ends):
                    if end <= last and needed[t, position]:
                        prediction = own_mass[:, end - 1] / total[:, end - 1]
                        losses[t, position, chunk] = values.losses(chunk, prediction)
                continue
            blended = np.zeros((len(e), values.width))
            weight = np.zeros(len(e))
            begin = 0
            for position, end in zip(order, ends):
                if end > last:
                    break
                part = e[:, begin:end]
                blended += np.matmul(part[:, None, :], gathered[:, begin:end])[:, 0]
                weight += part.sum(axis=1, dtype=np.float64)
                begin = end
                if needed[t, position]:
                    prediction = blended / weight[:, None]
                    losses[t, position, chunk] = values.losses(chunk, prediction)
    return losses
