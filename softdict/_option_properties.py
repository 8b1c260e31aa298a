"""SoftDict's options, as properties: read from the store's config, and set through it (the
config model checks each value, so a bad one raises and changes nothing)."""

from __future__ import annotations

import difflib
import weakref
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from softdict._arguments import embedding_array
from softdict._config import ValueKind, constructor_options, options_maker
from softdict._errors import ConfigError, InvalidValueError, ValueShapeError
from softdict._facade import Facade
from softdict._similarity import Similarity
from softdict.encoders import TextEncoder

__all__ = ["OptionProperties"]


def _properties(cls: type) -> tuple[str, ...]:
    """The public properties of ``cls``: its options, and what it reports."""
    return tuple(
        name
        for name in dir(cls)
        if not name.startswith("_") and isinstance(getattr(cls, name, None), property)
    )


@dataclass(frozen=True)
class _Names:
    """What a class's public names are, for ``__setattr__``: ``maker`` is the class whose
    constructor takes the options (SoftDict, in a subclass too)."""

    maker: str
    settable: tuple[str, ...]  # properties with a setter (a subclass may add some)
    fixed: frozenset[str]  # the maker's options that no property sets
    reports: frozenset[str]  # the maker's read-only properties
    options: tuple[str, ...]  # every name an attempt to set an option could mean

    @classmethod
    def of(cls, owner: type) -> _Names:
        known = _NAMES.get(owner)
        if known is None:
            maker = options_maker(owner) or owner
            settable = tuple(n for n in _properties(owner) if getattr(owner, n).fset is not None)
            made = set(constructor_options(maker)) - set(settable)
            reports = set(_properties(maker)) - set(settable)
            options = tuple(sorted(set(settable) | made | reports))
            known = cls(maker.__name__, settable, frozenset(made), frozenset(reports), options)
            _NAMES[owner] = known
        return known


# Worked out once per class: on every set (dir() three times) a set took 83 µs, now 6.
_NAMES: weakref.WeakKeyDictionary[type, _Names] = weakref.WeakKeyDictionary()


class OptionProperties(Facade):
    """The options of a ``SoftDict`` and what its store holds, as properties."""

    def __setattr__(self, name: str, value: object) -> None:
        """ConfigError for a public name that cannot take effect: an option fixed when the
        store was made (``sd.batch_size = 4`` was kept as a new attribute and changed nothing),
        something the store reports (Python's AttributeError said only "has no setter"), or a
        name that is an option but for case (``sd.Temperature``), or spelled almost as one that
        can be set (``sd.temprature = 0.5``). Only those: a subclass's own attributes
        (``seeds``, ``indexes``) and properties are as on any object, as are private names."""
        if not name.startswith("_"):
            names = _Names.of(type(self))
            settable = ", ".join(names.settable)
            if name in names.fixed:
                raise ConfigError(
                    f"{name} cannot change on a live {type(self).__name__}: it is chosen when one "
                    f"is made ({names.maker}(..., {name}=...)) and stays with it. The options "
                    f"that can be set afterwards: {settable}"
                )
            if name in names.reports:
                raise ConfigError(
                    f"{name} is read only: it reports what the store holds. The options that "
                    f"can be set: {settable}"
                )
            if not hasattr(type(self), name):
                near = [n for n in names.options if n.casefold() == name.casefold()]
                near = near or difflib.get_close_matches(name, names.settable, n=1, cutoff=0.8)
                if near:
                    raise ConfigError(
                        f"{type(self).__name__} has no option {name!r}: did you mean {near[0]!r}? "
                        f"(setting {name!r} would change nothing"
                        + ("" if near[0] in names.settable else f"; {near[0]} cannot be set")
                        + ")"
                    )
        super().__setattr__(name, value)

    @property
    def similarity(self) -> Similarity:
        """How queries are scored against keys."""
        return self._store.config.similarity

    @property
    def temperature(self) -> float:
        """The softmax temperature in force (the measured default unless one was set)."""
        # Only "scaled_dot" depends on the dimension. Before anything has been embedded it is not
        # known; 384 is the bundled model's, and lookups always use the store's real dimension.
        dim = self._store.dim or self._encoder.dim or 384
        return self._store.config.temperature_for(dim)

    @temperature.setter
    def temperature(self, value: float) -> None:
        with self._lock:
            self._store.set_options(temperature=value)

    @property
    def lexical(self) -> float:
        """The spelling channel's weight against meaning in text lookups; 0 when it is off."""
        return self._store.config.lexical

    @lexical.setter
    def lexical(self, value: float) -> None:
        with self._lock:
            self._store.set_options(lexical=value)

    @property
    def combination(self) -> str:
        """How meaning and spelling make one score: "rule-1" to "rule-8", or "learned-1"."""
        return self._store.config.combination.value

    @combination.setter
    def combination(self, value: str) -> None:
        with self._lock:
            self._store.set_options(combination=value)

    @property
    def lexical_known(self) -> float:
        """Under the "rule-1" to "rule-8" combinations, the share of the spelling
        weight that a query's common English words keep."""
        return self._store.config.lexical_known

    @lexical_known.setter
    def lexical_known(self, value: float) -> None:
        with self._lock:
            self._store.set_options(lexical_known=value)

    @property
    def top_k(self) -> int | None:
        """How many keys a query attends to; None for all of them."""
        return self._store.config.top_k

    @property
    def index_description(self) -> str:
        """Which index backend holds the keys now, e.g. "auto: exact" or "ivf (nlist=4000, ...)"."""
        with self._lock:
            return self._store.describe_index()

    @property
    def index_memory_bytes(self) -> int:
        """Bytes this process holds for the key vectors and their ids (the index backend)."""
        with self._lock:
            return self._store.index_memory_bytes()

    @property
    def value_kind(self) -> ValueKind | str | None:
        """The kind of value this store holds: a ``ValueKind`` for the built-in kinds (a str
        enum: it equals "scalar", "vector" or "categorical"), the name of a registered plug-in
        kind, or None while the store is empty and its kind not fixed by ``value_kind=``."""
        with self._lock:  # a Milvus store reads it again, and may forget what it knew
            kind = self._store.value_kind
        built_in = {member.value for member in ValueKind}
        return ValueKind(kind) if kind in built_in else kind

    @property
    def query_projection(self) -> np.ndarray | None:
        """W_q, learned by ``fit``: every query becomes W_q·q before it is scored. None is the
        identity. Set it to reuse a projection from another store, or to None to drop it.

        Raises (on setting):
            ValueShapeError: it is not (d, d) for the store's d-dim keys (any d of a store with
                no keys yet, whose first keys must then be d-dim), or not real numbers (text,
                booleans, complex numbers).
            InvalidValueError: it holds NaN, infinity or a number beyond float32's range.
        """
        projection = self._store.projection
        return None if projection is None else projection.copy()

    @query_projection.setter
    def query_projection(self, projection: npt.ArrayLike | None) -> None:
        with self._lock:
            if projection is None:
                self._store.projection = None
                return
            expected = "query_projection is a (d, d) matrix of real numbers"
            # float32, as it is kept and saved: a number past float32's range is infinity here.
            array = embedding_array(projection, "query_projection's entries", expected)
            # A store with no keys takes any (d, d): its first keys are checked against it, as
            # after clear(), which keeps the projection.
            dim = self._store.dim or (array.shape[0] if array.ndim == 2 else -1)
            if array.shape != (dim, dim) or not dim:
                raise ValueShapeError(
                    f"query_projection must be a (d, d) matrix for the store's d-dim keys; got "
                    f"shape {array.shape}" + (f", d = {dim}" if self._store.dim else "")
                )
            if not np.all(np.isfinite(array)):
                raise InvalidValueError(
                    "query_projection holds NaN or infinity, or a number beyond float32's range "
                    "(about ±3.4e38), in which it is kept; every entry must be finite"
                )
            self._store.projection = array.copy()

    @property
    def encoder(self) -> TextEncoder:
        """The encoder that embeds keys and queries."""
        return self._encoder
