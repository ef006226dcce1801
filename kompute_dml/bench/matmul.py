#!/usr/bin/env python3
"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT against its peers, side by side in one run.

For each shape (M, K, N) and type pair (int8 x int8, uint8 x int8; per-tensor scales and
zero points, FLOAT32 output; with --bias also a bias of N values on both sides) it times:
  - kompute_dml: the median of re-evaluations of an already compiled operator with bound
    tensors (one warm-up first), i.e. one recorded submission per call; measured before the
    peers of the same shape (their worker threads spin after each call);
  - onnxruntime CPU: com.microsoft MatMulIntegerToFloat (B, scales and zero points as
    initializers, as in quantized models), median of session.run calls after a warm-up;
  - numpy: float32 matmul of the same shape (the unquantized baseline).
GOPS = 2*M*N*K / seconds. Ratios are ours / peer in speed (>1: we are faster).

`run(quick, rounds=1, bias=False)` returns the rows;
`python -m kompute_dml.bench.matmul [--quick] [--rounds N] [--bias]`
prints a table (N > 1: ours and onnxruntime alternate N times per shape; medians of the rounds).
Timings on a shared machine are noisy: compare the peers within one run.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import kompute_dml as kdml

from .timing import median, series

D = kdml.DataType
PAIRS = {"s8s8": (np.int8, np.int8), "u8s8": (np.uint8, np.int8)}
BIG = (1024, 1024, 1024)
TRANSFORMER_M = (1, 16, 128, 512)
TRANSFORMER_KN = (384, 1536)


def shapes(quick: bool) -> list[tuple[int, int, int]]:
    if quick:
        return [BIG, (128, 384, 1536), (1, 1536, 384)]
    return [BIG] + [(m, k, n) for m in TRANSFORMER_M for k in TRANSFORMER_KN for n in TRANSFORMER_KN]


def _median_time(fn: Any, reps: int, min_total: float = 0.0) -> float:
    """The median of at least `reps` calls after a warm-up, more (up to 200) until they last `min_total`."""
    times = series(fn, reps, warmup=1)
    while sum(times) < min_total and len(times) < 200:
        times += series(fn, reps)
    return median(times)


def _ort_session(m: int, k: int, n: int, a_dt: Any, b: np.ndarray, a_zp: Any, b_zp: Any,
                 bias: np.ndarray | None = None) -> Any:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a_type = TensorProto.UINT8 if a_dt == np.uint8 else TensorProto.INT8
    inits = [
        numpy_helper.from_array(b, "B"),
        numpy_helper.from_array(np.array(0.02, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(0.01, np.float32), "b_scale"),
        numpy_helper.from_array(np.array(a_zp, a_dt), "a_zero_point"),
        numpy_helper.from_array(np.array(b_zp, b.dtype), "b_zero_point"),
    ]
    names = ["A", "B", "a_scale", "b_scale", "a_zero_point", "b_zero_point"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
        names.append("bias")
    node = helper.make_node("MatMulIntegerToFloat", names, ["Y"], domain="com.microsoft")
    graph = helper.make_graph(
        [node], "mmitf", [helper.make_tensor_value_info("A", a_type, [m, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])], initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=10
    )
    onnx.checker.check_model(model)
    so = ort.SessionOptions()
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(quick: bool = False, device: kdml.Device | None = None, rounds: int = 1,
        bias: bool = False) -> list[dict[str, Any]]:
    """Rows: name, shape, dtypes, seconds, gops, and the peers' seconds / GOPS / ratios.

    With rounds > 1 each shape is timed `rounds` times, alternating ours and onnxruntime
    (a pause after each peer lets its spinning worker threads settle), and the reported
    times are the medians of the per-round medians."""
    dev = device or kdml.Device()
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows: list[dict[str, Any]] = []
    for m, k, n in shapes(quick):
        ops = 2.0 * m * n * k
        cases = []
        for pair, (a_dt, b_dt) in PAIRS.items():
            ia = np.iinfo(a_dt)
            a = rng.integers(ia.min, ia.max, (m, k), endpoint=True).astype(a_dt)
            b = rng.integers(-128, 128, (k, n)).astype(b_dt)
            a_zp = 128 if a_dt == np.uint8 else 3
            b_zp = 0
            bias_v = rng.standard_normal(n).astype(np.float32) if bias else None
            # ONNX's (N,) bias: one value per column, stride 0 along M
            bias_desc = kdml.TensorDesc(D.FLOAT32, (m, n), (0, 1)) if bias else None
            T = D.from_numpy
            desc = kdml.MatrixMultiplyIntegerToFloatDesc(
                kdml.TensorDesc(T(a_dt), (m, k)), kdml.TensorDesc(D.FLOAT32, (1, 1)), kdml.TensorDesc(T(a_dt), (1, 1)),
                kdml.TensorDesc(T(b_dt), (k, n)), kdml.TensorDesc(D.FLOAT32, (1, 1)), kdml.TensorDesc(T(b_dt), (1, 1)),
                bias_desc, kdml.TensorDesc(D.FLOAT32, (m, n)),
            )
            op = dev.compile(desc)
            ins = [dev.tensor(a), dev.tensor(np.array([[0.02]], np.float32)), dev.tensor(np.array([[a_zp]], a_dt)),
                   dev.tensor(b), dev.tensor(np.array([[0.01]], np.float32)), dev.tensor(np.array([[b_zp]], b_dt)),
                   kdml.Tensor(dev.tensor(bias_v).buffer, bias_desc) if bias else None]
            out = dev.empty(desc.output_tensor)
            cases.append({"pair": pair, "a_dt": a_dt, "b_dt": b_dt, "a": a, "op": op, "ins": ins, "out": out,
                          "b": b, "a_zp": a_zp, "b_zp": b_zp, "bias": bias_v, "ours": [], "ort": []})
        for _ in range(max(1, rounds)):
            # ours first for both pairs: onnxruntime's and numpy's BLAS worker threads spin for a
            # while after each call and would take the cores lavapipe's threads need.
            for c in cases:
                c["ours"].append(_median_time(lambda c=c: c["op"].execute(c["ins"], [c["out"]]), reps, 0.2))
            for c in cases:
                # a fresh session per round, deleted right after: a live session's thread pool
                # slowed lavapipe's threads 2-3x when kept across our timings
                sess = _ort_session(m, k, n, c["a_dt"], c["b"], c["a_zp"], c["b_zp"], c["bias"])
                feed = {"A": c["a"]}
                c["ort"].append(_median_time(lambda sess=sess, feed=feed: sess.run(None, feed), reps, 0.2))
                c["ref"] = sess.run(None, feed)[0]
                del sess
            time.sleep(0.1)  # let spinning peer threads settle before ours runs again
        for c in cases:
            ref = c["ref"]
            got = c["out"].numpy()
            agree = float(np.max(np.abs(got - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
            # onnxruntime's u8 x s8 is exact only with VNNI (tests/ort_exactness.py): also against
            # the exact sums (float64 holds these integer sums exactly: |sum| < K * 2^16 < 2^53)
            acc = (c["a"].astype(np.float64) - c["a_zp"]) @ (c["b"].astype(np.float64) - c["b_zp"])
            exact = acc * (np.float64(np.float32(0.02)) * np.float64(np.float32(0.01)))
            exact = exact + (c["bias"].astype(np.float64) if c["bias"] is not None else 0.0)
            off_exact = float(np.max(np.abs(got - exact)) / max(1e-30, float(np.max(np.abs(exact)))))
            t_ours, t_ort = median(c["ours"]), median(c["ort"])
            rows.append({
                "name": f"matmul_integer_to_float {c['pair']}{'+bias' if bias else ''}",
                "shape": f"{m}x{k}x{n}",
                "dtypes": f"{np.dtype(c['a_dt']).name} x {np.dtype(c['b_dt']).name} -> float32",
                "variant": c["op"].variants[0],
                "seconds": t_ours,
                "gops": ops / t_ours / 1e9,
                "ort_seconds": t_ort,
                "ort_gops": ops / t_ort / 1e9,
                "rounds": len(c["ours"]),
                "ratio_per_round": [o / s for o, s in zip(c["ort"], c["ours"])],
                "max_rel_diff_vs_ort": agree,
                "max_rel_diff_vs_exact": off_exact,
            })
        del cases
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        b32 = rng.standard_normal((k, n)).astype(np.float32)
        t_np = _median_time(lambda a32=a32, b32=b32: a32 @ b32, reps, 0.2)
        for r in rows[-len(PAIRS):]:
            r["numpy_f32_seconds"] = t_np
            r["numpy_f32_gops"] = ops / t_np / 1e9
            r["ratio_vs_ort"] = r["ort_seconds"] / r["seconds"]
            r["ratio_vs_numpy_f32"] = t_np / r["seconds"]
        time.sleep(0.05)  # let spinning peer threads settle before the next shape
    if device is None:
        dev.close()
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'pair':10s} {'M x K x N':16s} {'variant':15s} {'ours ms':>9s} {'GOPS':>6s} {'ORT ms':>9s} {'GOPS':>6s} " \
           f"{'np f32 ms':>9s} {'GOPS':>6s} {'x ORT':>6s} {'x np':>6s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['name'].split()[-1]:10s} {r['shape']:16s} {r['variant']:15s} {r['seconds'] * 1e3:9.3f} {r['gops']:6.1f} "
            f"{r['ort_seconds'] * 1e3:9.3f} {r['ort_gops']:6.1f} {r['numpy_f32_seconds'] * 1e3:9.3f} "
            f"{r['numpy_f32_gops']:6.1f} {r['ratio_vs_ort']:6.2f} {r['ratio_vs_numpy_f32']:6.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three shapes, fewer repetitions")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate ours / onnxruntime this many times per shape and report medians")
    ap.add_argument("--bias", action="store_true", help="add a bias of N values (ONNX's (N,) bias) on both sides")
    args = ap.parse_args()
    rows = run(args.quick, rounds=args.rounds, bias=args.bias)
    print(format_table(rows))
    if args.rounds > 1:
        for r in rows:
            print(f"{r['name'].split()[-1]} {r['shape']}: x ORT per round "
                  + " ".join(f"{x:.2f}" for x in r["ratio_per_round"]))
    print("medians per call; GOPS = 2*M*N*K/s; 'x ORT' / 'x np' = peer time / our time (>1: we are faster)")


if __name__ == "__main__":
    main()
