"""The softdict command line: run in process through ``main(argv)`` (so the encoder the test
session loaded is reused), and once as the installed ``softdict`` command."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _support import COMBINATIONS, close, naive_combined

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


def test_python_m_softdict_runs_the_command(tmp_path: Path) -> None:
    """Where the entry point is not on the PATH (a venv not activated), ``python -m softdict``
    runs the same command: it said "No module named softdict.__main__"."""
    result = subprocess.run(
        [sys.executable, "-m", "softdict", "--help"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "usage: softdict" in result.stdout and "query" in result.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "softdict", "info", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 1 and "no such store folder" in missing.stderr


@pytest.mark.integration
def test_build_query_info_round_trip(tmp_path: Path, prices_csv: Path, bundled_encoder) -> None:
    store = tmp_path / "prices.store"
    out = run("build", str(prices_csv), "--key", "name", "--value", "price", "-o", str(store))
    assert "3 keys" in out.stdout and "scalar" in out.stdout
    answer = json.loads(run("query", str(store), "fruit", "--json", "--top", "2").stdout)
    assert [k["key"] for k in answer["keys"]] == ["banana", "apple"]
    assert 5.0 < answer["value"] < 6.0 and answer["k"] == 3
    explained = run("query", str(store), "fruit", "--explain").stdout
    assert "banana" in explained and "█" in explained and "attention over all 3 keys" in explained
    info = run("info", str(store)).stdout
    assert "keys         3" in info and "all-MiniLM-L6-v2" in info
    # What is in force, as a load gives it: "auto" and "default" said neither.
    loaded = SoftDict.load(store)
    assert f"temperature {loaded.temperature:g} (default)" in info
    assert f"index        {loaded.index_description}\n" in info  # "auto: exact"
    no_match = run("query", str(store), "quantum chromodynamics", "--min-score", "0.9", check=False)
    assert no_match.returncode == 3 and no_match.stdout.startswith("no match (best: ")


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
            "invalid JSON at line 2",
        ),
        (
            "name,x,y\napple,1,crunchy\n",
            "a.csv",
            ["--value", "x", "--value", "y"],
            "line 2, column 'y': 'crunchy' is not a number",
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
    result = run("build", str(tmp_path), "--key", "k", "--value", "v", "-o", "s", check=False)
    assert result.returncode == 1 and "a folder, not a file" in result.stderr


def test_info_refuses_a_store_whose_files_are_missing_or_cut(tmp_path: Path) -> None:
    """info reads the manifest, and checks that every file it lists is there at its size: a
    store that would not load is an error (exit 1), not described as if whole."""
    _, store = build(tmp_path, "name,price\napple,10\nbanana,5\n")
    assert run("info", store).returncode == 0
    keys = Path(store) / "keys.json"
    keys.write_bytes(keys.read_bytes()[:-3])
    result = run("info", store, check=False)
    assert result.returncode == 1 and "keys.json missing or not of the size" in result.stderr
    keys.unlink()
    assert run("info", store, check=False).returncode == 1


def test_build_replaces_a_store_only_with_force(tmp_path: Path) -> None:
    """build -o onto a store replaced it without a word; now that is a usage error (exit 2)
    unless --force is given, and the store stays as it was."""
    _, store = build(tmp_path, "name,price\napple,10\nbanana,5\n")
    result, _ = build(tmp_path, "name,price\nchair,2\n", check=False)
    assert result.returncode == 2 and not result.stdout
    assert f"{store} holds a store; pass --force to replace it" in result.stderr
    assert list(SoftDict.load(store)) == ["apple", "banana"]
    build(tmp_path, "name,price\nchair,2\n", "--force")
    assert list(SoftDict.load(store)) == ["chair"]
    Path(store, "manifest.json").unlink()  # no store: --force does not make save replace it
    result, _ = build(tmp_path, "name,price\nchair,2\n", "--force", check=False)
    assert result.returncode == 1 and "is not a softdict store" in result.stderr
    # Said before the table is read and its keys encoded (it was said only by the save, after
    # them): an encoder that cannot load is not what the user hears first.
    for arguments in (["--force", "--encoder", "/no/such/model"], ["-o", str(tmp_path / "t.csv")]):
        result, _ = build(tmp_path, "name,price\nchair,2\n", *arguments, check=False)
        assert result.returncode == 1 and "exists and is not a softdict store" in result.stderr
    assert (tmp_path / "t.csv").read_text() == "name,price\nchair,2\n"


def cut_short_save(tmp_path: Path) -> tuple[str, Path, Path]:
    """A store folder ``s`` whose save of chair and banana over apple was killed between its
    renames: ``s`` missing, the old store and the new one whole beside it."""
    csv = tmp_path / "new.csv"
    csv.write_text("name,price\nchair,2\nbanana,5\n")
    fresh = tmp_path / "fresh"
    command = ["build", str(csv), "--key", "name", "--value", "price", "--encoder", "test-hashing"]
    run(*command, "-o", str(fresh))
    _, store = build(tmp_path, "name,price\napple,10\n")
    old, new = tmp_path / ".s.old-aaaaaaaaaaaa", tmp_path / ".s.new-aaaaaaaaaaaa"
    os.rename(store, old)  # the first rename happened...
    os.rename(fresh, new)  # ...the second did not
    return store, old, new


def test_info_finishes_a_save_cut_short_as_a_load_does(tmp_path: Path) -> None:
    """info said "no such store folder" of a store a load would have recovered."""
    store, old, new = cut_short_save(tmp_path)
    result = run("info", store)
    assert "keys         2" in result.stdout and "finished a save" in result.stderr
    assert not old.exists() and not new.exists()
    assert list(SoftDict.load(store)) == ["chair", "banana"]


def test_build_refuses_to_replace_a_store_a_save_left_in_its_swap_folders(tmp_path: Path) -> None:
    """Without --force, build does not write over a store whose save was cut short: the store
    is brought back, as a load would, and build refuses as for any store."""
    store, _, _ = cut_short_save(tmp_path)
    result, _ = build(tmp_path, "name,price\nplum,3\n", check=False)
    assert result.returncode == 2 and "holds a store; pass --force" in result.stderr
    assert list(SoftDict.load(store)) == ["chair", "banana"]


def test_build_keeps_a_store_saved_at_its_output_while_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build looks for a store at -o before it reads its table, which can take minutes; a store
    another process saves there meanwhile is not replaced without --force either (the save
    checks again, under the store's lock)."""
    import softdict._cli as cli

    store = str(tmp_path / "s")
    reading = cli.read_table

    def read_after_another_save(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        SoftDict({"precious": 9.0}, encoder="test-hashing").save(store)
        return reading(*args, **kwargs)

    monkeypatch.setattr(cli, "read_table", read_after_another_save)
    result, _ = build(tmp_path, "name,price\napple,10\n", check=False)
    assert result.returncode == 1 and "holds a store and replace=False" in result.stderr
    assert "--force" in result.stderr
    assert dict(SoftDict.load(store).items()) == {"precious": 9.0}


def test_info_reads_a_store_whose_leftover_swap_folder_vanishes_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save in another process removes its ``.s.old-T`` between info's listing of the folder
    and its look at each entry: info exited 1 with "No such file or directory" about a
    healthy store. An entry that vanishes is treated as absent."""
    _, store = build(tmp_path, "name,price\napple,10\n")
    leftover = tmp_path / ".s.old-0123456789ab"
    leftover.mkdir()
    looking = Path.stat

    def gone(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self.name == leftover.name:
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return looking(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", gone)
    result = run("info", store, check=False)
    assert result.returncode == 0, result.stderr
    assert "keys         1" in result.stdout


def test_usage_errors_exit_2() -> None:
    assert run("build", check=False).returncode == 2
    assert run("frobnicate", check=False).returncode == 2


# -- reading tables as they come (issue: messy input loses nothing) ------------------------------


def build(tmp_path: Path, content: str, *args: str, name: str = "t.csv", check: bool = True):
    """Build a store from ``content`` on the test suite's hashing encoder (no model needed)."""
    path = tmp_path / name
    path.write_bytes(content.encode())
    store = str(tmp_path / "s")
    command = ["build", str(path), "--key", "name", "-o", store, "--encoder", "test-hashing"]
    if not any(arg == "--value" for arg in args):
        command += ["--value", "price"]
    return run(*command, *args, check=check), store


@pytest.mark.parametrize("separator", ["\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_line_breaks_inside_a_cell_stay_in_the_cell(tmp_path: Path, separator: str) -> None:
    result, store = build(tmp_path, f"name,price\napple{separator}pie,10\nbanana,5\n")
    assert "2 keys, scalar values" in result.stdout
    loaded = SoftDict.load(store)
    assert list(loaded) == [f"apple{separator}pie", "banana"] and loaded["banana"] == 5


@pytest.mark.parametrize("separator", ["\x85", "\u2028", "\u2029"])
def test_a_json_lines_string_keeps_its_line_separators(tmp_path: Path, separator: str) -> None:
    """JSON Lines are split at line feeds only: a string holding U+2028 or U+0085 as it is (as
    ``json.dumps(..., ensure_ascii=False)`` writes it) is one key, not a broken line."""
    rows = [{"name": f"apple{separator}pie", "price": 10}, {"name": "banana", "price": 5}]
    content = "\r\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\r\n"
    _, store = build(tmp_path, content, name="t.jsonl")
    loaded = SoftDict.load(store)
    assert list(loaded) == [f"apple{separator}pie", "banana"] and loaded["banana"] == 5


def test_a_quoted_cell_keeps_its_newlines(tmp_path: Path) -> None:
    _, store = build(tmp_path, 'name,price\n"two\nlines",10\r\n"and\r\nthree",3\nbanana,5\n')
    assert list(SoftDict.load(store)) == ["two\nlines", "and\r\nthree", "banana"]


def test_a_number_column_with_a_bad_cell_is_an_error_or_skipped_and_counted(
    tmp_path: Path,
) -> None:
    content = "name,price\napple,10\npear,11\nbanana,\nkiwi,cheap\nplum,3\n"
    result, store = build(tmp_path, content, check=False)
    assert result.returncode == 1
    assert "line 4, column 'price': '' is not a number" in result.stderr
    assert "--skip-bad-rows" in result.stderr and not Path(store).exists()
    result, store = build(tmp_path, content, "--skip-bad-rows")
    assert "3 keys, scalar values" in result.stdout
    assert "left out 2 rows" in result.stderr and "line 4, column 'price'" in result.stderr
    assert dict(SoftDict.load(store).items()) == {"apple": 10, "pear": 11, "plum": 3}


@pytest.mark.parametrize("cell", ["1_000", "\u0661\u0662\u0663", "\uff11\uff12", "0x10"])
def test_a_cell_python_would_read_as_a_number_but_a_table_does_not_is_no_number(
    tmp_path: Path, cell: str
) -> None:
    """Numbers are read as tables write them (ASCII digits, sign, point, exponent): "1_000",
    Arabic-Indic or fullwidth digits are no number, so in a number column they are an error
    naming the cell, not quietly 1000, 123 or 12."""
    content = f"name,price\napple,10\npear,11\nbanana,{cell}\nplum,3\n"
    result, _ = build(tmp_path, content, check=False)
    assert result.returncode == 1
    assert f"line 4, column 'price': {cell!r} is not a number" in result.stderr
    _, store = build(tmp_path, "name,price\napple,10\npear, 1e3 \nplum,-.5\n")
    assert dict(SoftDict.load(store).items()) == {"apple": 10, "pear": 1000, "plum": -0.5}


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (
            '{"name":"a","price":"red"}\n{"name":"b","prize":"yellow"}\n{"name":"c","price":"red"}\n',
            "t.jsonl",
            "line 2, column 'price' is missing (other rows have it)",
        ),
        ('[{"name":"a"},{"name":"b","price":10}]', "t.json", "item 1, column 'price' is missing"),
        ('[{"name":"a","price":1},{"name":"b","price":null}]', "t.json", "'price' is null"),
    ],
    ids=["misspelt field", "first row without it", "null number"],
)
def test_a_json_row_without_the_value_is_an_error_or_skipped(
    tmp_path: Path, content: str, name: str, message: str
) -> None:
    """A JSON row that lacks the value column (or holds null in it) was stored with None as
    its value, and the value under a misspelt field name was lost without a word."""
    result, store = build(tmp_path, content, name=name, check=False)
    assert result.returncode == 1 and message in result.stderr
    assert "--skip-bad-rows" in result.stderr and not Path(store).exists()
    result, store = build(tmp_path, content, "--skip-bad-rows", name=name)
    assert "left out 1 row" in result.stderr and None not in SoftDict.load(store).values()


def test_a_json_null_in_a_label_column_is_the_label_none(tmp_path: Path) -> None:
    _, store = build(
        tmp_path, '[{"name":"a","price":"x"},{"name":"b","price":null}]', name="t.json"
    )
    assert dict(SoftDict.load(store).items()) == {"a": "x", "b": None}


@pytest.mark.parametrize("key", ["   ", "\t", "\u3000"])
def test_a_key_cell_of_whitespace_only_has_no_text(tmp_path: Path, key: str) -> None:
    """A blank key cell was refused but one of spaces stored as a key."""
    rows = [{"name": "apple", "price": 10}, {"name": key, "price": 5}]
    result, _ = build(tmp_path, json.dumps(rows), name="t.json", check=False)
    assert result.returncode == 1 and "item 2 has no text in the key column 'name'" in result.stderr


def test_zero_padded_codes_keep_their_zeros_unless_numbers_are_asked_for(tmp_path: Path) -> None:
    """ "007" was read as the number 7: a column of such codes is text now, and a number
    column holding one is an error that says how to choose."""
    _, store = build(tmp_path, "name,price\napple,007\nbanana,042\npear,0\n")
    assert dict(SoftDict.load(store).items()) == {"apple": "007", "banana": "042", "pear": "0"}
    content = "name,price\napple,007\nbanana,12\npear,0.5\n"
    result, _ = build(tmp_path, content, "--force", check=False)
    assert result.returncode == 1 and "'007' is not a number" in result.stderr
    assert "--value-kind categorical" in result.stderr and "--value-kind scalar" in result.stderr
    content = "name,price\napple,007\nbanana,-042\n"
    _, store = build(tmp_path, content, "--value-kind", "scalar", "--force")
    assert dict(SoftDict.load(store).items()) == {"apple": 7, "banana": -42}
    content = "name,price,size\napple,007,1\nbanana,3,2\n"  # a vector of two columns
    result, _ = build(
        tmp_path, content, "--value", "price", "--value", "size", "--force", check=False
    )
    assert "pass --value-kind vector to read it as a number" in result.stderr


def test_vector_values_from_one_column_are_json_lists(tmp_path: Path) -> None:
    """--value-kind vector refused the JSON lists it asks for ("is not a number"), and for a
    column of numbers said to "give a 1-D sequence", which a command line cannot."""
    rows = [{"name": "apple", "price": [1, 2]}, {"name": "pear", "price": [3, 4]}]
    _, store = build(tmp_path, json.dumps(rows), "--value-kind", "vector", name="t.json")
    assert SoftDict.load(store)["pear"].tolist() == [3.0, 4.0]
    content = "name,price\napple,10\npear,5\n"
    result, _ = build(tmp_path, content, "--value-kind", "vector", "--force", check=False)
    assert result.returncode == 1 and "line 2, column 'price': '10' is no vector" in result.stderr
    assert "repeat --value" in result.stderr
    for bad, message in (
        ([3, "4"], "its item '4' is no finite number"),
        ([], "[] is no vector"),
        ([1, 2, 3], "a vector of 3 numbers, where item 1's has 2"),
    ):
        rows = [{"name": "apple", "price": [1, 2]}, {"name": "pear", "price": bad}]
        result, store = build(
            tmp_path, json.dumps(rows), "--value-kind", "vector", "--force", name="t.json",
            check=False,
        )  # fmt: skip
        assert result.returncode == 1 and f"item 2, column 'price': {message}" in result.stderr
    result, store = build(
        tmp_path, json.dumps(rows), "--value-kind", "vector", "--force", "--skip-bad-rows",
        name="t.json",
    )  # fmt: skip
    assert list(SoftDict.load(store)) == ["apple"]


def test_a_csv_column_of_json_lists_makes_vectors(tmp_path: Path) -> None:
    """A CSV cell is text: "[1, 2]" under --value-kind vector was "no vector", with the advice
    to give a JSON list per cell, which it was."""
    table = 'name,price\napple,"[1, 2.5]"\npear," [3, 4]"\n'
    _, store = build(tmp_path, table, "--value-kind", "vector")
    assert SoftDict.load(store)["apple"].tolist() == [1.0, 2.5]
    for cell, message in (
        ("[1, NaN]", "its item nan is no finite number"),
        ("[1, 2", "'[1, 2' is no JSON list"),
        ("[1e-400, 1]", "its item 1e-400 is"),
    ):
        table = f'name,price\npear,"{cell}"\n'
        result, _ = build(tmp_path, table, "--value-kind", "vector", "--force", check=False)
        assert result.returncode == 1 and f"line 2, column 'price': {message}" in result.stderr


def test_a_csv_line_of_spaces_only_is_skipped_as_a_blank_one(tmp_path: Path) -> None:
    """A line of spaces was a row of one cell ("line 3 has 1 cells, the header 2; a cell may
    hold an unquoted comma"); a blank line, and such a line in JSON Lines, are skipped."""
    _, store = build(tmp_path, "name,price\napple,1\n   \n\t\npear,2\n\n")
    assert dict(SoftDict.load(store).items()) == {"apple": 1, "pear": 2}
    result, _ = build(tmp_path, "name,price\napple,1\n  x \n", "--force", check=False)
    assert result.returncode == 1 and "line 3 has 1 cells, the header 2" in result.stderr


def test_keys_that_are_one_text_in_two_unicode_forms_are_reported(tmp_path: Path) -> None:
    """NFC and NFD "Café" are two keys (as in a dict), and a lookup typed as either split 50/50
    between them without a word; the build now says so."""
    nfc, nfd = "Caf\u00e9", "Cafe\u0301"
    result, store = build(tmp_path, f"name,price\n{nfc},10\n{nfd},20\nTea,3\n")
    assert len(SoftDict.load(store)) == 3  # both kept: the exact mapping is a dict's
    assert "1 keys are another key in another Unicode form" in result.stderr
    assert "'Caf\\xe9' and 'Cafe\\u0301'" in result.stderr
    result, _ = build(tmp_path, f"name,price\n{nfc},10\nTea,3\n", "--force")
    assert "Unicode form" not in result.stderr


def test_an_empty_output_path_is_refused(tmp_path: Path) -> None:
    result, _ = build(tmp_path, "name,price\napple,1\n", "-o", "", check=False)
    assert result.returncode == 1 and "the path is empty" in result.stderr


def test_a_number_too_small_for_a_float_is_an_error_not_zero(tmp_path: Path) -> None:
    result, store = build(tmp_path, "name,price\napple,1e-400\npear,2\n", check=False)
    assert result.returncode == 1 and "'1e-400' is too small for a 64-bit float" in result.stderr
    content = '{"name": "apple", "price": 2}\n{"name": "pear", "price": 1e-400}\n'
    result, store = build(tmp_path, content, name="t.jsonl", check=False)
    assert result.returncode == 1 and "line 2, column 'price': '1e-400' is too" in result.stderr
    content = '{"name": "apple", "price": 2, "note": 1e-400}\n'  # a column no value comes from
    _, store = build(tmp_path, content, name="t.jsonl")
    assert dict(SoftDict.load(store).items()) == {"apple": 2}
    _, store = build(tmp_path, "name,price\napple,0e-400\npear,0.000\n", "--force")
    assert dict(SoftDict.load(store).items()) == {"apple": 0.0, "pear": 0.0}


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("NaN", "'NaN' is no finite number"),
        ("-inf", "'-inf' is no finite number"),
        ("1e400", "1e400 is beyond a 64-bit float's range"),
        ("9007199254740993", "9007199254740993 is an integer beyond 2**53"),
        # Printed whole, 400 digits, before; by its size now (as every message does).
        ("1" + "0" * 400, "an integer of 401 digits or so is an integer beyond 2**53"),
    ],
)
def test_a_number_that_is_no_value_is_a_cell_error(tmp_path: Path, cell: str, message: str) -> None:
    """NaN, infinity, 1e400 and integers past 2**53 passed the table's checks: the store refused
    them after the encoder loaded, naming a key, not a line, and --skip-bad-rows kept them."""
    table = f"name,price\napple,1\npear,{cell}\nplum,2\n"
    result, store = build(tmp_path, table, "--encoder", "/no/such/model", check=False)
    assert result.returncode == 1 and f"line 3, column 'price': {message}" in result.stderr
    result, store = build(tmp_path, table, "--skip-bad-rows")
    assert dict(SoftDict.load(store).items()) == {"apple": 1, "plum": 2}
    assert "left out 1 rows" in result.stderr and message in result.stderr
    labels = f'[{{"name": "apple", "price": "x"}}, {{"name": "pear", "price": {cell}}}]'
    if cell in ("NaN", "1e400"):  # as JSON (Python's reads NaN): in a column of labels too
        result, _ = build(tmp_path, labels, "--force", name="t.json", check=False)
        assert result.returncode == 1 and "item 2, column 'price'" in result.stderr


@pytest.mark.parametrize(
    ("item", "shown"),
    [("9007199254740993", "9007199254740993"), ("1" + "0" * 400, "an integer of 401 digits or so")],
)
def test_an_integer_past_2_53_in_a_json_vector_cell_is_a_cell_error(
    tmp_path: Path, item: str, shown: str
) -> None:
    """A number cell past 2**53 was a cell error, but the same integer inside a JSON list cell
    went on to the store, which refused it naming the key, not the line, and --skip-bad-rows
    kept its row. One of 400 digits was an "internal error: OverflowError"."""
    table = f'name,vec\napple,"[1, 2]"\npear,"[{item}, 1]"\nplum,"[3, 4]"\n'
    options = ("--value", "vec", "--value-kind", "vector")
    result, _ = build(tmp_path, table, *options, "--encoder", "/no/such/model", check=False)
    message = f"line 3, column 'vec': its item {shown} is an integer beyond 2**53"
    assert result.returncode == 1 and message in result.stderr
    result, store = build(tmp_path, table, *options, "--skip-bad-rows")
    assert sorted(SoftDict.load(store)) == ["apple", "plum"] and "left out 1 rows" in result.stderr


def test_a_mostly_text_column_stays_labels(tmp_path: Path) -> None:
    _, store = build(tmp_path, "name,kind\napple,fruit\npear,fruit\nchair,3\n", "--value", "kind")
    assert SoftDict.load(store)["chair"] == "3"  # a label that reads as a number stays text


@pytest.mark.parametrize(
    ("option", "kept", "message"),
    [([], 2, "kept the last value"), (["--on-duplicate", "first"], 1, "kept the first value")],
)
def test_repeated_keys_are_counted_and_resolved(tmp_path, option, kept, message) -> None:
    result, store = build(tmp_path, "name,price\napple,1\napple,2\npear,3\n", *option)
    assert "1 rows repeat a key" in result.stderr and "'apple' on lines 2 and 3" in result.stderr
    assert message in result.stderr and SoftDict.load(store)["apple"] == kept
    twice = "name,price\napple,1\napple,2\n"  # over the store built above: --force
    result, _ = build(tmp_path, twice, "--on-duplicate", "error", "--force", check=False)
    assert result.returncode == 1 and "the key 'apple' on lines 2 and 3" in result.stderr


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("name,price\napple,10,3\nbanana,5\n", "t.csv", "2 has 3 cells, the header 2; a cell may"),
        (
            'name,price\napple,10\n"banana,5\nplum,3\n',
            "t.csv",
            "line 3 has 1 cells, the header 2; a quote opened in it may not be closed",
        ),
        ("name,price\napple,1\nba\x00nana,5\n", "t.csv", "line 3 holds a NUL byte"),
        ("name,price,name\napple,1,x\n", "t.csv", "the column name 'name' appears more than once"),
        ("name,price\n" + "a" * 200_000 + ",3\n", "t.csv", "line 2: field larger than field limit"),
        ("[" * 100_000 + "]" * 100_000, "t.json", "the JSON at line 1 nests too deeply"),
        (
            '{"name": "a", "price": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n",
            "t.jsonl",
            "the JSON at line 2 nests too deeply",
        ),
        # JSON keeps the last of a repeated name without a word (a value, or a key, was lost).
        (
            '[{"name":"a","price":1,"price":2},{"name":"b","price":3}]',
            "t.json",
            "the file: a JSON object names 'price' more than once",
        ),
        ('{"name":"a","name":"z","price":1}\n', "t.jsonl", "line 1: a JSON object names 'name'"),
        ('{"name":"a","price":{"x":1,"x":2}}\n', "t.jsonl", "line 1: a JSON object names 'x'"),
    ],
    ids=[
        "ragged",
        "unclosed quote",
        "NUL",
        "repeated column",
        "cell over 128 KiB",
        "deep JSON",
        "deep JSON Lines",
        "repeated JSON field",
        "repeated JSON key field",
        "repeated name inside a label",
    ],
)
def test_broken_tables_are_clear_errors_never_tracebacks(tmp_path, content, name, message) -> None:
    result, store = build(tmp_path, content, name=name, check=False)
    assert result.returncode == 1 and result.stderr.startswith("softdict: error:")
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not Path(store).exists()


# -- querying -------------------------------------------------------------------------------------


@pytest.fixture
def fruit_store(tmp_path: Path) -> str:
    _, store = build(tmp_path, "name,price\napple pie,10\nbanana bread,5\nwooden chair,2\n")
    return store


def test_queries_from_a_file_are_explained_in_batches_with_one_exit_status(
    fruit_store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--json and --explain attended every query of a file at once, holding every query's
    Attention (7.4 GB for 100,000 queries, a probe): now in batches, each printed when done,
    with the exit status of them all."""
    import softdict._cli

    monkeypatch.setattr(softdict._cli, "_ATTEND_BATCH", 2)
    sizes: list[int] = []
    attend = SoftDict.attend
    monkeypatch.setattr(
        SoftDict, "attend", lambda sd, texts: sizes.append(len(texts)) or attend(sd, texts)
    )
    queries = ["apple pie", "banana bread", "zzzz", "wooden chair", "apple"]
    (tmp_path / "queries.txt").write_text("\n".join(queries) + "\n")
    arguments = ["query", fruit_store, "--file", str(tmp_path / "queries.txt"), "--json"]
    result = run(*arguments, "--min-score", "0.99", check=False)
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [answer["query"] for answer in answers] == queries and result.returncode == 3
    assert [answer["match"] for answer in answers][:2] == [True, True] and sizes == [2, 2, 1]
    assert run(*arguments).returncode == 0


def test_a_json_query_with_no_match_prints_json_and_exits_3(fruit_store: str) -> None:
    result = run("query", fruit_store, "zzzz", "--json", "--min-score", "0.99", check=False)
    assert result.returncode == 3
    answer = json.loads(result.stdout)
    assert answer["match"] is False and answer["query"] == "zzzz" and answer["min_score"] == 0.99
    assert answer["best"]["key"] in ("apple pie", "banana bread", "wooden chair")


def test_options_may_stand_between_the_store_and_the_text(fruit_store: str) -> None:
    """argparse called TEXT unrecognised when an option came between it and STORE."""
    plain = run("query", fruit_store, "apple pie", "--json").stdout
    assert run("query", fruit_store, "--json", "apple pie").stdout == plain
    assert run("query", "--json", "--top", "5", fruit_store, "apple pie").stdout == plain
    result = run("query", fruit_store, "--json", "apple", "pie", check=False)
    assert result.returncode == 2 and "unrecognized arguments: apple pie" in result.stderr
    assert "'--'" not in result.stderr  # no dash: no advice about one


def test_a_text_that_is_no_utf8_is_refused_in_the_command_lines_words(fruit_store: str) -> None:
    """Bytes that are no UTF-8 reach argv as lone surrogates: refused with Python's advice
    ("decode its source with errors='replace'")."""
    latin1 = b"Z\xfcrich".decode("utf-8", "surrogateescape")
    result = run("query", fruit_store, latin1, check=False)
    assert result.returncode == 1
    assert "TEXT is not UTF-8 text (byte 0xfc at character 1)" in result.stderr
    assert "errors=" not in result.stderr


def test_a_query_that_starts_with_a_dash_goes_after_two_dashes(fruit_store: str) -> None:
    """A "--" worked only straight after STORE: after an option ("query STORE --json -- -TEXT",
    the usual form) it was an unrecognised argument, and a dash-led TEXT got no hint."""
    dashed = json.loads(run("query", "--json", fruit_store, "--", "-apple pie").stdout)
    assert dashed["query"] == "-apple pie"
    for form in (["--json", "--", "-apple pie"], ["--json", "--top", "2", "--", "-apple pie"]):
        result = json.loads(run("query", fruit_store, *form).stdout)
        assert result["query"] == "-apple pie" and result["value"] == dashed["value"]
    assert run("query", fruit_store, "--explain", "--", "apple pie").stdout.startswith(
        run("query", fruit_store, "apple pie").stdout
    )
    refused = run("query", fruit_store, "-apple", check=False)  # not "-1e3": a number to 3.14
    assert refused.returncode == 2 and "query STORE [options] -- TEXT" in refused.stderr
    mistyped = run("query", fruit_store, "--jsn", "apple", check=False)
    assert mistyped.returncode == 2 and "'--'" not in mistyped.stderr
    # A TEXT that is "--" itself, which argparse dropped as a second separator ("give a TEXT").
    for form in (["--json", fruit_store], [fruit_store, "--json"]):
        assert json.loads(run("query", *form, "--", "--").stdout)["query"] == "--"


def test_queries_from_a_file_or_stdin_give_one_result_per_line(
    tmp_path: Path, fruit_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = tmp_path / "queries.txt"
    queries.write_text("apple pie\n\nwooden chair\nzzzz\n")
    result = run(
        "query", fruit_store, "--file", str(queries), "--json", "--min-score", "0.9", check=False
    )
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["apple pie", "wooden chair", "zzzz"]
    assert [line["match"] for line in lines] == [True, True, False] and result.returncode == 3
    assert lines[0]["keys"][0]["key"] == "apple pie"
    monkeypatch.setattr("sys.stdin", io.StringIO("banana bread\napple pie\n"))
    plain = run("query", fruit_store, "--file", "-").stdout.splitlines()
    assert len(plain) == 2 and float(plain[0]) < float(plain[1])  # 5-ish, then 10-ish
    both = run("query", fruit_store, "apple", "--file", str(queries), check=False)
    assert both.returncode == 2 and "one of the two" in both.stderr  # a usage error
    neither = run("query", fruit_store, check=False)
    assert neither.returncode == 2 and "one of the two" in neither.stderr


@pytest.mark.parametrize("separator", ["\f", "\x1c", "\x85", "\u2028", "\u2029"])
def test_a_query_file_is_split_at_line_feeds_only(
    tmp_path: Path, fruit_store: str, separator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One query per line: a separator other than a line feed stays inside its query (as it
    does inside a query typed as TEXT), a CRLF ends a line, and a byte-order mark opens no
    query, from a file or standard input. (The JSON Lines printed hold such a separator as it
    is: they too are split at line feeds.)"""
    texts = [f"apple{separator}pie", "wooden chair"]
    queries = tmp_path / "q.txt"
    queries.write_bytes(("\ufeff" + "\r\n".join(texts) + "\r\n").encode())
    answers = run("query", fruit_store, "--file", str(queries), "--json").stdout.split("\n")[:-1]
    assert [json.loads(line)["query"] for line in answers] == texts
    alone = [json.loads(run("query", fruit_store, text, "--json").stdout) for text in texts]
    for line, single in zip(answers, alone):  # a batch and one query: float32 apart at most
        keys = json.loads(line)["keys"]
        assert [k["key"] for k in keys] == [k["key"] for k in single["keys"]]
        assert [k["score"] for k in keys] == close([k["score"] for k in single["keys"]])
    monkeypatch.setattr("sys.stdin", io.StringIO("\ufeff" + "\n".join(texts)))
    answers = run("query", fruit_store, "--file", "-", "--json").stdout.split("\n")[:-1]
    assert [json.loads(line)["query"] for line in answers] == texts


def test_a_nul_in_a_query_file_is_an_error_naming_its_line(
    tmp_path: Path, fruit_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NUL went to the encoder as part of a query; no query holds one (a UTF-16 file read as
    UTF-8 is full of them): an error naming the line, as a table's NUL is, nothing answered."""
    queries = tmp_path / "q.txt"
    queries.write_bytes(b"apple pie\r\n\r\nwooden\x00chair\n")
    result = run("query", fruit_store, "--file", str(queries), check=False)
    assert result.returncode == 1 and not result.stdout
    assert f"{queries}: line 3 holds a NUL byte, which no query should" in result.stderr
    monkeypatch.setattr("sys.stdin", io.StringIO("apple\x00 pie\n"))
    result = run("query", fruit_store, "--file", "-", check=False)
    assert result.returncode == 1 and "-: line 1 holds a NUL byte" in result.stderr


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
def test_files_in_the_encoding_their_byte_order_mark_names_are_read(
    tmp_path: Path, fruit_store: str, codec: str
) -> None:
    """Windows editors and PowerShell's ">" write UTF-16 with a byte-order mark: such a query
    file or table is read in the encoding its mark names (it was an error full of NULs, or "not
    UTF-8"), with its lines as a UTF-8 file's. A file with no mark must be UTF-8, and one that
    is not gets an error that says to save it as UTF-8."""
    mark = "" if codec in ("utf-16", "utf-32", "utf-8-sig") else "\ufeff"
    texts = ["apple pie", "wooden chair"]
    queries = tmp_path / "q.txt"
    queries.write_bytes((mark + "\r\n".join(texts) + "\r\n").encode(codec))
    answers = run("query", fruit_store, "--file", str(queries), "--json").stdout.split("\n")[:-1]
    assert [json.loads(line)["query"] for line in answers] == texts
    table = tmp_path / "t.csv"
    table.write_bytes((mark + 'name,price\n"apple\r\npie",10\nwooden chair,2\n').encode(codec))
    store = str(tmp_path / "s2")
    command = ["build", str(table), "--key", "name", "--value", "price", "-o", store]
    assert "2 keys" in run(*command, "--encoder", "test-hashing").stdout
    assert dict(SoftDict.load(store)) == {"apple\r\npie": 10.0, "wooden chair": 2.0}


def test_standard_input_is_read_as_a_file_is(
    tmp_path: Path, fruit_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--file -`` reads the bytes piped in as a file's: UTF-16 with its byte-order mark (a
    PowerShell pipe) is read, and bytes that are not UTF-8 are an error, where the locale's
    codec took them as escapes that reached the encoder. A lone carriage return stays in its
    query, as in a file: lines end at a line feed."""
    texts = ["apple pie", "wooden chair"]

    def piped(data: bytes) -> list[str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="ascii"))
        result = run("query", fruit_store, "--file", "-", "--json", check=False)
        assert result.returncode == 0 or not result.stdout
        return [json.loads(line)["query"] for line in result.stdout.split("\n")[:-1]]

    assert piped("\r\n".join(texts).encode("utf-16")) == texts
    assert piped(b"apple\rpie\nwooden chair\n") == ["apple\rpie", "wooden chair"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("café\n".encode("latin-1"))))
    result = run("query", fruit_store, "--file", "-", check=False)
    assert result.returncode == 1 and "-: not UTF-8 text" in result.stderr


def test_a_file_that_is_not_utf_8_says_to_save_it_as_utf_8(
    tmp_path: Path, fruit_store: str
) -> None:
    latin = tmp_path / "q.txt"
    latin.write_bytes("café\n".encode("latin-1"))
    result = run("query", fruit_store, "--file", str(latin), check=False)
    assert result.returncode == 1 and not result.stdout
    assert f"{latin}: not UTF-8 text" in result.stderr and "save it as UTF-8" in result.stderr
    table = tmp_path / "latin.csv"
    table.write_bytes("name,price\ncafé,1\n".encode("latin-1"))
    command = ["build", str(table), "--key", "name", "--value", "price", "-o", str(tmp_path / "x")]
    result = run(*command, "--encoder", "test-hashing", check=False)
    assert result.returncode == 1 and "not UTF-8 text" in result.stderr


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "much"])
def test_min_score_must_be_a_finite_number(fruit_store: str, bad: str) -> None:
    result = run("query", fruit_store, "apple", "--min-score", bad, "--json", check=False)
    assert result.returncode == 2 and "--min-score" in result.stderr and not result.stdout
    assert bad == "-inf" or f"{bad!r} is not a" in result.stderr  # was "invalid _finite value"


def test_plain_output_keeps_every_digit_of_a_large_whole_part(tmp_path: Path) -> None:
    """Plain output printed six significant digits: a price of 1,234,567 as "1.23457e+06"."""
    _, store = build(tmp_path, "name,price\napple pie,1234567\nbanana bread,0.000123456789\n")
    sd = SoftDict.load(store)
    for text, shown in (("apple pie", ".0f"), ("banana bread", ".6g")):  # 0.000123457-ish
        expected = format(sd.lookup(text), shown)
        assert run("query", store, text).stdout == expected + "\n"  # the bulk path
        assert run("query", store, text, "--explain").stdout.startswith(expected + "\n")
    assert float(run("query", store, "apple pie").stdout) == round(sd.lookup("apple pie"))
    assert abs(sd.lookup("apple pie") - 1234567) < 1


@pytest.mark.parametrize("values", [["sweet"], ["sweet", "hard"], ["kind"]])
def test_plain_values_from_a_file_are_the_values_each_query_explains(
    tmp_path: Path, values: list[str]
) -> None:
    """Without --json, --explain or --min-score, a file of queries is one bulk lookup: the
    values printed are those the per-query path reports, for numbers, vectors and labels."""
    rows = [
        {"name": "apple", "sweet": 0.8, "hard": 0.3, "kind": "fruit"},
        {"name": "granite", "sweet": 0.0, "hard": 1.0, "kind": "rock"},
        {"name": "honey cake", "sweet": 1.0, "hard": 0.1, "kind": "food"},
    ]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    options = [arg for value in values for arg in ("--value", value)]
    run("build", str(tmp_path / "d.json"), "--key", "name", *options, "-o", str(tmp_path / "s"))
    queries = tmp_path / "q.txt"
    queries.write_text("aple\nbasalt\nsomething sweet\ngranit\n")
    plain = run("query", str(tmp_path / "s"), "--file", str(queries)).stdout.splitlines()
    explained = run("query", str(tmp_path / "s"), "--file", str(queries), "--json").stdout
    expected = [json.loads(line)["value"] for line in explained.splitlines()]
    assert len(plain) == len(expected) == 4
    for line, value in zip(plain, expected):
        # Numbers print with 6 significant digits; labels exactly.
        assert json.loads(line) == (value if isinstance(value, str) else close(value))


def test_temperature_option_and_explain_shortens_long_keys(tmp_path: Path) -> None:
    long_key = "an apple pie " + "with cream " * 10
    _, store = build(tmp_path, f"name,price\n{long_key},10\nbanana bread,5\n")
    cold = json.loads(run("query", store, "apple pie", "--json", "--temperature", "0.01").stdout)
    warm = json.loads(run("query", store, "apple pie", "--json", "--temperature", "5").stdout)
    assert cold["keys"][0]["weight"] > warm["keys"][0]["weight"]
    explained = run("query", store, "apple pie", "--explain").stdout
    assert long_key not in explained and long_key[:39] + "…" in explained
    bad = run("query", store, "apple", "--temperature", "-1", check=False)
    assert bad.returncode == 1 and "temperature" in bad.stderr


def test_explain_escapes_control_characters_in_keys(tmp_path: Path) -> None:
    """A key from an untrusted table holding a terminal escape sequence (ESC [2J clears the
    screen) was printed raw by --explain; it shows escaped, as --json and the label do."""
    _, store = build(tmp_path, "name,price\nap\x1b[2Jple,10\nbanana\tbread,5\n")
    explained = run("query", store, "apple", "--explain").stdout
    assert "\x1b" not in explained and "\t" not in explained
    assert "ap\\x1b[2Jple" in explained and "banana\\x09bread" in explained


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_explain_and_json_show_meaning_and_spelling(tmp_path: Path, combination: str) -> None:
    """Each key's meaning and spelling scores (and marks, where the combination weighs them),
    and how the combination makes its score of them; --lexical 0 turns spelling off for a
    query."""
    csv = "name,price\nbanana bread,5\napple pie,10\n"
    _, store = build(tmp_path, csv, "--combination", combination)
    explained = run("query", store, "bananna bread", "--explain").stdout
    line = next(row for row in explained.splitlines() if "banana bread" in row)
    assert "meaning " in line and "spelling 0.9" in line
    assert "score = meaning × " in explained and f"({combination})" in explained
    answer = json.loads(run("query", store, "bananna bread", "--json").stdout)
    best = answer["keys"][0]
    assert best["key"] == "banana bread" and best["spelling"] > 0.9
    expected = naive_combined("bananna bread", ["banana bread"], [best["meaning"]], combination)
    assert best["score"] == close(expected[0])
    cut = json.loads(run("query", store, "banana b", "--json").stdout)["keys"][0]
    assert cut["key"] == "banana bread"
    if combination == "learned-1":
        assert answer["meaning_factor"] < 1  # a misspelt word: its meaning is a guess
    else:  # the rules weigh meaning as it is
        assert answer["meaning_factor"] == 1
    if combination == "rule-1":
        assert "marks" not in best
    else:
        assert best["marks"] == [] and cut["marks"] == ["start", "abbreviation"]
    off = json.loads(run("query", store, "bananna bread", "--json", "--lexical", "0").stdout)
    assert "spelling" not in off["keys"][0] and off["spelling_weight"] == 0.0
    assert off["keys"][0]["score"] == close(off["keys"][0]["meaning"])
    assert f"spelling     lexical 1, combination {combination}" in run("info", store).stdout
    # A key whose spelling could not matter is not scored: "-" when explained, null in JSON
    # (strict JSON: no NaN).
    unlike = json.loads(run("query", store, "e", "--json").stdout, parse_constant=_no_nan)
    assert [key["spelling"] for key in unlike["keys"]] == [None, None]
    assert "spelling -)" in run("query", store, "e", "--explain").stdout


def _no_nan(name: str) -> None:
    raise AssertionError(f"{name} is not JSON")


def test_ctrl_c_is_one_line_and_exit_status_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C printed Python's KeyboardInterrupt traceback (a probe)."""
    import softdict._cli

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(softdict._cli, "read_items", interrupted)
    table = tmp_path / "prices.csv"
    table.write_text("name,price\napple,10\n")
    arguments = ["build", str(table), "--key", "name", "--value", "price"]
    assert main([*arguments, "-o", str(tmp_path / "store")]) == 130
    assert capsys.readouterr().err == "softdict: interrupted\n"
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("sizes.jsonl", '{"name": "a", "v": "small"}\n{"name": "b", "v": "large"}\n'
         '{"name": "c", "v": 0}\n'),
        ("first.json", '[{"name": "a", "v": 1}, {"name": "b", "v": "x"}, {"name": "c", "v": "y"}]'),
    ],
)  # fmt: skip
def test_a_label_column_with_a_number_in_it_is_a_label_store(
    tmp_path: Path, name: str, rows: str
) -> None:
    """The table was read as labels, but the store took its kind from its first value: a number
    first made it scalar, and a number later was refused as another kind (a probe)."""
    table = tmp_path / name
    table.write_text(rows)
    store = str(tmp_path / "store")
    arguments = ["build", str(table), "--key", "name", "--value", "v", "-o", store]
    assert main([*arguments, "--encoder", "test-hashing"]) == 0
    loaded = SoftDict.load(store)
    assert loaded.value_kind == "categorical" and len(loaded) == 3

    lists = tmp_path / "lists.jsonl"  # and a column of lists (no number among labels) stays vectors
    lists.write_text('{"name": "a", "v": [1, 2]}\n{"name": "b", "v": [3, 4]}\n')
    arguments = ["build", str(lists), "--key", "name", "--value", "v", "-o", store, "--force"]
    assert main([*arguments, "--encoder", "test-hashing"]) == 0
    assert SoftDict.load(store).value_kind == "vector"


def test_an_error_message_of_several_lines_is_printed_as_one(
    tmp_path: Path, prices_csv: Path
) -> None:
    """A model loader's message holds a line break: the error took two lines (a probe)."""
    from softdict.encoders import register_encoder_name

    def two_lines() -> object:
        raise OSError("cannot reach the hub.\nCheck your connection.")

    register_encoder_name("test-two-lines", two_lines)
    command = ["build", str(prices_csv), "--key", "name", "--value", "price"]
    result = run(*command, "-o", str(tmp_path / "s"), "--encoder", "test-two-lines", check=False)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "cannot reach the hub. Check your connection." in result.stderr


def test_a_table_from_a_pipe_is_read_as_a_file(tmp_path: Path) -> None:
    """build called a named pipe (a shell's <(...)) "no such file"; query --file read it."""
    import os
    import threading

    fifo = tmp_path / "prices.csv"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as pipe:
            pipe.write("name,price\napple,10\nchair,2\n")

    writer = threading.Thread(target=write, daemon=True)  # daemon: no hang if never read
    writer.start()
    store = str(tmp_path / "store")
    command = ["build", str(fifo), "--key", "name", "--value", "price", "-o", store]
    result = run(*command, "--encoder", "test-hashing", check=False)
    writer.join(timeout=10)
    assert result.returncode == 0, result.stderr
    assert dict(SoftDict.load(store).items()) == {"apple": 10.0, "chair": 2.0}
