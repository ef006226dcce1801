"""`Backend.prepare` of a ResNet-50-shaped model (torchvision's graph as torch.onnx.export writes it in
eval mode: batch normalization folded into the convolutions; random weights, 102 MB; built with
onnx.helper, no torch), timed in this process after one untimed prepare (the device made), with
onnx's shape inference as the product runs it (the model less its large initializers' data:
onnx_backend/analysis.shape_model) and on the whole model (`--whole`, the way it ran before):

    python -m benchmarks.prepare_time [--repeat 5] [--whole]

One line: the median prepare, and the part in the shape inference.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kompute_dml.bench.timing import median


def resnet50(rng: np.random.Generator) -> onnx.ModelProto:
    """ResNet-50's 122 nodes: Conv (+ Relu) per folded conv-bn, bottlenecks with projection
    shortcuts, MaxPool, GlobalAveragePool, Flatten, Gemm."""
    nodes: list[onnx.NodeProto] = []
    inits: list[TensorProto] = []

    def conv(x: str, cin: int, cout: int, ks: int, stride: int = 1, relu: bool = True) -> str:
        i = len(nodes)
        w = (rng.standard_normal((cout, cin, ks, ks)) * (2 / (cin * ks * ks)) ** 0.5).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}")])
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[ks, ks],
                                      strides=[stride, stride], pads=[ks // 2] * 4))
        if not relu:
            return f"c{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        return f"r{i}"

    x = conv("input", 3, 64, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, cin = "pool", 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = conv(conv(conv(x, cin, width, 1), width, width, 3, s), width, 4 * width, 1, relu=False)
            short = conv(x, cin, 4 * width, 1, s, relu=False) if i == 0 else x
            k = len(nodes)
            nodes += [helper.make_node("Add", [y, short], [f"a{k}"]), helper.make_node("Relu", [f"a{k}"], [f"o{k}"])]
            x, cin = f"o{k}", 4 * width
    inits += [numpy_helper.from_array((rng.standard_normal((1000, 2048)) * 0.02).astype(np.float32), "fc_w"),
              numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "resnet50", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--whole", action="store_true", help="shape inference on the whole model (as before shape_model)")
    args = ap.parse_args()
    from kompute_dml.onnx_backend import Backend, analysis

    if args.whole:
        analysis.shape_model = lambda model: model
    spent: list[float] = []
    infer = onnx.shape_inference.infer_shapes

    def timed(model: onnx.ModelProto, **kw: object) -> onnx.ModelProto:
        t0 = time.perf_counter()
        out = infer(model, **kw)  # type: ignore[arg-type]
        spent.append(time.perf_counter() - t0)
        return out

    onnx.shape_inference.infer_shapes = timed
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50.onnx"
        onnx.save(resnet50(np.random.default_rng(0)), path)
        Backend.prepare(str(path), "CPU")  # the device, and imports
        spent.clear()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            Backend.prepare(str(path), "CPU")
            times.append(time.perf_counter() - t0)
    mode = "whole model" if args.whole else "shape_model"
    print(f"ResNet-50 (102 MB) prepare: median {median(times) * 1e3:.1f} ms over {args.repeat}, shape inference "
          f"({mode}) {median(spent) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
