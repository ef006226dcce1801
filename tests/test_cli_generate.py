"""`kompute-dml generate` (kompute_dml/cli/generate.py): a decoder step model's greedy tokens printed
step by step, rows of several lengths in one batch; user errors as one line and exit status 2."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.cli.main import main  # noqa: E402


def test_user_errors_exit_2(tmp_path, capsys):
    """A model that is no decoder step, token ids that are not integers, a count below one and a
    missing file: one line on stderr each, status 2, no traceback."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], [w])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), str(path))
    for argv, says in (([str(path), "-p", "1,2"], "model inputs: a decoder step takes input_ids, attention_mask"),
                       ([str(path), "-p", "1,two"], "--prompt '1,two': comma-separated integer token ids"),
                       ([str(path), "-p", "1", "--new", "0"], None),
                       ([str(tmp_path / "none.onnx"), "-p", "1"], "no such model file")):
        assert main(["generate", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kompute-dml generate: error: ") and err.count("\n") == 1 and "Traceback" not in err
        assert says is None or says in err


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers exports the decoder")
def test_tokens_step_by_step(capsys):
    """Two prompts of 5 and 2 tokens: each printed step is both rows' tokens, and each row's are
    torch's greedy tokens for its prompt alone."""
    from kompute_dml.bench import decoders

    dec = decoders.build("gpt2", "tiny")
    assert main(["generate", str(dec.path), "-p", "5,6,7,8,9", "-p", "11,12", "--new", "4"]) == 0
    out, err = capsys.readouterr()
    steps = [list(map(int, line.split())) for line in out.splitlines()]
    assert len(steps) == 4 and all(len(s) == 2 for s in steps)
    for r, prompt in enumerate(([5, 6, 7, 8, 9], [11, 12])):
        assert [s[r] for s in steps] == decoders.torch_greedy(dec, np.array([prompt]), 4)[0][0]
    assert "4 step(s) of 2 row(s)" in err
