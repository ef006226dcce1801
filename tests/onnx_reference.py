"""Exact references for the quantized products kompute_dml runs, and an onnx.reference
evaluator that runs onnxruntime's fused com.microsoft operators the same way.

Integer products are formed in numpy int64 (exact). A float32 result must then be, bit for
bit, the epilogue float(sum) * float32(a_scale * b_scale) + bias rounded after each operation
or once (a fused multiply-add), and the check asserts that a sum one unit off would have given
other bits (`assert_product`). The reference evaluator's epilogue is float64.

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
    """acc: the int64 sum of (A - a_zp) (B - b_zp); exact_scale: a_scale * b_scale in float64
    (exact for float32 / float16 scales); scale: that product rounded to float32, as kompute_dml
    and onnxruntime form it; bias: float32 or None. scale and bias broadcast against acc."""

    acc: np.ndarray
    exact_scale: np.ndarray
    scale: np.ndarray
    bias: np.ndarray | None

    @property
    def value(self) -> np.ndarray:
        """The mathematical result, in float64."""
        v = self.acc * self.exact_scale
        return v if self.bias is None else v + self.bias.astype(np.float64)

    def float32_results(self, acc: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The two legitimate float32 epilogues of the integer sum: float(acc) * scale + bias
        rounded after the multiply and after the add, or once (a fused multiply-add, which
        Vulkan allows a compiler to form)."""
        acc = self.acc if acc is None else acc
        x = acc.astype(np.float32).astype(np.float64) * self.scale.astype(np.float64)  # exact: 24 + 24 bits
        separate = x.astype(np.float32)
        if self.bias is None:
            return separate, separate
        b = np.broadcast_to(self.bias.astype(np.float64), x.shape)
        separate = separate + np.broadcast_to(self.bias, x.shape).astype(np.float32)
        # x + b rounded once to float32: float64 sum, its exact error (two-sum), then round to odd
        # (an odd float64 is never a float32 tie), so the one float32 rounding is correct.
        s = x + b
        bb = s - x
        e = (x - (s - bb)) + (b - bb)
        even = (s.view(np.int64) & 1) == 0
        nudged = np.where(e > 0, np.nextafter(s, np.inf), np.nextafter(s, -np.inf))
        fused = np.where((e != 0) & even, nudged, s).astype(np.float32)
        return separate, fused


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
    """MatMulIntegerToFloat's value: the integer product in int64, the epilogue in float64
    (`value`) and as a float32 epilogue gives it (`float32_results`)."""
    acc = integer_product(a, b, a_zp, b_zp)
    a_s = np.asarray(a_scale).astype(np.float32).reshape(())
    b_s = np.asarray(b_scale).astype(np.float32)
    per_column = acc.shape[-1:] if np.ndim(b) > 1 else ()
    exact = np.broadcast_to(a_s.astype(np.float64) * b_s.astype(np.float64), per_column)
    scale = np.broadcast_to(a_s * b_s, per_column)
    bias32 = None if bias is None else np.asarray(bias).astype(np.float32)
    return ExactProduct(acc, exact, scale, bias32)


def _matches(got: np.ndarray, results: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Where got is one of the legitimate results (FLOAT16: within one float16 ulp of one of
    them, since the shader's float-to-half conversion rounds as the implementation chooses)."""
    if got.dtype == np.float32:
        return (got == results[0]) | (got == results[1])
    g = got.astype(np.float64)
    ok = np.zeros(got.shape, bool)
    for r in results:
        ok |= np.abs(g - r) <= np.spacing(np.abs(r.astype(np.float16))).astype(np.float64)
    return ok


def assert_product(got: np.ndarray, exact: ExactProduct, *, resolve_units: bool = True, what: str = "product") -> int:
    """Assert got (FLOAT32: bit for bit; FLOAT16: within a float16 ulp) is a float epilogue of
    the exact integer product. With resolve_units, also assert that at every output the integer
    sums one above and one below would give other float32 bits, so any integer error would
    fail. Returns the number of outputs checked."""
    got = np.asarray(got)
    results = exact.float32_results()
    assert got.shape == results[0].shape, f"{what}: shape {got.shape}, expected {results[0].shape}"
    bad = ~_matches(got, results)
    if bad.any():
        ref = exact.value
        err = np.abs(got.astype(np.float64) - ref)
        i = np.unravel_index(int(np.argmax(np.where(bad, err, -1))), got.shape)
        units = (got.astype(np.float64)[i] - ref[i]) / np.broadcast_to(exact.exact_scale, ref.shape)[i]
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.size} outputs differ from the exact product; worst at "
                             f"{i}: got {got[i]!r}, expected {results[0][i]!r} (integer sum {exact.acc[i]}), off by "
                             f"{units:.3g} units of the integer product")
    if resolve_units:
        blind = np.zeros(got.shape, bool)
        for step in (-1, 1):
            for r in exact.float32_results(exact.acc + step):
                blind |= (r == results[0]) | (r == results[1])
        assert not blind.any(), (
            f"{what}: a unit error of the integer product would not show at {int(blind.sum())} outputs (|integer "
            f"sum| up to {int(np.abs(exact.acc).max())}): choose smaller inputs or bias")
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


def _check_product(node: Any, ins: list[Any], got: np.ndarray) -> int:
    if node.op_type == "DynamicQuantizeMatMul":
        a, b, b_scale, b_zp, bias = (ins + [None] * 5)[:5]
        q, s, z = dynamic_quantize_linear(a)
        exact = mmitf_exact(q, b, s, b_scale, z, b_zp, bias)
    else:
        a, b, a_scale, b_scale, a_zp, b_zp, bias = (ins + [None] * 7)[:7]
        exact = mmitf_exact(a, b, a_scale, b_scale, a_zp, b_zp, bias)
    return assert_product(got, exact, resolve_units=np.asarray(got).dtype == np.float32,
                          what=f"{node.op_type} {node.name!r}")


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
                check.outputs = _check_product(node, ins, values[outs[0]])
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
