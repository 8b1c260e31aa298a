"""What a retrieval decides with and what it gives: the options that decide a selection
(``RetrievalPolicy``, from the store's config) and the keys each query's softmax runs over, with
their scores and weights (``Selection``). Data only; ``softdict._retrieval`` makes selections."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from softdict._attention import mass_interval, weight_error_bound
from softdict._config import SoftDictConfig
from softdict.index.base import Capabilities, ScoreErrors
from softdict.spelling.terms import QueryTerms

__all__ = ["RetrievalPolicy", "Route", "ScoreBounds", "Selection"]


@dataclass(frozen=True)
class RetrievalPolicy:
    """The options that decide a selection (from the store's config)."""

    temperature: float
    top_k: int | None = None
    max_k: int = 1024
    tail_tolerance: float = 0.01
    # The sampled tail (softdict._sampling): the interval half-width wanted on the tail mass,
    # at this confidence, with at most max_sample keys drawn per query (0: no sample).
    tolerance: float = 0.01
    confidence: float = 0.95
    max_sample: int = 4096
    seed: int = 0

    @classmethod
    def from_config(cls, config: SoftDictConfig, dim: int) -> RetrievalPolicy:
        return cls(
            config.temperature_for(dim),
            config.top_k,
            config.max_k,
            config.tail_tolerance,
            config.tolerance,
            config.confidence,
            config.max_sample,
            config.seed,
        )


@dataclass(frozen=True)
class Route:
    """How one lookup chooses its keys, decided once for all its queries and chunks
    (``softdict._retrieval.route``), so no step below asks the backend or the policy again.

    Attributes:
        n_allowed: how many keys the lookup may attend to.
        capabilities: the backend's, asked once.
        scores_every_key: every allowed key is scored, in both channels (``scores_every_key``).
        scans_every_key: full attention over every allowed key (``scans_every_key``).
        columns: about how many keys a query's selection holds (a batch is chunked by it).
        head_k: the most keys an estimated attention's head holds (``_retrieval.head_size``).
        compressed: full attention from every allowed key's compressed score
            (``softdict._compressed``), in place of the scan.
    """

    n_allowed: int
    capabilities: Capabilities
    scores_every_key: bool
    scans_every_key: bool
    columns: int
    head_k: int
    compressed: bool = False

    @property
    def exact(self) -> bool:
        """Whether the backend's neighbours are exact (tail bounds hold only then)."""
        return self.capabilities.exact


@dataclass(frozen=True)
class ScoreBounds:
    """How far a selection's scores read from codes may be from the true ones: each within
    ``errors``, but for each query's ``exact_columns``, which were scored exactly."""

    errors: ScoreErrors
    exact_columns: tuple[np.ndarray, ...]
    temperature: float

    @functools.cached_property
    def exact(self) -> np.ndarray:
        """(m, c) bool: which columns were scored exactly. Made when first asked (an
        explanation): a lookup of values does not need it."""
        exact = np.zeros((len(self.exact_columns), self.errors.keys.shape[1]), dtype=bool)
        for row, columns in zip(exact, self.exact_columns):
            row[columns] = True
        return exact

    @functools.cached_property
    def spread(self) -> np.ndarray:
        """(m, c) a bound on each column's log-weight error: its score's over the temperature
        (0 where scored exactly). Computed once, when first asked."""
        return np.where(self.exact, 0.0, self.errors.of()) / self.temperature


@dataclass(frozen=True)
class Selection:
    """The keys each of m queries attends to, with their scores and weights.

    Attributes:
        scores: (m, c) float64 scores the softmax ran on (meaning + spelling, or meaning alone);
            -inf marks padding.
        ids: the keys' ids: (c,) shared by every query (attention over every allowed key, in
            increasing id order), or (m, c), one row per query, best first, -1 marking padding.
        weights: (m, c) softmax weights; 0 on padding; each row sums to 1.
        k: (m,) how many keys each query scored exactly (its head; every allowed key when exact).
        tail_mass: (m,) the attention mass of the allowed keys outside the head: 0 when every
            key was scored, the sample's estimate when the tail was sampled, NaN for top-k
            attention (which gives them nothing by its own formula).
        tail_bound: (m,) the deterministic bound on that mass from the head's scores
            (``tail_mass_bound``), NaN where it does not hold: an approximate index can miss
            near keys.
        meaning: (m, c) the similarity of the embeddings alone; -inf marks padding.
        spelling: (m, c) spelling similarities in [0, 1] (NaN on padding), or None when the
            spelling channel was off.
        terms: the queries' combination of meaning and spelling (``spelling.combination``), or
            None when the spelling channel was off.
        sampled: (m, c) which columns are sampled keys, standing for the tail (None: none are).
        n_sampled: (m,) how many keys each query sampled (0 when none).
        tail_stderr: (m,) the standard error of ``tail_mass`` (0 when not sampled).
        z: the normal quantile of the interval's confidence.
        n_draws: (m,) how many draws each query's sample was kept from (those that fell in the
            head were dropped; ``softdict._sampling``); 0 where the rest was scored whole.
        weight_error: (m,) a bound on the total variation between ``weights`` and those of
            every key's exact combined score, from spelling left unscored
            (``spelling.bounded``); None where every score is exact (``weight_errors`` adds the
            bound of scores read from codes).
        score_bounds: where scores were read from compressed codes (``softdict._compressed``),
            how far each may be from the true one; None elsewhere.
        code_spread: (m,) where the index keeps only lossy codes of the keys, how far each
            log-weight may be from the one of the vectors added, for every key alike
            (``with_code_error``); None elsewhere.
    """

    scores: np.ndarray
    ids: np.ndarray
    weights: np.ndarray
    k: np.ndarray
    tail_mass: np.ndarray
    tail_bound: np.ndarray
    meaning: np.ndarray
    spelling: np.ndarray | None = None
    terms: QueryTerms | None = None
    sampled: np.ndarray | None = None
    n_sampled: np.ndarray | None = None
    tail_stderr: np.ndarray | None = None
    z: float = 1.96
    n_draws: np.ndarray | None = None
    weight_error: np.ndarray | None = None
    score_bounds: ScoreBounds | None = None
    code_spread: np.ndarray | None = None

    def weight_errors(self) -> np.ndarray | None:
        """``weight_error``, or where scores were read from codes, the bound their errors give,
        and where keys are kept as lossy codes, the bound of their error added (computed when
        an explanation asks: a lookup of values does not need it)."""
        if self.score_bounds is not None:
            bounds = self.score_bounds
            return weight_error_bound(self.scores, bounds.temperature, bounds.spread)
        if self.code_spread is None:
            return self.weight_error
        spread = np.broadcast_to(self.code_spread[:, None], self.scores.shape)
        # One spread for every key bounds the total variation by 1 − e^(−2·spread) whatever
        # the weights, so any temperature gives it.
        codes = weight_error_bound(self.scores, 1.0, spread)
        before = self.weight_error if self.weight_error is not None else 0.0
        # Total variation obeys the triangle inequality: the two errors add.
        return np.minimum(before + codes, 1.0)

    def with_code_error(self, errors: np.ndarray, temperature: float) -> Selection:
        """This selection, with every key's score within ``errors`` (m,) of its score against
        the vector added (an index of lossy codes: ``softdict.index._code_error``), scaled as
        the combination scales meaning."""
        scale = self.terms.scale if self.terms is not None else 1.0
        spread = np.asarray(errors, dtype=np.float64) * scale / temperature
        return dataclasses.replace(self, code_spread=spread)

    def tail_interval(self) -> np.ndarray:
        """(m, 2) the interval on ``tail_mass`` at the selection's confidence, within [0, 1]
        (where scores were read from codes, the interval that surely holds)."""
        if self.score_bounds is not None:
            bounds = self.score_bounds
            inside = mass_interval(self.scores, bounds.temperature, bounds.spread, bounds.exact)
            return 1.0 - inside[:, ::-1]
        stderr = self.tail_stderr if self.tail_stderr is not None else np.zeros(len(self.k))
        low = np.clip(self.tail_mass - self.z * stderr, 0.0, 1.0)
        high = np.clip(self.tail_mass + self.z * stderr, 0.0, 1.0)
        return np.stack([low, high], axis=1)
