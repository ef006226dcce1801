"""The onnxruntime plugin EP (kompute_dml.ort) against the backend it wraps: the same model and
inputs through `Backend.prepare(...).run` and through an unchanged `InferenceSession` with the
EP, sampled round-robin between the two (kompute_dml/bench/timing.interleaved) after the GPU's
clock is up (bench.gpu_clock.hold), then onnxruntime's CPU provider (every core) on its own, all in
one process. (Sampled round-robin with the CPU provider, its spinning threads and the GPU's idle
clock inflated the backend's and the EP's runs 2-4x: bert256 at 8x128 read 2.55 ms against
encoder_speed's 0.61 at 00cc26d.)

    python -m benchmarks.ort_ep [--models bert256,minilm-shape] [--shapes 1x16,8x128,64x256] [--rounds 15]

Models: random BERTs, fused and dynamically quantized as kompute_dml/bench/bert_models.py builds
them (bert256: hidden 256, 3 layers; minilm-shape: all-MiniLM-L6-v2's shape, hidden 384,
6 layers, 12 heads, random weights). Per shape: medians in ms, EP / backend (1.00: no cost) and
ORT CPU / EP. Then the EP's per-call cost over the backend on a 4-node float model (a few
microseconds of device work), and onnxruntime's own per-run floor there (its CPU provider).
"""

from __future__ import annotations

import argparse

import numpy as np

MODELS = {"bert256": (256, 3, 4), "minilm-shape": (384, 6, 12)}


def _tiny() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 8), (8, 4)))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W1"], ["y"]), helper.make_node("Relu", ["y"], ["r"]),
                           helper.make_node("Sigmoid", ["r"], ["s"]), helper.make_node("MatMul", ["s", "W2"], ["out"])],
                          "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4])],
                          initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def contenders(model: str | bytes) -> dict:
    import onnxruntime as ort

    import kompute_dml.ort as kort
    from kompute_dml.onnx_backend import Backend

    rep = Backend.prepare(model)
    ep = ort.InferenceSession(model, sess_options=kort.session_options(), enable_fallback=0)
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return {"backend": rep.run, "ep": lambda f: ep.run(None, f), "ort_cpu": lambda f: cpu.run(None, f)}


def main() -> None:
    from kompute_dml.bench import gpu_clock
    from kompute_dml.bench.bert_models import build_random_bert, random_feeds
    from kompute_dml.bench.timing import interleaved, median

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert256,minilm-shape")
    ap.add_argument("--shapes", default="1x16,8x128,64x256")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print("| model | batch x seq | backend ms | EP ms | ORT CPU ms | EP / backend | ORT CPU / EP | max abs diff EP - backend |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        hidden, layers, heads = MODELS[name]
        path = str(build_random_bert(hidden, layers, heads))
        runs = contenders(path)
        for shape in args.shapes.split(","):
            b, s = map(int, shape.split("x"))
            feeds = random_feeds(b, s, 1000, np.random.default_rng(b * 1000 + s))
            diff = float(np.abs(runs["ep"](feeds)[0] - runs["backend"](feeds)[0]).max())
            calls = {k: (lambda f=f, feeds=feeds: f(feeds)) for k, f in runs.items()}
            gpu_clock.hold(calls["backend"], gpu_clock.WARM_SECONDS)
            t = {k: median(v) * 1e3 for k, v in interleaved({k: calls[k] for k in ("backend", "ep")}, args.rounds).items()}
            t["ort_cpu"] = median(interleaved({"ort_cpu": calls["ort_cpu"]}, max(3, args.rounds // 3), target=0)["ort_cpu"]) * 1e3
            print(f"| {name} | {shape} | {t['backend']:.3f} | {t['ep']:.3f} | {t['ort_cpu']:.3f} | "
                  f"{t['ep'] / t['backend']:.3f} | {t['ort_cpu'] / t['ep']:.2f} | {diff:.3g} |", flush=True)
    runs = contenders(_tiny())
    x = {"x": np.ones((4, 8), np.float32)}
    calls = {k: (lambda f=f: f(x)) for k, f in runs.items()}
    gpu_clock.hold(calls["backend"], gpu_clock.WARM_SECONDS)
    t = {k: median(v) * 1e6 for k, v in interleaved({k: calls[k] for k in ("backend", "ep")}, max(args.rounds, 30)).items()}
    t["ort_cpu"] = median(interleaved({"ort_cpu": calls["ort_cpu"]}, max(args.rounds, 30))["ort_cpu"]) * 1e6
    print(f"\nper call, 4-node model (us): backend {t['backend']:.1f}, EP {t['ep']:.1f} "
          f"(EP - backend {t['ep'] - t['backend']:.1f}), onnxruntime's CPU provider {t['ort_cpu']:.1f}")


if __name__ == "__main__":
    main()
