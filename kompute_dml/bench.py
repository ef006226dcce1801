"""`kompute-dml bench`: every operator against numpy and onnxruntime, in one run.

Usage: kompute-dml bench [--quick] [--json FILE] [--plot FILE.png] [--only SUBSTR] [--rounds N]

Method. Each row times several callables *interleaved*: one sample of ours, one of each
peer and one of the machine's copy ceiling per round, so that the noise of a shared
machine hits all of them alike; each figure is the median over the rounds, after a
warm-up. A sample repeats its callable enough times to last ~0.3 ms (so that the timer's
resolution does not matter for microsecond calls) and is divided by that count.

- ours: re-evaluation of an already compiled operator with already bound tensors
  (`op.execute(...)`, which replays the cached kp sequence); `eager`: the full functional
  call (`kdml.identity(x)` ...: compile-cache lookup, output allocation, execute).
- numpy: copyto into an existing array / zero + fill_diagonal into an existing array /
  np.triu, np.tril / float32 matmul.
- ort: onnxruntime's CPU provider through IOBinding with pre-allocated outputs
  (Identity, EyeLike, Trilu, com.microsoft MatMulIntegerToFloat), models built with
  onnx.helper, ir_version 10.
- ceiling: numpy.copyto of 64 MiB (the machine's own large-copy bandwidth), sampled in
  the same rounds; memory-bound rows report their fraction of it.

Bytes moved count bytes read plus bytes written (identity/copy: 2 x size; diagonal
matrix: the output written; triu/tril with input: 2 x size); GOPS = 2*M*N*K / time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CEILING_BYTES = 64 << 20
GOALS_DOC = {
    "identity_64MiB_vs_numpy_copyto": ">= 0.8",
    "diagonal_matrix_4096_vs_numpy_fill_diagonal": ">= 1.0",
    "triu_4096_vs_numpy_triu": ">= 1.0",
    "matmul_int8_1024_vs_ort": ">= 1.0",
    "eager_small_op_us": "<= 150",
    "recorded_small_op_us": "<= 30",
}


# ---- timing ------------------------------------------------------------------------
def _calibrate(fn: Callable[[], Any], target: float) -> int:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return int(min(1000, max(1, target / max(dt, 1e-7))))


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, warmup: int = 2, target: float = 3e-4,
                settle: float = 0.0) -> dict[str, list[float]]:
    """Seconds per call of each callable: `rounds` samples each, taken round-robin. `settle`
    seconds of sleep before each sample let the previous contender's worker threads
    (onnxruntime's and OpenBLAS's spin after a call; lavapipe's do not) stop competing for
    the cores."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    inner = {k: _calibrate(f, target) for k, f in fns.items()}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            n = inner[k]
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[k].append((time.perf_counter() - t0) / n)
    return samples


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


# ---- machine -----------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(dev: Any) -> dict[str, Any]:
    flags = ""
    with contextlib.suppress(OSError, StopIteration):
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_features": [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512vnni") if f" {f}" in flags],
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "device": dev.name,
        "device_type": getattr(dev, "device_type", None),
        "feature_level": dev.feature_level.name,
        "kp": _version("kp"),
        "kompute_dml": _version("kompute_dml") or _version("kompute-dml"),
        "numpy": np.__version__,
        "onnxruntime": _version("onnxruntime"),
        "onnx": _version("onnx"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "env": {k: os.environ[k] for k in ("LP_NUM_THREADS", "LP_NATIVE_VECTOR_WIDTH") if k in os.environ},
    }


# ---- onnxruntime peers -------------------------------------------------------------
class OrtPeer:
    """One single-node model run through IOBinding into pre-allocated outputs; `constants`
    become initializers (as weights are in a model, so onnxruntime may pre-pack them)."""

    def __init__(self, node: Any, inputs: dict[str, np.ndarray], out_name: str, out_shape: tuple[int, ...],
                 out_dtype: Any, opset: int = 21, ms_domain: bool = False,
                 constants: dict[str, np.ndarray] | None = None) -> None:
        import onnxruntime as ort
        from onnx import helper, numpy_helper

        def vi(name: str, arr_dtype: Any, shape: tuple[int, ...]) -> Any:
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(arr_dtype)), list(shape))

        graph = helper.make_graph(
            [node], "bench",
            [vi(k, v.dtype, v.shape) for k, v in inputs.items()],
            [vi(out_name, out_dtype, out_shape)],
            initializer=[numpy_helper.from_array(v, k) for k, v in (constants or {}).items()],
        )
        opsets = [helper.make_opsetid("", opset)]
        if ms_domain:
            opsets.append(helper.make_opsetid("com.microsoft", 1))
        model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.binding = self.sess.io_binding()
        self._keep = []
        for k, v in inputs.items():
            ov = ort.OrtValue.ortvalue_from_numpy(v)
            self._keep.append(ov)
            self.binding.bind_ortvalue_input(k, ov)
        self.out = np.empty(out_shape, dtype=out_dtype)
        ovo = ort.OrtValue.ortvalue_from_numpy(self.out)
        self._keep.append(ovo)
        self.binding.bind_ortvalue_output(out_name, ovo)

    def __call__(self) -> None:
        self.sess.run_with_iobinding(self.binding)


def _ort_available() -> bool:
    try:
        importlib.import_module("onnxruntime")
        importlib.import_module("onnx")
        return True
    except ImportError:
        return False


# ---- cases -------------------------------------------------------------------------
@dataclass
class Case:
    op: str
    dtype: str
    shape: tuple[int, ...]
    metric: str  # "GB/s" or "GOPS"
    amount: float  # bytes moved (read + written) or operations
    ours: Callable[[], Any] | None
    eager: Callable[[], Any] | None = None
    peers: dict[str, Callable[[], Any]] = field(default_factory=dict)
    check: Callable[[], bool] | None = None
    note: str = ""
    memory_bound: bool = True
    error: str | None = None


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in shape)


def _nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape, dtype=np.float32).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def identity_cases(kdml: Any, dev: Any, sizes: list[tuple[str, tuple[int, ...]]], ort_ok: bool, rng: Any) -> list[Case]:
    cases = []
    for dtname, shape in sizes:
        dt = np.dtype(dtname)
        a = _rand(rng, shape, dt)
        b = np.empty_like(a)
        x = dev.tensor(a)
        y = dev.empty(x.desc)
        op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
        peers: dict[str, Callable[[], Any]] = {"numpy": lambda a=a, b=b: np.copyto(b, a)}
        if ort_ok:
            from onnx import helper
            peers["ort"] = OrtPeer(helper.make_node("Identity", ["x"], ["y"]), {"x": a}, "y", shape, dt)
        cases.append(Case(
            "ACTIVATION_IDENTITY", dt.name, shape, "GB/s", 2 * a.nbytes,
            ours=lambda op=op, x=x, y=y: op.execute([x], [y]),
            eager=lambda x=x: kdml.identity(x),
            peers=peers,
            check=lambda y=y, a=a: bool(np.array_equal(y.numpy().view(np.uint8), a.view(np.uint8))),
        ))
    return cases


def copy_cases(kdml: Any, dev: Any, sizes: list[tuple[str, tuple[int, ...], bool]], rng: Any) -> list[Case]:
    cases = []
    for dtname, shape, transpose in sizes:
        dt = np.dtype(dtname)
        a = _rand(rng, shape, dt)
        t = dev.tensor(a)
        if transpose:  # read the transpose: a strided (non-mergeable) copy
            src = kdml.TensorDesc(t.desc.data_type, shape[::-1], (1, shape[1]))
            x = kdml.Tensor(t.buffer, src)
            ref = a.T
        else:
            x, ref = t, a
        y = dev.empty(kdml.TensorDesc(t.desc.data_type, x.desc.sizes))
        op = dev.compile(kdml.CopyDesc(x.desc, y.desc))
        b = np.empty(ref.shape, dt)
        cases.append(Case(
            "COPY" + (" (transpose)" if transpose else ""), dt.name, x.desc.sizes, "GB/s", 2 * a.nbytes,
            ours=lambda op=op, x=x, y=y: op.execute([x], [y]),
            eager=lambda x=x: kdml.copy(x),
            peers={"numpy": lambda ref=ref, b=b: np.copyto(b, ref)},
            check=lambda y=y, ref=ref: bool(np.array_equal(y.numpy().view(np.uint8), np.ascontiguousarray(ref).view(np.uint8))),
        ))
    return cases


def diagonal_cases(kdml: Any, dev: Any, sizes: list[tuple[str, tuple[int, ...]]], ort_ok: bool) -> list[Case]:
    cases = []
    for dtname, shape in sizes:
        dt = np.dtype(dtname)
        ddt = kdml.DataType.from_numpy(dt)
        desc = kdml.TensorDesc(ddt, shape)
        y = dev.empty(desc)
        op = dev.compile(kdml.DiagonalMatrixDesc(desc, 0, 1.0))
        b = np.empty(shape, dt)

        def np_eye(b: np.ndarray = b) -> None:
            b.fill(0)
            np.fill_diagonal(b, 1)

        peers: dict[str, Callable[[], Any]] = {"numpy": np_eye}
        if ort_ok:
            from onnx import helper
            peers["ort"] = OrtPeer(helper.make_node("EyeLike", ["x"], ["y"]), {"x": np.zeros(shape, dt)}, "y", shape, dt)
        eager = None
        if hasattr(kdml, "eye_like"):
            xz = dev.empty(desc)
            eager = lambda xz=xz: kdml.eye_like(xz)  # noqa: E731
        cases.append(Case(
            "DIAGONAL_MATRIX", dt.name, shape, "GB/s", _nbytes(shape, dt),
            ours=lambda op=op, y=y: op.execute([], [y]), eager=eager, peers=peers,
            check=lambda y=y, shape=shape, dt=dt: bool(np.array_equal(y.numpy(), np.eye(*shape, dtype=dt))),
            note="bytes = output written",
        ))
    return cases


def trilu_cases(kdml: Any, dev: Any, sizes: list[tuple[str, tuple[int, ...], bool]], ort_ok: bool, rng: Any) -> list[Case]:
    cases = []
    for dtname, shape, upper in sizes:
        dt = np.dtype(dtname)
        a = _rand(rng, shape, dt)
        x = dev.tensor(a)
        y = dev.empty(x.desc)
        begin, end = (-(2**31), 0) if upper else (1, 2**31 - 1)
        op = dev.compile(kdml.DiagonalMatrix1Desc(x.desc, y.desc, x.desc.data_type, 0, begin, end))
        npf = np.triu if upper else np.tril
        peers: dict[str, Callable[[], Any]] = {"numpy": lambda a=a, npf=npf: npf(a)}
        if ort_ok:
            from onnx import helper
            peers["ort"] = OrtPeer(helper.make_node("Trilu", ["x"], ["y"], upper=int(upper)), {"x": a}, "y", shape, dt)
        fn = kdml.triu if upper else kdml.tril
        cases.append(Case(
            f"DIAGONAL_MATRIX1 ({'triu' if upper else 'tril'})", dt.name, shape, "GB/s", 2 * a.nbytes,
            ours=lambda op=op, x=x, y=y: op.execute([x], [y]),
            eager=(lambda x=x, fn=fn: fn(x)) if hasattr(kdml, "triu") else None, peers=peers,
            check=lambda y=y, a=a, npf=npf: bool(np.array_equal(y.numpy(), npf(a))),
            note="numpy allocates its output",
        ))
    return cases


def _ort_mmitf(a: np.ndarray, b: np.ndarray) -> OrtPeer:
    from onnx import helper
    m, n = a.shape[0], b.shape[1]
    node = helper.make_node("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale"], ["Y"], domain="com.microsoft")
    # B and the scales are initializers, as a quantized model's weights are: onnxruntime
    # pre-packs B once (as a graph input it would re-pack B on every call, about 2x slower).
    consts = {"B": b, "a_scale": np.array([0.02], np.float32), "b_scale": np.array([0.03], np.float32)}
    return OrtPeer(node, {"A": a}, "Y", (m, n), np.float32, ms_domain=True, constants=consts)


def _our_matmul(kdml: Any, dev: Any, a: np.ndarray, b: np.ndarray) -> tuple[Callable[[], Any] | None, Callable[[], Any] | None, str | None]:
    """Ours via MatrixMultiplyIntegerToFloatDesc (per-tensor scales, no zero points, no bias)."""
    if not hasattr(kdml, "MatrixMultiplyIntegerToFloatDesc"):
        return None, None, "MatrixMultiplyIntegerToFloatDesc not available yet"
    try:
        A, B = dev.tensor(a), dev.tensor(b)
        sa, sb = dev.tensor(np.array([[0.02]], np.float32)), dev.tensor(np.array([[0.03]], np.float32))
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (a.shape[0], b.shape[1])))
        desc = kdml.MatrixMultiplyIntegerToFloatDesc(A.desc, sa.desc, None, B.desc, sb.desc, None, None, out.desc)
        op = dev.compile(desc)
        ours = lambda: op.execute([A, sa, None, B, sb, None, None], [out])  # noqa: E731
        eager = None
        if hasattr(kdml, "matmul_integer_to_float"):
            try:
                kdml.matmul_integer_to_float(A, B, a_scale=0.02, b_scale=0.03)
                eager = lambda: kdml.matmul_integer_to_float(A, B, a_scale=0.02, b_scale=0.03)  # noqa: E731
            except Exception:
                eager = None
        return ours, eager, None
    except Exception as e:
        return None, None, f"{type(e).__name__}: {e}"


def matmul_cases(kdml: Any, dev: Any, sizes: list[int], a_types: list[Any], ort_ok: bool, rng: Any) -> list[Case]:
    cases = []
    for n in sizes:
        for a_dt in a_types:
            a = _rand(rng, (n, n), a_dt)
            b = _rand(rng, (n, n), np.int8)
            ours, eager, err = _our_matmul(kdml, dev, a, b)
            peers: dict[str, Callable[[], Any]] = {}
            af, bf = a.astype(np.float32), b.astype(np.float32)
            cf = np.empty((n, n), np.float32)
            peers["numpy"] = lambda af=af, bf=bf, cf=cf: np.matmul(af, bf, out=cf)
            if ort_ok:
                peers["ort"] = _ort_mmitf(a, b)
            cases.append(Case(
                "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", f"{np.dtype(a_dt).name}x int8", (n, n, n), "GOPS", 2.0 * n**3,
                ours=ours, eager=eager, peers=peers, memory_bound=False, error=err,
                note="numpy peer: float32 matmul",
            ))
    return cases


# ---- running -----------------------------------------------------------------------
def run_case(case: Case, rounds: int, ceiling_fn: Callable[[], Any] | None) -> dict[str, Any]:
    fns: dict[str, Callable[[], Any]] = {}
    if case.ours is not None:
        fns["ours"] = case.ours
    fns.update(case.peers)
    if case.eager is not None:
        fns["eager"] = case.eager
    if ceiling_fn is not None and case.memory_bound:
        fns["ceiling"] = ceiling_fn
    # multi-threaded compute-bound peers: settle between samples (see `interleaved`; OpenBLAS
    # threads spin for about 0.1 s after a call)
    samples = interleaved(fns, rounds, settle=0.0 if case.memory_bound else 0.15)
    t = {k: _median(v) for k, v in samples.items()}
    row: dict[str, Any] = {
        "op": case.op, "dtype": case.dtype, "shape": list(case.shape), "metric": case.metric,
        "amount": case.amount, "note": case.note, "memory_bound": case.memory_bound,
    }
    scale = 1e9
    for k in ("ours", *case.peers):
        if k in t:
            row[f"{k}_s"] = t[k]
            row[f"{k}_{'gbps' if case.metric == 'GB/s' else 'gops'}"] = case.amount / t[k] / scale
    if "eager" in t:
        row["eager_s"] = t["eager"]
    for p in case.peers:
        if "ours_s" in row and f"{p}_s" in row:
            row[f"ratio_{p}"] = row[f"{p}_s"] / row["ours_s"]  # ours / peer, as throughput
    if "ceiling" in t:
        ceil = 2 * CEILING_BYTES / t["ceiling"] / scale
        row["ceiling_gbps"] = ceil
        if "ours_gbps" in row:
            row["fraction_of_ceiling"] = row["ours_gbps"] / ceil
    if case.error:
        row["error"] = case.error
    if case.check is not None and case.ours is not None:
        try:
            row["correct"] = case.check()
        except Exception as e:
            row["correct"] = False
            row["error"] = f"check failed: {e}"
    row["rounds"] = rounds
    return row


def latency(kdml: Any, dev: Any, reps: int) -> dict[str, Any]:
    """Eager small-op latency and recorded small ops (100 per submission)."""
    a = np.ones((64, 64), np.float32)
    x = dev.tensor(a)
    y = dev.empty(x.desc)
    op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
    outs = [dev.empty(x.desc) for _ in range(100)]
    chain = [x, *outs]

    def rec_same() -> None:
        with dev.record() as r:
            for _ in range(100):
                r.execute(op, [x], [y])

    def rec_distinct() -> None:
        with dev.record() as r:
            for o in outs:
                r.execute(op, [x], [o])

    def rec_chain() -> None:  # each reads what the previous wrote: a barrier before each
        with dev.record() as r:
            for i in range(100):
                r.execute(op, [chain[i]], [chain[i + 1]])

    s = interleaved({
        "eager_execute": lambda: op.execute([x], [y]),
        "eager_functional": lambda: kdml.identity(x),
        "recorded_100_same_output": rec_same,
        "recorded_100_distinct_outputs": rec_distinct,
        "recorded_100_chain": rec_chain,
    }, reps, target=0)
    m = {k: _median(v) for k, v in s.items()}
    return {
        "op": "ACTIVATION_IDENTITY float32 64x64",
        "eager_execute_us": m["eager_execute"] * 1e6,
        "eager_functional_us": m["eager_functional"] * 1e6,
        "recorded_per_op_us_same_output": m["recorded_100_same_output"] * 1e6 / 100,
        "recorded_per_op_us_distinct_outputs": m["recorded_100_distinct_outputs"] * 1e6 / 100,
        "recorded_per_op_us_chain": m["recorded_100_chain"] * 1e6 / 100,
        "reps": reps,
    }


def suite(kdml: Any, dev: Any, quick: bool, ort_ok: bool, rng: Any) -> list[tuple[str, Callable[[], Case]]]:
    """(label, factory) per row: each row's tensors exist only while it runs (a 2 GiB heap,
    and every buffer is held twice: device memory + staging)."""
    mib64 = (4096, 4096)
    out: list[tuple[str, Callable[[], Case]]] = []

    def add(op: str, fn: Callable[..., list[Case]], spec: tuple[Any, ...], *extra: Any) -> None:
        label = f"{op} {spec[0]} {_fmt_shape(spec[1])}"
        out.append((label, lambda: fn(kdml, dev, [spec], *extra)[0]))

    ident = [("float32", (64, 64)), ("float32", (512, 512))] if quick else [
        ("float32", (64, 64)), ("float32", (1024, 1024)), ("float32", mib64), ("float16", (1024, 1024)), ("float16", mib64)]
    for spec in ident:
        add("ACTIVATION_IDENTITY", identity_cases, spec, ort_ok, rng)
    cp = [("int8", (512, 512), False), ("float32", (256, 256), True)] if quick else [
        ("float32", mib64, False), ("uint8", (8192, 8192), False), ("int8", (1024, 1024), False), ("float32", (2048, 2048), True)]
    for cspec in cp:
        add("COPY", copy_cases, cspec, rng)
    if hasattr(kdml, "DiagonalMatrixDesc"):
        sz = [(64, 64), (512, 512)] if quick else [(64, 64), (1024, 1024), (4096, 4096)]
        for spec in [("float32", s) for s in sz] + ([] if quick else [("float16", mib64)]):
            add("DIAGONAL_MATRIX", diagonal_cases, spec, ort_ok)
    if hasattr(kdml, "DiagonalMatrix1Desc"):
        sz = [(64, 64), (512, 512)] if quick else [(64, 64), (1024, 1024), (4096, 4096)]
        for tspec in [("float32", s, True) for s in sz] + ([] if quick else [("float32", mib64, False)]):
            add("DIAGONAL_MATRIX1", trilu_cases, tspec, ort_ok, rng)
    return out


def matmul_from_peer_module(quick: bool) -> list[dict[str, Any]] | None:
    """benchmarks/bench_matmul.py's run(quick), when the matmul engineer has provided it."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_matmul.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("_kdml_bench_matmul", path)
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "run"):
        return None
    rows = mod.run(quick)
    return [dict(r) for r in rows] if rows else []


def goals(rows: list[dict[str, Any]], lat: dict[str, Any]) -> list[dict[str, Any]]:
    def find(op: str, shape: list[int], dtype: str = "float32") -> dict[str, Any] | None:
        return next((r for r in rows if r["op"] == op and r["shape"] == shape and r["dtype"] == dtype), None)

    out = []

    def ratio_goal(name: str, row: dict[str, Any] | None, peer: str, need: float) -> None:
        val = row.get(f"ratio_{peer}") if row else None
        out.append({"goal": name, "target": f">= {need}", "measured": val,
                    "met": None if val is None else bool(val >= need)})

    ratio_goal("identity 64 MiB vs numpy.copyto", find("ACTIVATION_IDENTITY", [4096, 4096]), "numpy", 0.8)
    ratio_goal("DIAGONAL_MATRIX 4096^2 f32 vs numpy zero+fill_diagonal", find("DIAGONAL_MATRIX", [4096, 4096]), "numpy", 1.0)
    ratio_goal("DIAGONAL_MATRIX1 triu 4096^2 f32 vs numpy.triu", find("DIAGONAL_MATRIX1 (triu)", [4096, 4096]), "numpy", 1.0)
    mm = find("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", [1024, 1024, 1024], "int8x int8")
    ratio_goal("matmul int8xint8 1024^3 vs onnxruntime", mm, "ort", 1.0)
    for name, key, lim in (("eager small-op latency (us)", "eager_execute_us", 150.0),
                           ("recorded small op (us/op, distinct outputs)", "recorded_per_op_us_distinct_outputs", 30.0)):
        v = lat.get(key)
        out.append({"goal": name, "target": f"<= {lim}", "measured": v, "met": None if v is None else bool(v <= lim)})
    return out


# ---- output ------------------------------------------------------------------------
def _f(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def render(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    m = result["machine"]
    console.print(f"[bold]kompute-dml bench[/bold] on {m['device']} | {m['cpu_model']} x{m['cpu_cores']} | "
                  f"kp {m['kp']} numpy {m['numpy']} onnxruntime {m['onnxruntime']} | load {m.get('load_average')}")
    t = Table(title="ours = re-evaluated compiled op; ratio = ours / peer (throughput); ceiling = numpy.copyto 64 MiB, same rounds",
              title_justify="left")
    for col, just in (("operator", "left"), ("dtype", "left"), ("shape", "left"), ("unit", "left"), ("ours", "right"),
                      ("us/op", "right"), ("eager us", "right"), ("numpy", "right"), ("x np", "right"),
                      ("ort", "right"), ("x ort", "right"), ("% ceil", "right"), ("ok", "center")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in result["rows"]:
        u = "gbps" if r["metric"] == "GB/s" else "gops"
        ok = r.get("correct")
        t.add_row(
            r["op"], r["dtype"], _fmt_shape(tuple(r["shape"])), r["metric"], _f(r.get(f"ours_{u}")),
            _f(r["ours_s"] * 1e6, 1) if "ours_s" in r else (r.get("error") or "-")[:40],
            _f(r["eager_s"] * 1e6, 1) if "eager_s" in r else "-",
            _f(r.get(f"numpy_{u}")), _f(r.get("ratio_numpy")), _f(r.get(f"ort_{u}")), _f(r.get("ratio_ort")),
            _f(100 * r["fraction_of_ceiling"], 1) if "fraction_of_ceiling" in r else "-",
            "-" if ok is None else ("yes" if ok else "[red]NO[/red]"),
        )
    console.print(t)
    if result.get("matmul_module"):
        mt = Table(title="benchmarks/bench_matmul.py run()", title_justify="left")
        keys = list(dict.fromkeys(k for r in result["matmul_module"] for k in r))
        for k in keys:
            mt.add_column(k)
        for r in result["matmul_module"]:
            mt.add_row(*(_f(r.get(k)) if not isinstance(r.get(k), (list, tuple)) else _fmt_shape(tuple(r[k])) for k in keys))
        console.print(mt)
    lat = result["latency"]
    console.print(
        f"[bold]latency[/bold] ({lat['op']}): eager op.execute {lat['eager_execute_us']:.1f} us, "
        f"eager functional {lat['eager_functional_us']:.1f} us; recorded (100 per submission) "
        f"{lat['recorded_per_op_us_distinct_outputs']:.1f} us/op distinct outputs, "
        f"{lat['recorded_per_op_us_same_output']:.1f} same output, {lat['recorded_per_op_us_chain']:.1f} chained")
    console.print(f"[bold]ceiling[/bold]: numpy.copyto 64 MiB median {result['ceiling_gbps']:.1f} GB/s (read + write)")
    g = Table(title="goals", title_justify="left")
    for col in ("goal", "target", "measured", "met"):
        g.add_column(col)
    for x in result["goals"]:
        met = x["met"]
        g.add_row(x["goal"], x["target"], _f(x["measured"]),
                  "-" if met is None else ("[green]yes[/green]" if met else "[red]no[/red]"))
    console.print(g)


def markdown(result: dict[str, Any]) -> str:
    """The run as Markdown: machine, the table, latency, goals (for benchmarks/RESULTS.md)."""
    m = result["machine"]
    lines = [
        f"Command: `{result['command']}` ({result['date']}, {result['seconds']:.0f} s, median of {result['rounds']} interleaved rounds)",
        "",
        f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores ({', '.join(m['cpu_features'])}), load average at the end "
        f"{', '.join(f'{x:.1f}' for x in (m.get('load_average') or []))}; device {m['device']} ({m['feature_level']}); "
        f"kp {m['kp']}, numpy {m['numpy']}, onnxruntime {m['onnxruntime']}, onnx {m['onnx']}, Python {m['python']}.",
        "",
        f"Ceiling: numpy.copyto of 64 MiB into an existing array, {result['ceiling_gbps']:.1f} GB/s (read + write), "
        "also sampled in every memory-bound row's rounds (`% ceil` uses that row's own samples).",
        "",
        "| operator | dtype | shape | unit | ours | us/op | eager us | numpy | ours/numpy | ort | ours/ort | % ceil |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["rows"]:
        u = "gbps" if r["metric"] == "GB/s" else "gops"
        if "ours_s" not in r and "numpy_s" not in r:
            lines.append(f"| {r['op']} | {r['dtype']} | {' '.join(map(str, r['shape']))} | {r['metric']} | "
                         f"not measured: {r.get('error', '')[:90]} | | | | | | | |")
            continue
        lines.append("| " + " | ".join([
            r["op"], r["dtype"], _fmt_shape(tuple(r["shape"])), r["metric"], _f(r.get(f"ours_{u}")),
            _f(r["ours_s"] * 1e6, 1) if "ours_s" in r else "-", _f(r["eager_s"] * 1e6, 1) if "eager_s" in r else "-",
            _f(r.get(f"numpy_{u}")), _f(r.get("ratio_numpy")), _f(r.get(f"ort_{u}")), _f(r.get("ratio_ort")),
            _f(100 * r["fraction_of_ceiling"], 1) if "fraction_of_ceiling" in r else "-",
        ]) + " |")
    lat = result["latency"]
    lines += [
        "",
        f"Latency ({lat['op']}, median of {lat['reps']}): eager `op.execute` {lat['eager_execute_us']:.1f} us; "
        f"eager functional `kdml.identity(x)` {lat['eager_functional_us']:.1f} us; "
        f"recorded, 100 per submission: {lat['recorded_per_op_us_distinct_outputs']:.1f} us/op (distinct outputs), "
        f"{lat['recorded_per_op_us_same_output']:.1f} (same output), {lat['recorded_per_op_us_chain']:.1f} (chained, a barrier each).",
        "",
        "| goal | target | measured | met |",
        "| --- | --- | ---: | --- |",
    ]
    for g in result["goals"]:
        met = "-" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {g['target']} | {_f(g['measured'])} | {met} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "ours_s" in r or "numpy_s" in r]
    gb = [r for r in rows if r["metric"] == "GB/s"]
    mm = [r for r in rows if r["metric"] == "GOPS"]
    fig, axes = plt.subplots(2, 1, figsize=(max(10, 0.55 * len(gb) + 4), 10),
                             gridspec_kw={"height_ratios": [3, 1.3]})
    series = (("ours", "kompute_dml (lavapipe)", "#1f77b4"), ("numpy", "numpy", "#ff7f0e"), ("ort", "onnxruntime CPU", "#2ca02c"))

    def bars(ax: Any, rs: list[dict[str, Any]], unit: str, ylabel: str) -> None:
        xs = np.arange(len(rs))
        w = 0.27
        for i, (k, label, color) in enumerate(series):
            vals = [r.get(f"{k}_{unit}") or 0.0 for r in rs]
            ax.bar(xs + (i - 1) * w, vals, w, label=label, color=color)
        if unit == "gbps" and result.get("ceiling_gbps"):
            ax.axhline(result["ceiling_gbps"], color="grey", ls="--", lw=1,
                       label=f"ceiling: numpy.copyto 64 MiB ({result['ceiling_gbps']:.0f} GB/s)")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{r['op'].replace('ACTIVATION_', '').replace('MATRIX_MULTIPLY_INTEGER_TO_FLOAT', 'MMITF')}\n"
                            f"{r['dtype']} {_fmt_shape(tuple(r['shape']))}" for r in rs], rotation=35, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")

    bars(axes[0], gb, "gbps", "GB/s (read + written), log scale")
    axes[0].set_title(f"kompute-dml bench: {result['machine']['device']} vs numpy / onnxruntime on "
                      f"{result['machine']['cpu_model']} x{result['machine']['cpu_cores']}", fontsize=10)
    if mm:
        bars(axes[1], mm, "gops", "GOPS, log scale")
    else:
        axes[1].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kompute-dml bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few rounds: seconds")
    ap.add_argument("--json", metavar="FILE", help="write every figure and the machine description")
    ap.add_argument("--plot", metavar="FILE.png", help="chart ours against peers (matplotlib, Agg)")
    ap.add_argument("--only", metavar="SUBSTR", help="only operators whose name contains SUBSTR (case-insensitive)")
    ap.add_argument("--rounds", type=int, default=None, help="samples per figure (default 15, quick 5)")
    ap.add_argument("--markdown", metavar="FILE.md", help="write the table, latency and goals as Markdown")
    ap.add_argument("--no-ort", action="store_true", help="skip the onnxruntime peers")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    import kompute_dml as kdml

    console = Console() if sys.stdout.isatty() else Console(width=170)
    rounds = args.rounds or (5 if args.quick else 15)
    rng = np.random.default_rng(0)
    ort_ok = _ort_available() and not args.no_ort
    t_start = time.perf_counter()
    dev = kdml.Device(args.device)
    ceil_a = np.ones(CEILING_BYTES // 4, np.float32)
    ceil_b = np.empty_like(ceil_a)
    def ceiling_fn() -> None:
        np.copyto(ceil_b, ceil_a)

    cases = suite(kdml, dev, args.quick, ort_ok, rng)
    for n in [128] if args.quick else [256, 1024]:
        for a_dt in (np.int8, np.uint8):
            cases.append((f"MATRIX_MULTIPLY_INTEGER_TO_FLOAT {np.dtype(a_dt).name} {n}^3",
                          lambda n=n, a_dt=a_dt: matmul_cases(kdml, dev, [n], [a_dt], ort_ok, rng)[0]))
    if args.only:
        cases = [c for c in cases if args.only.lower() in c[0].lower()]
    rows: list[dict[str, Any]] = []
    matmul_module = None
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        task = prog.add_task("bench", total=len(cases) + 3)
        prog.update(task, description="ceiling")
        ceil_s = interleaved({"c": ceiling_fn}, rounds)["c"]
        prog.advance(task)
        for label, make in cases:
            prog.update(task, description=label)
            try:
                rows.append(run_case(make(), rounds, ceiling_fn))
            except Exception as e:  # one broken operator must not hide the others' figures
                op, dt, shape = [*label.split(" ", 2), "", ""][:3]
                rows.append({"op": op, "dtype": dt, "shape": [shape], "metric": "GOPS" if "MATRIX_MULTIPLY" in op else "GB/s",
                             "amount": 0, "memory_bound": "MATRIX_MULTIPLY" not in op, "error": f"{type(e).__name__}: {e}"})
            gc.collect()  # free this row's buffers before the next row allocates
            prog.advance(task)
        prog.update(task, description="latency")
        lat = latency(kdml, dev, 7 if args.quick else 25)
        prog.advance(task)
        if not args.only or "matmul" in args.only.lower() or "matrix" in args.only.lower():
            prog.update(task, description="benchmarks/bench_matmul.py")
            try:
                matmul_module = matmul_from_peer_module(args.quick)
            except Exception as e:
                matmul_module = [{"error": f"{type(e).__name__}: {e}"}]
        prog.advance(task)
        ceil_s += interleaved({"c": ceiling_fn}, rounds)["c"]
    result: dict[str, Any] = {
        "command": "kompute-dml bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "rounds": rounds,
        "method": __doc__.split("Method.")[1].strip() if __doc__ else "",
        "machine": machine_info(dev),
        "ceiling_gbps": 2 * CEILING_BYTES / _median(ceil_s) / 1e9,
        "ceiling_method": "numpy.copyto of 64 MiB float32 into an existing array, median, before and after the suite",
        "rows": rows,
        "latency": lat,
        "matmul_module": matmul_module,
        "seconds": None,
    }
    result["goals"] = goals(rows, lat)
    result["seconds"] = time.perf_counter() - t_start
    render(console, result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        console.print(f"wrote {args.json}")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(markdown(result))
        console.print(f"wrote {args.markdown}")
    if args.plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot(result, args.plot)
        console.print(f"wrote {args.plot}")
    console.print(f"{result['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
