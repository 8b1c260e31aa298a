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
(``spelling.combination``), each key's own text the query, as in a lookup. Under the hand-set rule's
curve (``combination="rule-1"`` to ``"rule-8"``) the keys, real names and words, can
tell how much spelling should weigh between real words: ``lexical_known``. It is chosen on the same
rule, from 0 to 1 (1/64, 1/16, 1/4 and 1 tried), where the store is scored exactly. The learned
constants (``learned-1``'s, and the marks of ``rule-2`` to ``rule-8``) were fitted on what people
type, which no stored key is, so the values do not judge them. The weight of spelling as a whole
(``lexical``) is left alone: no stored key is a misspelling of another, so the values cannot judge
it (``fit`` learns it from examples)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from softdict._leave_one_out import LeftOutScores, ValueSide, all_keys_losses, prefix_losses
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

_COARSE_STEP = 4  # the first pass of the temperature search tries every 4th grid point

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
        # Each key's best meaning over the other keys (it is left out), which rule-8 reads.
        best_meaning = np.full(len(ids), np.inf)  # +inf: the other combinations do not
        if terms.reads_meaning.any():
            others = meaning.copy()
            others[np.arange(len(ids)), own] = -np.inf
            best_meaning = others.max(axis=1, initial=-np.inf)
        terms = terms.given_meaning(best_meaning)
        similarity = store.spelling.similarity(spelled_keys, column_ids)
        marks = store.spelling.marks(spelled_keys, column_ids) if terms.weighs_marks else None
        # The hand-set rule has one number the values can judge, lexical_known; the learned
        # combination none (its constants were fitted on what people type).
        choices = {config.lexical_known: terms}
        if config.combination.weighs_known:
            for known in KNOWN_CHOICES:
                choices.setdefault(
                    known, terms_of(store, texts, known=known).given_meaning(best_meaning)
                )
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
    values = ValueSide.build(own, values_of, loss)
    grid = default_temperature * _FACTORS
    every_key = left_out.all_scores is not None and None in options
    # Prefixes of the best candidates stand for each fixed k, and for "all keys" where the store
    # attends to its top candidates only (large or approximate stores).
    on_prefixes = [i for i, k in enumerate(options) if k is not None or not every_key]
    ends = [min(options[i] or left_out.attended, left_out.top_scores.shape[1]) for i in on_prefixes]
    best: dict[int, tuple[float, np.ndarray]] = {}  # option -> (temperature, per-key losses)

    def losses_over_every_key(temperatures: np.ndarray, needed: np.ndarray) -> np.ndarray:
        return all_keys_losses(left_out, values, temperatures)[:, None, :]

    def losses_over_prefixes(temperatures: np.ndarray, needed: np.ndarray) -> np.ndarray:
        return prefix_losses(left_out, values, temperatures, ends, needed)

    if every_key:
        best.update(_grid_search(grid, losses_over_every_key, [options.index(None)]))
    if on_prefixes:
        best.update(_grid_search(grid, losses_over_prefixes, on_prefixes))

    def losses_at(temperature: float, option: int) -> np.ndarray:
        """Per-key losses of one option at one temperature."""
        if every_key and options[option] is None:
            return losses_over_every_key(np.array([temperature]), np.ones((1, 1), dtype=bool))[0, 0]
        position = on_prefixes.index(option)
        needed = np.zeros((1, len(on_prefixes)), dtype=bool)
        needed[0, position] = True
        return losses_over_prefixes(np.array([temperature]), needed)[0, position]

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
