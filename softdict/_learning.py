"""Learning from examples: a query projection W_q and the temperature, fitted with PyTorch.

``fit`` is given (query text, target key) pairs and minimises the cross-entropy of attention on
each query's target key, the way a transformer learns its query projection. (Choosing the
temperature from the stored values alone is ``_calibration``'s concern.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from softdict._errors import KeyTypeError, NoMatchError
from softdict._similarity import Similarity
from softdict.index.base import require_vectors
from softdict.store.base import Store

__all__ = ["FitReport", "examples_from", "fit", "fit_projection"]


@dataclass(frozen=True, repr=False)
class FitReport:
    """What ``SoftDict.fit`` learned, judged on the held-out part of the pairs.

    Attributes:
        accuracy_before: held-out top-1 accuracy (the target key gets the most weight) before.
        accuracy_after: the same after fitting (equal to before when the projection was not kept).
        steps: optimisation steps taken (early stopping on the held-out loss ends it).
        temperature: the temperature in force afterwards.
        kept: whether the learned projection was kept; False when it did not reach the held-out
            accuracy of the projection already in force (the identity at first).
        n_train, n_heldout: how the pairs were split.
    """

    accuracy_before: float
    accuracy_after: float
    steps: int
    temperature: float
    kept: bool
    n_train: int
    n_heldout: int

    def __repr__(self) -> str:
        verdict = "projection kept" if self.kept else "previous projection kept (no held-out gain)"
        return (
            f"FitReport(held-out accuracy {self.accuracy_before:.3f} -> {self.accuracy_after:.3f}, "
            f"{self.steps} steps, temperature={self.temperature:.4g}, {verdict}, "
            f"{self.n_train} train / {self.n_heldout} held-out pairs)"
        )


def examples_from(pairs: Iterable[object]) -> list[tuple[str, str]]:
    """(query, target key) pairs as a list; KeyTypeError for anything that is not two strings."""
    examples = []
    for i, pair in enumerate(pairs):
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(isinstance(x, str) for x in pair)
        ):
            raise KeyTypeError(
                f"fit() takes (query, target key) pairs of strings; pair #{i} is {pair!r:.60}"
            )
        examples.append((str(pair[0]), str(pair[1])))
    return examples


def fit(
    store: Store,
    targets: list[str],
    queries: np.ndarray,
    n_heldout: int,
    *,
    max_steps: int,
    learning_rate: float,
    regularization: float,
    patience: int,
    seed: int,
) -> tuple[FitReport, np.ndarray | None]:
    """Fit W_q and T on raw query embeddings and their target keys; the first ``n_heldout`` are
    held out. Returns the report and the projection to put in force (None: keep the one in
    force, which the report then says).

    Raises:
        NoMatchError: a target key is not in the store.
    """
    missing = [target for target in targets if target not in store]
    if missing:
        raise NoMatchError(
            f"{len(missing)} target key(s) are not in the store, e.g. {missing[0]!r}; "
            f"fit learns to find stored keys, so insert them first"
        )
    assert store.dim is not None
    require_vectors(store.backend, "fit")
    position = {key: i for i, key in enumerate(store.keys())}
    target_positions = np.array([position[t] for t in targets], dtype=np.int64)
    keys = store.backend.vectors(store.ids())
    raw = store.checked_embeddings(queries, "query embeddings")
    temperature = store.config.temperature_for(store.dim)
    weight, learned_t, steps, before, after = fit_projection(
        raw[n_heldout:],
        target_positions[n_heldout:],
        raw[:n_heldout],
        target_positions[:n_heldout],
        keys,
        store.config.similarity,
        temperature,
        initial=store.projection,
        max_steps=max_steps,
        learning_rate=learning_rate,
        regularization=regularization,
        patience=patience,
        seed=seed,
    )
    kept = after >= before
    report = FitReport(
        accuracy_before=before,
        accuracy_after=after if kept else before,
        steps=steps,
        temperature=learned_t if kept else temperature,
        kept=kept,
        n_train=len(targets) - n_heldout,
        n_heldout=n_heldout,
    )
    return report, weight.astype(np.float32) if kept else None


def fit_projection(
    train_queries: np.ndarray,
    train_targets: np.ndarray,
    heldout_queries: np.ndarray,
    heldout_targets: np.ndarray,
    keys: np.ndarray,
    similarity: Similarity,
    temperature: float,
    *,
    initial: np.ndarray | None,
    max_steps: int,
    learning_rate: float,
    regularization: float,
    patience: int,
    seed: int,
) -> tuple[np.ndarray, float, int, float, float]:
    """Learn W_q (from ``initial``, or the identity, and pulled back towards the identity) and T
    by minimising the cross-entropy
    of attention on each query's target key; early stopping on the held-out loss.

    ``keys`` are prepared key vectors; targets index into them. Returns (W, T, steps, held-out
    accuracy with the starting W and T, held-out accuracy with the learned W and T).
    """
    import torch

    torch.manual_seed(seed)
    dim = keys.shape[1]
    key_t = torch.from_numpy(np.ascontiguousarray(keys, dtype=np.float32))
    key_sq = (key_t * key_t).sum(dim=1)
    identity = torch.eye(dim)
    start = identity if initial is None else torch.from_numpy(initial.astype(np.float32))
    weight = start.clone().requires_grad_(True)
    log_t = torch.tensor(float(np.log(temperature)), requires_grad=True)
    data = {
        "train": (
            torch.from_numpy(train_queries.astype(np.float32)),
            torch.from_numpy(train_targets),
        ),
        "heldout": (
            torch.from_numpy(heldout_queries.astype(np.float32)),
            torch.from_numpy(heldout_targets),
        ),
    }

    def scores(queries: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        projected = queries @ w.T
        if similarity is Similarity.COSINE:
            projected = projected / projected.norm(dim=1, keepdim=True).clamp_min(1e-12)
        elif similarity is Similarity.SCALED_DOT:
            projected = projected / float(np.sqrt(dim))
        if similarity is Similarity.L2:
            sq = (projected * projected).sum(dim=1, keepdim=True)
            return -(sq - 2 * projected @ key_t.T + key_sq[None, :]).clamp_min(0)
        return projected @ key_t.T

    def loss_and_accuracy(
        part: str, w: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, float]:
        queries, targets = data[part]
        s = scores(queries, w)
        loss = torch.nn.functional.cross_entropy(s / t, targets)
        return loss, float((s.argmax(dim=1) == targets).float().mean())

    with torch.no_grad():
        _, accuracy_before = loss_and_accuracy("heldout", start, torch.tensor(temperature))
    optimizer = torch.optim.Adam([weight, log_t], lr=learning_rate)
    best = (float("inf"), start.clone(), float(temperature))
    since_best, steps = 0, 0
    for steps in range(1, max_steps + 1):  # noqa: B007 - the last value is reported
        optimizer.zero_grad()
        train_loss, _ = loss_and_accuracy("train", weight, log_t.exp())
        objective = train_loss + regularization * ((weight - identity) ** 2).sum()
        objective.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        with torch.no_grad():
            heldout_loss, _ = loss_and_accuracy("heldout", weight, log_t.exp())
        if float(heldout_loss) < best[0] - 1e-6:
            best = (float(heldout_loss), weight.detach().clone(), log_t.detach().exp().item())
            since_best = 0
        else:
            since_best += 1
            if since_best >= patience:
                break
    with torch.no_grad():
        _, accuracy_after = loss_and_accuracy("heldout", best[1], torch.tensor(best[2]))
    return best[1].numpy(), best[2], steps, accuracy_before, accuracy_after
