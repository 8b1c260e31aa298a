"""SoftDict's learning: ``calibrate`` (the temperature, and a fixed k where it clearly helps,
from the stored values) and ``fit`` (a query projection and the spelling weights, from example
pairs). The arguments are checked here; ``softdict._calibration`` and ``softdict._learning``
compute, and what they learn is set on the store's config in one step, or not at all.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from softdict import _calibration, _learning
from softdict._config import check_number
from softdict._errors import CalibrationWarning, ConfigError, EmptyStoreError
from softdict._learning import FitReport
from softdict._option_properties import OptionProperties

__all__ = ["Tuning"]


class Tuning(OptionProperties):
    """What a ``SoftDict`` learns from its values (``calibrate``) or from examples (``fit``)."""

    def calibrate(self, *, sample_size: int = 2000, seed: int = 0, choose_k: bool = True) -> float:
        """Choose the temperature (and, where it clearly helps, a fixed k) that best predicts each
        stored value from the others; set them.

        Leave-one-out over the store: for each candidate temperature (a log grid from 1/50 to 50
        times the measured default), each key's value is predicted by attention over the other
        keys, as a lookup of that key would attend to them. Scalar and vector stores minimise the
        squared error (each value dimension in units of its variance), categorical stores
        maximise the likelihood of each key's own label. Stores larger than ``sample_size`` are
        calibrated on a random sample of that many keys (``seed`` fixes it), each still predicted
        from the whole store.

        With ``choose_k``, attending to only the k best keys (k = 1, 2, 4, ..., 512) is compared
        with attending to all of them; a fixed k is set only if its leave-one-out loss is lower by
        more than three standard errors, and ``top_k`` is reset to None otherwise. Without it,
        the ``top_k`` in force is kept and only the temperature is chosen. The temperature moves
        only where the data show it predicts better: by a one-sided paired t-test of the per-key
        losses at the 2.5% level. Otherwise it stays as it is, with a ``CalibrationWarning`` (a
        store of three keys cannot tell).

        With the spelling channel on, each key is scored as its own text would be (meaning and
        spelling), and ``lexical_known`` (how much spelling weighs between real words) moves on
        the same rule, among 0, 1/64, 1/16, 1/4 and 1, in stores scored exactly (up to 10,000
        keys). ``lexical``, the weight of misspelt words, is left alone: no stored key is a
        misspelling of another, so the values cannot judge it; ``fit`` learns it from examples.

        Squared error follows the values' scale: a few keys with extreme values pull the
        temperature towards averaging them away.

        Returns:
            The temperature chosen, now in force (``top_k`` shows the k).

        Raises:
            EmptyStoreError: the store has fewer than 2 keys.
            ConfigError: ``sample_size`` is not a whole number >= 2, ``seed`` not one >= 0, or
                ``choose_k`` not a bool.
        """
        check_number(
            "sample_size", sample_size, "a whole number >= 2", lambda v: v >= 2, whole=True
        )
        check_number("seed", seed, "a whole number >= 0", lambda v: v >= 0, whole=True)
        if not isinstance(choose_k, bool):
            raise ConfigError(f"choose_k must be True or False, got {choose_k!r}")
        with self._lock:
            n_keys = len(self._store)
            if n_keys < 2:
                raise EmptyStoreError(
                    f"calibrate needs at least 2 keys to predict one from the others; the store "
                    f"has {n_keys}"
                )
            in_force = self.temperature
            chosen = _calibration.calibrate(
                self._store,
                sample_size=int(sample_size),
                seed=int(seed),
                choose_k=choose_k,
                in_force=in_force,
            )
            if chosen is None:
                return in_force  # nothing to learn from: keep what is in force
            if chosen.kept_temperature:
                # Before the store changes: where warnings are errors (python -W error), the
                # call raises it, and changed the store first (a probe: top_k written).
                warnings.warn(
                    f"calibrate() kept the temperature in force ({in_force:.4g}): no "
                    f"temperature predicted the {n_keys} stored values clearly better "
                    f"(leave-one-out, a paired t-test at the 2.5% level), as happens on a store "
                    f"this small or this uniform. Add keys, or set sd.temperature yourself",
                    CalibrationWarning,
                    stacklevel=2,
                )
            temperature = None if chosen.kept_temperature else chosen.temperature
            config = self._store.config
            self._store.config = config.replace(
                temperature=config.temperature if temperature is None else temperature,
                top_k=chosen.top_k,
                lexical_known=(
                    config.lexical_known if chosen.lexical_known is None else chosen.lexical_known
                ),
            )
        return chosen.temperature

    def fit(
        self,
        pairs: Iterable[tuple[str, str]],
        *,
        heldout: float = 0.2,
        max_steps: int = 300,
        learning_rate: float = 0.01,
        regularization: float = 1e-2,
        patience: int = 20,
        seed: int = 0,
    ) -> FitReport:
        """Learn a query projection W_q, the temperature and the spelling channel's weights
        (``lexical``, ``lexical_known``; unless ``lexical`` is 0) from (query, target key)
        examples.

        W_q starts from the projection in force (the identity at first) and is pulled back
        towards the identity (``regularization``); the loss is the cross-entropy of attention on
        each query's target key over every key, scored as a lookup scores them. A ``heldout``
        share of the query texts is kept aside, with every pair of each, for early stopping
        and for the report (a pair given twice is never on both sides). If no step
        lowers the held-out loss (a training that diverges, say at too high a
        ``learning_rate``), or what was learned does not reach the held-out accuracy of what is
        in force, nothing changes: ``fit`` never makes held-out accuracy worse. Every later
        lookup uses W_q and the learned options, and ``save`` stores them.

        Raises:
            KeyTypeError: a pair is not two strings, or ``pairs`` is no iterable.
            InvalidValueError: a query is not valid Unicode (a lone surrogate).
            NoMatchError: a target key is not in the store.
            ConfigError: too few distinct queries to hold some out, or an option out of range.
        """
        check_number("heldout", heldout, "a fraction between 0 and 1", lambda v: 0 < v < 1)
        check_number("max_steps", max_steps, "a whole number >= 1", lambda v: v >= 1, whole=True)
        # The optimiser works in float32, and Adam's first step moves a parameter by up to ten
        # times the rate: past about 3.4e37 that step overflows (torch raised a RuntimeError).
        check_number(
            "learning_rate", learning_rate, "a number > 0 and at most 1e37", lambda v: 0 < v <= 1e37
        )
        check_number("regularization", regularization, "a number >= 0", lambda v: v >= 0)
        check_number("patience", patience, "a whole number >= 1", lambda v: v >= 1, whole=True)
        # Below 2**63, as the seed option: torch's generator takes no larger seed.
        check_number(
            "seed", seed, "a whole number from 0 to 2**63 - 1", lambda v: 0 <= v < 2**63, whole=True
        )
        examples, n_heldout = _learning.heldout_first(_learning.examples_from(pairs), heldout, seed)
        queries = self._encode_queries([query for query, _ in examples])
        with self._lock:
            report, projection = _learning.fit(
                self._store,
                [target for _, target in examples],
                queries,
                [query for query, _ in examples],
                n_heldout,
                max_steps=int(max_steps),
                learning_rate=float(learning_rate),
                regularization=float(regularization),
                patience=int(patience),
                seed=int(seed),
            )
            if projection is not None:
                # Validated first, so a bad learned option leaves the store as it was.
                config = self._store.config.replace(
                    temperature=report.temperature,
                    lexical=report.lexical,
                    lexical_known=report.lexical_known,
                )
                self._store.projection = projection
                self._store.config = config
            return report
