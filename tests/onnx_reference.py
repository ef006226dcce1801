"""Exact references for the quantized products kompute_dml runs, and an onnx.reference
evaluator that runs onnxruntime's fused com.microsoft operators the same way.

Integer products are formed in numpy int64 (exact), scales and bias in float64: a result is
then checked against the exact value with a float32 tolerance that is smaller than half of
one unit of the integer product times its scale, so a product that is off by one anywhere
fails (`assert_product`).

The com.microsoft operators follow onnxruntime's documented CPU semantics:
- DequantizeLinear (opset 13, which onnx's reference evaluator lacks): (x - zero point) * scale.
- GatherElements: onnx's reference fails on some shapes; np.take_along_axis instead.
- DynamicQuantizeLinear (and the A of DynamicQuantizeMatMul): range widened to include 0,
  float32 scale (max - min) / 255 (1 when max == min), zero point round-half-to-even of
  clamp(-min / scale, 0, 255), q = clamp(round-half-to-even(x / scale) + zero point, 0, 255),
  every step in float32 (onnx's own reference uses 1 / 255 for max == min: replaced here).
- MatMulIntegerToFloat: (A - a_zero_point) a_scale @ (B - b_zero_point) b_scale + bias.
- FusedMatMul: alpha * op(A) @ op(B) (transA / transB; transBatch* are refused).
- Gelu: x / 2 * (1 + erf(x / sqrt 2)).
- SkipLayerNormalization: LayerNorm(input + skip + bias) * gamma + beta over the last axis.
Float operators compute in float64 and round once to the output type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

EPS32 = float(np.finfo(np.float32).eps)  # 2^-23
MS = "com.microsoft"


# ---- exact quantized products ------------------------------------------------------------------
@dataclass
class ExactProduct:
    """acc: the int64 sum of (A - a_zp) (B - b_zp); scale: a_scale * b_scale in float64 (exact
    for float32 / float16 scales), broadcast over the output's last axis; bias: float64 or None."""

    acc: np.ndarray
    scale: np.ndarray
    bias: np.ndarray | None

    @property
    def value(self) -> np.ndarray:
        v = self.acc * self.scale
        return v if self.bias is None else v + self.bias

    def magnitude(self) -> np.ndarray:
        m = np.abs(self.acc * self.scale)
        return m if self.bias is None else m + np.abs(self.bias)


def integer_product(a: np.ndarray, b: np.ndarray, a_zp: Any = None, b_zp: Any = None) -> np.ndarray:
    """sum_k (A - a_zp) (B - b_zp) in int64, with numpy matmul's broadcasting; a (N,) b_zp is per column."""
    a64 = np.asarray(a).astype(np.int64)
    b64 = np.asarray(b).astype(np.int64)
    if a_zp is not None:
        a64 = a64 - np.asarray(a_zp).astype(np.int64)
    if b_zp is not None:
        b64 = b64 - np.asarray(b_zp).astype(np.int64)
    return np.matmul(a64, b64)


def mmitf_exact(a: np.ndarray, b: np.ndarray, a_scale: Any, b_scale: Any, a_zp: Any = None, b_zp: Any = None,
                bias: Any = None) -> ExactProduct:
    """MatMulIntegerToFloat's value, exactly: integer product in int64, epilogue in float64."""
    acc = integer_product(a, b, a_zp, b_zp)
    scale = np.asarray(a_scale, np.float64).reshape(()) * np.asarray(b_scale, np.float64)
    bias64 = None if bias is None else np.asarray(bias, np.float64)
    return ExactProduct(acc, np.broadcast_to(scale, acc.shape[-1:] if np.ndim(b) > 1 else ()), bias64)


def product_tolerance(exact: ExactProduct, out_dtype: Any) -> np.ndarray:
    """The largest legitimate |result - exact| for a float32 epilogue: the scale product, the
    multiply and the bias add each round once (2^-24 relative each; 3 * 2^-23 covers them, and
    an integer sum past 2^24 rounding into a float). FLOAT16 output adds its one rounding."""
    tol = 3 * EPS32 * exact.magnitude()
    if np.dtype(out_dtype) == np.float16:
        tol = tol + 2.0**-11 * np.abs(exact.value) + 2.0**-25
    return tol


def assert_product(got: np.ndarray, exact: ExactProduct, *, resolve_units: bool = True, what: str = "product") -> int:
    """Assert got (float32 / float16) equals the exact product within product_tolerance.

    With resolve_units, also assert the tolerance is below half of one unit of the integer
    product (scale / 2) at every output: then any integer error fails the check. Returns the
    number of outputs checked."""
    got = np.asarray(got)
    ref = exact.value
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    tol = product_tolerance(exact, got.dtype)
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= tol)
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(bad, err / np.maximum(tol, 1e-300), 0))), got.shape)
        units = (got.astype(np.float64)[i] - ref[i]) / np.broadcast_to(exact.scale, ref.shape)[i]
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.size} outputs off; worst at {i}: got {got[i]!r}, "
                             f"exact {ref[i]!r} (integer sum {exact.acc[i]}), off by {units:.3g} units of the "
                             f"integer product (tolerance {tol[i]:.3g})")
    if resolve_units:
        scale = np.broadcast_to(np.abs(exact.scale), ref.shape)
        blind = ~(2 * tol < scale)
        assert not blind.any(), (
            f"{what}: the check cannot see a unit error of the integer product at {int(blind.sum())} outputs "
            f"(|integer sum| up to {int(np.abs(exact.acc).max())}): choose smaller inputs or bias")
    return got.size


# ---- dynamic quantization (onnxruntime's semantics) -------------------------------------------------
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """onnxruntime's DynamicQuantizeLinear (uint8), in float32 arithmetic: (q, scale, zero point)."""
    x = np.asarray(x, np.float32)
    f32 = np.float32
    lo = min(f32(x.min()), f32(0)) if x.size else f32(0)
    hi = max(f32(x.max()), f32(0)) if x.size else f32(0)
    scale = f32(1) if hi == lo else f32(f32(hi - lo) / f32(255))
    zp = np.rint(np.clip(f32(f32(0) - f32(lo / scale)), f32(0), f32(255))).astype(np.uint8)
    q = np.clip(np.rint(x / scale) + f32(zp), f32(0), f32(255)).astype(np.uint8)
    return q, np.array(scale, np.float32), np.array(zp, np.uint8)


# ---- com.microsoft operators for onnx.reference --------------------------------------------------
class DynamicQuantizeLinear(OpRun):
    op_domain = ""

    def _run(self, x):
        return dynamic_quantize_linear(x)


class DequantizeLinear(OpRun):
    """Opset 13 semantics (onnx's reference starts at opset 19): (x - zero_point) * scale,
    per tensor or along `axis`."""

    op_domain = ""

    def _run(self, x, x_scale, x_zero_point=None, axis=1, block_size=0, output_dtype=0):
        if block_size or output_dtype:
            raise NotImplementedError("DequantizeLinear with block_size or output_dtype")
        x64 = np.asarray(x).astype(np.float64)
        scale = np.asarray(x_scale)
        zp = np.zeros((), np.float64) if x_zero_point is None else np.asarray(x_zero_point).astype(np.float64)
        if scale.ndim == 1 and x64.ndim > 0:
            shape = [1] * x64.ndim
            shape[axis % x64.ndim] = scale.size
            zp = zp.reshape(shape) if zp.ndim == 1 else zp
            return (((x64 - zp) * scale.astype(np.float64).reshape(shape)).astype(scale.dtype),)
        return (((x64 - zp) * float(scale.reshape(()))).astype(scale.dtype),)


class GatherElements(OpRun):
    """onnx's reference fails on some shapes (np.choose takes at most 64 choices, and its
    fallback reshapes wrongly): the same semantics through np.take_along_axis."""

    op_domain = ""

    def _run(self, data, indices, axis=0):
        data, idx = np.asarray(data), np.asarray(indices).astype(np.int64)
        axis %= data.ndim
        idx = np.where(idx < 0, idx + data.shape[axis], idx)
        region = tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(idx.shape))
        return (np.take_along_axis(data[region], idx, axis=axis),)


class MatMulIntegerToFloat(OpRun):
    op_domain = MS

    def _run(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        p = mmitf_exact(a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)
        return (p.value.astype(np.asarray(a_scale).dtype),)


class DynamicQuantizeMatMul(OpRun):
    op_domain = MS

    def _run(self, a, b, b_scale, b_zero_point=None, bias=None):
        q, s, z = dynamic_quantize_linear(a)
        p = mmitf_exact(q, b, s, b_scale, z, b_zero_point, bias)
        return (p.value.astype(np.float32),)


def _swap_last(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if x.ndim >= 2 else x


def fused_matmul(a: Any, b: Any, alpha: float = 1.0, trans_a: int = 0, trans_b: int = 0) -> np.ndarray:
    """alpha * op(A) @ op(B) in float64."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(alpha) * np.matmul(_swap_last(a64) if trans_a else a64, _swap_last(b64) if trans_b else b64)


class FusedMatMul(OpRun):
    op_domain = MS

    def _run(self, a, b, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
        if transBatchA or transBatchB:
            raise NotImplementedError("FusedMatMul with transBatchA / transBatchB")
        return (fused_matmul(a, b, alpha, transA, transB).astype(np.asarray(a).dtype),)


_erf = np.frompyfunc(math.erf, 1, 1)


class Gelu(OpRun):
    op_domain = MS

    def _run(self, x, approximate="none"):  # onnx fills in the attribute of its own opset-20 Gelu
        if approximate not in ("none", b"none"):
            raise NotImplementedError(f"Gelu approximate={approximate!r}")
        x64 = np.asarray(x, np.float64)
        y = 0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)).astype(np.float64))
        return (y.astype(np.asarray(x).dtype),)


class SkipLayerNormalization(OpRun):
    op_domain = MS

    def _run(self, x, skip, gamma, beta=None, bias=None, epsilon=1e-12):
        s = np.asarray(x, np.float64) + np.asarray(skip, np.float64)
        if bias is not None:
            s = s + np.asarray(bias, np.float64)
        mean = s.mean(axis=-1, keepdims=True)
        inv_std = 1.0 / np.sqrt(((s - mean) ** 2).mean(axis=-1, keepdims=True) + float(epsilon))
        y = (s - mean) * inv_std * np.asarray(gamma, np.float64)
        if beta is not None:
            y = y + np.asarray(beta, np.float64)
        dt = np.asarray(x).dtype
        outs = (y.astype(dt), mean.astype(np.float32), inv_std.astype(np.float32), s.astype(dt))
        return outs[: max(1, len(self.onnx_node.output))]


CUSTOM_OPS: list[type[OpRun]] = [DynamicQuantizeLinear, DequantizeLinear, GatherElements, MatMulIntegerToFloat,
                                 DynamicQuantizeMatMul, FusedMatMul, Gelu, SkipLayerNormalization]


def evaluator(model: Any) -> ReferenceEvaluator:
    """onnx's ReferenceEvaluator with the operators above (onnxruntime's fused models run on it)."""
    return ReferenceEvaluator(model, new_ops=CUSTOM_OPS)


# ---- node by node ---------------------------------------------------------------------------------
QUANTIZED_PRODUCTS = {"MatMulIntegerToFloat", "DynamicQuantizeMatMul"}
# Float outputs that round once per element (or move data): the reference must give the same bits.
BIT_EXACT_FLOAT_OPS = {"DynamicQuantizeLinear", "DequantizeLinear", "Add", "Sub", "Mul", "Div", "Where", "Cast",
                       "Reshape", "Transpose", "Gather", "GatherElements", "Concat", "Unsqueeze", "Squeeze", "Slice",
                       "Expand", "Flatten", "Identity", "Neg", "Relu", "Trilu", "EyeLike"}
# Matrix products: the tolerance scales with sum |a| |b| rather than with |result|.
FLOAT_PRODUCTS = {"MatMul", "FusedMatMul"}
FLOAT_ULPS = 16  # other float operators (normalizations, softmax, erf): float32 rounding, reordered


@dataclass
class NodeCheck:
    index: int
    name: str
    op_type: str
    kind: str  # "quantized product", "bit-exact", "float"
    outputs: int  # elements compared
    worst: float  # the largest |got - reference| / tolerance (0 for equal bits)
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message


def _node_value(values: dict[str, Any], constants: dict[str, Any], name: str) -> Any:
    if not name:
        return None
    if name in values:
        return values[name]
    return constants[name]


def _check_product(node: Any, ins: list[Any], got: np.ndarray) -> tuple[int, float]:
    if node.op_type == "DynamicQuantizeMatMul":
        a, b, b_scale, b_zp, bias = (ins + [None] * 5)[:5]
        q, s, z = dynamic_quantize_linear(a)
        exact = mmitf_exact(q, b, s, b_scale, z, b_zp, bias)
    else:
        a, b, a_scale, b_scale, a_zp, b_zp, bias = (ins + [None] * 7)[:7]
        exact = mmitf_exact(a, b, a_scale, b_scale, a_zp, b_zp, bias)
    n = assert_product(got, exact, resolve_units=np.asarray(got).dtype == np.float32,
                       what=f"{node.op_type} {node.name!r}")
    tol = product_tolerance(exact, np.asarray(got).dtype)
    err = np.abs(np.asarray(got, np.float64) - exact.value)
    return n, float(np.max(err / np.maximum(tol, 1e-300), initial=0.0))


def _float_tolerance(node: Any, ins: list[Any], ref: np.ndarray) -> np.ndarray:
    r = np.abs(ref.astype(np.float64))
    if node.op_type in FLOAT_PRODUCTS:
        attrs = {x.name: x for x in node.attribute}
        alpha = abs(attrs["alpha"].f) if "alpha" in attrs else 1.0
        trans = [attrs[t].i if t in attrs else 0 for t in ("transA", "transB")]
        mag = fused_matmul(np.abs(np.asarray(ins[0])), np.abs(np.asarray(ins[1])), alpha, *trans)
        return FLOAT_ULPS * EPS32 * (r + mag)
    scale = np.max(r, axis=-1, keepdims=True) if r.ndim else r
    return FLOAT_ULPS * EPS32 * (r + scale)


def compare_nodes(model: Any, values: dict[str, Any], nodes: Any = None) -> list[NodeCheck]:
    """Recompute every node of `model` from the values another engine gave its inputs
    (`values`: graph inputs and every node output) and compare with that engine's outputs:
    quantized products exactly (assert_product), data movement and single-rounding float
    operators bit for bit, other float operators within FLOAT_ULPS float32 ulps of their scale,
    integer and bool outputs exactly. `nodes`: only these node indices."""
    ev = evaluator(model)
    constants = dict(ev.rt_inits_)
    checks = []
    for i, (node, impl) in enumerate(zip(model.graph.node, ev.rt_nodes_, strict=True)):
        if nodes is not None and i not in nodes:
            continue
        ins = [_node_value(values, constants, n) for n in node.input]
        outs = [o for o in node.output if o]
        check = NodeCheck(i, node.name, node.op_type, "float", 0, 0.0)
        try:
            if node.op_type in QUANTIZED_PRODUCTS:
                check.kind = "quantized product"
                check.outputs, check.worst = _check_product(node, ins, values[outs[0]])
            else:
                refs = impl.run(*ins)
                for name, ref in zip(node.output, refs):
                    if not name:
                        continue
                    got, ref = np.asarray(values[name]), np.asarray(ref)
                    check.outputs += ref.size
                    if got.shape != ref.shape or got.dtype != ref.dtype:
                        raise AssertionError(f"{name}: {got.dtype}{got.shape}, reference {ref.dtype}{ref.shape}")
                    if ref.dtype.kind != "f" or node.op_type in BIT_EXACT_FLOAT_OPS:
                        check.kind = "bit-exact" if ref.dtype.kind == "f" or check.kind == "bit-exact" else "exact"
                        same = got.tobytes() == ref.tobytes() or np.array_equal(got, ref, equal_nan=ref.dtype.kind == "f")
                        if not same:
                            diff = int(np.count_nonzero(got != ref))
                            raise AssertionError(f"{name}: {diff} of {ref.size} elements differ from the reference")
                        continue
                    tol = _float_tolerance(node, ins, ref)
                    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
                    same_inf = np.isinf(ref) & (got == ref)
                    ratio = np.where(same_inf, 0.0, err / np.maximum(tol, 1e-300))
                    check.worst = max(check.worst, float(np.nanmax(ratio, initial=0.0)))
                    bad = ~(ratio <= 1.0)
                    if bad.any():
                        raise AssertionError(f"{name}: {int(bad.sum())} of {ref.size} elements off by more than "
                                             f"{FLOAT_ULPS} float32 ulps of their scale (worst {check.worst:.3g}x)")
        except AssertionError as e:
            check.message = str(e)
        checks.append(check)
    return checks
