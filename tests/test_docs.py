"""The README's support matrix is generated from the registry, never hand-kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_support_matrix_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_readme_names_the_commands():
    text = (ROOT / "README.md").read_text()
    assert "make test" in text and "make bench" in text


def test_readme_example_runs():
    """The first python block of the README is real code: run it."""
    text = (ROOT / "README.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
