"""docs/python.md's "Training at scale" section runs as written (docs must not drift): every
```python block under it, in a fresh interpreter, on a real store like the one the examples
name (`/data/project`: dataset `mnist`, tags v1 and v2, made by conftest's `local_store`) and,
for a block that names the remote `s3://bucket/datasets`, on the engines' remote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
SECTION = "## Training at scale"


def blocks() -> List[Tuple[str, str]]:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    found = []
    title = "Training at scale"
    for part in re.split(r"(?m)^(### .*)$", section):
        if part.startswith("### "):
            title = part[4:].strip()
            continue
        for code in re.findall(r"```python\n(.*?)```", part, flags=re.S):
            found.append((title, code))
    return found


BLOCKS = blocks()


def test_the_section_shows_each_capability():
    titles = [title for title, _ in BLOCKS]
    for capability in ["Elastic resume", "Mixtures", "Lineage", "Cache limit"]:
        assert titles.count(capability) == 1, f"docs/python.md {SECTION}: one ```python block under ### {capability}"


@pytest.mark.parametrize("title,code", BLOCKS, ids=[title for title, _ in BLOCKS])
def test_the_training_snippet_runs(title, code, local_store, request, tmp_path):
    code = code.replace('"/data/project"', repr(str(local_store["base"])))
    env = {k: v for k, v in os.environ.items() if k not in ("DSV_STORE", "DSV_REMOTE")}
    env["DSV_CACHE"] = str(tmp_path / "cache")
    if "s3://bucket/datasets" in code:
        remote = request.getfixturevalue("engine_remote")
        code = code.replace("s3://bucket/datasets", remote["url"])
        env.update(remote["env"])
    work = tmp_path / "work"
    work.mkdir()
    (work / "snippet.py").write_text(code)
    done = subprocess.run([sys.executable, "snippet.py"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"### {title}:\n{done.stdout}\n{done.stderr}"
