"""``rule-7``: a query typed without accents prefers, of keys spelled alike but for accents, the
one spelled as typed, whatever the keys' order; and it stays a tie-break.

The twins are real: pycountry's subdivision names whose spelling forms are equal and whose
texts differ by accents ("Beja" and "Béja", "Para" and "Pará"). The bundled encoder strips
accents, so both channels tied such twins under ``rule-6``, and the keys' order chose.
"""

from __future__ import annotations

import collections

import numpy as np
import pycountry
import pytest
from _support import close, naive_spelling

from softdict import SoftDict
from softdict.spelling import spelling_form
from softdict.spelling.scores import AS_TYPED

pytestmark = pytest.mark.integration


def _subdivisions() -> tuple[list[tuple[str, str]], list[str]]:
    """(plain, accented) twins among pycountry's subdivision names, and the other names."""
    names = sorted({s.name for s in pycountry.subdivisions})
    by_form = collections.defaultdict(list)
    for name in names:
        by_form[spelling_form(name)].append(name)
    twins = []
    for group in by_form.values():
        plain = [name for name in group if name.isascii()]
        accented = [name for name in group if not name.isascii()]
        if len(group) == 2 and len(plain) == 1 and len(accented) == 1:
            twins.append((plain[0], accented[0]))
    others = [group[0] for group in by_form.values() if len(group) == 1]
    return twins, others


@pytest.fixture(scope="module")
def twins_and_others() -> tuple[list[tuple[str, str]], list[str]]:
    return _subdivisions()


@pytest.mark.parametrize("accented_first", [True, False])
def test_a_key_typed_as_it_is_finds_itself_beside_its_accented_twin(
    bundled_encoder, twins_and_others, accented_first: bool
) -> None:
    twins, others = twins_and_others
    assert len(twins) >= 5, twins  # Beja, Huila, La Union, Para, Ruse, Tabor
    keys = [name for pair in twins for name in (pair[::-1] if accented_first else pair)]
    keys += others[::25]
    sd = SoftDict(dict.fromkeys(keys, 1.0), encoder=bundled_encoder)
    assert sd.combination == "rule-8"  # the default: rule-7 with short codes
    before = sd.copy()
    before.combination = "rule-6"
    for plain, accented in twins:
        assert sd.nearest(plain, 1)[0][0] == plain
        assert sd.nearest(accented, 1)[0][0] == accented
        # Under rule-6 both channels tie the twins: the first inserted came first.
        first = accented if accented_first else plain
        assert before.nearest(plain, 1)[0][0] == first
        # A tie-break: the twins keep almost equal weights.
        attention = sd.attend(plain)
        weights = dict(zip(attention.keys, attention.weights))
        assert weights[plain] > weights[accented] > 0.45


def test_the_spelling_of_an_accented_key_is_what_the_naive_statement_says(
    bundled_encoder,
) -> None:
    """A query typed without accents spells a key that bears some ``AS_TYPED`` lower (at least
    0), and a key that bears none as the forms say; one typed with accents as ``rule-4`` did."""
    keys = ["Béja", "Beja", "Tábor", "Tabor", "Pará", "Ruse"]
    sd = SoftDict(dict.fromkeys(keys, 1.0), encoder=bundled_encoder)
    for query in ("Beja", "Tabr", "Pará", "Ruše", "xyz"):
        attention = sd.attend(query)
        spelled = dict(zip(attention.keys, attention.spelling_scores))
        for key in keys:
            expected = naive_spelling(query, key, accents=True, sort_edits=True, as_typed=True)
            if not np.isnan(spelled[key]):  # a key that spelling could not lift is not spelled
                assert spelled[key] == close(expected), (query, key)
    spelled = dict(zip(sd.attend("Beja").keys, sd.attend("Beja").spelling_scores))
    assert spelled["Beja"] == 1.0 and spelled["Béja"] == close(1.0 - AS_TYPED)
    assert naive_spelling("Beja", "Béja", accents=True) == 1.0  # rule-6 ties the twins


def test_a_query_typed_without_accents_still_finds_the_accented_key(
    bundled_encoder, twins_and_others
) -> None:
    """Whoever leaves the accents out finds what rule-6 found: of pycountry's subdivision names
    that bear accents and have no twin, typed without them, every one ranks where it did."""
    _, others = twins_and_others
    accented = [name for name in others if not name.isascii()][::4]
    keys = accented + [name for name in others if name.isascii()][::10]
    sd = SoftDict(dict.fromkeys(keys, 1.0), encoder=bundled_encoder)
    before = sd.copy()
    before.combination = "rule-6"
    queries = [spelling_form(name).title() for name in accented]
    assert len(queries) >= 100
    now = [found[0][0] for found in sd.nearest(queries, 1)]
    then = [found[0][0] for found in before.nearest(queries, 1)]
    assert now == then
    assert sum(found == name for found, name in zip(now, accented)) >= 0.9 * len(accented)
