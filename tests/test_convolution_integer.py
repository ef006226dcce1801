"""CONVOLUTION_INTEGER (ops/convolution_integer.py) against an exact numpy int64 reference: every
type pair, zero points absent / per tensor / per output channel, groups, strides, dilations,
asymmetric padding, tensors at random offsets with random strides, outputs poisoned and every
byte outside them unchanged, the 32-bit wrap of the sum; refusals naming the field; ONNX
ConvInteger (onnx's node cases, a 1-D case, and quantize_dynamic's Conv) on the device."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml
from kompute_dml.ops.convolution_integer import ConvolutionIntegerDesc

D = kdml.DataType
Q8 = {D.INT8: np.int8, D.UINT8: np.uint8}


def reference(x, w, xz, wz, strides, dilations, start, end, groups):
    """The page's formula in numpy int64, the sum wrapped to INT32."""
    xi = x.astype(np.int64) - (0 if xz is None else int(np.asarray(xz).reshape(-1)[0]))
    wzv = np.zeros(w.shape[0], np.int64) if wz is None else np.broadcast_to(np.asarray(wz).reshape(-1), (w.shape[0],))
    wi = w.astype(np.int64) - wzv.astype(np.int64)[:, None, None, None]
    xp = np.pad(xi, ((0, 0), (0, 0), (start[0], end[0]), (start[1], end[1])))
    (kh, kw), (dh, dw), (sh, sw) = w.shape[2:], dilations, strides
    oh = (xp.shape[2] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (xp.shape[3] - ((kw - 1) * dw + 1)) // sw + 1
    m, cg = w.shape[0], w.shape[1]
    out = np.zeros((x.shape[0], m, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            for g in range(groups):
                ms = slice(g * (m // groups), (g + 1) * (m // groups))
                out[:, ms] += np.einsum("nchw,mc->nmhw", patch[:, g * cg:(g + 1) * cg], wi[ms, :, i, j])
    return ((out + 2**31) % 2**32 - 2**31).astype(np.int32)


CASES = [  # x sizes, filter sizes, strides, dilations, start, end, groups
    ((2, 4, 7, 6), (6, 2, 3, 3), (2, 1), (1, 1), (1, 0), (0, 2), 2),
    ((1, 3, 5, 5), (4, 3, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    ((1, 6, 9, 8), (6, 1, 3, 3), (1, 2), (2, 1), (2, 1), (1, 1), 6),  # depthwise, dilated
    ((3, 5, 4, 11), (7, 5, 2, 5), (1, 3), (1, 1), (0, 2), (1, 0), 1),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c[0]) for c in CASES])
@pytest.mark.parametrize("xt, wt", [(D.UINT8, D.INT8), (D.INT8, D.INT8), (D.UINT8, D.UINT8), (D.INT8, D.UINT8)])
@pytest.mark.parametrize("zps", ["none", "tensor", "channel"])
def test_against_int64_reference_with_strides_offsets_and_poison(dev, rng, case, xt, wt, zps):
    xs, fs, strides, dil, start, end, groups = case
    x = rng.integers(np.iinfo(Q8[xt]).min, np.iinfo(Q8[xt]).max, xs, endpoint=True).astype(Q8[xt])
    w = rng.integers(np.iinfo(Q8[wt]).min, np.iinfo(Q8[wt]).max, fs, endpoint=True).astype(Q8[wt])
    xz = None if zps == "none" else np.array(rng.integers(0, 100), Q8[xt]).reshape(1, 1, 1, 1)
    wz = None if zps == "none" else np.array(rng.integers(-5 if wt == D.INT8 else 0, 50, fs[0] if zps == "channel" else 1),
                                            Q8[wt]).reshape(1, -1, 1, 1)
    want = reference(x, w, xz, wz, strides, dil, start, end, groups)
    descs = [kdml.TensorDesc(t, a.shape, random_strides(rng, a.shape, allow_broadcast=False)) if a is not None else None
             for t, a in ((xt, x), (xt, xz), (wt, w), (wt, wz))]
    yd = kdml.TensorDesc(D.INT32, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    op = dev.compile(ConvolutionIntegerDesc(descs[0], descs[1], descs[2], descs[3], yd, strides, dil, start, end, groups))
    ins = [place(dev, rng, d, a)[0] if d is not None else None for d, a in zip(descs, (x, xz, w, wz))]
    y, _ = place(dev, rng, yd)
    before = poison_against(y, want, rng)
    op.execute(ins, [y])
    assert_output(y, before, want)


def test_the_sum_wraps_modulo_2_to_the_32(dev):
    """4096 channels of 255 x 255 under a 3x3 window: 2.4e9, past INT32's range."""
    x = np.full((1, 4096, 3, 3), 255, np.uint8)
    w = np.full((2, 4096, 3, 3), 255, np.uint8)
    got = kdml.conv_integer(x, w, device=dev).numpy()
    total = 4096 * 9 * 255 * 255
    assert total > 2**31 and got.shape == (1, 2, 1, 1)
    assert np.all(got == np.int64(total - 2**32).astype(np.int32))


def test_helper_takes_zero_points_of_any_shape(dev, rng):
    x = rng.integers(0, 256, (1, 2, 4, 4)).astype(np.uint8)
    w = rng.integers(-128, 128, (3, 2, 2, 2)).astype(np.int8)
    wz = np.array([1, -2, 3], np.int8)
    got = kdml.conv_integer(x, w, np.uint8(7), wz, strides=(2, 2), device=dev).numpy()
    np.testing.assert_array_equal(got, reference(x, w, np.uint8(7), wz, (2, 2), (1, 1), (0, 0), (0, 0), 1))
    with pytest.raises(kdml.InvalidArgumentError, match="w_zero_point: must hold 1 or 3 values"):
        kdml.conv_integer(x, w, None, np.zeros(2, np.int8), device=dev)


def _desc(**over):
    base = dict(input_tensor=kdml.TensorDesc(D.UINT8, (1, 4, 5, 5)), input_zero_point_tensor=None,
                filter_tensor=kdml.TensorDesc(D.INT8, (2, 4, 3, 3)), filter_zero_point_tensor=None,
                output_tensor=kdml.TensorDesc(D.INT32, (1, 2, 3, 3)))
    base.update(over)
    return ConvolutionIntegerDesc(**base)


@pytest.mark.parametrize("over, error, match", [
    ({"input_zero_point_tensor": kdml.TensorDesc(D.INT8, (1, 1, 1, 1))}, kdml.InvalidArgumentError,
     "input_zero_point_tensor.data_type: must equal its tensor's"),
    ({"filter_zero_point_tensor": kdml.TensorDesc(D.INT8, (1, 3, 1, 1))}, kdml.InvalidArgumentError,
     r"filter_zero_point_tensor.sizes: must be \(1, 1, 1, 1\) or \(1, 2, 1, 1\)"),
    ({"group_count": 3}, kdml.InvalidArgumentError, "group_count: must divide"),
    ({"output_tensor": kdml.TensorDesc(D.INT32, (1, 2, 4, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes: must be"),
    ({"filter_tensor": kdml.TensorDesc(D.INT8, (2, 3, 3, 3))}, kdml.InvalidArgumentError, "filter_tensor.sizes: channel count"),
    ({"strides": (1,)}, kdml.InvalidArgumentError, "strides: must hold DimensionCount"),
    ({"output_tensor": kdml.TensorDesc(D.FLOAT32, (1, 2, 3, 3))}, kdml.UnsupportedError, "output_tensor"),
    ({"input_tensor": kdml.TensorDesc(D.UINT8, (1, 4, 5, 5, 1))}, kdml.UnsupportedError, "input_tensor"),
])
def test_refusals_name_the_field_before_anything_runs(dev, over, error, match):
    with pytest.raises(error, match=match):
        dev.compile(_desc(**over))


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def test_onnx_node_cases_run_on_the_device():
    from onnx_node_cases import node_cases, run_case

    from kompute_dml.onnx_backend import VULKAN

    case, names = node_cases(r"^test_convinteger_.*_cpu$", __name__)
    assert names == ["test_convinteger_with_padding_cpu", "test_convinteger_without_padding_cpu"], names
    for name in names:
        placed = [p.target for rep in run_case(case, name) for p in rep.placement if p.op_type == "ConvInteger"]
        assert placed == [VULKAN], (name, placed)


def test_onnx_1d_conv_integer_with_auto_pad(rng):
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    from kompute_dml.onnx_backend import CPU, Backend

    w = rng.integers(-128, 128, (5, 3, 4)).astype(np.int8)
    g = helper.make_graph([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], auto_pad="SAME_UPPER", strides=[2])], "g",
                          [helper.make_tensor_value_info("x", T.UINT8, [2, 3, 9])], [helper.make_tensor_value_info("y", T.INT32, None)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(9, np.uint8), "xz")])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), "CPU")
    assert all(p.target != CPU for p in rep.placement)
    x = rng.integers(0, 256, (2, 3, 9)).astype(np.uint8)
    got = rep.run({"x": x})[0]
    # SAME_UPPER: out = ceil(9 / 2) = 5, total padding (5 - 1) * 2 + 4 - 9 = 3: 1 at the start, 2 at the end
    want = reference(x[:, :, None], w[:, :, None], np.uint8(9), None, (1, 2), (1, 1), (0, 1), (0, 2), 1)[:, :, 0]
    np.testing.assert_array_equal(got, want)


def test_quantize_dynamic_conv_model_runs_on_the_device(tmp_path, rng):
    """A float Conv -> Relu -> Conv model through onnxruntime's quantize_dynamic (ConvInteger
    chains): no CPU node, outputs equal onnxruntime's where its product is exact on this CPU."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from ort_exactness import skip_unless_exact

    from kompute_dml.onnx_backend import CPU, Backend

    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
                           helper.make_node("Conv", ["r", "w2"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3, 10, 10])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), src)
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv"])
    rep = Backend.prepare(str(dst), "CPU")
    assert "ConvInteger" in {p.op_type for p in rep.placement}
    assert all(p.target != CPU for p in rep.placement)
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    got = rep.run({"x": x})[0]
    assert rep.last_run.cpu_segments == 0 and rep.last_run.uploads == 1
    skip_unless_exact(np.uint8, np.int8, "MatMulInteger")
    want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
