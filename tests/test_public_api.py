"""The public surface: exactly the names in __all__, and a README whose set-up commands CI runs."""

from __future__ import annotations

import re
import types
from pathlib import Path

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
