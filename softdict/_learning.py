"""Learning from examples: a query projection W_q, the temperature and the spelling channel's
weights, fitted with PyTorch.

``fit`` is given (query text, target key) pairs and minimises the cross-entropy of attention on
each query's target key, the way a transformer learns its query projection. With the spelling
channel on, the score is the store's combination of meaning and spelling as in a lookup
(``spelling.combination``), and ``lexical`` (how much spelling weighs as a whole) is learned with
W_q and T, and ``lexical_known`` too under the hand-set rule's curve (``rule-1`` to ``rule-8``:
``SpellingInputs``). (Choosing the temperature from the stored values alone is
``_calibration``'s concern.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from softdict._arguments import check_unicode
from softdict._errors import ConfigError, KeyTypeError, NoMatchError, short_repr
from softdict._fit_spelling import (
    SpellingInputs,
    best_meaning_of,
    combined_in_torch,
    spelling_inputs,
)
from softdict._similarity import Similarity
from softdict.index.base import require_vectors
from softdict.store.base import Store

__all__ = [
    "FitReport",
    "Learned",
    "SpellingInputs",
    "combined_in_torch",
    "examples_from",
    "fit",
    "fit_projection",
]


@dataclass(frozen=True, repr=False)
class FitReport:
    """What ``SoftDict.fit`` learned, judged on the held-out part of the pairs.

    Attributes:
        accuracy_before: held-out top-1 accuracy (the target key gets the most weight) before.
        accuracy_after: the same after fitting (equal to before when the projection was not kept).
        steps: optimisation steps taken (early stopping on the held-out loss ends it).
        temperature: the temperature in force afterwards.
        kept: whether what was learned was kept; False when no step lowered the held-out loss
            (the training diverged, or could not improve on what was in force) or what was
            learned did not reach the held-out accuracy of what was in force (the identity
            projection at first).
        n_train, n_heldout: how the pairs were split.
        lexical, lexical_known: the spelling channel's options in force afterwards (learned
            with the rest where the channel is on; lexical 0 stays 0).
    """

    accuracy_before: float
    accuracy_after: float
    steps: int
    temperature: float
    kept: bool
    n_train: int
    n_heldout: int
    lexical: float = 0.0
    lexical_known: float = 0.0

    def __repr__(self) -> str:
        verdict = "projection kept" if self.kept else "previous projection kept (no held-out gain)"
        return (
            f"FitReport(held-out accuracy {self.accuracy_before:.3f} -> {self.accuracy_after:.3f}, "
            f"{self.steps} steps, temperature={self.temperature:.4g}, lexical={self.lexical:.4g}, "
            f"lexical_known={self.lexical_known:.4g}, {verdict}, "
            f"{self.n_train} train / {self.n_heldout} held-out pairs)"
        )


def examples_from(pairs: Iterable[object]) -> list[tuple[str, str]]:
    """(query, target key) pairs as a list; KeyTypeError for anything that is not two strings,
    InvalidValueError for a query that is not valid Unicode (a lone surrogate)."""
    if not isinstance(pairs, Iterable):
        raise KeyTypeError(
            f"fit() takes an iterable of (query, target key) pairs, got {type(pairs).__name__}"
        )
    examples = []
    for i, pair in enumerate(pairs):
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(isinstance(x, str) for x in pair)
        ):
            raise KeyTypeError(
                f"fit() takes (query, target key) pairs of strings; pair #{i} is "
                f"{short_repr(pair, 60)}"
            )
        # As a lookup checks it: no encoder reads it.
        check_unicode(pair[0], f"query of pair #{i}", "passing it to fit")
        examples.append((str(pair[0]), str(pair[1])))
    return examples


def heldout_first(
    examples: list[tuple[str, str]], heldout: float, seed: int
) -> tuple[list[tuple[str, str]], int]:
    """The ``examples`` with a ``heldout`` share of their query texts, drawn by ``seed``, held
    out whole and put first; and how many pairs that holds out. Whole queries, not pairs: a
    pair given twice, or a query given with two targets, is never both trained on and judged
    on, which would make the held-out check that guards ``fit`` flatter what was learned.

    Raises:
        ConfigError: fewer than 2 query texts on either side.
    """
    queries = list(dict.fromkeys(query for query, _ in examples))
    n_out = round(len(queries) * heldout)
    if n_out < 2 or len(queries) - n_out < 2:
        raise ConfigError(
            f"fit needs at least 2 training and 2 held-out queries (it holds out every pair of a "
            f"query together); {len(queries)} distinct "
            f"{'query' if len(queries) == 1 else 'queries'} in {len(examples)} "
            f"pair{'' if len(examples) == 1 else 's'} with heldout={heldout} give "
            f"{len(queries) - n_out} and {n_out}"
        )
    order = np.random.default_rng(seed).permutation(len(queries))
    out = {queries[i] for i in order[:n_out]}
    held = [pair for pair in examples if pair[0] in out]
    return held + [pair for pair in examples if pair[0] not in out], len(held)


def fit(
    store: Store,
    targets: list[str],
    queries: np.ndarray,
    texts: list[str],
    n_heldout: int,
    *,
    max_steps: int,
    learning_rate: float,
    regularization: float,
    patience: int,
    seed: int,
) -> tuple[FitReport, np.ndarray | None]:
    """Fit W_q, T and the spelling weights on raw query embeddings (of ``texts``) and their
    target keys; the first ``n_heldout`` are held out. Returns the report and the projection to
    put in force (None: keep what is in force, which the report then says).

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
    # Training queries first, then the held-out ones, as fit_projection takes the spelling rows.
    ordered = np.concatenate([raw[n_heldout:], raw[:n_heldout]])
    best_meaning = best_meaning_of(store, ordered, keys, store.projection)
    spelling = spelling_inputs(store, texts[n_heldout:] + texts[:n_heldout], best_meaning)

    def reread_heldout(projection: np.ndarray) -> SpellingInputs | None:
        # rule-8 reads each query's best meaning, which the learned projection moves: the
        # held-out accuracy after the fit is judged with the terms a lookup will then use.
        best = best_meaning_of(store, raw[:n_heldout], keys, projection)
        return spelling_inputs(store, texts[:n_heldout], best)

    learned = fit_projection(
        raw[n_heldout:],
        target_positions[n_heldout:],
        raw[:n_heldout],
        target_positions[:n_heldout],
        keys,
        store.config.similarity,
        temperature,
        initial=store.projection,
        spelling=spelling,
        reread_heldout=reread_heldout if store.config.combination.reads_meaning else None,
        max_steps=max_steps,
        learning_rate=learning_rate,
        regularization=regularization,
        patience=patience,
        seed=seed,
    )
    # A fit whose best is its starting point learned nothing: keeping it would only write back
    # float32 round trips of what is in force (a default temperature made explicit).
    kept = learned.improved and learned.accuracy_after >= learned.accuracy_before
    config = store.config
    report = FitReport(
        accuracy_before=learned.accuracy_before,
        accuracy_after=learned.accuracy_after if kept else learned.accuracy_before,
        steps=learned.steps,
        temperature=learned.temperature if kept else temperature,
        kept=kept,
        n_train=len(targets) - n_heldout,
        n_heldout=n_heldout,
        lexical=learned.lexical if kept and spelling else config.lexical,
        lexical_known=(
            learned.known
            if kept and spelling and spelling.known_gain is not None
            else config.lexical_known
        ),
    )
    return report, learned.weight.astype(np.float32) if kept else None


@dataclass(frozen=True)
class Learned:
    """What ``fit_projection`` found, and the held-out accuracy before and after;
    ``improved``: whether any step lowered the held-out loss below that of what was in force
    (else what it found is where it started: every step did worse, or diverged to a NaN
    loss)."""

    weight: np.ndarray
    temperature: float
    lexical: float
    known: float
    steps: int
    accuracy_before: float
    accuracy_after: float
    improved: bool


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
    spelling: SpellingInputs | None = None,
    reread_heldout: Callable[[np.ndarray], SpellingInputs | None] | None = None,
    max_steps: int,
    learning_rate: float,
    regularization: float,
    patience: int,
    seed: int,
) -> Learned:
    """Learn W_q (from ``initial``, or the identity, and pulled back towards the identity), T
    and, with ``spelling`` (its rows: the training queries, then the held-out ones, as
    ``train_queries`` and ``heldout_queries`` are), log(lexical) and logit(lexical_known), by
    minimising the cross-entropy of attention on each query's target key; early stopping on the
    held-out loss. ``reread_heldout`` (``rule-8``, whose spelling rows depend on the projection
    through each query's best meaning): the held-out rows under the learned projection, on which
    the accuracy after is judged (the optimiser sees the rows fixed).

    ``keys`` are prepared key vectors; targets index into them.
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
    # The spelling weights as unconstrained numbers: lexical > 0, 0 < known < 1.
    lexical = spelling.lexical if spelling else 0.0
    known = float(np.clip(spelling.known, 1e-4, 1 - 1e-4)) if spelling else 0.5
    learns_known = spelling is not None and spelling.known_gain is not None
    log_lexical = torch.tensor(
        float(np.log(max(lexical, 1e-12))), requires_grad=spelling is not None
    )
    logit_known = torch.tensor(float(np.log(known / (1 - known))), requires_grad=learns_known)
    n_train = len(train_queries)

    def spelling_part(
        rows: slice, inputs: SpellingInputs | None = spelling
    ) -> tuple[torch.Tensor, ...] | None:
        if inputs is None:
            return None
        known_gain = inputs.known_gain
        return (
            torch.from_numpy(inputs.factor[rows]),
            torch.from_numpy(np.ascontiguousarray(inputs.gain[rows])),
            torch.from_numpy(
                np.ascontiguousarray(
                    known_gain[rows] if known_gain is not None else np.zeros_like(inputs.gain[rows])
                )
            ),
        )

    data = {
        "train": (
            torch.from_numpy(train_queries.astype(np.float32)),
            torch.from_numpy(train_targets),
            spelling_part(slice(None, n_train)) if spelling else None,
        ),
        "heldout": (
            torch.from_numpy(heldout_queries.astype(np.float32)),
            torch.from_numpy(heldout_targets),
            spelling_part(slice(n_train, None)) if spelling else None,
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
        part: str, w: torch.Tensor, t: torch.Tensor, lex: torch.Tensor, kn: torch.Tensor
    ) -> tuple[torch.Tensor, float]:
        queries, targets, spelled = data[part]
        s = scores(queries, w)
        if spelled is not None:
            factor, gain, known_gain = spelled
            s = combined_in_torch(s, factor, gain, known_gain, lex.exp(), torch.sigmoid(kn))
        loss = torch.nn.functional.cross_entropy(s / t, targets)
        return loss, float((s.argmax(dim=1) == targets).float().mean())

    def snapshot(loss: float) -> tuple[float, torch.Tensor, float, torch.Tensor, torch.Tensor]:
        return (
            loss,
            weight.detach().clone(),
            log_t.detach().exp().item(),
            log_lexical.detach().clone(),
            logit_known.detach().clone(),
        )

    with torch.no_grad():
        loss_before, accuracy_before = loss_and_accuracy(
            "heldout", start, torch.tensor(temperature), log_lexical, logit_known
        )
    parameters = [weight, log_t] + ([log_lexical] if spelling else [])
    parameters += [logit_known] if learns_known else []
    optimizer = torch.optim.Adam(parameters, lr=learning_rate)
    # The point to beat is what is in force (the weights start there): a step that raised the
    # held-out loss above it was kept as the best one when the best began at infinity.
    best = snapshot(float(loss_before))
    since_best, steps = 0, 0
    for steps in range(1, max_steps + 1):  # noqa: B007 - the last value is reported
        optimizer.zero_grad()
        train_loss, _ = loss_and_accuracy("train", weight, log_t.exp(), log_lexical, logit_known)
        objective = train_loss + regularization * ((weight - identity) ** 2).sum()
        objective.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        with torch.no_grad():
            heldout_loss, _ = loss_and_accuracy(
                "heldout", weight, log_t.exp(), log_lexical, logit_known
            )
        if float(heldout_loss) < best[0] - 1e-6:
            best = snapshot(float(heldout_loss))
            since_best = 0
        else:
            since_best += 1
            if since_best >= patience:
                break
    best_loss, best_weight, best_t, best_lexical, best_known = best
    if reread_heldout is not None and spelling is not None:
        queries, targets, _ = data["heldout"]
        reread = spelling_part(slice(None), reread_heldout(best_weight.numpy()))
        data["heldout"] = (queries, targets, reread)
    with torch.no_grad():
        _, accuracy_after = loss_and_accuracy(
            "heldout", best_weight, torch.tensor(best_t), best_lexical, best_known
        )
    return Learned(
        weight=best_weight.numpy(),
        temperature=best_t,
        # Within the option's range (a store keeps at most 1000).
        lexical=min(float(best_lexical.exp()), 1000.0) if spelling else 0.0,
        known=float(torch.sigmoid(best_known)) if learns_known else 0.0,
        steps=steps,
        accuracy_before=accuracy_before,
        accuracy_after=accuracy_after,
        improved=best_loss < float(loss_before),
    )
