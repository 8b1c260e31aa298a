"""``rule-8``: a short query (a code's length) is read as a code as far as it is no common word,
or as far as no key the lookup may attend to means it (its best cosine, ``UNSURE_MEANING``).

The store is real: pycountry's names of the 184 languages that have a two-letter code, and
the queries their ISO 639-2 codes, which people type in lower case. Under ``rule-7`` a code that
is also a common English word ("nor", "hat") was answered by meaning, which knows nothing of it,
and a lower-case code that is none ("arg") got a tenth of the marks' weight a code in capitals
gets.
"""

from __future__ import annotations

import numpy as np
import pycountry
import pytest
from _support import FakeEncoder, assert_close

from softdict import SoftDict
from softdict._similarity import Similarity, metric_scores
from softdict.spelling.combination import (
    UNSURE_MEANING,
    read_as_code,
    typed_as_code,
    unsure_of_meaning,
)
from softdict.spelling.evidence import DESCRIPTION, describe_strict_short

LANGUAGES = sorted(lang.name for lang in pycountry.languages if hasattr(lang, "alpha_2"))
# (ISO 639-2 code, its language): two common English words, and a code that is no word.
CODES = [("nor", "Norwegian"), ("hat", "Haitian"), ("arg", "Aragonese")]
UNKNOWN, SHORT, CAPITALS = (DESCRIPTION.index(p) for p in ("unknown share", "short", "capitals"))


@pytest.fixture(scope="module")
def languages(bundled_encoder) -> SoftDict:  # type: ignore[no-untyped-def]
    return SoftDict(dict.fromkeys(LANGUAGES, 0.0), encoder=bundled_encoder, combination="rule-8")


@pytest.mark.integration
def test_a_short_code_no_key_means_finds_its_language(languages: SoftDict) -> None:
    """Each code finds its language under rule-8, where rule-7 (the same store) found another;
    the spelling weight it reports is a code's, not a common word's."""
    before = languages.copy()
    before.combination = "rule-7"
    for code, language in CODES:
        assert languages.nearest(code, 1)[0][0] == language
        assert before.nearest(code, 1)[0][0] != language
    nor, nor_before = languages.attend("nor"), before.attend("nor")
    low, high = UNSURE_MEANING
    unsure = (high - nor.meaning_scores.max()) / (high - low)
    assert 0.5 < unsure < 1  # its best cosine is 0.31 (Akan)
    assert nor.spelling_weight == pytest.approx(4.0 * (1 / 16 + 15 / 16 * unsure))
    assert nor_before.spelling_weight == pytest.approx(4.0 / 16)


@pytest.mark.integration
def test_a_short_word_a_key_means_keeps_its_meaning(languages: SoftDict) -> None:
    """Where a key means the short word ("cap" for "hat", "kitten" for "cat"), meaning answers
    as under rule-7; masked out, the word reads as a code again: the best cosine is over the
    keys the lookup may attend to, and a masked lookup is that of a store of those keys."""
    sd = languages.copy()
    sd.update({"cap": 0.0, "kitten": 0.0})
    assert sd.nearest("hat", 1)[0][0] == "cap"
    assert sd.nearest("cat", 1)[0][0] == "kitten"
    assert sd.attend("hat").spelling_weight == pytest.approx(0.25)
    masked = sd.attend("hat", mask=lambda key: key not in ("cap", "kitten"))
    alone = languages.attend("hat")
    assert masked.keys[0] == alone.keys[0] == "Haitian"
    assert masked.spelling_weight == pytest.approx(alone.spelling_weight)
    assert_close(masked.weights[:5], alone.weights[:5], atol=1e-6)


@pytest.mark.integration
def test_the_union_of_candidates_reads_meaning_as_the_scan_does(
    languages: SoftDict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the exact size (here forced) a lookup reads each short query's best meaning from a
    search of the index before choosing its spelling candidates: the same best keys and
    spelling weights as the scan of every key."""
    from softdict import _retrieval
    from softdict.spelling import fusion

    codes = [code for code, _ in CODES]
    scanned = languages.attend(codes)
    read = []
    monkeypatch.setattr(_retrieval, "scores_every_key", lambda capabilities, n_allowed: False)
    monkeypatch.setattr(_retrieval, "scans_every_key", lambda *args: False)
    monkeypatch.setattr(
        _retrieval, "with_best_meaning", lambda *a: read.append(a) or fusion.with_best_meaning(*a)
    )
    unioned = languages.attend(codes)
    assert read, "the union path was not taken"
    for union, scan in zip(unioned, scanned):
        assert union.keys[0] == scan.keys[0]
        assert union.spelling_weight == pytest.approx(scan.spelling_weight)


def test_unsure_of_meaning_follows_its_formula() -> None:
    """The unknown share of a query typed as a code rises from 0 at the second cosine to 1 at
    the first, in proportion between, and the capitals part follows it; a query not typed as a
    code (too long, or a name's capital and small letters), a query already of unknown words
    and a query with no key to attend to (-inf) are left as they are."""
    low, high = UNSURE_MEANING
    word = describe_strict_short("nor")
    assert word[SHORT] == 1 and word[UNKNOWN] == 0 and word[CAPITALS] == 0
    assert typed_as_code("nor") and typed_as_code("NOR") and not typed_as_code("Nor")
    x = np.stack([word] * 5)
    best = np.array([high, (low + high) / 2, low, low - 0.2, -np.inf])
    read = unsure_of_meaning(x, np.ones(5, dtype=bool), best)
    assert_close(read[:, UNKNOWN], [0.0, 0.5, 1.0, 1.0, 0.0])
    assert_close(read[:, CAPITALS], read[:, UNKNOWN])
    assert (unsure_of_meaning(x, np.zeros(5, dtype=bool), best) == x).all()
    long = describe_strict_short("Norway")
    assert not typed_as_code("norway")
    assert (unsure_of_meaning(long[None], np.array([False]), np.array([0.0]))[0] == long).all()
    unknown = describe_strict_short("xqz")
    assert unknown[UNKNOWN] == 1 and unknown[CAPITALS] == 0
    assert read_as_code(unknown[None], np.array([True]))[0, CAPITALS] == 1


@pytest.mark.integration
def test_a_short_name_typed_with_a_capital_is_no_code(bundled_encoder) -> None:  # type: ignore[no-untyped-def]
    """A short query typed as a name is ("Qql", two typos of "Qala") keeps rule-7's terms: read
    as a code, its letters in order pointed at a longer name ("Qalqilya")."""
    names = sorted({s.name for s in pycountry.subdivisions})
    sd = SoftDict(dict.fromkeys(names, 0.0), encoder=bundled_encoder)
    before = sd.copy()
    before.combination = "rule-7"
    for query in ("Qql", "Lpl"):
        now, then = sd.attend(query), before.attend(query)
        assert now.keys[0] == then.keys[0]
        assert now.spelling_weight == then.spelling_weight
        assert_close(now.scores[:5], then.scores[:5])


@pytest.mark.parametrize("similarity", list(Similarity))
def test_scores_read_as_cosines_in_every_similarity(similarity: Similarity) -> None:
    """``Similarity.as_cosine`` undoes each similarity's scale on unit-norm embeddings (l2:
    -|q-k|^2 = 2·cos - 2), so rule-8 compares the same cosines whatever the store's."""
    vectors = FakeEncoder().encode(["nor", "Norwegian", "Haitian", "Akan"]).astype(np.float64)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    dim = unit.shape[1]
    cosines = unit[:1] @ unit[1:].T
    queries, keys = similarity.prepare_queries(unit[:1]), similarity.prepare_keys(unit[1:])
    scores = metric_scores(queries, keys, similarity.metric)
    assert_close(similarity.as_cosine(scores, dim), cosines, atol=1e-6)


def test_a_store_named_rule_7_answers_as_before() -> None:
    """rule-8 is its own name: a store of rule-7 (the default when it was made) keeps rule-7's
    reading of a short common word whatever its meaning, and rule-8's differs where it counts."""
    words = ["Norwegian", "North Ndebele", "Akan", "Haitian"]
    rule_7 = SoftDict(dict.fromkeys(words, 0.0), encoder=FakeEncoder(), combination="rule-7")
    rule_8 = SoftDict(dict.fromkeys(words, 0.0), encoder=FakeEncoder(), combination="rule-8")
    assert rule_7.attend("nor").spelling_weight == pytest.approx(0.25)
    assert rule_8.attend("nor").spelling_weight > 0.25


def test_calibrate_reads_each_keys_best_meaning_over_the_other_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """calibrate predicts each key from the others, its text as the query: under rule-8 the
    best meaning it reads is over the other keys (the key itself, a cosine of 1, is left out),
    computed here naively from the encoder's vectors."""
    from softdict.spelling.terms import QueryTerms

    keys = ["nor", "hat", "arg", "cat", "dog", "sun", "Norwegian", "Haitian", "Aragonese"]
    sd = SoftDict(
        {key: float(len(key)) for key in keys}, encoder=FakeEncoder(), combination="rule-8"
    )
    read: list[np.ndarray] = []
    given_meaning = QueryTerms.given_meaning

    def spy(terms: QueryTerms, best: np.ndarray) -> QueryTerms:
        read.append(np.asarray(best, dtype=np.float64).copy())
        return given_meaning(terms, best)

    monkeypatch.setattr(QueryTerms, "given_meaning", spy)
    sd.calibrate()
    vectors = FakeEncoder().encode(keys).astype(np.float64)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = unit @ unit.T
    np.fill_diagonal(cosines, -np.inf)
    assert read, "calibrate read no best meaning"
    assert_close(read[0], cosines.max(axis=1), atol=1e-6)


@pytest.mark.integration
def test_fit_reports_the_held_out_accuracy_the_store_then_has(bundled_encoder) -> None:  # type: ignore[no-untyped-def]
    """rule-8's terms read each query's best meaning, which the learned projection moves: fit
    judges (and reports) the held-out accuracy after it with the terms a lookup then uses. With
    the terms of the projection before the fit it reported 0.700 where lookups gave 0.767 (a
    review's probe, these pairs): ISO 639 codes to their languages."""
    from softdict._learning import examples_from, heldout_first

    langs = [lang for lang in pycountry.languages if hasattr(lang, "alpha_2")]
    pairs = [(lang.alpha_3, lang.name) for lang in langs][:80]
    pairs += [(lang.alpha_2, lang.name) for lang in langs][:40]
    examples, n_heldout = heldout_first(examples_from(pairs), 0.25, 0)
    held = examples[:n_heldout]
    for combination in ("rule-7", "rule-8"):
        sd = SoftDict(
            dict.fromkeys(LANGUAGES, 0.0), encoder=bundled_encoder, combination=combination
        )
        before = sum(sd.nearest(q, 1)[0][0] == t for q, t in held) / n_heldout
        report = sd.fit(pairs, heldout=0.25, max_steps=60)
        after = sum(sd.nearest(q, 1)[0][0] == t for q, t in held) / n_heldout
        assert report.accuracy_before == pytest.approx(before)
        assert report.accuracy_after == pytest.approx(after)
