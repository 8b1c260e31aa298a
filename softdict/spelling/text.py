"""Text as the spelling channel sees it: a normalised form per key and query, and how much of
a query is words the encoder is likely to understand.

Spelling is compared on a *form*: accents stripped, case folded, punctuation turned into spaces,
spaces collapsed ("Côte d'Ivoire" -> "cote d ivoire"), so that the scores count typing mistakes
and not typography. Multi-word texts also have a token-sorted form ("states united" for "United
States"), which finds keys whose words come in another order.

A query's *unknown share* is the fraction of its words that are not common English words
(wordfreq's English list, Zipf frequency >= 2.5, about 54,000 words; a word with a digit is never
common; under ``rule-5`` a word of at most 3 characters only at Zipf 3.5,
``common_words_strict_short``). The spelling channel trusts spelling for the unknown share and
meaning for the rest: "Germny" and "Brazl" are no words, so spelling decides; "tool" is one, so
it is not pulled to a key "stool". Measured on the dev half of ``benchmarks/matching.py`` (the
README's table): without this, every weight of the spelling channel that found typos also broke
what embeddings get right.
"""

from __future__ import annotations

import contextlib
import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from softdict.spelling.bounds import character_counts

__all__ = [
    "Spelled",
    "SpellingQueries",
    "accented_form",
    "common_words",
    "common_words_strict_short",
    "sorted_like",
    "spelled",
    "spelling_form",
    "token_sorted",
    "unknown_share",
]

# A word is common when wordfreq's English list gives it a Zipf frequency of at least this
# (10^-6.5 of running text): chosen on the dev half of benchmarks/matching.py with the meaning
# guard of benchmarks/matching_design.py.
COMMON_WORD_MIN_ZIPF = 2.5
# Under rule-5, a word of at most this many characters is common only at this Zipf frequency
# (10^-5.5 of running text): at 2.5 wordfreq's list holds thousands of short strings that people
# type as typos, codes and abbreviations more than as words ("gam", "gon", "hun", "kor", "asm",
# "fao"), and a query of such a "common" word weighed spelling 1/16, so meaning answered it with
# noise ("Gam" -> Georgia for Guam). Of the 3,747 such words of ASCII letters, 1,070 stay common
# ("owl", "fog", "jaw"). On the dev half of benchmarks/matching.py (the marks refitted for each)
# 3.5 and 4 tied within 0.6 of a point on every task; 4 would also take "owl", "ant" and "fog"
# for unknown words, which no task measures, so the lower one.
SHORT_WORD_LENGTH = 3
SHORT_COMMON_WORD_MIN_ZIPF = 3.5
_LEXICON_LANGUAGE = "en"  # the bundled encoder's language
_WORD = re.compile(r"[^\W_]+")


def spelling_form(text: str) -> str:
    """``text`` as spelling is compared: no accents, case folded, punctuation as spaces, single
    spaces, trimmed.

    >>> spelling_form("  Côte d'Ivoire!")
    'cote d ivoire'
    """
    from rapidfuzz.utils import default_process

    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(default_process(bare.casefold()).split())


# A key's spelling form and its accented form (``accented_form``), as a store keeps them.
Spelled = tuple[str, str]


def spelled(text: str) -> Spelled:
    """``text``'s spelling form and accented form (the same object where it bore no accent)."""
    form = spelling_form(text)
    return form, accented_form(text, form)


def accented_form(text: str, form: str | None = None) -> str:
    """``text``'s spelling form (``form``, where the caller has it) with its accents kept: each
    letter that bore accents in ``text`` is that letter of the form with them, where Unicode
    composes the two into one character ("Kolār" -> "kolār", where the form is "kolar").

    It is the form character for character (the same length, each character the form's or an
    accented one that the form strips back to it), so whatever bounds a similarity of forms by
    their shared characters bounds one of accented forms too (``bounds``). Where the two cannot
    be lined up so (a letter that case folding or compatibility decomposition makes several),
    it is the form itself.

    >>> accented_form("Kolār"), accented_form("  Côte d'Ivoire!"), accented_form("Straße")
    ('kolār', 'côte d ivoire', 'strasse')
    """
    if form is None:
        form = spelling_form(text)
    if text.isascii():
        return form
    from rapidfuzz.utils import default_process

    # The form's steps, a base character at a time: each base and the accents that follow it.
    letters: list[tuple[str, str]] = []
    for ch in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(ch) and letters:
            base, accents = letters[-1]
            letters[-1] = (base, accents + ch)
        else:
            letters.append((ch, ""))
    out: list[str] = []
    for base, accents in letters:
        folded = default_process(base.casefold()) or " "
        composed = unicodedata.normalize("NFC", folded + accents) if accents else folded
        out.append(composed if accents and len(folded) == 1 and len(composed) == 1 else folded)
    accented = " ".join("".join(out).split())
    if accented == form or len(accented) != len(form) or spelling_form(accented) != form:
        return form  # no accent, or not aligned with the form: the form itself (the object)
    return accented


def token_sorted(form: str) -> str:
    """A form's words in sorted order (the form itself when it has one word).

    >>> token_sorted("united states")
    'states united'
    """
    words = form.split()
    return form if len(words) < 2 else " ".join(sorted(words))


def sorted_like(form: str, accented: str) -> str:
    """``accented`` (``accented_form`` of ``form``) with its words in the order ``token_sorted``
    puts ``form``'s: it strips back to ``token_sorted(form)`` letter by letter, as ``accented``
    does to ``form``. Sorted by themselves they need not: accented letters sort after every
    ASCII one, so "ávila costa" would sort as "costa ávila" where its form sorts as "avila
    costa", and the measure on the accented words could then exceed the forms' (which every
    bound on unspelled keys assumes it cannot: ``scores``).

    >>> sorted_like("avila costa", "ávila costa"), sorted_like("sao tome", "são tomé")
    ('ávila costa', 'são tomé')
    """
    if accented is form:
        return token_sorted(form)
    words = form.split()
    if len(words) < 2:
        return accented
    # An accented form keeps the form's spaces where they are (accented_form), so its words
    # pair with the form's one by one; ties (the same word twice) strip back alike either way.
    return " ".join(kept for _, kept in sorted(zip(words, accented.split())))


@functools.cache
def common_words(min_zipf: float = COMMON_WORD_MIN_ZIPF) -> frozenset[str]:
    """The common English words (wordfreq's English words of Zipf frequency at least
    ``min_zipf``), loaded once per process, on the first query that needs them.

    Importing wordfreq and reading its large list took 0.3 s here, most of a fresh process's
    first lookup, so the words are also kept as a list in the per-user cache (``_cache``),
    named by wordfreq's version and the threshold; a cache that cannot be written is skipped."""
    from importlib import metadata

    from softdict._cache import cache_root, write_whole

    name = f"{_LEXICON_LANGUAGE}-zipf{min_zipf}-wordfreq{metadata.version('wordfreq')}"
    path = cache_root() / "words" / f"{name}.txt"
    header = f"softdict common words {name}"
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines[0] == header and lines[-1] == "end":
            return frozenset(lines[1:-1])
    except (OSError, UnicodeDecodeError):
        pass  # not made yet, or unreadable: made again below
    from wordfreq import get_frequency_dict

    least = 10.0 ** (min_zipf - 9)  # Zipf = log10(frequency per word) + 9
    frequencies = get_frequency_dict(_LEXICON_LANGUAGE, wordlist="large")
    words = frozenset(word for word, frequency in frequencies.items() if frequency >= least)
    with contextlib.suppress(OSError):  # a read-only home: every process reads wordfreq
        write_whole(path, "\n".join([header, *sorted(words), "end"]))
    return words


@functools.cache
def common_words_strict_short() -> frozenset[str]:
    """The common words as ``rule-5`` reads them: a word of at most ``SHORT_WORD_LENGTH``
    characters only at Zipf ``SHORT_COMMON_WORD_MIN_ZIPF``, a longer one as ``common_words``.

    >>> [word in common_words() for word in ("gam", "gon", "cat")]
    [True, True, True]
    >>> [word in common_words_strict_short() for word in ("gam", "gon", "cat")]
    [False, False, True]
    """
    short = common_words(SHORT_COMMON_WORD_MIN_ZIPF)
    return frozenset(
        word for word in common_words() if len(word) > SHORT_WORD_LENGTH or word in short
    )


def unknown_share(text: str) -> float:
    """The share of ``text``'s words that are not common English words; 1 for no words.

    >>> unknown_share("Swtzerland"), unknown_share("a kitchen chair"), unknown_share("Brazl")
    (1.0, 0.0, 1.0)
    """
    words = _WORD.findall(unicodedata.normalize("NFC", text).casefold())
    if not words:
        return 1.0
    common = common_words()
    # A word with a digit ("mp3", "b2b", "0000") is a code, spelled rather than meant.
    return sum(word not in common or _has_digit(word) for word in words) / len(words)


def _has_digit(word: str) -> bool:
    return any(ch.isdigit() for ch in word)


@dataclass(frozen=True)
class SpellingQueries:
    """A batch of query texts as the spelling channel uses them.

    Attributes:
        forms: each query's spelling form.
        sorted_forms: each form with its words sorted.
        counts: (m, 64) each form's character counts (``bounds.character_counts``).
        accented: each query's ``accented_form``, and its words in its form's sorted order
            (``sorted_like``), where the combination reads accents (``scores``); else None.
        edits_sorted: whether the edit measure compares sorted words too (``scores``; the
            combination's ``edits_sorted``).
        as_typed: whether a query that bore no accents prefers a key that bears none
            (``scores``; the combination's ``prefers_as_typed``). Read where ``accented`` is.
    """

    forms: list[str]
    sorted_forms: list[str]
    counts: np.ndarray
    accented: tuple[list[str], list[str]] | None = None
    edits_sorted: bool = False
    as_typed: bool = False

    @classmethod
    def of(
        cls,
        texts: list[str],
        *,
        accents: bool = False,
        edits_sorted: bool = False,
        as_typed: bool = False,
    ) -> SpellingQueries:
        """``texts`` as spelling compares them; with ``accents``, their accented forms too; with
        ``edits_sorted``, compared by both measures in any order of their words; with
        ``as_typed`` (and ``accents``), preferring keys spelled as typed (``scores``)."""
        forms = [spelling_form(text) for text in texts]
        accented = None
        if accents:
            kept = [accented_form(text, form) for text, form in zip(texts, forms)]
            accented = (kept, [sorted_like(form, a) for form, a in zip(forms, kept)])
        return cls(
            forms,
            [token_sorted(form) for form in forms],
            character_counts(forms),
            accented,
            edits_sorted,
            as_typed,
        )

    def __len__(self) -> int:
        return len(self.forms)

    def compared_forms(self) -> tuple[list[str], list[str]]:
        """The forms and sorted forms spelling compares: the accented ones where the combination
        reads accents (a query that bore none has its form as its accented form)."""
        return self.accented if self.accented is not None else (self.forms, self.sorted_forms)

    @functools.cached_property
    def bearing(self) -> np.ndarray:
        """(m,) bool: which queries bore accents that the combination reads. Only these compare
        keys' accents (``scores``): a query typed without accents may have left them out."""
        if self.accented is None:
            return np.zeros(len(self.forms), dtype=bool)
        return np.array([a != f for a, f in zip(self.accented[0], self.forms)], dtype=bool)

    def row(self, i: int) -> SpellingQueries:
        """The ``i``-th query alone (the batch itself when it is that query)."""
        return self if len(self.forms) == 1 and i == 0 else self.subset(np.array([i]))

    def subset(self, rows: np.ndarray) -> SpellingQueries:
        """The queries ``rows``, in that order."""
        picked = np.asarray(rows, dtype=np.int64).tolist()
        accented = None
        if self.accented is not None:
            kept, kept_sorted = self.accented
            accented = ([kept[i] for i in picked], [kept_sorted[i] for i in picked])
        return SpellingQueries(
            [self.forms[i] for i in picked],
            [self.sorted_forms[i] for i in picked],
            self.counts[picked],
            accented,
            self.edits_sorted,
            self.as_typed,
        )
