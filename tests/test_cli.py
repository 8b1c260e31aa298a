"""The softdict command line: run in process through ``main(argv)`` (so the encoder the test
session loaded is reused), and once as the installed ``softdict`` command."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from softdict import SoftDict
from softdict._cli import main


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run(*args: str, check: bool = True) -> Result:
    """``softdict ARGS`` in this process: its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse exits on usage errors
            code = int(exc.code or 0)
    result = Result(code, out.getvalue(), err.getvalue())
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def prices_csv(tmp_path: Path) -> Path:
    path = tmp_path / "prices.csv"
    path.write_text("name,price,weight\napple,10,0.2\nbanana,5,0.15\nchair,2,5.0\n")
    return path


@pytest.mark.integration
def test_the_installed_command_answers_a_query(tmp_path: Path, bundled_encoder) -> None:
    """The one run as a user runs it: the entry point ``pip install`` put on the PATH."""
    command = shutil.which("softdict")
    assert command is not None, "pip install -e . installs the softdict command"
    SoftDict({"apple": 10, "banana": 5, "chair": 2}, encoder=bundled_encoder).save(tmp_path / "s")
    result = subprocess.run(
        [command, "query", str(tmp_path / "s"), "fruit", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert 5.0 < json.loads(result.stdout)["value"] < 6.0


@pytest.mark.integration
def test_build_query_info_round_trip(tmp_path: Path, prices_csv: Path, bundled_encoder) -> None:
    store = tmp_path / "prices.store"
    out = run("build", str(prices_csv), "--key", "name", "--value", "price", "-o", str(store))
    assert "3 keys" in out.stdout and "scalar" in out.stdout
    answer = json.loads(run("query", str(store), "fruit", "--json", "--top", "2").stdout)
    assert [k["key"] for k in answer["keys"]] == ["banana", "apple"]
    assert 5.0 < answer["value"] < 6.0 and answer["k"] == 3
    explained = run("query", str(store), "fruit", "--explain").stdout
    assert "banana" in explained and "█" in explained and "left out" in explained
    info = run("info", str(store)).stdout
    assert "keys         3" in info and "all-MiniLM-L6-v2" in info
    no_match = run("query", str(store), "quantum chromodynamics", "--min-score", "0.9", check=False)
    assert no_match.returncode == 3 and "no match" in no_match.stderr


@pytest.mark.integration
def test_build_vectors_and_labels_from_json_and_jsonl(tmp_path: Path, bundled_encoder) -> None:
    data = [
        {"name": "apple", "sweet": 0.8, "hard": 0.3, "kind": "fruit"},
        {"name": "granite", "sweet": 0.0, "hard": 1.0, "kind": "rock"},
    ]
    (tmp_path / "d.json").write_text(json.dumps(data))
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(row) for row in data))
    run(
        "build",
        str(tmp_path / "d.json"),
        "--key",
        "name",
        "--value",
        "sweet",
        "--value",
        "hard",
        "-o",
        str(tmp_path / "v"),
    )
    vector = json.loads(run("query", str(tmp_path / "v"), "a ripe pear", "--json").stdout)["value"]
    assert len(vector) == 2 and vector[0] > 0.5
    run(
        "build",
        str(tmp_path / "d.jsonl"),
        "--key",
        "name",
        "--value",
        "kind",
        "-o",
        str(tmp_path / "c"),
    )
    assert (
        json.loads(run("query", str(tmp_path / "c"), "basalt", "--json").stdout)["value"] == "rock"
    )


@pytest.mark.parametrize(
    ("content", "name", "args", "message"),
    [
        (
            "name,price\napple,1\n",
            "a.csv",
            ["--value", "cost"],
            "no column 'cost'; the columns are 'name', 'price'",
        ),
        ("", "a.csv", ["--value", "price"], "the file has no rows"),
        ("name,price\n", "a.csv", ["--value", "price"], "the file has no rows"),
        ('[{"name": "a", "price": 1},', "a.json", ["--value", "price"], "invalid JSON at line 1"),
        (
            '{"name": "a", "price": 1}\n{oops}\n',
            "a.jsonl",
            ["--value", "price"],
            "invalid JSON on line 2",
        ),
        (
            "name,x,y\napple,1,crunchy\n",
            "a.csv",
            ["--value", "x", "--value", "y"],
            "must all hold numbers",
        ),
        ("name,price\napple,1\n", "a.txt", ["--value", "price"], "unknown format"),
    ],
)
def test_bad_input_files_fail_fast_with_a_clear_message(
    tmp_path: Path, content: str, name: str, args: list[str], message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = run("build", str(path), "--key", "name", *args, "-o", str(tmp_path / "s"), check=False)
    assert result.returncode == 1
    assert message in result.stderr and result.stderr.startswith("softdict: error:")
    assert not (tmp_path / "s").exists()


def test_missing_files_and_stores(tmp_path: Path) -> None:
    result = run(
        "build", str(tmp_path / "nope.csv"), "--key", "k", "--value", "v", "-o", "s", check=False
    )
    assert result.returncode == 1 and "no such file" in result.stderr
    result = run("info", str(tmp_path / "nothing"), check=False)
    assert result.returncode == 1 and "no such store" in result.stderr
    result = run("query", str(tmp_path), "x", check=False)
    assert result.returncode == 1 and "manifest.json is missing" in result.stderr


def test_usage_errors_exit_2() -> None:
    assert run("build", check=False).returncode == 2
    assert run("frobnicate", check=False).returncode == 2
