"""calibrate(): the leave-one-out temperature beats the default on held-out data."""

from __future__ import annotations

import numpy as np
import pytest
from _support import FakeEncoder

from softdict import ConfigError, EmptyStoreError, SoftDict

DIM = 16


def noisy_clusters(
    n: int, seed: int, clusters: int = 20
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys in clusters whose values are the cluster's mean plus heavy noise: the nearest key
    alone is a poor guess, an average over the cluster a good one."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((clusters, DIM))
    means = np.random.default_rng(98).standard_normal(clusters) * 3
    labels = rng.integers(0, clusters, n)
    X = centres[labels] + 0.4 * rng.standard_normal((n, DIM))
    return X.astype(np.float32), means[labels] + rng.standard_normal(n) * 2.0, labels


def held_out_mse(sd: SoftDict, X: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean((sd.lookup_embeddings(X) - truth) ** 2))


def test_calibrated_temperature_beats_the_default_on_held_out_data() -> None:
    X, y, _ = noisy_clusters(600, seed=0)
    X_test, _, test_labels = noisy_clusters(300, seed=1)
    truth = (np.random.default_rng(98).standard_normal(20) * 3)[test_labels]  # the cluster means
    sd = SoftDict(encoder=FakeEncoder())
    sd.add_embeddings([f"k{i}" for i in range(len(X))], X, y)
    default_t, default_mse = sd.temperature, held_out_mse(sd, X_test, truth)
    chosen = sd.calibrate()
    assert sd.temperature == chosen != default_t
    calibrated_mse = held_out_mse(sd, X_test, truth)
    print(
        f"held-out MSE: default T={default_t} {default_mse:.3f}, calibrated T={chosen:.3f} "
        f"{calibrated_mse:.3f} ({1 - calibrated_mse / default_mse:.0%} lower)"
    )
    assert calibrated_mse < 0.9 * default_mse  # measured: 21% lower (T 0.05 -> 0.084)


def test_calibration_of_labels_maximises_held_out_likelihood() -> None:
    X, _, labels = noisy_clusters(600, seed=2)
    noisy = np.where(np.random.default_rng(3).random(600) < 0.3, (labels + 1) % 20, labels)
    X_test, _, test_labels = noisy_clusters(300, seed=4)
    sd = SoftDict(encoder=FakeEncoder(), temperature=5.0)  # far too flat to tell clusters apart
    sd.add_embeddings([f"k{i}" for i in range(600)], X, [f"c{c}" for c in noisy])

    def held_out_log_likelihood() -> float:
        return float(
            np.mean(
                [
                    np.log(max(a.distribution.get(f"c{c}", 0.0), 1e-12))
                    for a, c in zip(sd.attend_embeddings(X_test), test_labels)
                ]
            )
        )

    before = held_out_log_likelihood()
    sd.calibrate()
    after = held_out_log_likelihood()
    print(
        f"held-out log-likelihood: T=5 {before:.3f}, calibrated T={sd.temperature:.3f} {after:.3f}"
    )
    assert after > before + 0.5


def test_calibrate_samples_large_stores_and_is_reproducible() -> None:
    X, y, _ = noisy_clusters(3000, seed=5)
    a = SoftDict(encoder=FakeEncoder())
    a.add_embeddings([f"k{i}" for i in range(3000)], X, y)
    b = SoftDict(encoder=FakeEncoder())
    b.add_embeddings([f"k{i}" for i in range(3000)], X, y)
    assert a.calibrate(sample_size=400, seed=1) == b.calibrate(sample_size=400, seed=1)


def test_calibrate_errors() -> None:
    with pytest.raises(EmptyStoreError, match="at least 2 keys"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder()).calibrate()
    with pytest.raises(ConfigError, match="sample_size"):
        SoftDict({"apple": 1.0, "pear": 2.0}, encoder=FakeEncoder()).calibrate(sample_size=1)
