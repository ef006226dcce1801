"""What the docs say is generated or run: the support matrix and the README's on-the-device block
from the registry (never hand-kept), every python block of README.md and docs/ as real code, no
path outside the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_support_matrix_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_readme_names_the_commands():
    text = (ROOT / "README.md").read_text()
    assert "make test" in text and "make bench" in text


def _write_model(path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    w = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) - 6, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "doc",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def _python_blocks() -> list[tuple[str, int, str]]:
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for k, code in enumerate(path.read_text().split("```python\n")[1:]):
            blocks.append((path.relative_to(ROOT).as_posix(), k, code.split("```", 1)[0]))
    return blocks


@pytest.mark.parametrize("where,k,code", _python_blocks(), ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_every_python_block_of_the_docs_runs(where, k, code, tmp_path):
    """README.md's and docs/*.md's python blocks are real code: each runs as it stands, in a fresh
    process in a directory holding only a `model.onnx` (input x: float32 [batch, 4], output y), the
    file the onnxruntime snippets open."""
    if "kompute_dml.ort" in code:  # the plugin EP: built only where onnxruntime's headers were (tests/test_ort_ep.py)
        import kompute_dml.ort as kort

        try:
            kort.get_library_path()
        except FileNotFoundError as e:
            pytest.skip(str(e))
    _write_model(tmp_path / "model.onnx")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, f"{where} block {k}:\n{res.stderr[-3000:]}"


def test_no_link_leaves_the_repository():
    """Paths in the docs stay inside the repository (the shared folder beside a checkout is not there
    for a reader)."""
    for path in [ROOT / "README.md", ROOT / "DEVELOPING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "../shared" not in path.read_text(), path
