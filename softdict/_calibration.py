"""Choosing the temperature (and a fixed k, where one helps) by leave-one-out over the store.

``calibrate`` asks, for each candidate temperature T and each way of choosing the keys a query
attends to (all of them, or its k best), how well attention over the *other* keys predicts each
key's own value: softmax(sim(k_i, K_{-i}) / T) · V_{-i} against v_i. Scalar and vector values are
scored by squared error, each value dimension in units of its variance (so a price in the
thousands does not outvote a ratio in [0, 1]); labels by the negative log-likelihood of the key's
own label.

A fixed k is chosen only where it is clearly better than attending to every key: its per-key
losses must beat those of the best all-keys temperature by more than ``_SIGNIFICANCE`` standard
errors of the paired difference. Attention over every key keeps the tail bound meaningful and
needs no tuning when the store grows, so it is the choice unless the data say otherwise. The
temperature moves on the same rule: only when the best one beats the temperature in force so
clearly, by a one-sided paired t-test at the 2.5% level (t quantiles from scipy): on three keys
the gain must exceed 4.3 standard errors, on hundreds about 2; a store too small to tell keeps
what it has.

With the spelling channel on, the scores are the store's combination of meaning and spelling
(``spelling.combination``), each key's own text the query, as in a lookup. Under the hand-set
rule (``combination="rule-1"``) the keys, real names and words, can tell how much spelling should
weigh between real words: ``lexical_known``. It is chosen on the same rule, from 0 to 1 (1/64,
1/16, 1/4 and 1 tried), where the store is scored exactly. The learned combination's constants
were fitted on what people type, which no stored key is, so the values judge only the
temperature there. The weight of spelling as a whole (``lexical``) is left alone: no stored key
is a misspelling of another, so the values cannot judge it (``fit`` learns it from examples).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from softdict._attention import top_of_scores
from softdict._config import CombinationName
from softdict._lookup import spelling_terms, terms_of
from softdict._retrieval import scores_every_key
from softdict.index.base import require_vectors
from softdict.store.base import Store
from softdict.values.base import LossKind

__all__ = ["K_CHOICES", "Calibration", "LeftOutScores", "calibrate", "calibrate_leave_one_out"]

# Temperatures tried: the measured default for the similarity times these factors (a log grid
# from 1/50 to 50: for cosine, 0.001 to 2.5).
_FACTORS = np.geomspace(1 / 50, 50, 61)

# Fixed k tried when calibrate may choose k (those below the number of other keys).
K_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

# How many standard errors of the paired per-key difference a fixed k (or a new temperature)
# must win by. Twelve-odd alternatives are compared, so a plain 2-sigma rule would pick noise
# now and then.
_SIGNIFICANCE = 3.0

# Bytes of gathered candidate values held at once (the loop over queries is chunked to this).
_CHUNK_BYTES = 64 * 2**20

_COARSE_STEP = 4  # the first pass of the temperature search tries every 4th grid point

_FLOOR = 1e-12  # probability floor: a label given no mass costs -log(1e-12), not infinity

# lexical_known tried by calibrate, besides the one in force.
KNOWN_CHOICES = (0.0, 1 / 64, 1 / 16, 1 / 4, 1.0)


def calibrate(
    store: Store, *, sample_size: int, seed: int, choose_k: bool, in_force: float
) -> Calibration | None:
    """The temperature and k (None: every key) that best predict each stored value from the
    others, as ``SoftDict.calibrate`` documents; None when no key found another to learn from.

    The store must hold at least 2 keys. Stores larger than ``sample_size`` are calibrated on a
    random sample of that many keys (``seed`` fixes it), each predicted from the whole store.
    """
    config, backend = store.config, store.backend
    assert store.dim is not None
    dim = store.dim
    require_vectors(backend, "calibrate")
    ids = store.ids()
    n_keys = len(ids)
    if n_keys > sample_size:
        ids = np.sort(np.random.default_rng(seed).choice(ids, sample_size, replace=False))
    # Each sampled key is the query, as its own text would be. The query projection is left
    # out: it is learned for how users phrase queries, not for the keys themselves.
    queries = config.similarity.prepare_queries(backend.vectors(ids))
    fixed = [k for k in K_CHOICES if k < n_keys - 1] if choose_k else []
    options: list[int | None] = [None, *fixed]
    if not choose_k and config.top_k is not None:
        options = [config.top_k]
    # How many of each key's best neighbours to rank: enough for every fixed k, and where the
    # store attends to its top candidates (large or approximate), for max_k of them.
    deepest = max((k for k in options if k is not None), default=1)
    column, _ = store.values_of(ids[:0])

    def values_of(of: np.ndarray) -> np.ndarray:
        column, slots = store.values_of(of)
        return column.calibration_values(slots)

    def choose(left_out: LeftOutScores, own_ids: np.ndarray) -> Calibration:
        return calibrate_leave_one_out(
            left_out,
            values_of(own_ids),
            values_of,
            column.loss,
            config.similarity.default_temperature(dim),
            options,
            in_force,
        )

    if scores_every_key(backend.capabilities, n_keys):
        meaning, column_ids = backend.score_all(queries)
        own = np.searchsorted(column_ids, ids)
        depth = min(deepest, n_keys - 1)
        texts = store.keys_of(ids)
        spelled = spelling_terms(store, texts)
        if spelled is None:
            return choose(LeftOutScores.from_all_scores(meaning, own, column_ids, depth), ids)
        spelled_keys, terms = spelled
        similarity = store.spelling.similarity(spelled_keys, column_ids)
        marks = store.spelling.marks(spelled_keys, column_ids) if terms.marks.shape[1] else None
        # The hand-set rule has one number the values can judge, lexical_known; the learned
        # combination none (its constants were fitted on what people type).
        choices = {config.lexical_known: terms}
        if config.combination is CombinationName.RULE_1:
            for known in KNOWN_CHOICES:
                choices.setdefault(known, terms_of(store, texts, known=known))
        found: dict[float, Calibration] = {}
        for known, choice in choices.items():
            scores = choice.score(meaning, similarity, marks)
            left_out = LeftOutScores.from_all_scores(scores, own, column_ids, depth)
            found[known] = choose(left_out, ids)
        base = found[config.lexical_known]
        challenger = min(found.values(), key=lambda c: float(c.losses.mean()))
        if challenger is not base and _clearly_better(
            challenger.losses, than=base.losses, margin=None
        ):
            known = next(k for k, c in found.items() if c is challenger)
            return dataclasses.replace(challenger, lexical_known=known)
        return base
    else:
        depth = min(max(deepest, config.max_k), n_keys - 1)
        found_scores, found_ids = backend.search(queries, depth + 1)
        left_out = LeftOutScores.from_search(found_scores, found_ids, ids, config.max_k)
        reached = left_out.found_any()
        if not reached.any():
            return None
        # Large or approximate stores are calibrated on meaning alone: their keys' spelling
        # neighbours would need a candidate search per sampled key.
        return choose(left_out.subset(reached), ids[reached])


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
class Calibration:
    """The choice: ``temperature`` and ``top_k`` (None: attend to every key), whether the
    temperature in force was kept because no other predicted clearly better, the per-key losses
    of the choice, and the ``lexical_known`` to set (None: keep the one in force)."""

    temperature: float
    top_k: int | None
    kept_temperature: bool = False
    losses: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    lexical_known: float | None = None


def _clearly_better(
    losses: np.ndarray, than: np.ndarray, margin: float | None = _SIGNIFICANCE
) -> bool:
    """Whether per-key ``losses`` beat ``than`` by more than ``margin`` standard errors of the
    paired difference; with ``margin=None``, by a one-sided paired t-test at the 2.5% level (its
    critical value grows as the keys get few). With one key, never."""
    gain = than - losses
    # Losses are in nats or in units of the values' variance: a gain below 1e-9 is rounding.
    if len(gain) < 2 or gain.mean() <= 1e-9:
        return False
    if margin is None:
        from scipy.stats import t  # imported here: only calibrate needs it

        margin = float(t.ppf(0.975, df=len(gain) - 1))
    standard_error = gain.std(ddof=1) / np.sqrt(len(gain))
    return bool(gain.mean() > margin * standard_error)


@dataclass(frozen=True)
class _ValueSide:
    """The values leave-one-out predicts, in the units its loss counts them in.

    Numbers are divided by each dimension's spread over the sampled keys (a constant dimension
    keeps 1: it is predicted exactly anyway); labels stay codes, and ``scale`` is None.
    """

    own: np.ndarray  # the sampled keys' values: (m, d_v) numbers over their spread, or (m,) codes
    of_ids: Callable[[np.ndarray], np.ndarray]  # any keys' stored values, by id
    scale: np.ndarray | None

    @classmethod
    def build(
        cls, own: np.ndarray, of_ids: Callable[[np.ndarray], np.ndarray], loss: LossKind
    ) -> _ValueSide:
        if loss is LossKind.LABEL_LIKELIHOOD:
            return cls(own, of_ids, None)
        own = own.astype(np.float64).reshape(len(own), -1)
        spread = own.std(axis=0)
        scale = np.where(spread > 0, spread, 1.0)
        return cls(own / scale, of_ids, scale)

    @property
    def width(self) -> int:
        """Numbers per value (1 for a label code)."""
        return 1 if self.scale is None else int(self.own.shape[1])

    def at(self, ids: np.ndarray) -> np.ndarray:
        """Values of ``ids`` (any shape): label codes, or float32 numbers over their spread with
        a value axis appended (float32 halves the work; losses only rank temperatures)."""
        stored = self.of_ids(ids)
        if self.scale is None:
            return stored
        return (stored.reshape(*ids.shape, -1) / self.scale).astype(np.float32)

    def losses(self, chunk: slice, prediction: np.ndarray) -> np.ndarray:
        """Each key's loss in ``chunk``: ``prediction`` is the attention mass on its own label
        (negative log-likelihood), or its blended value (mean squared error)."""
        if self.scale is None:
            return -np.log(np.maximum(prediction, _FLOOR))
        return np.mean((prediction - self.own[chunk]) ** 2, axis=1)


def calibrate_leave_one_out(
    left_out: LeftOutScores,
    own: np.ndarray,
    values_of: Callable[[np.ndarray], np.ndarray],
    loss: LossKind,
    default_temperature: float,
    options: Sequence[int | None],
    in_force: float,
) -> Calibration:
    """The temperature and k, among ``options``, that best predict each sampled key's own value.

    Args:
        left_out: each sampled key's scores against the other keys.
        own: the sampled keys' values: (m,) or (m, d_v) numbers, or (m,) label codes.
        values_of: values of any keys by id, in the same form as ``own``.
        loss: how the store's values are judged (squared error, or the own label's likelihood).
        default_temperature: the measured default for the similarity; the grid is laid around it.
        options: None (attend to every key) and/or fixed k to compare. A fixed k replaces None
            only when it is significantly better; without None the best option simply wins.
        in_force: the temperature in force; kept unless another is significantly better.
    """
    values = _ValueSide.build(own, values_of, loss)
    grid = default_temperature * _FACTORS
    every_key = left_out.all_scores is not None and None in options
    # Prefixes of the best candidates stand for each fixed k, and for "all keys" where the store
    # attends to its top candidates only (large or approximate stores).
    on_prefixes = [i for i, k in enumerate(options) if k is not None or not every_key]
    ends = [min(options[i] or left_out.attended, left_out.top_scores.shape[1]) for i in on_prefixes]
    best: dict[int, tuple[float, np.ndarray]] = {}  # option -> (temperature, per-key losses)

    def every_key_losses(temperatures: np.ndarray, needed: np.ndarray) -> np.ndarray:
        return _all_keys_losses(left_out, values, temperatures)[:, None, :]

    def prefix_losses(temperatures: np.ndarray, needed: np.ndarray) -> np.ndarray:
        return _prefix_losses(left_out, values, temperatures, ends, needed)

    if every_key:
        best.update(_grid_search(grid, every_key_losses, [options.index(None)]))
    if on_prefixes:
        best.update(_grid_search(grid, prefix_losses, on_prefixes))

    def losses_at(temperature: float, option: int) -> np.ndarray:
        """Per-key losses of one option at one temperature."""
        if every_key and options[option] is None:
            return every_key_losses(np.array([temperature]), np.ones((1, 1), dtype=bool))[0, 0]
        position = on_prefixes.index(option)
        needed = np.zeros((1, len(on_prefixes)), dtype=bool)
        needed[0, position] = True
        return prefix_losses(np.array([temperature]), needed)[0, position]

    def chosen(option: int) -> Calibration:
        temperature, losses = best[option]
        in_force_losses = losses_at(in_force, option)
        if not _clearly_better(losses, than=in_force_losses, margin=None):
            return Calibration(in_force, options[option], True, in_force_losses)
        return Calibration(temperature, options[option], False, losses)

    fixed = [i for i, k in enumerate(options) if k is not None]
    if not fixed:
        return chosen(options.index(None))
    challenger = min(fixed, key=lambda i: float(best[i][1].mean()))
    if None not in options:
        return chosen(challenger)
    base = options.index(None)
    return chosen(challenger if _clearly_better(best[challenger][1], than=best[base][1]) else base)


def _grid_search(
    grid: np.ndarray,
    evaluate: Callable[[np.ndarray, np.ndarray], np.ndarray],
    option_ids: Sequence[int],
) -> dict[int, tuple[float, np.ndarray]]:
    """Each option's best temperature on ``grid`` and its per-key losses there.

    ``evaluate(temperatures, needed)`` gives per-key losses (temperatures, options, keys), NaN
    where ``needed`` (temperatures, options) is False. Loss is smooth in log T, so every 4th
    temperature is tried first, then for each option the fine grid around its best: about a
    quarter of the work of the whole grid, and each temperature is a pass over the scores.
    """
    n_options = len(option_ids)
    coarse = np.arange(0, len(grid), _COARSE_STEP)
    found = evaluate(grid[coarse], np.ones((len(coarse), n_options), dtype=bool))
    losses = np.full((len(grid), *found.shape[1:]), np.nan)
    losses[coarse] = found
    near = _best_temperatures(losses.mean(axis=2))
    offsets = np.arange(-_COARSE_STEP + 1, _COARSE_STEP)
    wanted = np.zeros((len(grid), n_options), dtype=bool)
    for j, centre in enumerate(near):
        wanted[np.clip(centre + offsets, 0, len(grid) - 1), j] = True
    wanted[coarse] = False
    todo = np.flatnonzero(wanted.any(axis=1))
    if len(todo):
        found = evaluate(grid[todo], wanted[todo])
        losses[todo] = np.where(wanted[todo][:, :, None], found, losses[todo])
    chosen = _best_temperatures(losses.mean(axis=2))
    return {
        option: (float(grid[t]), losses[t, j])
        for j, (option, t) in enumerate(zip(option_ids, chosen))
    }


def _best_temperatures(mean: np.ndarray) -> np.ndarray:
    """Per option (column), the grid index of the lowest mean loss; NaN marks untried points.

    Ties go to the point nearest the middle of the grid, the measured default: a store whose
    every temperature predicts equally well (one label, constant values, k = 1) keeps it.
    """
    lowest = np.nanmin(mean, axis=0)
    tied = mean <= lowest + 1e-12 * np.maximum(1.0, np.abs(lowest))  # NaN compares False
    distance = np.abs(np.arange(len(mean)) - len(mean) // 2)[:, None]
    return np.asarray(np.argmin(np.where(tied, distance, len(mean)), axis=0))


def _query_chunks(n_queries: int, values_per_query: int) -> list[slice]:
    """Slices of the sampled keys, so that a chunk holds about _CHUNK_BYTES of floats."""
    step = max(1, _CHUNK_BYTES // (8 * max(values_per_query, 1)))
    return [slice(start, start + step) for start in range(0, n_queries, step)]


def _all_keys_losses(
    left_out: LeftOutScores, values: _ValueSide, temperatures: np.ndarray
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


def _prefix_losses(
    left_out: LeftOutScores,
    values: _ValueSide,
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
