"""com.microsoft MatMulNBits (weight-only quantized products) through the backend: expanded at
`prepare` into a MatMul of the weights dequantized once (onnx_backend/nbits.py), then on the
device; against onnxruntime's CPU kernel for 2-, 4- and 8-bit weights, with and without zero
points (packed or of A's type), K not a multiple of the block, a bias, batches, float32 and
float16."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.onnx_backend.nbits import dequantize  # noqa: E402


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Rows of `bits`-bit values packed into bytes, low bits first (zero-padded)."""
    per = 8 // bits
    pad = (-q.shape[-1]) % per
    q = np.concatenate([q, np.zeros((*q.shape[:-1], pad), q.dtype)], -1).reshape(*q.shape[:-1], -1, per)
    return np.bitwise_or.reduce(q.astype(np.uint8) << (np.arange(per, dtype=np.uint8) * bits), axis=-1)


def _quantize(w: np.ndarray, bits: int, block: int, zero_points: str, dt):
    """W (K, N) as MatMulNBits' B, scales and zero points ("packed", "float" or "none")."""
    k, n = w.shape
    blocks = -(-k // block)
    wp = np.concatenate([w, np.zeros((blocks * block - k, n), w.dtype)]).T.reshape(n, blocks, block)
    top = (1 << bits) - 1
    if zero_points == "none":  # symmetric around 2^(bits - 1)
        scale = np.abs(wp).max(-1) / (1 << (bits - 1)) + 1e-8
        zp = np.full((n, blocks), 1 << (bits - 1))
    else:
        lo, hi = np.minimum(wp.min(-1), 0), np.maximum(wp.max(-1), 0)
        scale = (hi - lo) / top + 1e-8
        zp = np.clip(np.rint(-lo / scale), 0, top)
    scale = scale.astype(dt)
    q = np.clip(np.rint(wp / scale.astype(np.float32)[..., None]) + zp[..., None], 0, top).astype(np.uint8)
    b = _pack(q, bits).reshape(n, blocks, block * bits // 8)
    zps = None if zero_points == "none" else (_pack(zp.astype(np.uint8), bits).reshape(-1) if zero_points == "packed"
                                               else zp.astype(dt).reshape(-1))
    return b, scale.reshape(-1), zps


CASES = {  # A shape, N, bits, block, zero points, bias, type
    "4bit-asym-bias": ((3, 256), 96, 4, 32, "packed", True, np.float32),
    "4bit-sym-k-padded": ((4, 200), 40, 4, 16, "none", False, np.float32),
    "4bit-float-zp-batched": ((2, 5, 128), 24, 4, 32, "float", True, np.float32),
    "8bit": ((3, 64), 16, 8, 16, "packed", False, np.float32),
    "2bit": ((3, 96), 20, 2, 32, "packed", False, np.float32),
    "4bit-f16": ((2, 5, 128), 64, 4, 32, "packed", True, np.float16),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matmul_nbits_matches_onnxruntime_on_the_device(rng, case):
    ashape, n, bits, block, zmode, with_bias, dt = CASES[case]
    k = ashape[-1]
    w = (rng.standard_normal((k, n)) * 0.2).astype(np.float32)
    b, scales, zps = _quantize(w, bits, block, zmode, dt)
    elem = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")]
    ins = ["A", "B", "scales"]
    if zps is not None:
        inits.append(numpy_helper.from_array(zps, "zp"))
        ins.append("zp")
    if with_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(dt), "bias"))
        ins += [""] * (5 - len(ins)) + ["bias"]
    node = helper.make_node("MatMulNBits", ins, ["Y"], domain="com.microsoft", K=k, N=n, bits=bits, block_size=block)
    g = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", elem, list(ashape))],
                          [helper.make_tensor_value_info("Y", elem, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=8)
    a = rng.standard_normal(ashape).astype(dt)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"A": a})[0]
    assert rep.nbits_expanded == 1 and {p.target for p in rep.placement} == {"vulkan"}, rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = float(np.abs(want.astype(np.float64)).max())
    tol = 2e-5 if dt == np.float32 else 4e-3
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol * scale, rtol=0)


def test_dequantized_weights_are_the_ones_quantized(rng):
    """The expansion's W reproduces each block's values from B, scales and zero points exactly as
    (q - zero_point) * scale (an independent unpacking here: the packing above, reversed)."""
    k, n, bits, block = 64, 8, 4, 16
    w = (rng.standard_normal((k, n)) * 0.3).astype(np.float32)
    b, scales, zps = _quantize(w, bits, block, "packed", np.float32)
    node = helper.make_node("MatMulNBits", ["A", "B", "s", "z"], ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)
    got = dequantize(node, b, scales, zps, np.dtype(np.float32))
    q = np.stack([b & 15, b >> 4], -1).reshape(n, k)
    z = np.stack([zps & 15, zps >> 4], -1).reshape(n, -1)[:, :k // block]
    want = ((q.astype(np.float32) - np.repeat(z, block, 1)) * np.repeat(scales.reshape(n, -1), block, 1)).T
    np.testing.assert_array_equal(got, want)
    assert np.abs(got - w).max() <= scales.max()  # and it approximates the weights quantized


def test_matmul_nbits_with_g_idx_stays_a_node(rng):
    node = helper.make_node("MatMulNBits", ["A", "B", "s", "", "g"], ["Y"], domain="com.microsoft", K=32, N=4, bits=4,
                            block_size=16)
    inits = [numpy_helper.from_array(np.zeros((4, 2, 8), np.uint8), "B"),
             numpy_helper.from_array(np.ones(8, np.float32), "s"), numpy_helper.from_array(np.zeros(32, np.int32), "g")]
    g = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 32])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=8)
    rep = Backend.prepare(m, "CPU")
    assert rep.nbits_expanded == 0 and [p.op_type for p in rep.placement] == ["MatMulNBits"]
