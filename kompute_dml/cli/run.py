"""`kompute-dml run MODEL.onnx --input name=file.npy ... [--output out.npz]`.

Runs an ONNX model through kompute_dml.onnx_backend (supported nodes on the Vulkan
device, the rest on the CPU fallback), prints where every node ran and how long it took,
and writes the outputs to a .npz file. User errors (a missing or unreadable file, a
missing or unknown input, a wrong type, a shape other than the model declares, a device
this machine lacks) print one clear line and exit with status 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import HELP, DeviceArgError, parse_device


class UsageError(Exception):
    """A problem with the command line or its files: reported in one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="kompute-dml run",
        description="Run an ONNX model through the kompute_dml backend (Vulkan + CPU fallback).",
    )
    ap.add_argument("model", help="the .onnx file")
    ap.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE",
                    help="an input from a .npy file (repeat for each input); FILE.npz loads every array in it "
                         "by name when given without NAME=")
    ap.add_argument("--output", "-o", default=None, metavar="OUT.npz", help="write the outputs here (.npz)")
    ap.add_argument("--device", default="CPU", help=HELP)
    ap.add_argument("--feature-level", default=None, help="DirectML feature level, e.g. 6_2 (default: highest)")
    ap.add_argument("--fallback", default="auto", choices=["auto", "onnxruntime", "reference"],
                    help="CPU fallback engine (auto: onnxruntime, then onnx's reference evaluator)")
    ap.add_argument("--exclude-ops", default="", metavar="OP,OP",
                    help="ONNX op types to keep on the CPU fallback (comma-separated)")
    ap.add_argument("--allow-half-precision", action="store_true",
                    help="float32 matrix products and convolutions in float16 with float32 accumulation "
                         "(DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION)")
    ap.add_argument("--cast", action="store_true",
                    help="convert inputs of another element type to the declared one even where values change")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs after the first (default 1)")
    ap.add_argument("--placement", action="store_true", help="also list every node with where it runs")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed runs, one more run with the device time of every dispatch, per node")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress lines on standard error")
    ap.add_argument("--compare-onnxruntime", action="store_true",
                    help="also run the model with onnxruntime's CPU provider: its timing, each output's largest "
                         "absolute and relative difference and a verdict against the stated tolerance")
    return ap


def _load_inputs(specs: list[str]) -> dict[str, Any]:
    feeds: dict[str, Any] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep:
            name, file = "", spec
        path = Path(file)
        if not file:
            raise UsageError(f"--input {spec!r}: expected NAME=FILE.npy")
        if not path.is_file():
            raise UsageError(f"--input {spec!r}: no such file: {file}")
        try:
            with open(path, "rb") as f:
                magic = f.read(6)
        except OSError as e:
            raise UsageError(f"--input {spec!r}: cannot read {file}: {e.strerror}") from None
        if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
            raise UsageError(f"--input {spec!r}: {file} is not a numpy .npy or .npz file")
        try:
            data = np.load(path, allow_pickle=False)
        except Exception as e:
            raise UsageError(f"--input {spec!r}: cannot read {file} ({e})") from None
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                arrays = {k: data[k] for k in data.files}
            if name:
                if name not in arrays:
                    if len(arrays) != 1:
                        raise UsageError(f"--input {spec!r}: {file} holds {sorted(arrays)}, not {name!r}")
                    arrays = {name: next(iter(arrays.values()))}
                feeds[name] = arrays[name]
            else:
                feeds.update(arrays)
        else:
            if not name:
                raise UsageError(f"--input {spec!r}: expected NAME=FILE.npy")
            feeds[name] = data
    return feeds


def _flatten_outputs(names: list[str], values: list[Any]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, v in zip(names, values):
        if v is None:
            continue
        if isinstance(v, list):
            for i, e in enumerate(v):
                out[f"{name}.{i}"] = np.asarray(e)
        else:
            out[name] = np.asarray(v)
    return out


def _describe(v: Any) -> str:
    if v is None:
        return "absent (optional)"
    if isinstance(v, list):
        return f"sequence of {len(v)}"
    a = np.asarray(v)
    return f"{a.dtype} {list(a.shape)}"


def _run(args: argparse.Namespace) -> int:
    from ..core.errors import DMLError
    from ..onnx_backend import Backend, FallbackError
    from ..onnx_backend.backend import load_model
    from ..onnx_backend.ort_compat import for_onnxruntime
    from .compare import compare_lines
    from .progress import Stages

    model_path = Path(args.model)
    if not model_path.is_file():
        raise UsageError(f"no such model file: {args.model}")
    try:  # empty, corrupt, too new: the backend's checks (onnx_backend/backend.py)
        model = load_model(model_path)
    except ValueError as e:
        raise UsageError(f"cannot read {e}") from None
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    feeds = _load_inputs(args.input)
    try:
        index = parse_device(args.device)
    except DeviceArgError as e:
        raise UsageError(str(e)) from None
    device = "CPU" if str(args.device).strip().upper() in ("CPU", "CPU:0") else f"VULKAN:{index}"

    stages = Stages("kompute-dml run", args.quiet)
    t0 = time.perf_counter()
    try:
        with stages.stage(f"preparing {model_path.name} ({len(model.graph.node)} nodes)"):
            rep = Backend.prepare(model, device, feature_level=args.feature_level, fallback=args.fallback,
                                  exclude_ops=[op for op in args.exclude_ops.split(",") if op],
                                  allow_half_precision=args.allow_half_precision)
    except (ValueError, DMLError, FallbackError) as e:
        raise UsageError(f"cannot prepare the model: {e}") from None
    t_prepare = time.perf_counter() - t0
    names = rep.feed_names
    missing = [n for n in names if n not in feeds]
    if missing:
        raise UsageError(f"missing input(s) {missing}: give each as --input NAME=FILE.npy (model inputs: {names})")
    unknown = [n for n in feeds if n not in rep.input_names]
    if unknown:
        raise UsageError(f"unknown input(s) {unknown}; the model's inputs are {names}")
    try:  # names, types and the declared shapes (onnx_backend/feeds.py)
        feeds = rep._normalize_inputs(feeds, args.cast)
    except ValueError as e:
        raise UsageError(str(e).replace("pass cast=True", "pass --cast")) from None

    print(f"model: {model_path} ({len(model.graph.node)} nodes)")
    print(rep.summary())
    if args.placement:
        for p in rep.placement:
            where = f"{p.target}:{p.operator}" + (f" (sub-graph {p.segment})" if p.segment is not None else "")
            print(f"  [{p.index:4}] {p.op_type:28} {p.name:40} {where}{'  - ' + p.reason if p.reason else ''}")

    try:
        with stages.stage("first run (compiles the operators, plans the device program)"):
            t0 = time.perf_counter()
            outputs = list(rep.run(feeds))
            t_first = time.perf_counter() - t0
        times, vk, cpu = [], [], []
        with stages.stage(f"{args.repeat} timed run(s)", total=args.repeat) as advance:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                outputs = list(rep.run(feeds))
                times.append(time.perf_counter() - t0)
                vk.append(rep.last_run.vulkan_seconds)
                cpu.append(rep.last_run.cpu_seconds)
                advance(1)
    except (ValueError, FallbackError) as e:
        raise UsageError(str(e)) from None
    st = rep.last_run
    print(f"timing: prepare {t_prepare * 1e3:.1f} ms, first run {t_first * 1e3:.1f} ms, "
          f"median of {len(times)} runs {statistics.median(times) * 1e3:.2f} ms "
          f"(medians: vulkan nodes {statistics.median(vk) * 1e3:.2f} ms, cpu sub-graphs "
          f"{statistics.median(cpu) * 1e3:.2f} ms); "
          f"transfers per run: {st.uploads} uploads, {st.downloads} downloads")
    for ev in st.events:
        print(f"note: {ev}")
    for name, v in zip(rep.output_names, outputs):
        print(f"output {name}: {_describe(v)}")
    if args.profile:
        with rep.device.profile() as prof:
            rep.run(feeds)
        print(f"device time per node (one profiled run; {len(prof.rows)} dispatches, {prof.total_us():.1f} us in all):")
        for row in prof.table(by="scope"):
            print(f"  {row['scope']:60} {row['dispatches']:4} dispatch(es) {row['microseconds']:10.2f} us")

    if args.compare_onnxruntime:
        import onnxruntime as ort

        with stages.stage("onnxruntime CPU, for the comparison", total=args.repeat + 1) as advance:
            # the IR version and opset this onnxruntime loads (onnx 1.23 writes newer ones)
            sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), providers=["CPUExecutionProvider"])
            ref = sess.run(rep.output_names, feeds)
            advance(1)
            ort_times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sess.run(rep.output_names, feeds)
                ort_times.append(time.perf_counter() - t0)
                advance(1)
        print(f"onnxruntime CPU: median of {len(ort_times)} runs {statistics.median(ort_times) * 1e3:.2f} ms")
        for line in compare_lines(rep.output_names, outputs, ref, {n.op_type for n in model.graph.node},
                                  half=args.allow_half_precision):
            print(line)

    if args.output:
        out_path = Path(args.output)
        try:
            arrays: dict[str, Any] = _flatten_outputs(rep.output_names, outputs)
            np.savez(out_path, **arrays)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e}") from None
        print(f"wrote {out_path if out_path.suffix == '.npz' else str(out_path) + '.npz'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except UsageError as e:
        print(f"kompute-dml run: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # keep the command line free of tracebacks; say what failed
        print(f"kompute-dml run: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
