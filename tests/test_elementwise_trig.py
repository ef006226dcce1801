"""ELEMENT_WISE_SIN / _COS beyond the table-wide tests of tests/test_elementwise_unary.py: the
inputs where the argument reduction is hardest (the float32 values nearest multiples of pi / 2,
huge arguments up to float32's largest), the special values, and a Llama-style rotary
embedding (Range -> Mul(inv_freq) -> Cos / Sin) through the ONNX backend against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from test_elementwise_unary import BOUND
from unary_reference import check_close, near_half_pi_multiples, reference64

import kompute_dml as kdml


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_hard_reductions(dev, rng, fn):
    """Near k pi / 2 the reduced argument, and so sin or cos, is tiny relative to x: pi / 2
    carried to fewer bits than the reduction's 94 (removing its last 32 gives 750+ ulp here)
    shows as a relative error of the result; above 2^24 every bit of x matters. Both within the
    float32 bound of float64."""
    huge = rng.integers(0x4B800000, 0x7F800000, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([near_half_pi_multiples(1 << 18), huge, -huge])
    got = getattr(kdml, fn)(x, device=dev).numpy()
    ref = reference64(fn, x)
    check_close(got, ref, BOUND[fn][0])
    # the tiny results are really there: sin of the float32 nearest pi is -8.74e-8, not 0 or ~1e-7 off
    assert np.abs(ref).min() < 1e-6


def test_special_values(dev):
    """+-inf and NaN -> NaN (a NaN input kept, quieted); sin is odd (-0 -> -0, tiny x -> x,
    subnormals included), cos even (1 at +-0 and below 2^-12); sin(float32(pi)) is pi's float32
    error, float64's value rounded: -8.742278e-08."""
    bits = np.array([0x7F800000, 0xFF800000, 0x7F800001, 0x80000000, 0x00000001, 0x80000001, 0x39000000],
                    np.uint32).view(np.float32)
    s = kdml.sin(bits, device=dev).numpy()
    c = kdml.cos(bits, device=dev).numpy()
    assert np.isnan(s[:3]).all() and np.isnan(c[:3]).all()
    assert s.view(np.uint32)[2] == 0x7FC00001  # the NaN's payload, quieted
    assert s.view(np.uint32)[3:].tolist() == bits.view(np.uint32)[3:].tolist()
    assert c[3:].tolist() == [1.0] * 4
    pi32 = np.array([np.pi, -np.pi, np.pi / 2], np.float32)
    assert kdml.sin(pi32, device=dev).numpy().tolist() == np.sin(pi32.astype(np.float64)).astype(np.float32).tolist()
    assert kdml.sin(pi32[:1], device=dev).numpy()[0] == np.float32(-8.742278e-08)


def test_rotary_embedding_on_device():
    """Llama's rotary angles: positions (Range from a runtime start and the sequence length, so
    nothing folds to a constant) times inv_freq, then Cos and Sin, run on Vulkan (Range too, as
    FILL_VALUE_SEQUENCE), each output within 1 float32 ulp of 1 (onnxruntime's std::cos / std::sin) at
    positions up to 8192 and the float64 bound on the same float32 angles."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    half = 32
    inv = (1.0 / 10000.0 ** (np.arange(half) / half)).astype(np.float32).reshape(1, half)
    nodes = [helper.make_node("Shape", ["ids"], ["shp"]), helper.make_node("Gather", ["shp", "one"], ["n"], axis=0),
             helper.make_node("Add", ["n", "start"], ["end"]), helper.make_node("Range", ["start", "end", "one"], ["pi"]),
             helper.make_node("Cast", ["pi"], ["pos"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["pos", "ax"], ["pos2"]), helper.make_node("Mul", ["pos2", "inv"], ["ang"]),
             helper.make_node("Cos", ["ang"], ["cos"]), helper.make_node("Sin", ["ang"], ["sin"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array([1], np.int64), "ax"),
             numpy_helper.from_array(inv, "inv")]
    ins = [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
           helper.make_tensor_value_info("start", TensorProto.INT64, [])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["seq", half]) for n in ("cos", "sin")]
    model = helper.make_model(helper.make_graph(nodes, "rotary", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rep = Backend.prepare(model, "CPU")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for start, seq in ((0, 7), (4096, 4096)):
        feeds = {"ids": np.zeros((1, seq), np.int64), "start": np.array(start, np.int64)}
        got, want = rep.run(feeds), sess.run(None, feeds)
        ang = np.float32(np.arange(start, start + seq, dtype=np.float32)[:, None] * inv)  # Mul's float32 product
        for fn, g, w in zip(("cos", "sin"), got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=2.0**-23, err_msg=fn)
            check_close(g, reference64(fn, ang), BOUND[fn][0])
    on = {p.op_type: p.target for p in rep.placement}
    assert on["Sin"] == on["Cos"] == on["Mul"] == on["Range"] == on["Cast"] == "vulkan"
    assert rep.summary().startswith("7 of 9 nodes on Vulkan")  # Shape and Gather on the host
