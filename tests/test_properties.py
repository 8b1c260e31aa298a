"""Property tests: a SoftDict is a dict under any sequence of operations, and attention stays
a convex blend: finite weights summing to 1, values between the stored extremes."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pycountry
from _support import (
    COMBINATIONS,
    FLOAT32_RTOL,
    FakeEncoder,
    assert_close,
    library_measures,
    naive_combined,
    naive_marks,
    naive_spelling,
    same_value,
    spelling_reads,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from softdict import SoftDict, SoftDictError

keys = st.sampled_from(
    [f"{a} {b}" for a in ("red", "old", "big") for b in ("apple", "chair", "car")]
)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


class DictMachine(RuleBasedStateMachine):
    """Random set / delete / update / save+load against a plain dict."""

    def __init__(self) -> None:
        super().__init__()
        self.sd = SoftDict(encoder=FakeEncoder(), temperature=0.5)
        self.model: dict[str, float] = {}
        self.tmp = tempfile.TemporaryDirectory()

    def teardown(self) -> None:
        self.tmp.cleanup()

    @rule(key=keys, value=finite)
    def set(self, key: str, value: float) -> None:
        self.sd[key] = value
        self.model[key] = value

    @rule(key=keys)
    def delete(self, key: str) -> None:
        if key in self.model:
            del self.sd[key]
            del self.model[key]
        else:
            try:
                del self.sd[key]
            except KeyError:
                pass
            else:
                raise AssertionError("deleting an absent key must raise KeyError")

    @rule(items=st.lists(st.tuples(keys, finite), max_size=5))
    def update(self, items: list[tuple[str, float]]) -> None:
        self.sd.update(items)
        self.model.update(items)

    @rule()
    def save_and_load(self) -> None:
        path = Path(self.tmp.name) / "store"
        self.sd.save(path)
        self.sd = SoftDict.load(path, encoder=FakeEncoder())

    @invariant()
    def behaves_like_the_dict(self) -> None:
        assert list(self.sd) == list(self.model)
        assert all(same_value(self.sd[k], v) for k, v in self.model.items())

    @invariant()
    def attention_is_a_convex_blend(self) -> None:
        if not self.model:
            return
        attention = self.sd.attend("red apple")
        assert np.all(np.isfinite(attention.weights)) and np.all(attention.weights >= 0)
        assert math.isclose(attention.weights.sum(), 1.0, rel_tol=1e-9)
        low, high = min(self.model.values()), max(self.model.values())
        assert (
            low - 1e-6 * max(1.0, abs(low)) <= attention.value <= high + 1e-6 * max(1.0, abs(high))
        )


DictMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=15, deadline=None)
TestDictMachine = DictMachine.TestCase


@settings(max_examples=60, deadline=None)
@given(
    vectors=st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=8),
    temperature=st.floats(min_value=1e-6, max_value=1e3),
    query=st.sampled_from(["red", "apple chair", "zzz", ""]),
)
def test_vector_blend_lies_in_the_convex_hull(vectors, temperature, query) -> None:
    names = [f"key {i} {w}" for i, w in enumerate(["red", "apple", "chair", "car"] * 2)][
        : len(vectors)
    ]
    sd = SoftDict(dict(zip(names, vectors)), encoder=FakeEncoder(), temperature=temperature)
    value = sd.lookup(query)
    stored = np.array(vectors)
    slack = 1e-9 * np.maximum(1.0, np.abs(stored).max(axis=0))
    assert np.all(value >= stored.min(axis=0) - slack) and np.all(
        value <= stored.max(axis=0) + slack
    )


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.floats(min_value=-1e300, max_value=1e300), min_size=1, max_size=20),
    temperature=st.floats(min_value=1e-300, max_value=1e300),
)
def test_softmax_weights_are_always_finite_and_sum_to_one(scores, temperature) -> None:
    from softdict._attention import softmax

    weights = softmax(np.array([scores]), temperature)
    assert np.all(np.isfinite(weights)) and np.all(weights >= 0)
    assert math.isclose(weights.sum(), 1.0, rel_tol=1e-9)


HOSTILE_TEXT = st.one_of(
    st.text(max_size=50),  # every plane of unicode, control characters, empty strings
    st.text(min_size=2000, max_size=5000),
    st.sampled_from(["", " ", "\x00", "\n\t\r", "\ud7ff", "🦄" * 300, "a" * 20000]),
    # Lone surrogates, which st.text() never makes: not valid Unicode, refused everywhere.
    st.sampled_from(["bad\udce9", "\ud800", "x\udfffy"]),
)
HOSTILE_VALUE = st.one_of(
    st.floats(),
    st.integers(),
    st.just(1e308),
    st.just(5e-324),
    st.text(max_size=5),
    st.lists(st.floats(), max_size=4),
    st.none(),
    st.booleans(),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
    st.just(np.ones((2, 2))),
    st.binary(max_size=4),
)


@settings(max_examples=150, deadline=None)
@given(
    key=st.one_of(HOSTILE_TEXT, st.integers(), st.none()),
    value=HOSTILE_VALUE,
    query=st.one_of(HOSTILE_TEXT, st.lists(HOSTILE_TEXT, max_size=3), st.integers()),
    k=st.integers(min_value=-2, max_value=10**6),
    min_score=st.one_of(st.none(), st.floats()),
)
def test_hostile_input_gets_a_result_or_a_softdict_error(key, value, query, k, min_score) -> None:
    """Whatever comes in, each call returns or raises a SoftDictError; a failed call changes
    nothing, and a write that succeeds stores exactly the value given (a scalar store takes
    only finite numbers it can hold exactly)."""
    sd = SoftDict({"red apple": 1.0, "old chair": 2.0, "fast car": 3.0}, encoder=FakeEncoder())
    expected = dict(sd.items())
    for writes, operation in (
        (True, lambda: sd.__setitem__(key, value)),
        (True, lambda: sd.update([(key, value)])),
        (False, lambda: sd.lookup(query, min_score=min_score, default=None)),
        (False, lambda: sd.attend(query)),
        (False, lambda: sd.nearest(query, k=k)),
    ):
        try:
            operation()
        except SoftDictError:
            pass  # the store must be as it was: checked below
        else:
            if writes:
                assert sd[key] == value and type(sd[key]) is type(value)
                expected[key] = value
        assert dict(sd.items()) == expected


CELL = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", '"', '""', ",", "\n", "\r\n", "\f", "\u2028", "\x00", "1", "-2.5", "1e400"]
    ),
)


@settings(max_examples=80, deadline=None)
@given(
    header=st.lists(st.sampled_from(["kind", "", "name,x", "price"]), max_size=2).map(
        lambda extra: ["name", "price", *extra]
    ),
    rows=st.lists(st.lists(CELL, min_size=1, max_size=4), min_size=1, max_size=6),
    fmt=st.sampled_from(["csv", "json", "jsonl"]),
    extra=st.sampled_from([[], ["--skip-bad-rows"], ["--on-duplicate", "error"]]),
)
def test_any_table_builds_or_fails_with_a_clear_error(header, rows, fmt, extra) -> None:
    """Whatever a table holds, `softdict build` exits 0, or 1 with a one-line softdict error:
    never a traceback, never an internal error."""
    import contextlib
    import csv
    import io
    import json

    from softdict._cli import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t.{fmt}"
        if fmt == "csv":
            buffer = io.StringIO(newline="")
            csv.writer(buffer).writerows([header, *rows])
            path.write_text(buffer.getvalue(), encoding="utf-8", errors="surrogatepass")
        else:
            objects = [dict(zip(header, row)) for row in rows]
            text = json.dumps(objects) if fmt == "json" else "\n".join(map(json.dumps, objects))
            path.write_text(text, encoding="utf-8")
        err = io.StringIO()
        args = ["build", str(path), "--key", "name", "--value", "price", "-o", f"{tmp}/s"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main([*args, "--encoder", "test-hashing", *extra])
        message = err.getvalue()
        assert code in (0, 1)
        if code == 1:
            assert message.startswith("softdict: error:") and "internal error" not in message


# -- spelling scored where it can matter (softdict.spelling.bounds, .bounded) -----------------

# Letters, digits, the space, accented and non-Latin letters, punctuation: what people type.
_TYPED = st.text(alphabet="aabeinorstuyz AEGR19éüßİ日本-'.", max_size=14)


@given(query=_TYPED, keys=st.lists(_TYPED, min_size=1, max_size=12))
@settings(max_examples=300, deadline=None)
def test_the_character_count_ceiling_bounds_the_spelling_similarity(
    query: str, keys: list[str]
) -> None:
    from softdict.spelling import spelling_form
    from softdict.spelling.bounds import (
        ceiling_and_could,
        character_counts,
        could_mark,
        several_words,
        similarity_ceiling,
    )
    from softdict.spelling.evidence import may_bear_marks

    forms = [spelling_form(key) for key in keys]
    query_form = spelling_form(query)
    query_counts, key_counts = character_counts([query_form])[0], character_counts(forms).T
    lengths = np.array([len(form) for form in forms], dtype=np.float32)
    ceiling = similarity_ceiling(query_counts, len(query_form), key_counts, lengths)
    exact = np.array([naive_spelling(query, key) for key in keys])
    # A query that bore accents, under rule-4: the mean with the measure on accented forms; and
    # under rule-6, OSA on sorted words too.
    for accents, sort_edits in ((True, False), (False, True), (True, True)):
        found = [naive_spelling(query, key, accents, sort_edits) for key in keys]
        exact = np.maximum(exact, found)
    # Both from one gather are each alone; only a key that could bear a mark bears one.
    both, could = ceiling_and_could(query_counts, len(query_form), key_counts, lengths)
    np.testing.assert_array_equal(both, ceiling)
    assert could is not None
    np.testing.assert_array_equal(could, could_mark(query_counts, key_counts))
    rows = np.arange(len(keys))[::-1]
    part, part_could = ceiling_and_could(
        query_counts, len(query_form), key_counts, lengths[rows], rows
    )
    np.testing.assert_array_equal(part, ceiling[rows])
    np.testing.assert_array_equal(part_could, could[rows])
    marked = np.array([any(naive_marks(query, key)) for key in keys])
    assert np.all(could[marked]), (query_form, forms)
    # And only a key that begins with the query's first character, or has several words.
    first = np.array([ord(form[0]) if form else -1 for form in forms])
    begins_or_spaced = may_bear_marks(query_form, first, several_words(key_counts))
    assert np.all(begins_or_spaced[marked]), (query_form, forms)
    # A few forms are counted in Python, many in numpy: the same counts.
    few = character_counts(forms[:8])
    np.testing.assert_array_equal(few, character_counts(forms[:8] * 9)[: len(few)])
    assert np.all(ceiling >= exact - 1e-6), (query_form, forms, ceiling, exact)  # float32


@given(
    query=st.text(alphabet="aabeen", min_size=255, max_size=400),  # forms as long
    keys=st.lists(st.text(alphabet="abe nz", max_size=300), min_size=1, max_size=6),
)
@settings(max_examples=60, deadline=None)
def test_a_query_past_255_characters_has_a_ceiling_below_1(query: str, keys: list[str]) -> None:
    """Its counts saturate: it was bounded by 1 for every key, so a 100,000-character query had
    rapidfuzz score every key of a store (1.5 s at 10^4 keys). min(|q|, |k|) bounds what it
    shares: still at least the exact similarity, and small for short keys."""
    from softdict.spelling import spelling_form
    from softdict.spelling.bounds import character_counts, similarity_ceiling

    forms = [spelling_form(key) for key in keys]
    query_form = spelling_form(query)
    lengths = np.array([len(form) for form in forms], dtype=np.float32)
    query_counts, key_counts = character_counts([query_form])[0], character_counts(forms).T
    ceiling = similarity_ceiling(query_counts, len(query_form), key_counts, lengths)
    exact = np.array([naive_spelling(query, key) for key in keys])
    assert np.all(ceiling >= exact - 1e-6), (query_form, forms, ceiling, exact)  # float32
    short = lengths <= 10
    assert np.all(ceiling[short] < 0.1), (ceiling, lengths)


# A few words of letters with and without accents, in any order: where an accented word sorts
# after a plain one that its form sorts before ("ávila" after "costa", "avila" before).
_ACCENTED_WORDS = st.lists(
    st.text(alphabet="aábcéozüZ", min_size=1, max_size=4), min_size=1, max_size=3
).map(" ".join)


@given(
    query=st.one_of(_TYPED, _ACCENTED_WORDS),
    keys=st.lists(st.one_of(_TYPED, _ACCENTED_WORDS), min_size=1, max_size=12),
)
@settings(max_examples=300, deadline=None)
def test_accents_read_never_raise_the_spelling_similarity(query: str, keys: list[str]) -> None:
    """Under rule-4 (and rule-6, OSA on sorted words too; rule-7, accents read both ways) a
    query's similarity with a key, accents read, is at most the forms' (the character-count
    ceilings of unspelled keys are computed on the forms), whatever the words' order, and it
    is the naive statement's."""
    for sort_edits, as_typed in ((False, False), (True, False), (True, True)):
        read, plain = library_measures(query, keys, sort_edits, as_typed)
        # Exact, not within a tolerance: each measure is an integer distance over a length, a
        # mean of two float32 values is at most the larger, and rule-7's x - a·(x - y) with
        # 0 <= a < 1 and y <= x is at most x.
        assert np.all(read <= plain), (query, keys, read, plain)
        naive = [
            naive_spelling(query, key, accents=True, sort_edits=sort_edits, as_typed=as_typed)
            for key in keys
        ]
        assert_close(read, naive)
        assert_close(plain, [naive_spelling(query, key, sort_edits=sort_edits) for key in keys])


_NAMES = sorted(c.name for c in pycountry.countries)


def _typo(name: str, position: int, edit: int) -> str:
    """A letter dropped or replaced, the name itself, or the name cut short (what marks)."""
    i = position % max(len(name), 1)
    return [
        name[:i] + name[i + 1 :],
        name[:i] + "x" + name[i + 1 :],
        name[:i] + name[i:],
        name[: i + 2],
    ][edit]


@given(
    picked=st.lists(st.sampled_from(_NAMES), min_size=2, max_size=60, unique=True),
    target=st.integers(0, 10_000),
    position=st.integers(0, 40),
    edit=st.integers(0, 3),
    top_k=st.sampled_from([None, 1, 3]),
    combination=st.sampled_from(COMBINATIONS),
)
@settings(max_examples=80, deadline=None)
def test_spelling_scored_where_it_matters_answers_as_scoring_every_key(
    picked: list[str], target: int, position: int, edit: int, top_k: int | None, combination: str
) -> None:
    """Against every key's exact combined score, computed naively: the same best key (and the
    same k best under top_k), and weights within the reported bound, itself under 1e-4."""
    values = np.arange(len(picked), dtype=float)
    sd = SoftDict(
        dict(zip(picked, values)), encoder=FakeEncoder(), temperature=0.05, top_k=top_k,
        combination=combination,
    )  # fmt: skip
    query = _typo(picked[target % len(picked)], position, edit)
    encoder = FakeEncoder()
    q, K = encoder.encode([query])[0], encoder.encode(picked)
    cosine = K @ q / (np.linalg.norm(K, axis=1) * np.linalg.norm(q) + 1e-300)
    combined = naive_combined(query, picked, cosine, combination)
    attention = sd.attend(query)
    order = np.argsort(-combined, kind="stable")
    ties = np.isclose(combined, combined[order[0]], rtol=0, atol=1e-6)
    assert attention.keys[0] in {picked[i] for i in np.flatnonzero(ties)}
    if top_k is not None:
        k = min(top_k, len(picked))
        kth = combined[order[k - 1]]
        assert {picked[i] for i in order[:k] if combined[i] > kth + 1e-6} <= set(attention.keys)
        return
    assert attention.weight_error <= 1e-4
    column = {key: i for i, key in enumerate(picked)}
    exact = np.exp((combined - combined.max()) / 0.05)
    exact /= exact.sum()
    mine = np.zeros(len(picked))
    mine[[column[key] for key in attention.keys]] = attention.weights
    # Slack for float32: the scores (float32 kernels, ~1e-7 of a cosine, times 1/T) and the
    # exponentials (float32, ``_attention.exponentials``) against this float64 formula.
    assert np.abs(mine - exact).sum() / 2 <= attention.weight_error + FLOAT32_RTOL


_WORDS = st.sampled_from(["sao", "são", "tome", "tomé", "a", "b", "costa", "ávila", "rica", ""])
_NAMES = st.lists(_WORDS, max_size=3).map(" ".join) | _TYPED


@given(
    queries=st.lists(_NAMES, min_size=1, max_size=3),
    keys=st.lists(_NAMES, min_size=1, max_size=10),
    combination=st.sampled_from(["rule-1", "rule-4", "rule-6", "rule-8"]),
)
@example(queries=["sao são"], keys=["são sao", "costa rica"], combination="rule-8")
@settings(max_examples=200, deadline=None)
def test_the_index_spells_every_pair_as_the_naive_measure_does(
    queries: list[str], keys: list[str], combination: str
) -> None:
    """The index scores the token-sorted forms only for the pairs whose query or key sorting
    moves (``KeyForms.reordered``): words in sorted order already ("costa rica"), words repeated
    with and without accents ("sao são"), one word. Every pair, every query by query and paired
    path, is what the naive measure says."""
    from softdict.spelling.index import SpellingIndex
    from softdict.spelling.scores import QueryColumns, paired_similarity
    from softdict.spelling.text import SpellingQueries

    reads = spelling_reads(combination)
    spelled = SpellingQueries.of(
        queries,
        accents=reads["accents"],
        edits_sorted=reads["sort_edits"],
        as_typed=reads["as_typed"],
    )
    index = SpellingIndex()
    ids = np.arange(len(keys))
    index.add(ids, keys)
    expected = np.array([[naive_spelling(q, k, **reads) for k in keys] for q in queries])
    assert_close(index.similarity(spelled, ids), expected)
    reversed_ids = np.tile(ids[::-1], (len(queries), 1))  # the path of one query at a time
    found = index.similarity(spelled, reversed_ids)[:, ::-1]
    assert_close(found, expected)
    rows = np.repeat(np.arange(len(queries)), len(keys))  # every pair side by side
    paired = paired_similarity(
        QueryColumns.of(spelled), rows, index._key_forms(np.tile(ids, len(queries)))
    )
    assert_close(paired.reshape(expected.shape), expected)
