"""The `dsv` command that the Python package installs (`dsv._cli`, `python -m dsv`): the Rust
command line compiled into the extension, giving what the `dsv` binary gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dsv
from conftest import DSV_BIN, REPO


def py_dsv(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsv", *args], capture_output=True, text=True, cwd=cwd)


def test_version_names_the_commit_and_the_build_date():
    done = py_dsv("--version")
    assert done.returncode == 0, done.stderr
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    assert done.stdout.strip() == f"dsv {dsv.__build__}"
    assert commit and commit in done.stdout, (commit, done.stdout)


def test_the_packaged_command_gives_what_the_binary_gives(local_store):
    for args in (["--json", "ls", "mnist@v1"], ["log", "mnist", "--oneline"], ["show", "mnist@v1", "--json"]):
        ours = py_dsv("--store", str(local_store["store"]), *args)
        theirs = subprocess.run([str(DSV_BIN), "--store", str(local_store["store"]), *args],
                                capture_output=True, text=True)
        assert ours.returncode == theirs.returncode == 0, ours.stderr
        assert ours.stdout == theirs.stdout
    listed = json.loads(py_dsv("--store", str(local_store["store"]), "--json", "ls", "mnist@v1").stdout)
    assert listed


def test_exit_codes_and_errors_pass_through(local_store):
    done = py_dsv("--store", str(local_store["store"]), "show", "mnist@v99")
    binary = subprocess.run([str(DSV_BIN), "--store", str(local_store["store"]), "show", "mnist@v99"],
                            capture_output=True, text=True)
    assert done.returncode == binary.returncode != 0
    assert done.stderr == binary.stderr and "unknown revision" in done.stderr
    usage = py_dsv("no-such-command")
    assert usage.returncode == 2 and "unrecognized subcommand" in usage.stderr


def test_the_console_script_is_installed():
    script = Path(sys.executable).parent / "dsv"
    if not script.exists():
        import pytest

        pytest.skip(f"no console script at {script} (the package was not installed with its scripts)")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("dsv ")
