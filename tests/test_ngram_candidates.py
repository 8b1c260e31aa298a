"""The spelling channel's 3-gram postings (``spelling.ngrams``) against their formula written
naively: a row's score is the sum of the inverse document frequencies of the query's 3-grams it
holds, over the square root of its own 3-gram count plus one; the best ``pool`` rows that share
a 3-gram are proposed, best first. Keys are wordfreq's English words."""

from __future__ import annotations

import numpy as np
import pytest
from _support import assert_close

from softdict.spelling.ngrams import NgramCandidates


@pytest.fixture(scope="module")
def forms() -> list[str]:
    from wordfreq import top_n_list

    return [word for word in top_n_list("en", 4000) if word.isalpha()][:3000]


def naive_scores(forms: list[str], merged: int, query: str) -> dict[int, float]:
    """Every row sharing a 3-gram with ``query``: its score, pair by pair. The idf is that of
    the first ``merged`` rows (those in the postings), stored as float32; a row added after
    them weighs a 3-gram no merged row holds as the rarest there could be, log(merged + 1)."""
    grams = NgramCandidates().grams
    keys = [set(grams([form]).indices.tolist()) for form in forms]
    query_grams = set(grams([query]).indices.tolist())
    frequency: dict[int, int] = {}
    for row_grams in keys[:merged]:
        for gram in row_grams:
            frequency[gram] = frequency.get(gram, 0) + 1

    def idf(gram: int) -> float:
        if gram not in frequency:
            return float(np.log(merged + 1))
        return float(np.float32(np.log((merged + 1) / (frequency[gram] + 1))))

    scores = {}
    for row, row_grams in enumerate(keys):
        shared = query_grams & row_grams
        if shared:
            scores[row] = sum(idf(gram) for gram in shared) / np.sqrt(len(row_grams) + 1.0)
    return scores


@pytest.mark.parametrize("pending", [0, 300], ids=["merged", "some rows pending"])
def test_candidates_are_the_best_rows_by_the_naive_score(forms: list[str], pending: int) -> None:
    """Merged rows are read from the postings; rows added after the merge wait in a block that
    is scored directly. Either way the rows proposed are those of best naive score, in order."""
    merged = len(forms) - pending
    candidates = NgramCandidates()
    candidates.add(candidates.grams(forms[:merged]))
    candidates.maintain(force=True)
    if pending:
        candidates.add(candidates.grams(forms[merged:]))
    assert candidates.merge_due() is False  # the pending rows are scored where they wait
    for query in ["goverment", "restaurnt", "teh", "informaton", "thier", "zzqx"]:
        naive = naive_scores(forms, merged, query)
        for pool in (8, 50, 10_000):
            found = candidates.search([query], pool, None)[0]
            expected = sorted(naive.values(), reverse=True)[:pool]
            assert len(found) == len(expected)
            assert_close([naive[int(row)] for row in found], expected)


def test_a_3_gram_every_row_holds_still_proposes_its_rows() -> None:
    """A 3-gram that every row holds has an idf of 0: a row sharing only it scores 0 and is
    still proposed, after every row that scores more."""
    candidates = NgramCandidates()
    candidates.add(candidates.grams(["ab", "ab", "abc"]))
    candidates.maintain(force=True)
    # "ab" shares "ab " with the first two rows; "abc" shares only " ab", which all hold.
    assert candidates.search(["ab"], 10, None)[0].tolist() == [0, 1, 2]


def test_rows_by_first_character_stay_in_step_through_appends_and_compaction(
    forms: list[str],
) -> None:
    """``spelling.marked.RowsByFirst``: the rows of each first character, as a scan of the
    column finds them, while rows are appended past the share that sorts them again, and after
    a compaction (``reset``) leaves other rows in other places."""
    from softdict.spelling.marked import RowsByFirst

    by_first = RowsByFirst()
    codes = np.array([ord(form[0]) for form in forms * 4], dtype=np.int32)  # 12,000 rows
    letters = [*sorted(set(codes.tolist()))[:6], ord("~")]  # "~" begins no row
    for size in (10, 4000, 5000, 9000, 12_000):  # some waiting rows, some sorted again
        first = codes[:size]
        for code in letters:
            assert np.array_equal(by_first.rows(first, code), np.flatnonzero(first == code))
    kept = np.flatnonzero(np.arange(len(codes)) % 3 != 0)  # a compaction keeps 2/3 of the rows
    by_first.reset()
    for code in letters:
        assert np.array_equal(by_first.rows(codes[kept], code), np.flatnonzero(codes[kept] == code))
