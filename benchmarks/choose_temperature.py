"""Measure which softmax temperature suits the bundled encoder; the default comes from this table.

Run:  python benchmarks/choose_temperature.py [--encoder NAME]

Data (benchmarks/categories.py): 16 categories of real words, 12 members each (192 keys), plus 64
held-out queries that are category names or paraphrases ("something to sit on"). For each
temperature T, with cosine similarity and all-MiniLM-L6-v2:

* queries: each held-out query attends over all 192 members; we score the attention mass that
  lands on the query's own category (log-likelihood and accuracy of the most likely category);
* leave-one-out: each member attends over the other 191; same scores for its own category.

A lookup returns a blend, the weighted average of the stored values, so the default is the T
whose blend is closest to the truth: the lowest mean Brier score, which is the squared error of
the blended one-hot category vector, over both tasks. The table also shows log-likelihood (which
punishes confident mistakes harder and so prefers colder T) and accuracy.

A second table shows what ``calibrate()`` makes of the same store (members -> category labels):
it sees only the 192 stored keys, and is judged on the 64 held-out queries it never saw.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from categories import CATEGORIES

from softdict import Similarity, SoftDict
from softdict._attention import softmax

TEMPERATURES = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5]


def category_mass(
    weights: np.ndarray, member_category: np.ndarray, n_categories: int
) -> np.ndarray:
    """(m, n) key weights -> (m, n_categories) attention mass per category."""
    onehot = np.eye(n_categories)[member_category]
    return weights @ onehot


def score(mass: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    """Mean log-likelihood and Brier score of the true category, and accuracy of the top one."""
    own = mass[np.arange(len(truth)), truth]
    brier = np.sum((mass - np.eye(mass.shape[1])[truth]) ** 2, axis=1)
    return (
        float(np.mean(np.log(np.maximum(own, 1e-300)))),
        float(np.mean(brier)),
        float(np.mean(mass.argmax(1) == truth)),
    )


def main() -> None:
    names = list(CATEGORIES)
    members = [(word, c) for c, name in enumerate(names) for word in CATEGORIES[name]["members"]]
    queries = [(text, c) for c, name in enumerate(names) for text in CATEGORIES[name]["queries"]]
    member_category = np.array([c for _, c in members])
    query_category = np.array([c for _, c in queries])

    # --encoder NAME: another encoder= (e.g. bundled-static) instead of the default.
    name = sys.argv[sys.argv.index("--encoder") + 1] if "--encoder" in sys.argv else None
    sd = SoftDict(encoder=name)
    keys_emb = sd.encoder.encode_keys([w for w, _ in members])
    query_emb = sd.encoder.encode_queries([t for t, _ in queries])
    query_scores = Similarity.COSINE.scores(query_emb, keys_emb)
    loo_scores = Similarity.COSINE.scores(keys_emb, keys_emb)
    np.fill_diagonal(loo_scores, -np.inf)
    seed = SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=sd.encoder)

    print(
        "| T | queries: Brier / log-lik / acc | leave-one-out: Brier / log-lik / acc "
        "| mean Brier | mean log-lik | fruit -> banana / apple / chair |"
    )
    print("|" + "---|" * 6)
    rows = []
    for t in TEMPERATURES:
        q_ll, q_brier, q_acc = score(
            category_mass(softmax(query_scores, t), member_category, len(names)), query_category
        )
        l_ll, l_brier, l_acc = score(
            category_mass(softmax(loo_scores, t), member_category, len(names)), member_category
        )
        seed.temperature = t
        fruit = dict(seed.attend("fruit").top(3))
        rows.append((t, (q_brier + l_brier) / 2, (q_ll + l_ll) / 2))
        print(
            f"| {t} | {q_brier:.3f} / {q_ll:.3f} / {q_acc:.3f} | {l_brier:.3f} / {l_ll:.3f} / "
            f"{l_acc:.3f} | {rows[-1][1]:.3f} | {rows[-1][2]:.3f} | {fruit['banana']:.2f} / "
            f"{fruit['apple']:.2f} / {fruit['chair']:.3f} |"
        )
    by_brier = min(rows, key=lambda row: row[1])
    by_likelihood = max(rows, key=lambda row: row[2])
    print(f"\nlowest mean Brier score (error of the blended value): T = {by_brier[0]}")
    print(f"highest mean log-likelihood: T = {by_likelihood[0]}")
    compare_calibration(sd, members, names, query_emb, query_category)


def compare_calibration(
    sd: SoftDict,
    members: list[tuple[str, int]],
    names: list[str],
    query_emb: np.ndarray,
    query_category: np.ndarray,
) -> None:
    """calibrate() on the member -> category store, judged on the held-out queries."""
    store = SoftDict({word: names[c] for word, c in members}, encoder=sd.encoder)

    def held_out() -> tuple[float, float, float]:
        found = store.attend_embeddings(query_emb)
        mass = np.array([[a.distribution.get(name, 0.0) for name in names] for a in found])
        return score(mass, query_category)

    print("\n| store | T | top_k | held-out queries: Brier / log-lik / acc |")
    print("|" + "---|" * 4)
    for label, calibrate in [
        ("default", None),
        ("calibrate(choose_k=False)", {"choose_k": False}),
        ("calibrate()", {}),
    ]:
        if calibrate is not None:
            store.calibrate(**calibrate)
        ll, brier, acc = held_out()
        print(
            f"| {label} | {store.temperature:.4g} | {store.top_k} | "
            f"{brier:.3f} / {ll:.3f} / {acc:.3f} |"
        )


if __name__ == "__main__":
    main()
