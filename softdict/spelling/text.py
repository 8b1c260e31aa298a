"""Text as the spelling channel sees it: a normalised form per key and query, and how much of
a query is words the encoder is likely to understand.

Spelling is compared on a *form*: accents stripped, case folded, punctuation turned into spaces,
spaces collapsed ("Côte d'Ivoire" -> "cote d ivoire"), so that the scores count typing mistakes
and not typography. Multi-word texts also have a token-sorted form ("states united" for "United
States"), which finds keys whose words come in another order.

A query's *unknown share* is the fraction of its words that are not common English words
(wordfreq's English list, Zipf frequency >= 2.5, about 54,000 words; a word with a digit is never
common). The spelling channel trusts spelling for the unknown share and meaning for the rest:
"Germny" and "Brazl" are no words, so spelling decides; "tool" is one, so it is not pulled to a
key "stool". Measured on the dev half of ``benchmarks/matching.py`` (the README's table): without
this, every weight of the spelling channel that found typos also broke what embeddings get right.
"""

from __future__ import annotations

import contextlib
import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from softdict.spelling.bounds import character_counts

__all__ = ["SpellingQueries", "common_words", "spelling_form", "token_sorted", "unknown_share"]

# A word is common when wordfreq's English list gives it a Zipf frequency of at least this
# (10^-6.5 of running text): chosen on the dev half of benchmarks/matching.py with the meaning
# guard of benchmarks/matching_design.py.
COMMON_WORD_MIN_ZIPF = 2.5
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


def token_sorted(form: str) -> str:
    """A form's words in sorted order (the form itself when it has one word).

    >>> token_sorted("united states")
    'states united'
    """
    words = form.split()
    return form if len(words) < 2 else " ".join(sorted(words))


@functools.cache
def common_words() -> frozenset[str]:
    """The common English words, loaded once per process, on the first query that needs them.

    Importing wordfreq and reading its large list took 0.3 s here, most of a fresh process's
    first lookup, so the words are also kept as a list in the per-user cache (``_cache``),
    named by wordfreq's version and the threshold; a cache that cannot be written is skipped."""
    from importlib import metadata

    from softdict._cache import cache_root, write_whole

    name = f"{_LEXICON_LANGUAGE}-zipf{COMMON_WORD_MIN_ZIPF}-wordfreq{metadata.version('wordfreq')}"
    path = cache_root() / "words" / f"{name}.txt"
    header = f"softdict common words {name}"
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines[0] == header and lines[-1] == "end":
            return frozenset(lines[1:-1])
    except (OSError, UnicodeDecodeError):
        pass  # not made yet, or unreadable: made again below
    from wordfreq import get_frequency_dict

    least = 10.0 ** (COMMON_WORD_MIN_ZIPF - 9)  # Zipf = log10(frequency per word) + 9
    frequencies = get_frequency_dict(_LEXICON_LANGUAGE, wordlist="large")
    words = frozenset(word for word, frequency in frequencies.items() if frequency >= least)
    with contextlib.suppress(OSError):  # a read-only home: every process reads wordfreq
        write_whole(path, "\n".join([header, *sorted(words), "end"]))
    return words


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
    """

    forms: list[str]
    sorted_forms: list[str]
    counts: np.ndarray

    @classmethod
    def of(cls, texts: list[str]) -> SpellingQueries:
        forms = [spelling_form(text) for text in texts]
        return cls(
            forms,
            [token_sorted(form) for form in forms],
            character_counts(forms),
        )

    def __len__(self) -> int:
        return len(self.forms)

    def row(self, i: int) -> SpellingQueries:
        """The ``i``-th query alone (the batch itself when it is that query)."""
        return self if len(self.forms) == 1 and i == 0 else self.subset(np.array([i]))

    def subset(self, rows: np.ndarray) -> SpellingQueries:
        """The queries ``rows``, in that order."""
        picked = np.asarray(rows, dtype=np.int64).tolist()
        return SpellingQueries(
            [self.forms[i] for i in picked],
            [self.sorted_forms[i] for i in picked],
            self.counts[picked],
        )
