"""The command line as a new user meets it (issue 25): one --device syntax with a one-line
error and status 2, --only without a match, tables that keep whole names when piped, `run`
checking input shapes. Each calls the CLI's main with an argv (stdout is captured, so not a
terminal: what a pipe sees)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import kompute_dml as kdml
from kompute_dml.cli import common
from kompute_dml.cli.main import main

MISSING = len(kdml.list_devices())  # the first index this machine lacks


def _model(tmp_path, shape):
    g = helper.make_graph([helper.make_node("Trilu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, list(shape))])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return str(path)


@pytest.mark.parametrize("spelling", [str(MISSING), f"VULKAN:{MISSING}", f"vulkan:{MISSING}"])
@pytest.mark.parametrize("command", ["info", "bench", "run"])
def test_a_missing_device_is_one_line_and_status_2(tmp_path, capsys, command, spelling):
    argv = {"info": ["info"], "bench": ["bench", "--quick"], "run": ["run", _model(tmp_path, (3, 4))]}[command]
    rc = main([*argv, "--device", spelling])
    out = capsys.readouterr()
    assert rc == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.err, out.err
    assert f"kompute-dml {command}: error: --device {spelling!r}: no Vulkan device {MISSING}; this machine has " \
           f"{MISSING}" in lines[0]


@pytest.mark.parametrize("text", ["gpu", "VULKAN:x", "CPU:1", "-1"])
def test_device_syntax_errors(text):
    with pytest.raises(common.DeviceArgError, match=f"--device {text!r}"):
        common.parse_device(text)


@pytest.mark.parametrize("text", ["0", "VULKAN:0", "vulkan", "CPU", " 0 "])
def test_every_spelling_of_device_0(text):
    assert common.parse_device(text) == 0


def test_info_and_run_take_the_same_device_spellings(tmp_path, capsys):
    assert main(["info", "--device", "VULKAN:0", "--json"]) == 0
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    for spelling in ("0", "VULKAN:0", "CPU"):
        rc = main(["run", _model(tmp_path, (3, 4)), "--input", f"x={tmp_path / 'x.npy'}", "--device", spelling])
        assert rc == 0, capsys.readouterr().err


def test_only_without_a_match_lists_the_rows(capsys):
    rc = main(["bench", "--quick", "--no-ort", "--only", "no-such-row"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "--only 'no-such-row' matches no row; the rows are: " in err
    assert "ACTIVATION_IDENTITY float32 64x64" in err and "DIAGONAL_MATRIX1 (triu)" in err


def test_piped_tables_keep_whole_names():
    """A name far wider than any terminal is printed whole: no ellipsis."""
    import io

    from kompute_dml.bench.harness import Case, summarize
    from kompute_dml.bench.report import goals, render

    name = "OPERATOR_" + "X" * 240
    row = summarize(Case(name, "float32", (64, 64), "GB/s", 1e6, ours=None), {"ours": 1e-5}, ceiling_gbps=10.0)
    lat = {"op": "ACTIVATION_IDENTITY float32 64x64", "reps": 1, "eager_execute_us": 1.0, "eager_functional_us": 1.0,
           "recorded_per_op_us_same_output": 1.0, "recorded_per_op_us_distinct_outputs": 1.0, "recorded_per_op_us_chain": 1.0}
    machine = {"device": "dev", "cpu_model": "cpu", "cpu_cores": 2, "kp": "x", "numpy": "x", "onnxruntime": "x"}
    result = {"machine": machine, "rows": [row], "timing": "execute", "ceiling_label": "copy", "ceiling_method": "a copy",
              "ceiling_gbps": 10.0, "latency": lat, "goals": goals([row], lat)}
    buf = io.StringIO()  # not a terminal, like a pipe
    render(common.console(file=buf), result)
    text = buf.getvalue()
    assert name in text and "…" not in text


def test_run_checks_input_shapes(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((3, 5), np.float32))
    rc = main(["run", _model(tmp_path, (4, 5)), "--input", f"x={tmp_path / 'x.npy'}"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "kompute-dml run: error: input 'x': has shape (3, 5); the model declares (4, 5)" in err
    rc = main(["run", _model(tmp_path, ("rows", 5)), "--input", f"x={tmp_path / 'x.npy'}"])  # symbolic: free
    assert rc == 0, capsys.readouterr().err


def test_run_profile_shows_device_time_per_node(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((4, 5), np.float32))
    rc = main(["run", _model(tmp_path, (4, 5)), "--input", f"x={tmp_path / 'x.npy'}", "--device", "VULKAN:0",
               "--profile"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "device time per node" in out
    line = next(ln for ln in out.splitlines() if "Trilu" in ln and "dispatch" in ln)
    assert float(line.split()[-2]) >= 0
