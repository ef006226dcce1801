"""A mixture-of-experts family's routing, ours against onnxruntime: each router's TopK indices and the
probabilities it chose from made graph outputs, the tokens whose experts differ listed with both
sides' probabilities, and the logits' per-row cosine (why a float16 family's min cos is below 0.99:
benchmarks/RESULTS.md).

    python -m benchmarks.moe_routing [--family mixtral-fp16] [--size small] [--batch 8] [--seq 128]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from kompute_dml.bench import families
from kompute_dml.onnx_backend import Backend


def _with_routes(path: Path, out: Path) -> int:
    """The model with every TopK's indices and its input as graph outputs; the TopK count."""
    m = onnx.load(str(path))
    tops = [n for n in m.graph.node if n.op_type == "TopK"]
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for n in tops:
        m.graph.output.append(onnx.helper.make_tensor_value_info(n.output[1], onnx.TensorProto.INT64, None))
        m.graph.output.append(onnx.helper.make_tensor_value_info(n.input[0], types.get(n.input[0], onnx.TensorProto.FLOAT),
                                                                 None))
    onnx.save(m, str(out))
    return len(tops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="mixtral-fp16")
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "routes.onnx"
        layers = _with_routes(families.build(args.family, args.size), path)
        feeds = families.feeds(args.family, args.batch, args.seq, np.random.default_rng([args.batch, args.seq]), args.size)
        theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
        ours = [np.asarray(v) for v in Backend.prepare(str(path), "CPU").run(feeds)]
    g, w = (a.reshape(-1, a.shape[-1]).astype(np.float64) for a in (ours[0], theirs[0]))
    cos = (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1) + 1e-30)
    print(f"{args.family} ({args.size}) {args.batch}x{args.seq}: logits min cos {cos.min():.6f}; "
          f"rows below 0.999: {np.nonzero(cos < 0.999)[0].tolist()}")
    decisions = differ = 0
    for layer in range(layers):
        ti, oi = (v[1 + 2 * layer].reshape(-1, v[1 + 2 * layer].shape[-1]) for v in (theirs, ours))
        tp, op = (v[2 + 2 * layer].astype(np.float32).reshape(ti.shape[0], -1) for v in (theirs, ours))
        rows = np.nonzero((np.sort(ti, 1) != np.sort(oi, 1)).any(1))[0]
        decisions += ti.shape[0]
        differ += len(rows)
        print(f"  router {layer}: tokens routed differently {len(rows)} of {ti.shape[0]}; "
              f"probabilities max |ours - onnxruntime| {np.abs(tp - op).max():.2e}")
        for t in rows[:4]:
            print(f"    token {t}: onnxruntime {ti[t].tolist()} of {np.round(tp[t], 8).tolist()}; "
                  f"ours {oi[t].tolist()} of {np.round(op[t], 8).tolist()}")
    print(f"  {differ} of {decisions} routing decisions differ")


if __name__ == "__main__":
    main()
