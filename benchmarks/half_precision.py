"""What `allow_half_precision=True` (DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION) changes on
the model families (kompute_dml/bench/families.py, random weights): per family and input shape,
the products it moves to float16, the program's dispatches with the flag off and on ("node by
node" where the model has CPU nodes and runs no single program), and the
outputs' error against onnxruntime's CPU provider running the float32 model, with the flag on and
off: 1 - the smallest per-row cosine similarity and the largest per-row relative error
(max |ours - onnxruntime| over a row / max |onnxruntime| over that row). docs/onnx.md ("Half
precision") holds its output on lavapipe.

    python -m benchmarks.half_precision [--size tiny] [--shapes 1x9,3x17] [--families gpt2,vit]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from kompute_dml.bench import families

HALF_OPS = ("MatMul", "Gemm", "FusedMatMul", "Conv")


def row_errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(smallest per-row cosine, largest per-row relative error) over the last axis, in float64."""
    g, w = (a.reshape(-1, a.shape[-1]).astype(np.float64) for a in (got, want))
    cos = (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))
    rel = np.abs(g - w).max(1) / np.abs(w).max(1)
    return float(cos.min()), float(rel.max())


def half_products(rep: Any) -> int:
    """The device nodes that the flag computes in float16: float32 MatMul, Gemm, FusedMatMul, Conv."""
    from kompute_dml.onnx_backend import VULKAN

    return sum(1 for p, node in zip(rep.placement, rep.graph.node)
               if p.target == VULKAN and p.op_type in HALF_OPS
               and any(rep._elem_dtype(n) == np.float32 for n in node.input[:2]))  # a weight's type is declared


def measure(name: str, size: str, shapes: list[tuple[int, int]]) -> list[dict[str, Any]]:
    import onnxruntime as ort

    from kompute_dml.onnx_backend import Backend

    path = str(families.build(name, size))
    off, on = (Backend.prepare(path, "CPU", allow_half_precision=h) for h in (False, True))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rows = []
    for b, s in shapes:
        feeds = families.feeds(name, b, s, np.random.default_rng([b, s]), size)
        (want,) = sess.run(None, feeds)
        (y_off,), d_off = off.run(feeds), off.last_run.dispatches
        (y_on,), d_on = on.run(feeds), on.last_run.dispatches
        cos_on, rel_on = row_errors(y_on, want)
        cos_off, rel_off = row_errors(y_off, want)
        rows.append({"family": name, "shape": f"{b}x{s}", "half": half_products(on), "dispatches": (d_off, d_on),
                     "cos_on": cos_on, "rel_on": rel_on, "cos_off": cos_off, "rel_off": rel_off})
    for rep in (off, on):
        rep.release()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| family | shape | products in float16 | dispatches off / on | 1 - min cosine, on | max row rel. error, on "
             "| 1 - min cosine, off | max row rel. error, off |", "| " + " | ".join(["---"] * 8) + " |"]
    for r in rows:
        d = "node by node" if r["dispatches"] == (0, 0) else f"{r['dispatches'][0]} / {r['dispatches'][1]}"
        lines.append(f"| {r['family']} | {r['shape']} | {r['half']} | {d} | "
                     f"{1 - r['cos_on']:.1e} | {r['rel_on']:.2e} | {1 - r['cos_off']:.1e} | {r['rel_off']:.2e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny", choices=sorted(families.SIZES))
    ap.add_argument("--shapes", default="1x9,3x17", help="batch x tokens, comma-separated")
    ap.add_argument("--families", default=",".join(n for n, f in families.FAMILIES.items() if f.post != "fp16"))
    args = ap.parse_args(argv)
    shapes = [(int(b), int(s)) for b, s in (x.split("x") for x in args.shapes.split(","))]
    rows = []
    for name in args.families.split(","):
        try:
            rows += measure(name, args.size, shapes)
        except ImportError as e:  # torchvision's nets where torchvision is missing
            print(f"  {name}: skipped ({e})", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
