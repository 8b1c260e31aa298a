"""Options are declared once, in the config model (``SoftDictConfig``): SoftDict's signature,
its docstring and the retrieval policy's defaults are checked against it here."""

from __future__ import annotations

import dataclasses
import inspect
from decimal import Decimal
from fractions import Fraction
from typing import get_args

import numpy as np
import pytest

from softdict import ConfigError, SoftDict
from softdict._config import SoftDictConfig
from softdict._selection import RetrievalPolicy
from tests._support import FakeEncoder

# Arguments of SoftDict() that are not options of the store's config.
NOT_OPTIONS = {"self", "data", "encoder", "store", "collection"}
FIELDS = SoftDictConfig.model_fields


def options_of_signature() -> dict[str, inspect.Parameter]:
    parameters = inspect.signature(SoftDict.__init__).parameters
    return {name: p for name, p in parameters.items() if name not in NOT_OPTIONS}


def test_the_signature_lists_exactly_the_config_options_with_their_defaults() -> None:
    options = options_of_signature()
    assert set(options) == set(FIELDS)
    for name, parameter in options.items():
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, name
        # A default in the signature is what the config makes of it (an enum from its value).
        built = getattr(SoftDictConfig.build(**{name: parameter.default}), name)
        assert built == FIELDS[name].default, name


def test_the_docstring_documents_every_option() -> None:
    doc = inspect.getdoc(SoftDict) or ""
    missing = [name for name in FIELDS if f"\n    {name}: " not in doc]
    assert not missing, f"SoftDict's docstring does not document {missing}"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("similarity", "dot"),
        ("temperature", 0.3),
        ("top_k", 5),
        ("max_k", 64),
        ("tail_tolerance", 0.05),
        ("tolerance", 0.02),
        ("confidence", 0.9),
        ("max_sample", 100),
        ("seed", 7),
        ("index", "flat"),
        ("value_kind", "vector"),
        ("query_cache_size", 3),
        ("batch_size", 8),
        ("progress", True),
        ("lexical", 0.5),
        ("lexical_known", 0.25),
        ("combination", "learned-1"),
    ],
)
def test_each_option_given_reaches_the_store(name: str, value: object) -> None:
    assert name in FIELDS
    sd = SoftDict(encoder=FakeEncoder(), **{name: value})  # type: ignore[arg-type]
    assert getattr(sd._store.config, name) == getattr(SoftDictConfig.build(**{name: value}), name)
    assert getattr(sd._store.config, name) != FIELDS[name].default


def test_every_option_is_covered_by_the_test_above() -> None:
    marks = test_each_option_given_reaches_the_store.pytestmark  # type: ignore[attr-defined]
    covered = {name for name, _ in marks[0].args[1]}
    assert covered == set(FIELDS)


# The options that are numbers (every other is a name, or progress, a bool).
NUMBER_OPTIONS = [
    "temperature",
    "top_k",
    "max_k",
    "tail_tolerance",
    "tolerance",
    "confidence",
    "max_sample",
    "seed",
    "query_cache_size",
    "batch_size",
    "lexical",
    "lexical_known",
]


def test_the_number_options_are_every_int_and_float_option() -> None:
    numbers = {int, float, int | None, float | None}
    assert set(NUMBER_OPTIONS) == {name for name, f in FIELDS.items() if f.annotation in numbers}


@pytest.mark.parametrize("flag", [True, False, np.True_])
@pytest.mark.parametrize("name", NUMBER_OPTIONS)
def test_a_number_option_refuses_true_and_false(name: str, flag: object) -> None:
    """bool is an int subclass, so the config took top_k=True for top_k=1 (and seed=False
    for 0, temperature=True for 1.0); a number option refuses it, as the methods' number
    arguments do (``check_number``)."""
    with pytest.raises(ConfigError, match=f"{name}=.*must be a number, not True or False"):
        SoftDict(encoder=FakeEncoder(), **{name: flag})  # type: ignore[arg-type]


@pytest.mark.parametrize("nan", [float("nan"), np.float32("nan")])
@pytest.mark.parametrize("name", NUMBER_OPTIONS)
def test_a_number_option_calls_nan_nan(name: str, nan: float) -> None:
    """NaN fails every bound, so pydantic named one ("lexical=nan: Input should be less than or
    equal to 1000"), as if the number were too large."""
    with pytest.raises(ConfigError, match=f"{name}=.*nan.*: must be a number, not NaN$"):
        SoftDict(encoder=FakeEncoder(), **{name: nan})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NUMBER_OPTIONS)
def test_a_number_option_refuses_text_and_a_count_refuses_a_float(name: str) -> None:
    """pydantic's lax mode took temperature="0.05", seed="3" and top_k=2.0, which the methods'
    number arguments refuse (``check_number``); the options refuse them too."""
    with pytest.raises(ConfigError, match=f"{name}='1': must be a number, not text$"):
        SoftDict(encoder=FakeEncoder(), **{name: "1"})  # type: ignore[arg-type]
    whole = int in {FIELDS[name].annotation, *get_args(FIELDS[name].annotation)}
    if whole:
        for fraction in (2.0, Decimal(2), Fraction(2)):
            with pytest.raises(
                ConfigError, match=f"{name}=.*whole number .*not {type(fraction).__name__}"
            ):
                SoftDict(encoder=FakeEncoder(), **{name: fraction})  # type: ignore[arg-type]
        assert getattr(SoftDictConfig.build(**{name: np.int64(2)}), name) == 2


def test_number_options_set_later_refuse_true_and_false_and_progress_takes_them() -> None:
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder(), progress=True)
    for name in ("temperature", "lexical", "lexical_known"):
        before = getattr(sd, name)
        with pytest.raises(ConfigError, match="not True or False"):
            setattr(sd, name, True)
        assert getattr(sd, name) == before
    with pytest.raises(ConfigError, match="query_cache_size"):
        SoftDict.open("milvus:./never-made.db", collection="c", query_cache_size=True)  # type: ignore[arg-type]
    assert sd._store.config.progress is True


def test_a_misspelt_option_is_an_error_that_names_the_option_meant() -> None:
    """An option spelled wrong, given to the constructor or set later, says which one was meant
    (set later, it was kept as a new attribute and changed nothing); other attributes are set
    as on any object."""
    with pytest.raises(TypeError, match=r"unknown option 'temprature': did you mean 'temperature'"):
        SoftDict({"apple": 1.0}, encoder=FakeEncoder(), temprature=0.5)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="unknown option"):  # a softdict error too
        SoftDict(encoder=FakeEncoder(), batch_sise=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unknown option 'x'\. Its options: encoder, "):
        SoftDict(x=1)  # type: ignore[call-arg]
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    for wrong, meant in (("temprature", "temperature"), ("lexicl", "lexical"), ("top_K", "top_k")):
        with pytest.raises(ConfigError, match=f"no option '{wrong}': did you mean '{meant}'"):
            setattr(sd, wrong, 0.5)
        assert not hasattr(sd, wrong)
    assert sd.temperature == 0.05 and sd.lexical == 1.0
    sd.note = "mine"  # not close to any option: an attribute like any other
    assert sd.note == "mine"


@pytest.mark.parametrize(
    ("name", "value"), [("batch_size", 4), ("top_k", 3), ("index", "flat"), ("encoder", None)]
)
def test_an_option_fixed_at_construction_cannot_be_set_later(name: str, value: object) -> None:
    """``sd.batch_size = 4`` was kept as a new attribute and changed nothing (and setting
    ``top_k`` raised Python's bare "has no setter"): a ConfigError says how the option is
    chosen and which ones can be set, and the store is as it was."""
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder(), batch_size=8)
    before = (sd.top_k, sd.index_description, sd.encoder, sd.__dict__.copy())
    with pytest.raises(
        ConfigError,
        match=rf"{name} cannot change on a live SoftDict: .*"
        rf"SoftDict\(\.\.\., {name}=\.\.\.\).* set afterwards: combination, ",
    ):
        setattr(sd, name, value)
    assert (sd.top_k, sd.index_description, sd.encoder, sd.__dict__) == before
    with pytest.raises(ConfigError, match="index_description is read only"):
        sd.index_description = "flat"  # type: ignore[misc]
    with pytest.raises(
        ConfigError, match=r"did you mean 'batch_size'\? .*batch_size cannot be set"
    ):
        sd.Batch_Size = 4
    assert sd.lookup("apple") == pytest.approx(1.0)


def test_a_subclass_sets_its_own_options_as_attributes() -> None:
    """Only SoftDict's own options are fixed: a subclass's constructor keeps its options as
    attributes, and SoftDict's stay fixed in it."""

    class Priced(SoftDict):
        def __init__(self, data: dict[str, float], *, currency: str = "EUR", **options: object):
            self.currency = currency
            super().__init__(data, **options)

    sd = Priced({"apple": 1.0}, currency="USD", encoder=FakeEncoder())
    sd.currency = "GBP"
    # Names near a fixed option or a report are a subclass's to use (only those near an option
    # that can be set are taken for a misspelling).
    sd.seeds, sd.indexes, sd.stored = [1, 2], {}, True
    assert sd.currency == "GBP" and sd.seeds == [1, 2] and sd.lookup("apple") == pytest.approx(1.0)

    class Labelled(SoftDict):
        @property
        def label(self) -> str:
            return "fruit"

    with pytest.raises(AttributeError):  # its own read-only property: as Python says it
        Labelled({"apple": 1.0}, encoder=FakeEncoder()).label = "veg"  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"when one is made \(SoftDict\(\.\.\., top_k="):
        Labelled({"apple": 1.0}, encoder=FakeEncoder()).top_k = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match="batch_size cannot change on a live Priced"):
        sd.batch_size = 4


@pytest.mark.parametrize(
    ("name", "text"),
    [("combination", "rule-6"), ("similarity", "dot"), ("index", "flat"), ("value_kind", "vector")],
)
def test_an_option_given_as_bytes_is_refused_as_keys_and_queries_are(name: str, text: str) -> None:
    """pydantic's lax mode decoded bytes: combination=b"rule-6" was taken, where a key or a
    query given as bytes is refused."""
    for given in (text.encode(), bytearray(text.encode())):
        with pytest.raises(ConfigError, match=rf"{name}=.*not bytes: decode it first"):
            SoftDict(encoder=FakeEncoder(), **{name: given})
    sd = SoftDict({"apple": 1.0}, encoder=FakeEncoder())
    with pytest.raises(ConfigError, match="not bytes"):
        sd.combination = b"rule-6"  # type: ignore[assignment]
    assert sd.combination == "rule-8"


@pytest.mark.parametrize("bad", [1, 0, "no", "yes", 1.0])
def test_progress_takes_only_true_false_or_none(bad: object) -> None:
    """pydantic's bool took 1, "yes" and "no" (which drew no bar, or a bar, by its spelling)."""
    with pytest.raises(ConfigError, match=r"progress=.*must be True, False or None"):
        SoftDict(encoder=FakeEncoder(), progress=bad)  # type: ignore[arg-type]
    assert SoftDict(encoder=FakeEncoder(), progress=np.False_)._store.config.progress is False


def test_the_retrieval_policy_takes_its_defaults_and_values_from_the_config() -> None:
    config = SoftDictConfig()
    policy = RetrievalPolicy.from_config(config, dim=384)
    for field in dataclasses.fields(RetrievalPolicy):
        if field.name == "temperature":
            assert policy.temperature == config.temperature_for(384)
            continue
        assert field.default == FIELDS[field.name].default, field.name
        assert getattr(policy, field.name) == getattr(config, field.name), field.name
    changed = config.replace(top_k=3, max_k=16, tail_tolerance=0.2, tolerance=0.1, seed=4)
    policy = RetrievalPolicy.from_config(changed, dim=384)
    assert (policy.top_k, policy.max_k, policy.tail_tolerance, policy.tolerance, policy.seed) == (
        3,
        16,
        0.2,
        0.1,
        4,
    )
