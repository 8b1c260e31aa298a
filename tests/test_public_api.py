"""The public surface: exactly the names in __all__, and a README whose set-up commands CI runs."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

import softdict

ROOT = Path(__file__).resolve().parent.parent


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(softdict).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(softdict.__all__) == public
    assert len(softdict.__all__) == len(set(softdict.__all__))


def test_design_names_are_exported() -> None:
    for name in [
        "SoftDict",
        "Attention",
        "SoftDictError",
        "NoMatchError",
        "EmptyStoreError",
        "ValueShapeError",
        "StoreFormatError",
    ]:
        assert name in softdict.__all__


def setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    first_section = readme.split("\n## ", 1)[0]
    return re.findall(r"```(?:bash|sh)\n(.*?)\n```", first_section, flags=re.S)


def test_readme_opens_with_exactly_two_setup_commands() -> None:
    commands = setup_commands()
    assert len(commands) == 2
    assert all("\n" not in c and "pip install torch==2.13.0" in c for c in commands)
    assert "examples/quickstart.py" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup_commands()[1] in ci.splitlines()


def test_no_public_method_returns_any_and_help_shows_no_sentinel_object() -> None:
    import inspect
    import pydoc
    import typing

    # The methods SoftDict and the parts it is made of define (softdict._facade); the
    # MutableMapping mixins are typed through its generic base.
    parts = [c for c in softdict.SoftDict.__mro__ if c.__module__.startswith("softdict.")]
    members = {name: m for part in reversed(parts) for name, m in vars(part).items()}
    assert {"lookup", "attend", "nearest", "calibrate", "fit", "save", "load"} <= set(members)
    for name, member in members.items():
        if name.startswith("_") and name not in ("__getitem__", "__iter__", "__len__"):
            continue
        function = member.fget if isinstance(member, property) else member
        if not callable(function):
            continue
        hints = typing.get_type_hints(inspect.unwrap(getattr(function, "__func__", function)))
        assert "return" in hints, f"SoftDict.{name} has no return annotation"
        assert hints["return"] is not typing.Any, f"SoftDict.{name} returns Any"
    text = pydoc.render_doc(softdict.SoftDict, renderer=pydoc.plaintext)
    assert "object object at" not in text


def test_plug_ins_registered_through_the_documented_names_are_used_by_name() -> None:
    """One plug-in of each kind, registered under this test's own names through the names the
    docs give; a SoftDict built by those names runs on them (not only imports them)."""
    from _plugins import BooleanColumn, DictBackend, HashingEncoder

    from softdict.encoders import Encoder, register_encoder_name, resolve_encoder
    from softdict.index import IndexBackend, register_backend
    from softdict.store import MemoryStore, Store, register_store
    from softdict.values import ValueColumn, register_value_kind

    class Flag(BooleanColumn):
        kind = "public-api-flag"

    searched: list[int] = []

    class CountingBackend(DictBackend):
        def score_all(self, queries, allow=None):  # type: ignore[no-untyped-def]
            searched.append(len(queries))
            return super().score_all(queries, allow)

    opened: list[str] = []

    def open_memory(location: str, config, **options) -> Store:  # type: ignore[no-untyped-def]
        opened.append(location)
        return MemoryStore(config)

    register_value_kind(Flag)
    register_encoder_name("public-api-encoder", HashingEncoder)
    register_backend("public-api-index", CountingBackend)
    register_store("public-api-store", open_memory)
    assert issubclass(Flag, ValueColumn) and issubclass(CountingBackend, IndexBackend)
    encoder = resolve_encoder("public-api-encoder")
    assert isinstance(encoder.encoder, HashingEncoder) and isinstance(encoder.encoder, Encoder)

    sd = softdict.SoftDict(
        {"apple": True, "apples": True, "chair": False},
        encoder="public-api-encoder",
        value_kind="public-api-flag",
        index="public-api-index",
        store="public-api-store:here",
    )
    assert opened == ["here"] and sd.value_kind == "public-api-flag"
    assert sd.encoder.name == "public-api-encoder" and sd.encoder.dim == HashingEncoder.DIM
    attention = sd.attend("apple")
    assert searched  # the registered backend scored the keys
    assert sd.lookup("apple") == pytest.approx(
        sum(w for key, w in zip(attention.keys, attention.weights) if sd[key] is True)
    )


def test_only_the_package_root_imports_the_facade() -> None:
    """The façade sits on top: no module below it reaches back up (persistence, the store, the
    CLI all work through public interfaces)."""
    import ast

    package = ROOT / "softdict"
    for path in package.rglob("*.py"):
        if path == package / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "softdict._mapping", f"{path} imports the façade"
            if isinstance(node, ast.Import):
                assert all(alias.name != "softdict._mapping" for alias in node.names), path


def test_a_registration_that_could_not_work_is_refused_when_made() -> None:
    """The registries took anything: a name 5 made every error that lists the names sorted
    (index="typo") a raw TypeError, a factory 42 failed at the first insert, a value kind
    registered as an instance made categorical stores, and a store opener that returned None
    an AttributeError (a hostile-input probe)."""
    from _plugins import BooleanColumn, DictBackend

    from softdict.index import backend_names, register_backend
    from softdict.store import register_store, store_schemes
    from softdict.values import kind_names, register_value_kind

    class Numbered(BooleanColumn):
        kind = 5  # type: ignore[assignment]

    before = (backend_names(), kind_names(), store_schemes())
    refused = [
        lambda: register_backend(5, DictBackend),  # type: ignore[arg-type]
        lambda: register_backend("", DictBackend),
        lambda: register_backend("public-api-bad", 42),  # type: ignore[arg-type]
        lambda: register_backend("public-api-bad", DictBackend, description=3),  # type: ignore[arg-type]
        lambda: register_value_kind(Numbered),
        lambda: register_value_kind(BooleanColumn()),  # type: ignore[arg-type]
        lambda: register_value_kind(dict),  # type: ignore[arg-type]
        lambda: register_store(5, lambda *a, **k: None),  # type: ignore[arg-type]
        lambda: register_store("a:b", lambda *a, **k: None),
        lambda: register_store("public-api-bad", "opener"),  # type: ignore[arg-type]
        lambda: register_store("bad\ud800", lambda *a, **k: None),
    ]
    for register in refused:
        with pytest.raises(softdict.ConfigError):
            register()
    assert (backend_names(), kind_names(), store_schemes()) == before
    with pytest.raises(softdict.ConfigError, match="index='typo'"):
        softdict.SoftDict(index="typo")
    register_store("public-api-none", lambda location, config, **options: None)
    with pytest.raises(softdict.ConfigError, match="opened NoneType, not a softdict"):
        softdict.SoftDict(store="public-api-none:x")
