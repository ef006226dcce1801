"""Progress of long commands (kompute_dml/cli/progress.py): piped, a line per stage on standard
error when it starts, a heartbeat while it lasts and its time when it ends; nothing with --quiet;
the results on standard output unchanged either way."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

from kompute_dml.cli import progress  # noqa: E402


def test_piped_stages_start_beat_and_end(monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.05)
    out = io.StringIO()
    stages = progress.Stages("cmd", stream=out)
    with stages.stage("slow work", total=3) as advance:
        advance(2)
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "cmd: slow work ..."
    assert any(ln.startswith("cmd: slow work: still working (") and ", 2/3)" in ln for ln in lines[1:-1])
    assert lines[-1].startswith("cmd: slow work: done in ")


def test_quiet_says_nothing():
    out = io.StringIO()
    with progress.Stages("cmd", quiet=True, stream=out).stage("work") as advance:
        advance(1)
    assert out.getvalue() == ""


@pytest.mark.parametrize("quiet", [False, True])
def test_kompute_dml_run_reports_its_stages(tmp_path, capsys, quiet):
    from kompute_dml.cli.run import main

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", T.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.array([1.0, -2.0, 3.0], np.float32))
    argv = [str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--repeat", "2", "--compare-onnxruntime"]
    assert main(argv + (["--quiet"] if quiet else [])) == 0
    captured = capsys.readouterr()
    assert "nodes on Vulkan" in captured.out and "agree" in captured.out
    stages = ["preparing m.onnx (1 nodes) ...", "first run (compiles the operators, plans the device program) ...",
              "2 timed run(s) ...", "onnxruntime CPU, for the comparison ..."]
    for s in stages:
        assert (f"kompute-dml run: {s}" in captured.err) != quiet, captured.err
    assert quiet == (captured.err == "")
