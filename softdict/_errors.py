"""Exceptions raised by softdict.

Every error softdict raises on purpose is a ``SoftDictError``, so one ``except`` catches them all.
Each subclass also derives from the built-in exception a caller would naturally expect, so code
written for plain dicts and arrays keeps working (``except KeyError`` catches a ``NoMatchError``)::

    SoftDictError
    ├── NoMatchError          (KeyError)     no key scored at least ``min_score``
    ├── EmptyStoreError       (LookupError)  a soft lookup on a store with no keys
    ├── KeyTypeError          (TypeError)    a key that is not a ``str``
    ├── ValueKindError        (TypeError)    a value of another kind than the store holds
    ├── ValueShapeError       (ValueError)   a vector or embedding of the wrong shape, or
    │                                        embeddings that are not an array of real numbers
    ├── InvalidValueError     (ValueError)   NaN, infinity, a number too large to keep exactly, or
    │                                        text that is not valid Unicode (a lone surrogate)
    ├── ConfigError           (ValueError)   a bad option: temperature <= 0, unknown similarity, ...
    ├── EncoderError          (ValueError)   the encoder could not be loaded or returned bad output
    ├── StoreFormatError      (ValueError)   a saved store that cannot be read
    ├── StoreBusyError        (TimeoutError) another process held a store's lock too long
    └── StoreUnavailableError (ConnectionError) a store's server cannot be reached or failed

Messages say what was wrong and what to do about it. An operation that raises leaves the store
exactly as it was.

Warnings: ``CalibrationWarning`` (a ``UserWarning``): ``calibrate()`` kept the temperature in
force because the store's values could not tell a better one.
"""

from __future__ import annotations

__all__ = [
    "CalibrationWarning",
    "ConfigError",
    "EmptyStoreError",
    "EncoderError",
    "InvalidValueError",
    "KeyTypeError",
    "NoMatchError",
    "SoftDictError",
    "StoreBusyError",
    "StoreFormatError",
    "StoreUnavailableError",
    "UnknownOptionError",
    "ValueKindError",
    "ValueShapeError",
]


def short_repr(value: object, width: int = 80) -> str:
    """``repr(value)`` for a message, at most ``width`` characters: an int of more than 40
    digits by its size (Python will not write one past 4,300 digits, and a message of 5,000
    digits says no more), anything else cut short; a repr that fails is "..."."""
    if isinstance(value, int) and abs(value).bit_length() > 133:  # past 10**40
        return f"an integer of {int(abs(value).bit_length() * 0.30103) + 1:,} digits or so"
    try:
        text = repr(value)
    except Exception:  # a message must not fail
        if type(value) not in (tuple, list) or len(value) > 4:  # type: ignore[arg-type]
            return "..."
        items = ", ".join(short_repr(item, width) for item in value)  # type: ignore[attr-defined]
        text = f"({items})" if type(value) is tuple else f"[{items}]"
    return text if len(text) <= width else text[: width - 3] + "..."


class CalibrationWarning(UserWarning):
    """``calibrate()`` kept the temperature in force: no other predicted the stored values
    clearly better (a store too small, or too uniform, to tell)."""


class SoftDictError(Exception):
    """Base class of every error softdict raises on purpose."""


class NoMatchError(SoftDictError, KeyError):
    """No key scored at least ``min_score`` and no ``default`` was given."""

    # KeyError.__str__ shows repr(message) in quotes; a sentence reads better as itself.
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EmptyStoreError(SoftDictError, LookupError):
    """A soft lookup was asked of a store that holds no keys."""


class KeyTypeError(SoftDictError, TypeError):
    """A key is not a ``str``."""


class ValueKindError(SoftDictError, TypeError):
    """A value is of another kind (scalar, vector, categorical) than the store holds."""


class ValueShapeError(SoftDictError, ValueError):
    """A vector value, embedding or query batch has the wrong shape, or embeddings are not an
    array of real numbers (text, a ragged list, complex numbers, times)."""


class InvalidValueError(SoftDictError, ValueError):
    """A value is NaN, infinite, or otherwise cannot be stored faithfully (such as a key or label
    that is not valid Unicode)."""


class ConfigError(SoftDictError, ValueError):
    """An option passed to softdict is out of range or unknown."""


class UnknownOptionError(ConfigError, TypeError):
    """A constructor was given an option it does not have: a ``TypeError``, as Python raises
    for an unknown keyword argument, and a ``ConfigError``."""


class EncoderError(SoftDictError, ValueError):
    """The encoder could not be loaded, or it returned output of the wrong shape or type."""


class StoreBusyError(SoftDictError, TimeoutError):
    """Another process kept a store folder's lock (saving or loading it) past the timeout."""


class StoreFormatError(SoftDictError, ValueError):
    """A saved store is truncated, corrupted, of an unknown format version, or mismatched."""


class StoreUnavailableError(SoftDictError, ConnectionError):
    """A store kept by a server (``store="milvus:..."``) cannot be reached, or the server failed
    a request. A write that raises it may have been applied in part: see the store's docs."""
