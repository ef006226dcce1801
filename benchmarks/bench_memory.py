"""Memory-bound operators (COPY / ACTIVATION_IDENTITY, DIAGONAL_MATRIX, DIAGONAL_MATRIX1) per
variant choice, against PyTorch CUDA in the same process (issue 14 item 1).

    python -m benchmarks.bench_memory                    # the H100 table
    python -m benchmarks.bench_memory --variants default,gpu,gpu:vecs=8,cpu,transfer
    python -m benchmarks.bench_memory --rows DIAGONAL,triu,tril   # the diagonal rows only
    python -m benchmarks.bench_memory --small                # lavapipe, no torch
    python -m benchmarks.bench_memory --shrink 128 --variants gpu:vecs=1,gpu:vecs=4
                                                  # the same rows at 64x64 (small-output kernels)

--rows keeps the rows whose name contains one of the comma-separated words (case-sensitive):
DIAGONAL (DIAGONAL_MATRIX), triu / tril (DIAGONAL_MATRIX1 with and without input), copy,
identity, int8, f32, ...

Contenders per row: torch (when importable with CUDA: copy_, eye(out=), triu/tril(out=), or
the two-kernel equivalents named in the row) and ours once per variant choice:
  default      the device's own policy (Device())
  gpu | cpu    shaders only, DevicePolicy.memory_kernel forced to that family
  transfer     transfer commands where they apply, the device's family elsewhere
  gpu:vecs=N   the gpu family with N 16-byte chunks per invocation at every size (by default
               4, and 1 for outputs up to gpu_memory.SMALL_OUTPUT_BYTES)
  gpu:rows     the gpu family without the flat diagonal plan (rows_diag_* where flat_diag_*
               would run: packed rows off the 16-byte grid)
Ours runs N executions recorded once (Recording.compile), so the clock times the submission and
the GPU work. torch runs N launches, then synchronizes. A sample is the slope (t(N) - t(1)) /
(N - 1) (timing.slopes, each timed call the second of two: the first submission after another
contender's work pays a switch between the CUDA and Vulkan contexts): one submission's or
synchronize's fixed cost cancels. Contenders alternate within each round; the figure is
the median over rounds. GB/s = (bytes of input elements read + bytes written) / time,
the same count for every contender of a row; ratio = torch time / ours time (> 1: ours is
faster). After timing, each contender's output is checked bit for bit against torch's (or
numpy's without torch), from a poisoned output.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import once, repeater, slopes
from kompute_dml.ops import gpu_flat, gpu_memory

DT = kdml.DataType
SMALL_OUTPUT_BYTES = gpu_memory.SMALL_OUTPUT_BYTES
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
TORCH_DT = {DT.FLOAT32: "float32", DT.FLOAT16: "float16", DT.INT8: "int8", DT.INT16: "int16", DT.INT64: "int64",
            DT.UINT8: "uint8", DT.INT32: "int32"}


@dataclasses.dataclass
class Row:
    name: str
    kind: str  # "copy" | "identity" | "diag" | "trilu"
    dt: kdml.DataType
    shape: tuple[int, ...]  # output sizes
    base: tuple[int, ...] = ()  # copies: the input's storage (packed), viewed with `strides`
    strides: tuple[int, ...] | None = None  # copies: the input view's strides, in elements
    k: int = 0  # diag: offset; trilu: k
    upper: bool = True
    with_input: bool = True
    torch_note: str = ""


def size_name(nbytes: int) -> str:
    for unit, name in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << unit:
            return f"{nbytes >> unit} {name}"
    return f"{nbytes} B"


def rows(shrink: int) -> list[Row]:
    s = shrink  # every side / s (1-D: / s^2)
    n64, n1g = (1 << 24) // s**2, (1 << 28) // s**2
    a, b, c = 8192 // s, 4096 // s, 16384 // s
    return [
        Row(f"identity f32 {size_name(4 * n64)}", "identity", DT.FLOAT32, (n64,)),
        Row(f"identity f32 {size_name(4 * n1g)}", "identity", DT.FLOAT32, (n1g,)),
        Row(f"copy int8 {a}^2", "copy", DT.INT8, (a, a)),
        Row(f"copy int16 {a}x{c}", "copy", DT.INT16, (a, c)),
        Row(f"copy int64 {b}x{a}", "copy", DT.INT64, (b, a)),
        Row(f"copy f16 {a}x{c}", "copy", DT.FLOAT16, (a, c)),
        Row(f"copy f32 {a}^2 row pitch +64", "copy", DT.FLOAT32, (a, a), (a, a + 64), (a + 64, 1)),
        Row(f"copy f32 {a}^2 step 2", "copy", DT.FLOAT32, (a, a), (a, 2 * a), (2 * a, 2)),
        Row(f"copy f32 {b}^2 transposed", "copy", DT.FLOAT32, (b, b), (b, b), (1, b)),
        Row(f"copy f32 {a}^2 transposed", "copy", DT.FLOAT32, (a, a), (a, a), (1, a)),
        Row(f"copy f16 {a}^2 transposed", "copy", DT.FLOAT16, (a, a), (a, a), (1, a)),
        Row(f"copy f32 {a}^2 from a row", "copy", DT.FLOAT32, (a, a), (1, a), (0, 1)),
        Row(f"copy f32 {a}^2 from a column", "copy", DT.FLOAT32, (a, a), (a, 1), (1, 0)),
        Row(f"DIAGONAL_MATRIX f32 {c}^2", "diag", DT.FLOAT32, (c, c), k=0, torch_note="eye(out=)"),
        Row(f"DIAGONAL_MATRIX f32 {c}^2 offset 7", "diag", DT.FLOAT32, (c, c), k=7, torch_note="zero_ + fill diagonal"),
        Row(f"DIAGONAL_MATRIX int8 {c}^2", "diag", DT.INT8, (c, c), k=0, torch_note="eye(out=)"),
        Row(f"DIAGONAL_MATRIX int8 {c}^2 offset -5", "diag", DT.INT8, (c, c), k=-5, torch_note="zero_ + fill diagonal"),
        # rows at every 16-byte phase: partial chunks at both ends of each row
        Row(f"DIAGONAL_MATRIX int8 {c - 1}^2", "diag", DT.INT8, (c - 1, c - 1), k=0, torch_note="eye(out=)"),
        Row(f"DIAGONAL_MATRIX int16 {c}^2", "diag", DT.INT16, (c, c), k=0, torch_note="eye(out=)"),
        # packed rows off the 16-byte grid take the flat plan (flat_diag_*) on GPUs
        Row(f"DIAGONAL_MATRIX int16 {c - 1}x{a - 1}", "diag", DT.INT16, (c - 1, a - 1), k=0, torch_note="eye(out=)"),
        Row(f"DIAGONAL_MATRIX f32 {c - 1}x{a - 1} offset 3", "diag", DT.FLOAT32, (c - 1, a - 1), k=3,
            torch_note="zero_ + fill diagonal"),
        Row(f"triu f32 {a}^2 k=1", "trilu", DT.FLOAT32, (a, a), k=1),
        Row(f"tril f32 {a}^2 k=-1", "trilu", DT.FLOAT32, (a, a), k=-1, upper=False),
        Row(f"triu f32 {a}^2 no input", "trilu", DT.FLOAT32, (a, a), k=1, with_input=False, torch_note="fill_ + triu_"),
        Row(f"tril f32 {a}^2 no input", "trilu", DT.FLOAT32, (a, a), k=0, upper=False, with_input=False,
            torch_note="fill_ + tril_"),
        Row(f"triu int8 {c}^2", "trilu", DT.INT8, (c, c), k=0),
        Row(f"tril int8 {c}^2", "trilu", DT.INT8, (c, c), k=3, upper=False),
        Row(f"triu int8 {c}^2 no input", "trilu", DT.INT8, (c, c), k=0, with_input=False, torch_note="fill_ + triu_"),
        Row(f"triu int8 {c - 1}^2", "trilu", DT.INT8, (c - 1, c - 1), k=0),
        Row(f"triu int8 {c - 1}^2 no input", "trilu", DT.INT8, (c - 1, c - 1), k=0, with_input=False,
            torch_note="fill_ + triu_"),
        Row(f"tril int16 {c}^2 no input", "trilu", DT.INT16, (c, c), k=0, upper=False, with_input=False,
            torch_note="fill_ + tril_"),
        Row(f"triu int64 {a}^2", "trilu", DT.INT64, (a, a), k=2),
    ]


# ---- ours --------------------------------------------------------------------------
def configure(dev: kdml.Device, variant: str, default: Any) -> None:
    """Set the device's policy (read by compile) to a variant choice."""
    family, _, opt = variant.partition(":")
    forced = opt.startswith("vecs=")
    gpu_memory.VECS = int(opt.split("=")[1]) if forced else 4
    gpu_memory.SMALL_OUTPUT_BYTES = 0 if forced else SMALL_OUTPUT_BYTES
    gpu_flat.ENABLED = opt != "rows"
    transfer = family == "transfer" or (family == "default" and default.transfer_commands)
    kernel = default.memory_kernel if family in ("default", "transfer") else family
    if kernel not in ("cpu", "gpu"):
        raise SystemExit(f"--variants: unknown variant {variant!r} (default, gpu, cpu, transfer, gpu:vecs=N, gpu:rows)")
    dev.policy = dataclasses.replace(default, transfer_commands=transfer, memory_kernel=kernel)
    dev.transfer_commands = transfer


def ours_desc(row: Row) -> tuple[Any, kdml.TensorDesc | None, kdml.TensorDesc]:
    out = kdml.TensorDesc(row.dt, row.shape)
    if row.kind in ("copy", "identity"):
        src = kdml.TensorDesc(row.dt, row.shape, row.strides)
        cls = kdml.ActivationIdentityDesc if row.kind == "identity" else kdml.CopyDesc
        return cls(src, out), src, out
    if row.kind == "diag":
        return kdml.DiagonalMatrixDesc(out, row.k, 1.0), None, out
    if row.with_input:  # keep x - y >= k (upper) or <= k (lower); Value 0 elsewhere
        begin, end = (I32_MIN, row.k) if row.upper else (row.k + 1, I32_MAX)
        return kdml.DiagonalMatrix1Desc(out, out, row.dt, 0, begin, end), out, out
    begin, end = (row.k, I32_MAX) if row.upper else (I32_MIN, row.k + 1)  # Value 1 there, 0 elsewhere
    return kdml.DiagonalMatrix1Desc(None, out, row.dt, 1, begin, end), None, out


def input_array(row: Row) -> np.ndarray | None:
    if row.kind == "diag" or (row.kind == "trilu" and not row.with_input):
        return None
    shape = row.base or row.shape
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.int64) % 251 - 125).astype(row.dt.numpy_dtype).reshape(shape)


def moved_bytes(row: Row, x: np.ndarray | None) -> int:
    out = int(np.prod(row.shape)) * row.dt.size
    if x is None:
        return out
    if row.strides is not None and 0 in row.strides:
        return out + x.nbytes  # a broadcast source: its distinct elements
    return 2 * out


def numpy_reference(row: Row, x: np.ndarray | None) -> np.ndarray:
    if row.kind in ("copy", "identity"):
        assert x is not None
        strides = row.strides or kdml.TensorDesc(row.dt, row.shape).effective_strides
        view = np.lib.stride_tricks.as_strided(x, row.shape, [s * row.dt.size for s in strides])
        return np.ascontiguousarray(view)
    if row.kind == "diag":
        return np.eye(*row.shape, row.k, dtype=row.dt.numpy_dtype)
    src = x if x is not None else np.ones(row.shape, row.dt.numpy_dtype)
    return (np.triu if row.upper else np.tril)(src, row.k)


# ---- torch -------------------------------------------------------------------------
def torch_module(device: str) -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if device == "cpu" or torch.cuda.is_available() else None


def torch_sync(torch: Any, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def torch_step(torch: Any, device: str, row: Row, x: np.ndarray | None) -> tuple[Callable[[], Any], Callable[[], np.ndarray]]:
    dtype = getattr(torch, TORCH_DT[row.dt])
    dst = torch.empty(row.shape, dtype=dtype, device=device)
    if row.kind in ("copy", "identity"):
        base = torch.from_numpy(x).to(device)
        view = base.as_strided(row.shape, row.strides) if row.strides else base.view(row.shape)

        def step() -> Any:
            return dst.copy_(view)
    elif row.kind == "diag":
        if row.k == 0:
            def step() -> Any:
                return torch.eye(*row.shape, out=dst)
        else:
            def step() -> Any:
                dst.zero_()
                return dst.diagonal(row.k).fill_(1)
    elif row.with_input:
        xt = torch.from_numpy(x).to(device)
        fn = torch.triu if row.upper else torch.tril

        def step() -> Any:
            return fn(xt, row.k, out=dst)
    else:
        def step() -> Any:
            dst.fill_(1)
            return dst.triu_(row.k) if row.upper else dst.tril_(row.k)
    return step, lambda: dst.cpu().numpy()


# ---- timing ------------------------------------------------------------------------
def ours_runner(dev: kdml.Device, op: Any, ins: list[Any], outs: list[Any]) -> Callable[[int], Any]:
    """n executions recorded once and replayed; execution i writes outs[i % len(outs)] (see --outputs)."""
    programs: dict[int, Any] = {}

    def run(n: int) -> None:
        if n not in programs:
            with dev.record() as rec:
                for i in range(n):
                    rec.execute(op, ins, [outs[i % len(outs)]])
                programs[n] = rec.compile()
        programs[n].run()
    return run


def torch_runner(torch: Any, device: str, step: Callable[[], Any]) -> Callable[[int], Any]:
    make = repeater(step, lambda: torch_sync(torch, device))
    return lambda n: make(n)()


def torch_name(torch: Any, device: str) -> str:
    if torch is None:
        return "not used"
    return f"{torch.__version__} " + (f"CUDA {torch.cuda.get_device_name()}" if device == "cuda" else "CPU")


def bench_row(dev: kdml.Device, default: Any, row: Row, variants: list[str], torch: Any, args: Any) -> dict[str, Any]:
    x = input_array(row)
    desc, src_desc, out_desc = ours_desc(row)
    src = None
    if x is not None:
        base = dev.tensor(x)
        src = kdml.Tensor(base.buffer, src_desc, 0) if row.kind in ("copy", "identity") else base
    outs = [dev.empty(out_desc) for _ in range(args.outputs)]
    out = outs[0]
    ins = [] if row.kind == "diag" else [src]
    runners: dict[str, Callable[[int], Any]] = {}
    plans: dict[str, str] = {}
    ops: dict[str, Any] = {}
    for v in variants:
        configure(dev, v, default)
        ops[v] = dev.compile(desc)
        plans[v] = "+".join(p.variant for p in ops[v].plans)
        runners[v] = ours_runner(dev, ops[v], ins, outs)
    configure(dev, "default", default)
    fetch_torch = None
    if torch is not None:
        step, fetch_torch = torch_step(torch, args.torch_device, row, x)
        runners["torch"] = torch_runner(torch, args.torch_device, step)
    # Each contender's N: a sample of about args.target_ms (the slope cancels the fixed cost,
    # so N need not be shared); the first calls also build pipelines and recorded sequences.
    counts: dict[str, int] = {}
    for k, r in runners.items():
        r(2)
        per = max(once(lambda r=r: r(3)) / 3, 1e-7)
        counts[k] = int(min(args.max_n, max(3, args.target_ms / 1e3 / per)))
        r(1)  # the recordings the samples replay (a recording of new length is encoded once)
        r(counts[k])
    seconds = slopes(runners, args.rounds, counts, warmup=0)
    nbytes = moved_bytes(row, x)
    res: dict[str, Any] = {"row": row.name, "bytes": nbytes, "n": counts, "plans": plans, "torch_note": row.torch_note}
    for k, s in seconds.items():
        res[f"{k}_gbps"] = nbytes / s / 1e9
    if not args.no_check:
        want = fetch_torch() if fetch_torch is not None else numpy_reference(row, x)
        want_bytes = np.ascontiguousarray(want).tobytes()
        for v, op in ops.items():
            out.buffer.write(bytes([0xA5]) * out.buffer.nbytes)
            op.execute(ins, [out])
            res[f"{v}_ok"] = out.buffer.read(0, len(want_bytes)) == want_bytes
    return res


def gbps(g: float) -> str:
    return f"{g:.0f}" if g >= 100 else f"{g:.3g}"


def print_table(results: list[dict[str, Any]], variants: list[str], with_torch: bool) -> None:
    head = f"{'row':38}" + (f"{'torch':>8}" if with_torch else "")
    for v in variants:
        head += f" {v:>16}"
    print("\nGB/s (input elements read + bytes written) per execution" + (", ours/torch in ()" if with_torch else ""))
    print(head)
    for r in results:
        line = f"{r['row']:38}" + (f"{gbps(r['torch_gbps']):>8}" if with_torch else "")
        for v in variants:
            g = r[f"{v}_gbps"]
            cell = f"{gbps(g)} ({g / r['torch_gbps']:.2f})" if with_torch else gbps(g)
            if r.get(f"{v}_ok") is False:
                cell += "!"
            line += f" {cell:>16}"
        print(line)
    print("\n! = output differs from the reference. Plans:")
    for r in results:
        note = f"  [torch: {r['torch_note']}]" if with_torch and r["torch_note"] else ""
        print(f"  {r['row']:38} " + "  ".join(f"{v}={p}" for v, p in r["plans"].items()) + note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="sizes / 8 per side (lavapipe): --shrink 8")
    ap.add_argument("--shrink", type=int, default=1, choices=(1, 2, 4, 8, 16, 32, 64, 128),
                    help="every side / this (1-D sizes / its square)")
    ap.add_argument("--variants", default="default,gpu,cpu,transfer", help="comma-separated variant choices")
    ap.add_argument("--rows", default="", help="only rows whose name contains one of these comma-separated words")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=25.0, help="approximate length of one sample")
    ap.add_argument("--max-n", type=int, default=200)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: torch's CPU kernels as the peer (checks this script's torch side anywhere)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--outputs", type=int, default=1,
                    help="ours cycles over this many outputs: with 2, consecutive executions write different "
                         "buffers and need no barrier between them (a diagnostic of the barrier's cost)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    torch = None if args.no_torch else torch_module(args.torch_device)
    dev = kdml.Device()
    default = dev.policy
    print(f"device: {dev.name} ({dev.device_type}); default policy: {default.describe()}; "
          f"torch: {torch_name(torch, args.torch_device)}")
    wanted = [w.strip() for w in args.rows.split(",") if w.strip()]
    results = []
    t_start = time.perf_counter()
    for row in rows(8 if args.small else args.shrink):
        if wanted and not any(w in row.name for w in wanted):
            continue
        res = bench_row(dev, default, row, variants, torch, args)
        results.append(res)
        cells = " ".join(f"{k}={gbps(res[f'{k}_gbps'])} (n={n})" for k, n in res["n"].items())
        print(f"{row.name:38} {cells}", flush=True)
        gc.collect()
        if torch is not None:
            torch.cuda.empty_cache()
    print_table(results, variants, torch is not None)
    print(f"\n{len(results)} rows in {time.perf_counter() - t_start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"device": dev.name, "variants": variants, "rows": results}, indent=1))
    dev.close()
    return 0 if all(r.get(f"{v}_ok", True) for r in results for v in variants) else 1


if __name__ == "__main__":
    sys.exit(main())
