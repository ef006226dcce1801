"""Is onnxruntime's CPU integer matrix product exact on this processor?

onnxruntime's CPU provider multiplies uint8 x int8 with `vpdpbusd` where the processor has
AVX-512 VNNI (or AVX-VNNI): exact. Without it, it uses `vpmaddubsw`, which adds each pair of
u8 x s8 products into a saturating int16: 255 * 127 + 255 * 127 = 64770 becomes 32767, so the
result is wrong wherever neighbouring products are large. kompute_dml is exact on every device,
so onnxruntime can be a second opinion only where a probe shows it exact on this CPU.

The probe runs, once per test session and per operand-type pair, onnxruntime's three integer
products (MatMulInteger, MatMulIntegerToFloat with unit scales, DynamicQuantizeMatMul with an
A whose quantization is the identity), with B both as a graph input and as an initializer (a
constant B takes onnxruntime's pre-packed path), on two inputs: extremes that force pair sums
past int16 (rows of the type's maximum and minimum against columns of the same) and random
full-range 64x256x64 operands. Every result is compared with numpy int64 arithmetic.

    .venv/bin/python -m tests.ort_exactness     # prints the probe's figures for this CPU
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

PAIRS: dict[str, tuple[type[np.integer], type[np.integer]]] = {
    "u8u8": (np.uint8, np.uint8), "u8s8": (np.uint8, np.int8), "s8s8": (np.int8, np.int8), "s8u8": (np.int8, np.uint8)}


def pair_name(a_type: object, b_type: object) -> str:
    """'u8s8' for (uint8, int8), and so on."""
    short = {np.dtype(np.uint8): "u8", np.dtype(np.int8): "s8"}
    return short[np.dtype(a_type)] + short[np.dtype(b_type)]  # type: ignore[arg-type]


def pair_words(pair: str) -> str:
    """'u8 x s8' for 'u8s8'."""
    return f"{pair[:2]} x {pair[2:]}"


@dataclass(frozen=True)
class Exactness:
    """What the probe found for one operand-type pair: `wrong` of `total` outputs differ from
    exact integer arithmetic, by up to `max_error`; `ops` lists the products probed."""

    pair: str
    wrong: int
    total: int
    max_error: int
    ops: tuple[str, ...]
    details: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return self.total > 0 and self.wrong == 0

    def describe(self) -> str:
        if self.total == 0:
            return f"onnxruntime has no CPU kernel for {pair_words(self.pair)} ({', '.join(self.details)})"
        if self.exact:
            return (f"onnxruntime {pair_words(self.pair)} is exact on this CPU: {self.total} probe outputs of "
                    f"{', '.join(self.ops)}")
        return (f"onnxruntime {pair_words(self.pair)} is not exact on this CPU: {self.wrong} of {self.total} "
                f"outputs off by up to {self.max_error}")


def _probe_inputs(a_type: type[np.integer], b_type: type[np.integer]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    ai, bi = np.iinfo(a_type), np.iinfo(b_type)
    # Extremes: every sign combination of max/min rows against max/min columns, K = 64, so a
    # pair sum (2 * 255 * 127 for u8 x s8) leaves the int16 range wherever the kernel pairs them.
    a = np.empty((4, 64), a_type)
    a[0], a[1], a[2], a[3] = ai.max, ai.min, ai.max, ai.min
    a[2, 1::2] = ai.min  # alternating: exact results with partial cancellation
    b = np.empty((64, 4), b_type)
    b[:, 0], b[:, 1], b[:, 2], b[:, 3] = bi.max, bi.min, bi.max, bi.min
    b[::3, 3] = bi.max
    rng = np.random.default_rng(20240612)
    ar = rng.integers(ai.min, int(ai.max) + 1, (64, 256)).astype(a_type)
    br = rng.integers(bi.min, int(bi.max) + 1, (256, 64)).astype(b_type)
    return [("extremes 4x64x4", a, b), ("random 64x256x64", ar, br)]


def _session(node, inputs, initializers, out_type):
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    g = helper.make_graph([node], "probe", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                          list(v.shape)) for n, v in inputs.items()],
                          [helper.make_tensor_value_info("Y", out_type, None)],
                          initializer=[numpy_helper.from_array(v, n) for n, v in initializers.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def _run_op(op: str, a: np.ndarray, b: np.ndarray, b_const: bool) -> np.ndarray:
    """onnxruntime's product of a and b as exact integers would give it (int64)."""
    from onnx import TensorProto, helper

    one = np.array(1.0, np.float32)
    if op == "MatMulInteger":
        node = helper.make_node("MatMulInteger", ["A", "B"], ["Y"])
        ins, consts, out_t = {"A": a, "B": b}, {}, TensorProto.INT32
    elif op == "MatMulIntegerToFloat":
        node = helper.make_node("MatMulIntegerToFloat", ["A", "B", "as", "bs"], ["Y"], domain="com.microsoft")
        ins, consts, out_t = {"A": a, "B": b, "as": one}, {"bs": one}, TensorProto.FLOAT
    else:  # DynamicQuantizeMatMul: A holds 0 and 255 and only integers, so scale 1, zero point 0, q = A
        node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "bs"], ["Y"], domain="com.microsoft")
        af = a.astype(np.float32)
        af[0, 0], af[-1, -1] = 0.0, 255.0
        a[0, 0], a[-1, -1] = 0, 255
        ins, consts, out_t = {"A": af, "B": b}, {"bs": one}, TensorProto.FLOAT
    if b_const:
        consts["B"] = ins.pop("B")
    y = _session(node, ins, consts, out_t)
    # |sum| < 2^24 for every probe input, so a float32 output holds the integer exactly
    return np.asarray(y).astype(np.int64)


def _compare(op: str, a: np.ndarray, b: np.ndarray, b_const: bool) -> tuple[int, int, int]:
    """(outputs off, outputs, largest error) of onnxruntime's op against int64 arithmetic."""
    a = a.copy()
    got = _run_op(op, a, b, b_const)
    off = np.abs(got - a.astype(np.int64) @ b.astype(np.int64))
    return int(np.count_nonzero(off)), off.size, int(off.max())


@functools.cache
def probe(pair: str) -> Exactness:
    """Run the probe for one pair ('u8s8', ...) once per process."""
    a_type, b_type = PAIRS[pair]
    ops = ["MatMulInteger", "MatMulIntegerToFloat"] + (["DynamicQuantizeMatMul"] if a_type is np.uint8 else [])
    wrong = total = worst = 0
    done, details = [], []
    for op in ops:
        try:
            results = [(label, b_const, *_compare(op, a, b, b_const))
                       for label, a, b in _probe_inputs(a_type, b_type) for b_const in (False, True)]
        except Exception as e:  # no kernel for this pair: not a second opinion here
            details.append(f"{op}: {type(e).__name__}")
            continue
        done.append(op)
        for label, b_const, n_off, size, max_off in results:
            wrong, total, worst = wrong + n_off, total + size, max(worst, max_off)
            details.append(f"{op} {label} B {'initializer' if b_const else 'input'}: "
                           f"{n_off} of {size} off by up to {max_off}")
    return Exactness(pair, wrong, total, worst, tuple(done), tuple(details))


def onnxruntime_exact(a_type: object, b_type: object) -> Exactness:
    """The probe's verdict for A and B element types (numpy types)."""
    return probe(pair_name(a_type, b_type))


def skip_unless_exact(a_type: object, b_type: object, op: str) -> None:
    """pytest.skip, with the probe's figure, where onnxruntime's `op` is not an exact second
    opinion for these element types (inexact on this CPU, or no kernel)."""
    import pytest

    verdict = onnxruntime_exact(a_type, b_type)
    if not verdict.exact:
        pytest.skip(verdict.describe())
    if op not in verdict.ops:
        pytest.skip(f"onnxruntime has no CPU {op} for {pair_words(verdict.pair)}")


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return "unknown"
    wanted = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")
    return " ".join(f for f in wanted if f in flags) or "none of " + ", ".join(wanted)


def main() -> int:
    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__}; CPU flags: {_cpu_flags()}")
    for pair in PAIRS:
        r = probe(pair)
        print(r.describe())
        for d in r.details:
            print("   ", d)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
