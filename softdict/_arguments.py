"""Checks of the arguments users pass to SoftDict's methods: keys, queries, items, min_score.

Each raises a softdict error that says what was wrong and what to do, before anything is encoded
or changed.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from softdict._config import check_number
from softdict._errors import (
    ConfigError,
    InvalidValueError,
    KeyTypeError,
    ValueShapeError,
    short_repr,
)
from softdict._similarity import Similarity

__all__ = [
    "check_key",
    "check_min_score",
    "check_plug_in",
    "check_unicode",
    "checked_embeddings",
    "embedding_array",
    "embedding_items",
    "is_unicode",
    "projected_queries",
    "query_texts",
    "update_items",
]

# What numpy would cast to float32 but is no embedding, by dtype kind, and what to do instead:
# a cast drops a complex number's imaginary part and a time's unit without a word.
_NOT_REAL = {
    # A mask passed where embeddings go would cast to 0/1 and be scored.
    "b": "booleans: pass .astype(float) if vectors of 0 and 1 are meant",
    "c": "complex numbers, whose imaginary part a cast would drop: pass .real if that is meant",
    "m": "durations: convert them to floats, such as seconds",
    "M": "times: convert them to floats, such as seconds since the epoch",
    "U": "text",
    "S": "bytes",
    "V": "structured records",
}


def check_key(key: object, position: str = "", what: str = "key") -> str:
    """``key`` as a plain str; KeyTypeError for another type, InvalidValueError for text that is
    not valid Unicode. ``what`` ("key" or "query") and ``position`` name it in messages."""
    if not isinstance(key, str):
        plural = "queries" if what == "query" else f"{what}s"
        raise KeyTypeError(
            f"{plural} must be str{position}, got {type(key).__name__} ({key!r:.60}); "
            f"convert it with str() if its text is what should be matched"
        )
    check_unicode(key, f"{what}{position}")
    return str(key)  # a str subclass (numpy.str_) is stored as a plain str


def embedding_items(keys: object, values: object) -> tuple[list[str], list[object]]:
    """``add_embeddings``' keys (each checked by ``check_key``) and values as lists: one str
    for the keys would be read as its characters, one str or number for the values as its
    characters or not at all, so those are refused (KeyTypeError, ValueShapeError)."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise KeyTypeError(
            f"add_embeddings takes a sequence of keys, got {type(keys).__name__} "
            f"({short_repr(keys, 60)}); pass a list, [key] for one"
        )
    one = isinstance(values, (str, bytes)) or getattr(values, "ndim", 1) == 0  # 0-d: one number
    if one or not isinstance(values, Iterable):
        raise ValueShapeError(
            f"add_embeddings takes one value per key, got {type(values).__name__} "
            f"({short_repr(values, 60)}); pass a list of values, [value] for one"
        )
    return [check_key(key, f" (item #{i})") for i, key in enumerate(keys)], list(values)


def check_plug_in(name: object, what: str, make: object = None, *, forbidden: str = "") -> None:
    """ConfigError unless ``name`` (``what``: "index backend name", ...) is a non-empty str of
    valid Unicode without the characters ``forbidden``, and ``make`` (the plug-in's factory;
    None: none to check) is callable. A registry took any name: 5 made every "unknown option"
    error that lists the names sorted a raw TypeError, and a factory 42 failed at the first
    insert (a hostile-input probe)."""
    if (
        not isinstance(name, str)
        or not name
        or not is_unicode(name)
        or any(character in name for character in forbidden)
    ):
        without = f", without {forbidden!r}" if forbidden else ""
        raise ConfigError(
            f"the {what} must be a non-empty str of valid Unicode{without}, got {name!r:.60}"
        )
    if make is not None and not callable(make):
        raise ConfigError(
            f"the {what} {name!r} is registered with {type(make).__name__}, which is not "
            f"callable: register the function or class that makes one"
        )


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode, which UTF-8 holds: no lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_unicode(text: str, what: str, doing: str | None = None) -> None:
    """InvalidValueError for text that is not valid Unicode (a lone surrogate, as
    ``bytes.decode(errors="surrogateescape")`` leaves): it could not be saved as UTF-8.
    ``doing``: what the message says to fix it before (default: looking up a query, inserting
    anything else)."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A query is never saved, but no encoder can read it either.
        after = doing or ("looking it up" if what.startswith("query") else "inserting it")
        cannot = "be encoded" if what.startswith("query") else "be saved"
        raise InvalidValueError(
            f"{what} {text!r:.60} holds {text[exc.start]!r} at position {exc.start}, a lone "
            f"surrogate that is not valid Unicode and cannot {cannot}; decode its source with "
            f"errors='replace' (or fix the bytes) before {after}"
        ) from None


def query_texts(query: object) -> tuple[list[str], bool]:
    """A query or a batch of them as a list of texts, and whether it was a single one."""
    if isinstance(query, str):
        return [check_key(query, what="query")], True
    # A 0-d array claims to be iterable and then refuses: it is one value, not a sequence.
    zero_dim = getattr(query, "ndim", None) == 0
    if isinstance(query, (bytes, Mapping)) or not isinstance(query, Iterable) or zero_dim:
        hint = " (one value, not a sequence: pass it as a str)" if zero_dim else ""
        raise KeyTypeError(
            f"a query must be a str or a sequence of str, got {type(query).__name__}{hint}"
        )
    return [check_key(q, f" (query #{i})", "query") for i, q in enumerate(query)], False


def update_items(other: Any, kwargs: Mapping[str, object]) -> dict[str, object]:
    """``dict.update``'s arguments as one dict: later duplicates win, and a key keeps its first
    position, exactly as ``dict.update`` does."""
    if isinstance(other, Mapping):
        pairs = list(other.items())
    elif hasattr(other, "keys"):
        # dict.update's protocol: any object with .keys() is read as a mapping.
        pairs = [(key, other[key]) for key in other.keys()]  # noqa: SIM118
    else:
        try:
            items_of = iter(other)
        except TypeError:
            raise KeyTypeError(
                f"update() takes a mapping or an iterable of (key, value) pairs, got "
                f"{type(other).__name__}"
            ) from None
        pairs = []
        for i, item in enumerate(items_of):
            # As dict.update: any iterable of two things is a pair; anything else is an error
            # of the kind dict raises (TypeError for no sequence, ValueError for a wrong length).
            try:
                pair = tuple(item)
            except TypeError:
                raise KeyTypeError(
                    f"update() takes a mapping or an iterable of (key, value) pairs; item #{i} "
                    f"is {short_repr(item, 60)}, which is not a sequence"
                ) from None
            if len(pair) != 2:
                raise ValueShapeError(
                    f"update() takes (key, value) pairs; item #{i} has length {len(pair)}: "
                    f"{short_repr(item, 60)}"
                )
            pairs.append(pair)
    pairs.extend(kwargs.items())
    items: dict[str, object] = {}
    for i, (key, value) in enumerate(pairs):
        items[check_key(key, f" (item #{i})")] = value
    return items


def check_min_score(min_score: object) -> None:
    if min_score is not None:
        check_number("min_score", min_score, "a finite number or None", lambda _: True)


_EMBEDDINGS = "embeddings are real numbers in one array: (n, d), each row of the same length d"


def embedding_array(embeddings: object, what: str, expected: str = _EMBEDDINGS) -> np.ndarray:
    """``embeddings`` as a float32 array of any shape, or ValueShapeError where they are not real
    numbers in one array (text, a ragged list, complex numbers, times); ``what`` names them and
    ``expected`` says what they should be. A number beyond float32's range becomes infinity here,
    quietly: every caller refuses what is not finite, with its own message."""
    if np.ma.is_masked(embeddings):  # np.asarray keeps the data under the mask
        raise InvalidValueError(
            f"{what} are a masked array with masked (missing) entries; fill them "
            f"(embeddings.filled(...)) or leave their rows out"
        )
    try:
        array = np.asarray(embeddings)
        if array.dtype.kind == "O":  # Python objects: numbers (Decimal, Fraction) convert
            _check_objects(array, what, expected)
            array = array.astype(np.float64)  # float32 below, in one place
    except ValueShapeError:  # _check_objects' own, which says it all
        raise
    except (TypeError, ValueError) as exc:  # a ragged list, or objects that are no numbers
        raise ValueShapeError(f"{what} cannot be read as numbers ({exc}); {expected}") from None
    except OverflowError:  # an int that no float holds (10**400)
        raise InvalidValueError(
            f"{what} contain a number beyond float32 range; they must be finite"
        ) from None
    if array.dtype.kind in _NOT_REAL:
        raise ValueShapeError(
            f"{what} have dtype {array.dtype} ({_NOT_REAL[array.dtype.kind]}); {expected}"
        )
    with np.errstate(over="ignore"):  # to infinity, which the caller refuses (docstring)
        return array.astype(np.float32, copy=False)


def _check_objects(array: np.ndarray, what: str, expected: str) -> None:
    """ValueShapeError where an object array holds what a cast to float32 would take as a
    number without being one: a bool (1.0), a str ("1.5" parses), None (NaN); or a complex
    number whose imaginary part the cast would drop (numpy's: Python's fails to cast)."""
    kinds = set(map(type, array.flat))
    if any(issubclass(kind, (bool, np.bool_)) for kind in kinds):
        raise ValueShapeError(f"{what} hold {_NOT_REAL['b']}; {expected}")
    if any(
        issubclass(kind, numbers.Complex) and not issubclass(kind, numbers.Real) for kind in kinds
    ):
        raise ValueShapeError(f"{what} hold {_NOT_REAL['c']}; {expected}")
    others = sorted(kind.__name__ for kind in kinds if not issubclass(kind, numbers.Number))
    if others:
        raise ValueShapeError(f"{what} hold {others[0]} objects, which are no numbers; {expected}")


def checked_embeddings(embeddings: Any, dim: int | None, what: str) -> np.ndarray:
    """``embeddings`` as float32 (n, d) for a store of ``dim``-dim keys (None: any d >= 1), or
    ValueShapeError (another dimension) or InvalidValueError (NaN, infinity); ``what`` names them
    in the message."""
    array = embedding_array(embeddings, what)
    if array.ndim != 2 or (dim is not None and array.shape[1] != dim) or array.shape[1] == 0:
        expected = f"(n, {dim})" if dim is not None else "(n, d) with d >= 1"
        advice = (
            f": this store's keys are {dim}-dim embeddings, so queries and new keys must be "
            f"too (use the encoder the store was built with)"
            if dim is not None
            else ""
        )
        raise ValueShapeError(f"{what} have shape {array.shape}, expected {expected}{advice}")
    if not np.all(np.isfinite(array)):
        raise InvalidValueError(
            f"{what} contain NaN or infinity (or values beyond float32 range); "
            f"embeddings must be finite"
        )
    return array


def projected_queries(queries: np.ndarray, projection: np.ndarray | None) -> np.ndarray:
    """Checked query embeddings (m, d) projected by W_q (``query_projection``), or
    InvalidValueError where the projection takes them past float32's range: a projection with
    finite but huge entries gave NaN scores, and every lookup answered NaN."""
    if projection is None:
        return queries
    with np.errstate(over="ignore", invalid="ignore"):
        projected = queries @ projection.T
    if not np.all(np.isfinite(projected)):
        raise InvalidValueError(
            "query_projection takes these query embeddings beyond float32's range (about "
            "±3.4e38): its entries are too large for them. Scale it down, or set "
            "query_projection = None to drop it"
        )
    return projected


# The largest embedding norm a store scores by "dot", "scaled_dot" or "l2": float32 scores of two
# such vectors stay within 1e37 (|q|·|k|, and |q − k|² at most 4e36), far below float32's 3.4e38.
# Past it a score overflowed: NaN weights, a raw error from the sampled tail's arithmetic, or (l2)
# every key equally far, uniform attention without a word (a probe).
MAX_SCORED_NORM = 1e18


def within_score_range(embeddings: np.ndarray, similarity: Similarity, what: str) -> np.ndarray:
    """Checked ``embeddings`` (n, d), or InvalidValueError where a row's norm passes
    ``MAX_SCORED_NORM`` and ``similarity`` scores it as it is (cosine divides the norm out)."""
    if similarity is Similarity.COSINE or not embeddings.size:
        return embeddings
    # A largest entry under the limit over √d bounds every norm under it: one float32 pass.
    if float(np.abs(embeddings).max()) * np.sqrt(embeddings.shape[1]) <= MAX_SCORED_NORM:
        return embeddings
    norms = np.linalg.norm(embeddings.astype(np.float64), axis=1)
    if np.any(norms > MAX_SCORED_NORM):
        row = int(np.argmax(norms > MAX_SCORED_NORM))
        raise InvalidValueError(
            f"{what} have a norm past {MAX_SCORED_NORM:g} (row {row}: {norms[row]:.3g}), whose "
            f"scores would pass float32's range under this similarity; scale them down, or use "
            f"similarity='cosine', which compares directions only"
        )
    return embeddings
