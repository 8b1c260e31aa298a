"""The example scripts, run as scripts (``__main__``, their own argv) on the bundled encoder, say
what they should. They run in this process, so they share the encoder the session loaded."""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(autouse=True)
def _loaded_once(bundled_encoder) -> None:
    """Load the bundled model before the first example, once for the session."""


def run(script: str, *args: str) -> str:
    out = io.StringIO()
    argv = sys.argv
    sys.argv = [str(EXAMPLES / script), *args]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    finally:
        sys.argv = argv
    return out.getvalue()


def test_quickstart_prints_the_fruit_blend_and_weights() -> None:
    out = run("quickstart.py")
    assert "lookup('fruit') = 5.1" in out
    assert "banana   weight 0.97" in out and "chair" in out


def test_vector_values_blend_nutrition_by_meaning() -> None:
    out = run("vector_values.py")
    sweet = next(line for line in out.splitlines() if line.startswith("'a sweet fruit'"))
    assert float(sweet.split("kcal ")[1].split(",")[0]) < 100  # fruit, not chocolate


def test_fuzzy_matching_maps_names_and_saves_a_plot(tmp_path: Path) -> None:
    png = tmp_path / "attention.png"
    out = run("fuzzy_matching.py", "--plot", str(png))
    assert "'USA'                -> US" in out and "'Deutschland'        -> DE" in out
    assert "'Germny'             -> DE" in out and "'Itlay'              -> IT" in out
    assert "'Untied Kingdom'     -> GB" in out
    assert "'my shopping list'   -> no match" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
