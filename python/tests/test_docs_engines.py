"""Every ```python block of docs/python.md's `## Engines` section runs as written (issue 35).

Each block runs in a fresh interpreter, as a user would paste it into a file: in a working
directory with no store, with a fresh DSV_CACHE (and Hugging Face cache), the AWS variables of
`engine_remote`, and the literal remote `s3://bucket/datasets` replaced by the real one. A
block that imports an engine this machine lacks is skipped (listed), never passed.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import List, Tuple

import pytest

from conftest import REPO, skip_for

DOC = REPO / "docs" / "python.md"
PLACEHOLDER = "s3://bucket/datasets"


def engine_blocks(text: str) -> List[Tuple[str, str]]:
    """(subsection title, code) of each ```python block under `## Engines`, up to the next
    `## ` heading."""
    match = re.search(r"^## Engines\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if match is None:
        return []
    blocks, title = [], "Engines"
    for part in re.split(r"^(### .*)$", match.group(1), flags=re.M):
        if part.startswith("### "):
            title = part[4:].strip()
            continue
        for code in re.findall(r"^```python\n(.*?)^```", part, re.S | re.M):
            blocks.append((title, code))
    return blocks


BLOCKS = engine_blocks(DOC.read_text())


def imported_modules(code: str) -> List[str]:
    """The top-level modules `code` imports."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return sorted(names)


def test_the_engines_section_has_a_block_per_engine():
    titles = [title for title, _ in BLOCKS]
    for engine in ["pandas", "pyarrow", "Dask", "DuckDB", "Hugging Face datasets", "Ray Data", "Spark", "Rows of Parquet files (PyTorch)", "Writing back"]:
        assert titles.count(engine) == 1, f"docs/python.md ## Engines: no single ```python block under ### {engine}"
    for title, code in BLOCKS:
        assert PLACEHOLDER in code, f"### {title}: the block should name the remote {PLACEHOLDER}"


@pytest.mark.parametrize("title,code", BLOCKS, ids=[title for title, _ in BLOCKS])
def test_the_engines_snippet_runs(title, code, engine_remote, tmp_path):
    for module in imported_modules(code):
        if importlib.util.find_spec(module) is None:
            skip_for(f"engine {module}", f"{module} is not installed here (### {title})")
        if module == "pyspark" and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            skip_for("engine pyspark", f"no Java here: Spark 4 needs Java 17 (### {title})")
    work = tmp_path / "work"
    work.mkdir()
    (work / "snippet.py").write_text(code.replace(PLACEHOLDER, engine_remote["url"]))
    env = {k: v for k, v in os.environ.items() if k not in ("DSV_STORE", "DSV_REMOTE")}
    env.update(engine_remote["env"])
    env["DSV_CACHE"] = str(tmp_path / "cache")
    env["HF_HOME"] = str(tmp_path / "hf")
    done = subprocess.run(
        [sys.executable, "snippet.py"], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    if arrow_exit_abort(done, code):
        # apache/arrow#34314: Arrow's I/O threads abort the interpreter's exit after the
        # block's work is done (docs/python.md says so; rare with `use_threads=False`, and
        # seen with no dsv loaded). Its output is still checked below; any other failure fails.
        warnings.warn(f"### {title}: Arrow aborted the exit after the block's work (apache/arrow#34314)")
    else:
        assert done.returncode == 0, f"### {title} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"### {title} printed nothing"


ARROW_EXIT_ABORT = "terminate called without an active exception"


def arrow_exit_abort(done: "subprocess.CompletedProcess[str]", code: str) -> bool:
    """Whether `done` is the known abort at exit of a block that reads through Arrow: SIGABRT
    with nothing on stderr but libstdc++'s line, after the block printed its result."""
    reads_through_arrow = bool({"pandas", "pyarrow"} & set(imported_modules(code)))
    return (
        reads_through_arrow
        and done.returncode == -6
        and done.stderr.strip() == ARROW_EXIT_ABORT
        and bool(done.stdout.strip())
    )
