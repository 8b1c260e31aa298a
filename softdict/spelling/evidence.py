"""What people type, read as spelling evidence: a query's description, and exact marks of a key.

A similarity of spelling counts edits; it does not know that "blvd" abbreviates "boulevard",
that "gil" is what a user types before giving up on "gilbert", that "uk" is the initials of
"united kingdom" or that "bl ake" is "blake" with a stray space. Those are exact facts about
the two texts, cheap to check on a pair, and they are marks (``EVIDENCE``), each 0 or 1:

* ``same``: the texts are equal but for spaces, punctuation, case and accents ("bl ake");
* ``start``: the key starts with the query ("gil" -> "gilbert");
* ``word start``: a later word of the key starts with the query ("york" -> "new york");
* ``initials``: the query is the initials of the key's words ("uk" -> "united kingdom");
* ``abbreviation``: the query's letters appear in the key in order, from its first letter
  ("blvd" -> "boulevard", "mgr" -> "manager").

Each needs every character of the query to be in the key (as a multiset: the query, spaces
removed, is a subsequence or a part of the key), so a key that shares fewer characters than the
query holds cannot bear one: ``softdict.spelling.bounded`` bounds the unscored keys by that.
And each but ``word start`` begins where the key does, which needs a later word: a key that
begins with another character and has one word bears none (``may_bear_marks``).

How much spelling and these marks weigh depends on what the query is (``describe``): the share
of its words that are not common words (letters and digits split first, so "clock2" is the
common word "clock" and a number, not an unknown word), whether it holds digits, whether it is
as short as a code, has several words, or is written in capitals.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from softdict.spelling.text import common_words, common_words_strict_short

__all__ = [
    "DESCRIPTION",
    "EVIDENCE",
    "SAME",
    "WORD_START",
    "compact",
    "describe",
    "describe_strict_short",
    "evidence_marks",
    "initials",
    "is_short",
    "markable",
    "may_bear_marks",
    "tokens",
    "word_start_marks",
]

EVIDENCE = ("same", "start", "word start", "initials", "abbreviation")
SAME = EVIDENCE.index("same")  # the one mark of a key spelled as the query: it bears no other
WORD_START = EVIDENCE.index("word start")  # the one mark a key of another first letter can bear
DESCRIPTION = ("constant", "unknown share", "digits", "short", "several words", "capitals")
# A query of at most this many characters (spaces aside) is as short as a code ("de", "usd").
SHORT = 3
# Marks need a query of at least this many characters: one letter starts half the keys.
_MIN_MARKED = 2
_TOKEN = re.compile(r"[^\W\d_]+|\d+")


def tokens(text: str) -> list[str]:
    """``text``'s words, case folded, with letters and digits split: "clock2" -> clock, 2.

    >>> tokens("Clock2 B2B-ready")
    ['clock', '2', 'b', '2', 'b', 'ready']
    """
    return _TOKEN.findall(unicodedata.normalize("NFC", text).casefold())


def is_short(words: list[str]) -> bool:
    """Whether a query of these ``tokens`` is short: at most ``SHORT`` letters and digits."""
    return len("".join(words)) <= SHORT


def describe(text: str, *, strict_short: bool = False) -> np.ndarray:
    """The query's description (``DESCRIPTION``), float64 (6,): 1; the share of its letter
    words that are not common English words (``text.common_words``; with ``strict_short``,
    ``text.common_words_strict_short``, where a word of at most 3 letters is common only when
    very frequent; numbers are not counted as unknown; 1 when it has no word); whether it holds
    a digit; whether it is at most ``SHORT`` characters long (spaces and punctuation aside);
    whether it has several words apart by spaces; whether its letters are all capitals.

    >>> describe("clock2").tolist(), describe("USD").tolist()
    ([1.0, 0.0, 1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    """
    words = tokens(text)
    letters = [word for word in words if not word.isdigit()]
    common = common_words_strict_short() if strict_short else common_words()
    unknown = sum(word not in common for word in letters) / len(words) if words else 1.0
    cased = [ch for ch in text if ch.isalpha()]
    capitals = len(cased) >= 2 and all(ch.isupper() for ch in cased)
    return np.array(
        [
            1.0,
            unknown,
            float(any(word.isdigit() for word in words)),
            float(is_short(words)),
            float(len(text.split()) >= 2),
            float(capitals),
        ]
    )


def describe_strict_short(text: str) -> np.ndarray:
    """``rule-5``'s description: ``describe`` with ``strict_short``.

    >>> [float(f("Gam")[1]) for f in (describe, describe_strict_short)]
    [0.0, 1.0]
    """
    return describe(text, strict_short=True)


def compact(form: str) -> str:
    """A spelling form without its spaces: what the marks compare."""
    return form.replace(" ", "")


def initials(form: str) -> str | None:
    """The first letters of a spelling form's words, which a query matches to bear the
    ``initials`` mark; None for a form of fewer than two words (it has none).

    >>> initials("ho chi minh city"), initials("paris")
    ('hcmc', None)
    """
    words = form.split()
    return "".join(word[0] for word in words) if len(words) >= 2 else None


def markable(form: str) -> bool:
    """Whether a query of this spelling form can bear a mark at all (it is long enough)."""
    return len(compact(form)) >= _MIN_MARKED


def evidence_marks(query_form: str, key_forms: list[str]) -> np.ndarray:
    """(p, 5) float64: the marks (``EVIDENCE``) of one query form with each key form, both
    spelling forms (``text.spelling_form``).

    >>> evidence_marks("gil", ["gilbert", "agil", "gil"]).astype(int).tolist()
    [[0, 1, 0, 0, 1], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]]
    >>> [evidence_marks(q, [k]).astype(int).tolist()[0] for q, k in
    ...  [("uk", "united kingdom"), ("blvd", "boulevard"), ("bl ake", "blake")]]
    [[0, 0, 0, 1, 1], [0, 0, 0, 0, 1], [1, 0, 0, 0, 0]]
    """
    marks = np.zeros((len(key_forms), len(EVIDENCE)))
    if not markable(query_form):
        return marks
    # The query's part of every test, once, and each mark's keys gathered in lists: this loop
    # runs over thousands of keys a lookup (a short query's), at about half a microsecond each.
    short_query = compact(query_form)
    first, later_word = short_query[0], f" {query_form}"
    found: tuple[list[int], ...] = ([], [], [], [], [])
    same, start, word_start, initial, abbreviation = found
    for i, key in enumerate(key_forms):
        if not key:
            continue
        spaced = " " in key  # a later word, and initials, need several words
        short_key = compact(key)
        if short_query == short_key:
            same.append(i)
            continue
        if len(short_query) >= len(short_key):
            continue
        if key.startswith(query_form):
            start.append(i)
        if spaced and later_word in key:
            word_start.append(i)
        if short_key[0] == first:  # initials and letters in order begin where the key does
            if spaced and short_query == initials(key):
                initial.append(i)
            if _in_order(short_query, short_key):
                abbreviation.append(i)
    for mark, rows in enumerate(found):
        if rows:  # most lists are empty: an assignment of none still costs a microsecond or two
            marks[rows, mark] = 1.0
    return marks


def may_bear_marks(query_form: str, first: np.ndarray, several_words: np.ndarray) -> np.ndarray:
    """(c,) bool: which of c keys could bear a mark (``evidence_marks``) for this query, by
    their forms' first characters (``first``, code points) and which have ``several_words``:
    ``same``, ``start``, ``initials`` and ``abbreviation`` each begin where the key does (the
    query's first character is the key's), ``word start`` needs a later word. Of 10^4 real
    names (``benchmarks/speed.py``'s), an ISO 3166 code in small letters ("deu") found a median
    of 279 that hold all its characters, 184 of which begin with its letter or have several
    words; the rest had been bounded as if a mark could lift them. Telling them apart took
    0.08 ms off a lookup of such a code under ``rule-8`` (paired, one-off; 0.006 on typos)."""
    if not query_form:
        return np.zeros(len(first), dtype=bool)
    return (first == ord(query_form[0])) | several_words


def word_start_marks(query_form: str, key_forms: list[str]) -> np.ndarray:
    """(p,) float64: ``evidence_marks``' ``word start`` of one query form with each key form,
    alone: the only mark a key that does not begin with the query's first character can bear
    (the others begin where the key does).

    >>> word_start_marks("york", ["new york", "yorkshire"]).tolist()
    [1.0, 0.0]
    """
    if not markable(query_form):
        return np.zeros(len(key_forms))
    needle = f" {query_form}"
    return np.fromiter((needle in key for key in key_forms), dtype=np.float64, count=len(key_forms))


def _in_order(needle: str, haystack: str) -> bool:
    """Whether ``needle``'s characters appear in ``haystack`` in order (a subsequence: each
    found after the last, the earliest such place, which finds one wherever one exists). A
    compiled pattern matched faster, but each query is a new pattern, and compiling it cost
    more than the keys it then tests."""
    at = 0
    for ch in needle:
        at = haystack.find(ch, at) + 1
        if not at:
            return False
    return True
