"""Options of a SoftDict, validated once at construction, and the checks for method options.

The default temperature was chosen by measurement on real text with the bundled encoder
(``benchmarks/choose_temperature.py``; the README shows its table). It is stated for cosine
similarity; ``Similarity.default_temperature`` rescales it for the others.

``index`` and ``value_kind`` are names in registries (``softdict.index``, ``softdict.values``); the
store resolves them, so a registered plug-in is a valid option without changes here.
"""

from __future__ import annotations

import decimal
import difflib
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from softdict._errors import ConfigError, UnknownOptionError, short_repr
from softdict._similarity import Similarity

__all__ = [
    "EXACT_MAX_KEYS",
    "CombinationName",
    "SoftDictConfig",
    "ValueKind",
    "check_number",
    "constructor_options",
    "noting_named_options",
    "options_maker",
    "shown_option",
]

# With top_k=None, a lookup attends exactly to every key while it may attend to at most this
# many; index="auto" keeps its keys in exact numpy search up to the same size. The benchmark's
# 10^4-key rows (benchmarks/scale.py) show why: exact attention there is as fast as any index.
EXACT_MAX_KEYS = 10_000


class ValueKind(str, Enum):
    """The built-in kinds of value a store holds (``value_kind=``); fixed by the first insert."""

    SCALAR = "scalar"
    VECTOR = "vector"
    CATEGORICAL = "categorical"


class CombinationName(str, Enum):
    """How meaning and spelling make one score (``combination=``; the formulas and constants are
    ``softdict.spelling.combination``'s)."""

    RULE_1 = "rule-1"  # the hand-set rule (store formats up to 3 load with it)
    RULE_2 = "rule-2"  # the rule's curve, letters and digits split, learned marks
    RULE_3 = "rule-3"  # rule-2, and a key spelled as the query gains the most
    RULE_4 = "rule-4"  # rule-3, and spelling reads the accents a query bears
    RULE_5 = "rule-5"  # rule-4, a short word common only when very frequent
    RULE_6 = "rule-6"  # rule-5, and both edit measures read words in any order
    RULE_7 = "rule-7"  # rule-6, and a key spelled as typed beats its accented twin
    RULE_8 = "rule-8"  # the default: rule-7, and a short query read as a code (no word, not meant)
    LEARNED_1 = "learned-1"  # learned from real names: opt-in until it keeps min_score's use

    @property
    def weighs_known(self) -> bool:
        """Whether ``lexical_known`` (the rule's weight of common words) is part of it: the
        hand-set curve's, which calibrate and fit may move."""
        return self is not CombinationName.LEARNED_1

    @property
    def reads_accents(self) -> bool:
        """Whether spelling compares the texts' accents (``spelling.scores``), not only their
        letters."""
        return self in (
            CombinationName.RULE_4,
            CombinationName.RULE_5,
            CombinationName.RULE_6,
            CombinationName.RULE_7,
            CombinationName.RULE_8,
        )

    @property
    def edits_sorted(self) -> bool:
        """Whether spelling's edit measure (OSA) compares the texts' words sorted too, as its
        Indel measure always did (``spelling.scores``): the order of words is free."""
        return self in (CombinationName.RULE_6, CombinationName.RULE_7, CombinationName.RULE_8)

    @property
    def prefers_as_typed(self) -> bool:
        """Whether a query typed without accents prefers, of keys spelled alike, the one that
        bears none (``spelling.scores``): it reads accents both ways."""
        return self in (CombinationName.RULE_7, CombinationName.RULE_8)

    @property
    def reads_meaning(self) -> bool:
        """Whether a query's terms depend on its best meaning score over the keys it may attend
        to (``rule-8``: a short query no key means is read as a code), not on its text alone."""
        return self is CombinationName.RULE_8


# What changes how this process works, not what a store answers (``check_same_answers``).
_PROCESS_OPTIONS = ("query_cache_size", "batch_size", "progress")


class SoftDictConfig(BaseModel):
    """Validated, immutable options of one SoftDict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The upper bounds are far beyond any use (a million keys per query, ten million cached
    # queries); they turn a mistyped or tampered value into an error instead of a memory blow-up.
    similarity: Similarity = Similarity.COSINE
    temperature: float | None = None
    top_k: int | None = Field(default=None, gt=0, le=1_000_000)
    max_k: int = Field(default=1024, gt=0, le=1_000_000)
    tail_tolerance: float = Field(default=0.01, gt=0.0, lt=1.0)
    # Full attention in a large store, estimated (softdict._sampling): the half-width wanted on
    # the tail mass's interval at this confidence, at most max_sample keys drawn per query (but
    # 2 at least: one draw has no spread; 0: attend to the head alone), drawn by a generator
    # seeded with seed and the query.
    tolerance: float = Field(default=0.01, gt=0.0, lt=1.0)
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    max_sample: int = Field(default=4096, ge=0, le=1_000_000)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    index: str = "auto"
    value_kind: str | None = None
    query_cache_size: int = Field(default=1024, ge=0, le=10_000_000)
    batch_size: int = Field(default=64, gt=0, le=1_000_000)
    progress: bool | None = None
    # The spelling channel (softdict.spelling): its weight against meaning, 1 as measured and 0
    # for meaning alone; and the share of that weight a query's common English words get.
    lexical: float = Field(default=1.0, ge=0.0, le=1000.0)
    lexical_known: float = Field(default=1 / 16, ge=0.0, le=1.0)
    # How meaning and spelling make one score (softdict.spelling.combination): the hand-set rule's
    # curve with learned marks, under which a key spelled as the query gains the most, spelling
    # reads the accents a query bears and words in any order, a short word is common only when
    # very frequent, a query typed without accents prefers a key that bears none of two spelled
    # alike, and a query typed as a code is read as one where it is no common word or no key
    # means it (rule-8, the default); that reading left out (rule-7, the default before rule-8);
    # the preference for a key spelled as typed left out too (rule-6, the default before
    # rule-7); the edit measure in the typed order (rule-5, the default before rule-6); every
    # short word of the list common (rule-4); the same reading no accents (rule-3); without the
    # "same" floor (rule-2), the rule alone (rule-1, the default before rule-2: a store records
    # its combination, so one saved with an earlier default keeps it), or the learned
    # combination (learned-1, opt-in while it tells a query with no key less well by its best
    # score: README, Spelling).
    combination: CombinationName = CombinationName.RULE_8

    @field_validator("temperature")
    @classmethod
    def _temperature_positive_finite(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError("must be a finite number > 0")
        return value

    @field_validator("value_kind")
    @classmethod
    def _a_kind_named(cls, value: str | None) -> str | None:
        # "" read as "no kind fixed" where the store was made, and as a kind at load: the store
        # worked and saved, and then did not load.
        if value is not None and not value.strip():
            raise ValueError("must name a value kind, or be None to take the first value's kind")
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _a_number_as_a_number(cls, value: object, info: ValidationInfo) -> object:
        # As check_number takes the methods' numbers: bool is an int subclass, so pydantic took
        # top_k=True for top_k=1, and its lax mode took text ("0.05") and a float for a count.
        annotation = cls.model_fields[str(info.field_name)].annotation
        a_number = {int, float} & {annotation, *get_args(annotation)}
        if a_number and isinstance(value, (bool, np.bool_)):
            raise ValueError("must be a number, not True or False")
        if a_number and isinstance(value, (str, bytes)):
            raise ValueError("must be a number, not text")
        nan = isinstance(value, (float, np.floating)) and math.isnan(value)
        if a_number and (nan or (isinstance(value, decimal.Decimal) and value.is_nan())):
            raise ValueError("must be a number, not NaN")  # pydantic named a bound NaN fails
        fraction = isinstance(value, numbers.Number) and not isinstance(value, numbers.Integral)
        if a_number == {int} and fraction:  # 2.0, Decimal(2), Fraction(2)
            raise ValueError(f"must be a whole number (an int), not {type(value).__name__}")
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _text_not_bytes(cls, value: object) -> object:
        # pydantic's lax mode decoded them (combination=b"rule-6"), where keys and queries refuse
        # bytes: an option is text or a number, as typed.
        if isinstance(value, (bytes, bytearray, memoryview)):
            raise ValueError("must be text (a str) or a number, not bytes: decode it first")
        return value

    @field_validator("progress", mode="before")
    @classmethod
    def _progress_true_false_or_none(cls, value: object) -> object:
        # pydantic's bool takes 1, "yes" and "off" as well: progress="no" would have drawn bars.
        if isinstance(value, np.bool_):
            return bool(value)
        if value is not None and not isinstance(value, bool):
            raise ValueError("must be True, False or None")
        return value

    @classmethod
    def build(cls, **options: object) -> SoftDictConfig:
        """Validate ``options``, raising ``ConfigError`` with one line per bad option."""
        try:
            return cls.model_validate(options)
        except ValidationError as exc:
            # pydantic opens a validator's own message with "Value error, ": the message says it.
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}={short_repr(err.get('input'))}: "
                f"{err['msg'].removeprefix('Value error, ')}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid SoftDict option: {problems}") from None

    def naming(self, names: Iterable[str]) -> SoftDictConfig:
        """These options, with ``names`` (those of its fields among them) as the ones a caller
        named (pydantic's ``model_fields_set``): opening an existing store overrides its options
        with those alone (``store.milvus``), where comparing with the defaults could not tell
        ``combination="rule-8"`` named from the default left alone."""
        named = set(names) & set(SoftDictConfig.model_fields)
        return SoftDictConfig.model_construct(_fields_set=named, **dict(self))

    def check_same_answers(self, other: SoftDictConfig, where: str) -> None:
        """ConfigError unless ``other`` (the store at ``where``) has these options, but for
        this process's own (cache, batch size, progress bars): ``copy_to`` an existing empty
        collection, which keeps its options, makes a faithful copy only then."""

        differ = [
            f"{name}={shown_option(getattr(other, name))} "
            f"(the copy's {shown_option(getattr(self, name))})"
            for name in SoftDictConfig.model_fields
            if name not in _PROCESS_OPTIONS and getattr(self, name) != getattr(other, name)
        ]
        if differ:
            raise ConfigError(
                f"{where} holds an empty store made with other options: {', '.join(differ)}; "
                "copy into a new collection"
            )

    def replace(self, **changes: object) -> SoftDictConfig:
        """A copy with ``changes``, validated like the original."""
        return SoftDictConfig.build(**{**self.model_dump(), **changes})

    def temperature_for(self, dim: int) -> float:
        """The temperature in force: the one given, or the measured default for this similarity."""
        if self.temperature is not None:
            return self.temperature
        return self.similarity.default_temperature(dim)


def shown_option(value: object) -> str:
    """An option's value as a message shows it: an enum's value (``'dot'``, not
    ``<Similarity.DOT: 'dot'>``), else its repr."""
    return repr(value.value if isinstance(value, Enum) else value)


def noting_named_options(init: Callable[..., None]) -> Callable[..., None]:
    """Wraps a constructor whose options are keyword-only with defaults (``SoftDict``): it sees
    every option, the default filled in where the caller named none, so this notes which the
    caller named, in ``self._named_options``, before it runs (``SoftDictConfig.naming``)."""

    parameters = inspect.signature(init).parameters.values()
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    known = [p.name for p in parameters if p.kind in named and p.name != "self"]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)

    @functools.wraps(init)
    def init_noting(self: Any, *args: Any, **options: Any) -> None:
        unknown = [name for name in options if name not in known]
        if unknown and not takes_any:  # no **options: a TypeError as Python's,
            # with the options that are, and the one meant
            near = difflib.get_close_matches(unknown[0], known, n=1)
            raise UnknownOptionError(
                f"{type(self).__name__}() got an unknown option {unknown[0]!r}"
                + (f": did you mean {near[0]!r}?" if near else ".")
                + f" Its options: {', '.join(known)}"
            )
        self._named_options = frozenset(options)
        init(self, *args, **options)

    setattr(init_noting, _OPTIONS, tuple(known))
    return init_noting


# Where ``noting_named_options`` leaves a constructor's options, for ``constructor_options``.
_OPTIONS = "_softdict_options"


def options_maker(cls: type) -> type | None:
    """The class whose ``noting_named_options`` constructor ``cls`` inherits or defines
    (``SoftDict``, for a subclass with a constructor of its own too); None where there is none."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is not None and hasattr(init, _OPTIONS):
            return klass
    return None


def constructor_options(cls: type) -> tuple[str, ...]:
    """The options of ``options_maker(cls)``'s constructor; () where there is none."""
    maker = options_maker(cls)
    return () if maker is None else tuple(getattr(vars(maker)["__init__"], _OPTIONS))


def check_number(
    name: str, value: object, expected: str, valid: Callable[[Any], bool], *, whole: bool = False
) -> None:
    """ConfigError unless ``value`` is a finite number (a whole one if ``whole``; bools are not
    numbers here) for which ``valid`` holds; ``expected`` says what was wanted."""
    kind = numbers.Integral if whole else numbers.Real
    if (
        not isinstance(value, kind)
        or isinstance(value, bool)
        or not _representable(value)
        or not valid(value)
    ):
        raise ConfigError(f"{name} must be {expected}, got {short_repr(value)}")


def _representable(value: Any) -> bool:
    """Whether a number is finite as a float64 (10**400 is an int no float holds)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
