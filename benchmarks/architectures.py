"""Architectures users bring, beyond the families: transformers configurations (tiny, random weights)
and torchvision networks exported with torch.onnx.export (opset 17), each run through the backend
against onnxruntime's CPU provider at two batch sizes: where its nodes run (the node types left on
the CPU), the CPU sub-graphs and transfers of a run, the largest relative difference and the
smallest per-row cosine, and how many attention chains it fuses (fusion_attention.py). A correctness
sweep of model shapes no test builds, not a timing (the configurations: benchmarks/architecture_configs.py).
`--variant fp16` converts each export to float16
(onnxruntime's convert_float_to_float16, float32 inputs and outputs kept) and compares it with
onnxruntime running the float32 export; `--variant int8` quantizes it with quantize_dynamic (int8
weights) and compares with onnxruntime running the int8 model; `--variant qdq` / `qop` with
quantize_static (u8 activations, s8 weights, calibrated on four random batches) in the QDQ or the
QOperator (QLinearConv, QLinearMatMul, ...) format; `--variant ort-fused` with onnxruntime's transformers optimizer
(`optimize_model`, model type bert: its contrib nodes) against onnxruntime running the optimized model.
`--exporter dynamo` exports with torch.export
(torch.onnx.export's default since torch 2.9: opset 18 and up, onnxscript's graph optimizer; needs
onnxscript) instead of TorchScript.

    python -m benchmarks.architectures [--set transformers|torchvision|timm|all] [--variant fp32|fp16|int8|qdq|qop|ort-fused]
        [--exporter torchscript|dynamo] [NAME ...]

Needs torch and transformers (requirements-model.txt); the torchvision set needs torchvision, the
timm set timm (at each network's own input size, 224 x 224 for most).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .architecture_configs import TIMM, TORCHVISION, TRACED_LENGTH, TRANSFORMERS, H


def _inputs(kind: str, b: int, s: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Feeds of `kind` for batch b and length s (text rows after the first padded at the end)."""
    if kind == "ids":  # (models that take no attention mask)
        return {"input_ids": rng.integers(3, 100, (b, s)).astype(np.int64)}
    if kind in ("text", "text-tt", "seq2seq"):
        f = {"input_ids": rng.integers(3, 100, (b, s)).astype(np.int64), "attention_mask": np.ones((b, s), np.int64)}
        f["attention_mask"][1:, s - 2:] = 0
        if kind == "text-tt":
            f["token_type_ids"] = np.zeros((b, s), np.int64)
        if kind == "seq2seq":
            f["decoder_input_ids"] = rng.integers(3, 100, (b, max(1, s // 2))).astype(np.int64)
        return f
    if kind == "image":
        return {"pixel_values": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)}
    if kind == "mel":
        return {"input_features": rng.standard_normal((b, 16, 64)).astype(np.float32),
                "decoder_input_ids": rng.integers(3, 100, (b, max(1, s // 3))).astype(np.int64)}
    if kind == "spectrogram":
        return {"input_values": rng.standard_normal((b, 32, 16)).astype(np.float32)}
    if kind == "fbank":  # (filter-bank frames, 16 features each, and the decoder's tokens)
        return {"input_features": rng.standard_normal((b, 32, 16)).astype(np.float32),
                "decoder_input_ids": rng.integers(3, 100, (b, max(1, s // 3))).astype(np.int64)}
    if kind == "audio-seq2seq":  # (a waveform and the decoder's tokens)
        return {"input_values": rng.standard_normal((b, 4000)).astype(np.float32),
                "decoder_input_ids": rng.integers(3, 100, (b, max(1, s // 3))).astype(np.int64)}
    return {"input_values": rng.standard_normal((b, 400)).astype(np.float32)}


DYNAMO = False  # --exporter dynamo
FLOAT64 = False  # --float64: the float32 models against torch's float64 run too


def _export(module: Any, names: list[str], example: dict[str, np.ndarray], path: str) -> None:
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = module

        def forward(self, *args: Any) -> Any:
            out = self.m(**dict(zip(names, args))) if names != ["x"] else self.m(*args)
            out = out["out"] if isinstance(out, dict) and "out" in out else out
            return out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)

    dims = {n: ({0: "b", 1: "t" if n == "decoder_input_ids" else "s"} if example[n].ndim == 2 and n != "input_values"
                else {0: "b"}) for n in names}
    args = tuple(torch.from_numpy(example[n]) for n in names)
    with torch.no_grad():
        if DYNAMO:  # torch.export's dynamic shapes for the *args signature: one tuple of the inputs' dims
            auto = torch.export.Dim.AUTO
            shapes = (tuple({a: auto for a in dims[n]} for n in names),)
            torch.onnx.export(Wrapped().eval(), args, path, input_names=names, output_names=["out"], opset_version=18,
                              dynamo=True, dynamic_shapes=shapes, verbose=False)
        else:
            torch.onnx.export(Wrapped().eval(), args, path, input_names=names, output_names=["out"], opset_version=17,
                              dynamo=False, dynamic_axes=dims)


FP16_NORMAL = 6.103515625e-05  # float16's smallest normal number


def _calibration(feeds: Callable[[int, np.random.Generator], dict[str, np.ndarray]]) -> Any:
    """quantize_static's calibration data: four random batches of 2 from the case's own feeds."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([feeds(2, np.random.default_rng(100 + i)) for i in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    return Reader()


def _variant(path: str, variant: str, feeds: Callable[[int, np.random.Generator], dict[str, np.ndarray]]
             ) -> tuple[str, list[tuple[str, str]]]:
    """The model to run for `variant` (fp32, fp16, int8), and the models onnxruntime runs beside it (label, path): the
    reference first. float16: the float32 export, then onnxruntime's run of the converted model
    (which tells a conversion that loses the model from a difference of ours); int8: the int8
    model, then the float32 export (how far each int8 run is from the float32 model)."""
    if variant == "fp16":
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        out = path.replace(".onnx", "-fp16.onnx")
        onnx.save(convert_float_to_float16(onnx.load(path), keep_io_types=True), out)
        return out, [("", path), ("vs ORT's fp16 ", out)]
    if variant == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        out = path.replace(".onnx", "-int8.onnx")
        quantize_dynamic(path, out, weight_type=QuantType.QInt8)
        return out, [("", out), ("vs float32 ", path)]
    if variant in ("qdq", "qop"):  # quantize_static, calibrated on random inputs: QDQ pairs or QLinear* operators
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        out, pre = path.replace(".onnx", f"-{variant}.onnx"), path.replace(".onnx", "-pre.onnx")
        fmt = QuantFormat.QDQ if variant == "qdq" else QuantFormat.QOperator

        def quantize(src: str) -> None:
            quantize_static(src, out, _calibration(feeds), quant_format=fmt, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8)

        # (in the models' folder: onnxruntime's quantizer leaves <uuid>.data files in the working directory)
        with contextlib.chdir(os.path.dirname(os.path.abspath(path))):
            try:
                quantize(path)
            except Exception:  # onnxruntime's QOperator Conv wants its bias an initializer: its pre-processing first
                quant_pre_process(path, pre, skip_symbolic_shape=True)
                quantize(pre)
        return out, [("", out), ("vs float32 ", path)]
    if variant == "ort-fused":  # onnxruntime's transformers optimizer (model type bert, its default; heads detected)
        from onnxruntime.transformers.optimizer import optimize_model

        out = path.replace(".onnx", "-ort-fused.onnx")
        optimize_model(path, model_type="bert").save_model_to_file(out)
        return out, [("", out), ("vs float32 ", path)]
    return path, [("", path)]


def _min_cos(got: np.ndarray, want: np.ndarray, b: int) -> float:
    """The least cosine of a row of `got` with its row of `want` (each row scaled by want's largest
    magnitude first, so that outputs of 1e-16 compare as well as outputs of 1; all-zero rows: 0)."""
    a, w = got.reshape(b, -1), want.reshape(b, -1)
    scale = np.abs(w).max(axis=1, keepdims=True)
    a, w = a / np.where(scale > 0, scale, 1), w / np.where(scale > 0, scale, 1)
    return min(float(a[i] @ w[i] / (np.linalg.norm(a[i]) * np.linalg.norm(w[i]) + 1e-30)) for i in range(b))


def _compare(path: str, feeds: Callable[[int, np.random.Generator], dict[str, np.ndarray]], variant: str) -> str:
    import onnxruntime as ort

    from kompute_dml.onnx_backend import CPU, Backend

    path, references = _variant(path, variant, feeds)
    rep = Backend.prepare(path, "CPU")
    cpu = sorted({p.op_type for p in rep.placement if p.target == CPU})
    sessions = [(tag, ref, ort.InferenceSession(ref, providers=["CPUExecutionProvider"])) for tag, ref in references]
    rows = []
    for b in (1, 3):
        f = feeds(b, np.random.default_rng(b))
        got = rep.run(f)[0].astype(np.float64)
        st = rep.last_run
        row = f"b{b}: "
        for tag, ref, sess in sessions:
            want = sess.run(None, f)[0].astype(np.float64)
            if tag and ref != path:  # the int8 model as onnxruntime runs it, against the float32 model too
                own = sessions[0][2].run(None, f)[0].astype(np.float64)
                row += f"{tag}cos {_min_cos(got, want, b):.6f} (ORT's {_min_cos(own, want, b):.6f}) "
                continue
            row += f"{tag}cos {_min_cos(got, want, b):.6f} rel {float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30)):.1e} "
            if variant == "fp16" and ref != path and np.abs(want).max() < FP16_NORMAL:
                # random weights whose activations shrink layer by layer: float16 flushes them (onnxruntime's
                # CPU provider computes the converted model's nodes without float16 kernels in float32)
                row += f"(float32 outputs below float16's normal range: max {np.abs(want).max():.1e}) "
        rows.append(row + f"CPU sub-graphs {st.cpu_segments} up/down {st.uploads}/{st.downloads}")
    attention = sum(f.pattern.operator == "MULTIHEAD_ATTENTION" for f in rep.fusions.by_carrier.values())
    return f"nodes {len(rep.graph.node)}, attention chains fused {attention}, CPU ops {cpu or '-'} | " + " | ".join(rows)


def _transformers_case(name: str, tmp: str, variant: str) -> str:
    import torch
    import transformers

    cfg_cls, model_cls, kw, kind = TRANSFORMERS[name]
    base = {"vocab_size": 100, **H} if kind.startswith("text") or kind == "ids" else {}
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**{**base, **kw})).eval()
    example = _inputs(kind, 2, 9, np.random.default_rng(0))
    path = os.path.join(tmp, f"{name}.onnx")
    _export(model, list(example), example, path)
    fixed = name in TRACED_LENGTH  # (architecture_configs.py)
    line = _compare(path, lambda b, rng: _inputs(kind, b, 9 if fixed else 7 if b == 1 else 13, rng), variant)
    return line + (_float64(model, path, _inputs(kind, 1, 7, np.random.default_rng(1))) if FLOAT64 and variant == "fp32" else "")


def _float64(model: Any, path: str, feeds: dict[str, np.ndarray]) -> str:
    """Ours and onnxruntime's (with and without its graph optimizations) largest error relative to torch's
    float64 run of the same model on `feeds` (the transformers' at batch 1, timm networks' at batch 3):
    which of two disagreeing runs is the inexact one."""
    import onnxruntime as ort
    import torch

    from kompute_dml.onnx_backend import Backend

    with torch.no_grad():
        args = {k: torch.from_numpy(v).double() if v.dtype == np.float32 else torch.from_numpy(v) for k, v in feeds.items()}
        out = model.double()(*args.values()) if list(args) == ["x"] else model.double()(**args)
    ref = (out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)).numpy()
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = {"ours": Backend.prepare(path, "CPU").run(feeds)[0],
            "ORT": ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0],
            "ORT unoptimized": ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"]).run(None, feeds)[0]}
    scale = np.abs(ref).max() + 1e-300
    return " | vs torch float64 rel: " + ", ".join(f"{k} {np.abs(v.astype(np.float64) - ref).max() / scale:.1e}"
                                                  for k, v in runs.items())


def _torchvision_shape(name: str) -> tuple[int, ...]:
    """An input's shape past the batch: 96 x 96 images; the video networks 8 frames of 112 x 112."""
    return (3, 8, 112, 112) if name.startswith("video.") else (3, 96, 96)


def _torchvision_case(name: str, tmp: str, variant: str) -> str:
    path = export_torchvision(name, tmp)
    shape = _torchvision_shape(name)
    return _compare(path, lambda b, rng: {"x": rng.standard_normal((b, *shape)).astype(np.float32)}, variant)


def _timm_case(name: str, tmp: str, variant: str) -> str:
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    with torch.no_grad():
        zero_head = not model(torch.randn(1, *size)).abs().max().item()
    if zero_head:  # a classifier initialised to zeros (gMLP, ResMLP, Sequencer, Hiera): compare the pooled features
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=0).eval()
    path = os.path.join(tmp, f"{name}.onnx")
    _export(model, ["x"], {"x": np.zeros((2, *size), np.float32)}, path)
    feeds = lambda b, rng: {"x": rng.standard_normal((b, *size)).astype(np.float32)}  # noqa: E731
    line = _compare(path, feeds, variant)
    if FLOAT64 and variant == "fp32":  # (the batch-3 feeds of _compare's second run)
        line += _float64(model, path, feeds(3, np.random.default_rng(3)))
    return line + (" (features: its classifier is initialised to zeros)" if zero_head else "")


def export_torchvision(name: str, tmp: str) -> str:
    """torchvision's `name` (random weights) exported to tmp at its input shape (_torchvision_shape), batch dynamic;
    its path."""
    import torch
    import torchvision

    torch.manual_seed(0)
    factory: Any = torchvision.models
    for part in name.split("."):
        factory = getattr(factory, part)
    model = factory(weights=None, weights_backbone=None) if name.startswith("segmentation.") else factory()
    path = os.path.join(tmp, f"{name}.onnx")
    _export(model.eval(), ["x"], {"x": np.zeros((2, *_torchvision_shape(name)), np.float32)}, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="all", choices=("transformers", "torchvision", "timm", "all"))
    ap.add_argument("--variant", default="fp32", choices=("fp32", "fp16", "int8", "qdq", "qop", "ort-fused"),
                    help="fp16: converted, float32 I/O kept, against the float32 export; int8: quantize_dynamic; "
                         "qdq / qop: quantize_static (random calibration) in QDQ or QOperator format; ort-fused: "
                         "onnxruntime's transformers optimizer (model type bert)")
    ap.add_argument("--exporter", default="torchscript", choices=("torchscript", "dynamo"),
                    help="dynamo: torch.export (torch.onnx.export's default since torch 2.9), opset 18")
    ap.add_argument("--float64", action="store_true",
                    help="transformers, fp32: ours and onnxruntime's error against torch's float64 run too")
    ap.add_argument("names", nargs="*", help="a subset of the set's names")
    args = ap.parse_args()
    global DYNAMO
    DYNAMO = args.exporter == "dynamo"
    global FLOAT64
    FLOAT64 = args.float64
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    cases: list[tuple[str, Callable[[str, str, str], str]]] = []
    if args.set in ("transformers", "all"):
        cases += [(n, _transformers_case) for n in TRANSFORMERS]
    if args.set in ("torchvision", "all"):
        cases += [(n, _torchvision_case) for n in TORCHVISION]
    if args.set in ("timm", "all"):
        cases += [(n, _timm_case) for n in TIMM]
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases:
            if args.names and name not in args.names:
                continue
            t0 = time.perf_counter()
            try:
                line = case(name, tmp, args.variant)
            except Exception as e:  # an architecture that does not export here, or a failure of ours: its line says which
                line = f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            print(f"{name:20s} {line} ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
