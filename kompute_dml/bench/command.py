"""The `kompute-dml bench` command: options, the run, the result dictionary (see __init__)."""

from __future__ import annotations

import argparse
import datetime
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..cli.common import HELP, DeviceArgError, parse_device
from ..cli.common import console as make_console
from . import transfers
from .cases import Env, RowSpec, gpu_rows, recorded, suite
from .cpu_peers import ort_available
from .gpu_peers import GpuPeer, load_peers
from .harness import CEILING_BYTES, latency, machine_info, run_case
from .report import goals, render, write_outputs
from .timing import Batched, interleaved, median

GPU_CEILING_BYTES = 1 << 30
GPU_PEERS = ("torch", "cupy")


def matmul_from_peer_module(quick: bool) -> list[dict[str, Any]] | None:
    """matmul.run(quick): the matrix product against onnxruntime and numpy, shape by shape."""
    from . import matmul

    rows = matmul.run(quick)
    return [dict(r) for r in rows] if rows else []


def encoders_from_peer_module(argv: list[str]) -> int | None:
    """encoder_speed.main(argv): the ONNX backend on whole encoders against onnxruntime CPU and
    PyTorch CUDA float16."""
    from . import encoder_speed

    return int(encoder_speed.main(argv))


def _error_row(spec: RowSpec, e: Exception) -> dict[str, Any]:
    """A row whose set-up failed: one broken operator must not hide the others' figures."""
    return {"op": spec.op, "dtype": spec.dtype, "shape": list(spec.shape), "metric": spec.metric, "amount": 0,
            "memory_bound": spec.metric == "GB/s", "error": f"{type(e).__name__}: {e}"}


def gpu_ceiling(kdml: Any, dev: Any, peers: list[GpuPeer], nbytes: int, rounds: int) -> tuple[float, str]:
    """GB/s of the best sample of an nbytes device-to-device copy, and what copied: the first
    GPU peer, else ours (ACTIVATION_IDENTITY, 10 per recording)."""
    mib = nbytes >> 20
    for p in peers:
        try:
            return p.ceiling(nbytes, rounds), f"{p.name} copy of {mib} MiB"
        except Exception:  # e.g. out of memory: fall back to ours
            continue
    nbytes = min(nbytes, dev.limits["max_storage_buffer_range"] >> 20 << 20)  # one buffer each (lavapipe: 128 MiB)
    mib = nbytes >> 20
    desc = kdml.TensorDesc(kdml.DataType.FLOAT32, (nbytes // 4,))
    x, y = dev.empty(desc), dev.empty(desc)
    op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
    best = min(interleaved({"c": Batched(recorded(dev, op, [x], [y])(10), 10)}, rounds)["c"])
    return 2 * nbytes / best / 1e9, f"ours (identity, recorded) copy of {mib} MiB"


def _latency(kdml: Any, dev: Any, peers: list[GpuPeer], args: argparse.Namespace) -> dict[str, Any]:
    """The latency section: each side in a process of its own (latency_proc), or all in this
    one (--latency-here, and peers that only exist here such as the tests' numpy peer)."""
    from . import latency_proc  # here, not at the top: `python -m` runs it as __main__ after the package's import

    reps = 7 if args.quick else 25
    here = args.latency_here
    lat = latency(kdml, dev, reps) if here else latency_proc.measure("ours", reps, args.device)
    lat["method"] = "in the bench's process" if here else "each side in a process of its own"
    for p in peers:
        if hasattr(p, "latency"):
            try:
                alone = not here and p.name in GPU_PEERS
                lat.update(latency_proc.measure(p.name, reps, torch_device=args.torch_device) if alone else p.latency(reps))
            except Exception as e:  # the run's figures stand without the peer's latency
                lat[f"{p.name}_error"] = f"{type(e).__name__}: {e}"
    return lat


def parse(argv: list[str] | None) -> argparse.Namespace:
    from .method import __doc__ as doc

    ap = argparse.ArgumentParser(prog="kompute-dml bench", description=(doc or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few rounds: seconds (a GPU run: about a minute)")
    ap.add_argument("--json", metavar="FILE", help="write every figure and the machine description")
    ap.add_argument("--plot", metavar="FILE.png", help="chart ours against peers (matplotlib, Agg)")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress lines on standard error when piped")
    ap.add_argument("--only", metavar="SUBSTR", help="only rows whose label (operator dtype shape) contains SUBSTR "
                    "(case-insensitive)")
    ap.add_argument("--rounds", type=int, default=None, help="samples per figure (default 15, quick 5)")
    ap.add_argument("--markdown", metavar="FILE.md", help="write the table, latency and goals as Markdown")
    ap.add_argument("--no-ort", action="store_true", help="skip the onnxruntime peers")
    ap.add_argument("--gpu", choices=("auto", "on", "off"), default="auto",
                    help="GPU rows, ours recorded, PyTorch/CuPy peers, one device copy ceiling (auto: when the "
                    "device policy is not 'cpu')")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch peers")
    ap.add_argument("--no-cupy", action="store_true", help="skip the CuPy peers")
    ap.add_argument("--torch-device", default="cuda", help="where the torch peers run (default cuda; 'cpu' exercises "
                    "the GPU rows' code on a machine without one)")
    ap.add_argument("--device", default=None, help=HELP)
    ap.add_argument("--no-transfers", action="store_true", help="leave out the transfers and first-call sections")
    ap.add_argument("--encoders", metavar="SHAPES", nargs="?", const="1x16,8x128,64x256", default=None,
                    help="also run whole encoders through the ONNX backend (kompute_dml.bench.encoder_speed: MiniLM "
                         "where its model or KDML_MINILM_DIR is there, a random BERT of hidden 256 where torch is) "
                         "at these BATCHxSEQUENCE shapes (default 1x16,8x128,64x256)")
    ap.add_argument("--decoders", metavar="NAMES", nargs="?", const="gpt2,llama", default=None,
                    help="also run greedy generation with the key/value cache on the device (kompute_dml.bench."
                         "decoder_speed: prompt ms and tokens/s against onnxruntime CPU and PyTorch CUDA fp32 / fp16 "
                         "with its cache; random weights, 'small' size, 128-token prompt, 32 new tokens)")
    ap.add_argument("--scaling", metavar="SHAPES", nargs="?", const="8x128,64x256", default=None,
                    help="also measure throughput over every GPU from one thread per GPU and one process per GPU "
                         "against one GPU (kompute_dml.bench.scaling, a random BERT; default 8x128,64x256), then "
                         "two models from two threads on one GPU (kompute_dml.bench.shared_device), then "
                         "batch-1 requests from 8 threads through serving.Batcher on one GPU (kompute_dml.bench.batcher)")
    ap.add_argument("--conv", action="store_true",
                    help="also the convolution layers (ResNet's, depthwise 3x3, 1x1, ViT's patches, Whisper's) against "
                         "torch's cuDNN and onnxruntime as TFLOPS and ratios, and on a device with cooperative matrices "
                         "ResNet-50's largest layers on the tensor-core kernel (python -m benchmarks.bench_conv "
                         "[--kernels], from the source checkout)")
    ap.add_argument("--latency-here", action="store_true", help="time the latency section in this process, not in "
                    "one process per side (python -m kompute_dml.bench.latency_proc)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    import kompute_dml as kdml

    from .method import __doc__ as doc

    t_start = time.perf_counter()
    try:  # one line and status 2 for a device this machine lacks or cannot open
        args.device = parse_device(args.device)
        dev = kdml.Device(args.device)
    except (DeviceArgError, kdml.DMLError) as e:
        print(f"kompute-dml bench: error: {e}", file=sys.stderr)
        return 2
    policy = getattr(getattr(dev, "policy", None), "name", getattr(dev, "device_type", "cpu"))
    gpu_mode = args.gpu == "on" or (args.gpu == "auto" and policy != "cpu")
    console = make_console()
    rounds = args.rounds or (5 if args.quick else 15)
    names = [n for n in GPU_PEERS if gpu_mode and not getattr(args, f"no_{n}")]
    peers, skipped = load_peers(names, args.torch_device)
    env = Env(kdml, dev, np.random.default_rng(0), ort=ort_available() and not args.no_ort, gpu=peers)
    specs = suite(env, args.quick) + (gpu_rows(env, args.quick) if gpu_mode else [])
    if args.only:
        chosen = [s for s in specs if args.only.lower() in s.label.lower()]
        matmul_only = not gpu_mode and any(w in args.only.lower() for w in ("matmul", "matrix"))
        if not chosen and not matmul_only:
            labels = "; ".join(s.label for s in specs)
            print(f"kompute-dml bench: error: --only {args.only!r} matches no row; the rows are: {labels}",
                  file=sys.stderr)
            return 2
        specs = chosen

    ceil_a = np.ones(CEILING_BYTES // 4, np.float32)
    ceil_b = np.empty_like(ceil_a)
    ceiling_fn: Callable[[], Any] | None = None if gpu_mode else (lambda: np.copyto(ceil_b, ceil_a))
    rows: list[dict[str, Any]] = []
    matmul_module = None
    ceil_s: list[float] = []
    ceiling_gbps = None
    ceiling_label = "numpy.copyto 64 MiB"
    ceiling_method = "numpy.copyto of 64 MiB float32 into an existing array, median, before and after the suite " \
                     "(% ceil uses each row's own samples of it)"
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as prog:
        task = prog.add_task("bench", total=len(specs) + 3)
        prog.update(task, description="ceiling")
        if gpu_mode:
            nbytes = GPU_CEILING_BYTES >> (4 if args.quick else 0)  # quick: 64 MiB
            ceiling_gbps, ceiling_label = gpu_ceiling(kdml, dev, peers, nbytes, max(rounds, 5))
            ceiling_method = f"the best of {max(rounds, 5)} samples of a {ceiling_label} (device to device, 10 per sample)"
        else:
            ceil_s = interleaved({"c": ceiling_fn}, rounds)["c"]  # type: ignore[dict-item]
        prog.advance(task)
        for k, spec in enumerate(specs):
            prog.update(task, description=spec.label)
            if not console.is_terminal and not args.quiet:  # piped: a line per row, on standard error
                print(f"kompute-dml bench: [{k + 1}/{len(specs)}] {spec.label} "
                      f"({time.perf_counter() - t_start:.0f} s in)", file=sys.stderr, flush=True)
            t_row = time.perf_counter()
            try:
                row = run_case(spec.make(), rounds, ceiling_fn, recorded=gpu_mode, ceiling_gbps=ceiling_gbps)
            except Exception as e:
                row = _error_row(spec, e)
            row["row_seconds"] = time.perf_counter() - t_row
            rows.append(row)
            gc.collect()  # free this row's buffers before the next row allocates
            for p in peers:
                p.release()
            prog.advance(task)
        prog.update(task, description="latency")
        lat = _latency(kdml, dev, peers, args)
        prog.advance(task)
        xfer: list[dict[str, Any]] = []
        first: list[dict[str, Any]] = []
        if not args.no_transfers and not args.only:
            prog.update(task, description="transfers, first calls")
            torch_dev = args.torch_device if "torch" in [p.name for p in peers] else None
            xfer = transfers.transfers(kdml, dev, max(rounds, 5), 64 << 20 if not args.quick else 16 << 20, torch_dev)
            first = transfers.first_calls(kdml, dev, max(rounds, 5))
        wants_mm = not args.only or "matmul" in args.only.lower() or "matrix" in args.only.lower()
        # matmul.py times eager submissions (one wait per call): on a GPU that measures
        # the submission latency, not the kernel, so a GPU run leaves it out
        if wants_mm and not gpu_mode:
            prog.update(task, description="kompute_dml.bench.matmul")
            try:
                matmul_module = matmul_from_peer_module(args.quick)
            except Exception as e:
                matmul_module = [{"error": f"{type(e).__name__}: {e}"}]
        prog.advance(task)
        if not gpu_mode:
            ceil_s += interleaved({"c": ceiling_fn}, rounds)["c"]  # type: ignore[dict-item]
            ceiling_gbps = 2 * CEILING_BYTES / median(ceil_s) / 1e9
    machine = machine_info(dev)
    gpu_info: dict[str, Any] = {}
    for p in peers:
        gpu_info.update(p.describe())
    result: dict[str, Any] = {
        "command": "kompute-dml bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "rounds": rounds,
        "mode": "gpu" if gpu_mode else "cpu",
        "timing": "recorded" if gpu_mode else "execute",
        "method": (doc or "").split("Method.")[1].strip() if doc and "Method." in doc else "",
        "machine": machine,
        "gpu_peers": gpu_info,
        "gpu_peers_skipped": skipped,
        "ceiling_gbps": ceiling_gbps,
        "ceiling_method": ceiling_method,
        "ceiling_label": ceiling_label,
        "rows": rows,
        "latency": lat,
        "transfers": xfer,
        "first_calls": first,
        "matmul_module": matmul_module,
        "seconds": None,
    }
    result["goals"] = goals(rows, lat, gpu=gpu_mode)
    result["seconds"] = time.perf_counter() - t_start
    render(console, result)
    if xfer:
        transfers.render(console, "transfers (median per call)", xfer)
    if first:
        transfers.render(console, "first calls against the same call repeated (median)", first)
    write_outputs(console, result, args.json, args.markdown, args.plot)
    console.print(f"{result['seconds']:.1f} s")
    if args.encoders:
        enc = ["--shapes", args.encoders, "--repeat", str(max(rounds, 5))]
        if args.json:
            enc += ["--json", str(Path(args.json).with_suffix(".encoders.json"))]
        console.print("encoders end to end (python -m kompute_dml.bench.encoder_speed " + " ".join(enc) + ")")
        encoders_from_peer_module(enc)
    if args.decoders:
        from . import decoder_speed

        dec = ["--decoders", args.decoders]
        console.print("decoders, greedy with the cache (python -m kompute_dml.bench.decoder_speed " + " ".join(dec) + ")")
        decoder_speed.main(dec)
    if args.conv:
        _conv_section(console, dev, args.quick)
    if args.scaling:
        from . import scaling

        sc = ["--shapes", args.scaling, "--seconds", "2" if args.quick else "5"]
        console.print("scaling over GPUs (python -m kompute_dml.bench.scaling " + " ".join(sc) + ")")
        scaling.main(sc)
        from . import shared_device

        sd = ["--copies", "2", "--shapes", "1x128,8x128", "--seconds", "1" if args.quick else "2"]
        console.print("one GPU, a model per thread (python -m kompute_dml.bench.shared_device " + " ".join(sd) + ")")
        shared_device.main(sd)
        _batcher_section(console, args.quick)
    return 0


def _batcher_section(console: Any, quick: bool) -> None:
    """One GPU, eight threads of batch-1 requests through serving.Batcher against one thread calling
    rep.run (kompute_dml.bench.batcher; its float32 model is a torch export)."""
    import importlib.util

    missing = [m for m in ("torch", "transformers", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        console.print(f"batcher: skipped ({', '.join(missing)} not installed: the model is a torch export)")
        return
    from . import batcher

    bt = ["--seq", "128", "--max-delay-ms", "0,2", "--seconds", "2" if quick else "3"]
    console.print("one GPU, batch-1 requests through the batcher (python -m kompute_dml.bench.batcher " + " ".join(bt) + ")")
    batcher.main(bt)


def _conv_section(console: Any, dev: Any, quick: bool) -> None:
    """benchmarks/bench_conv.py in a process of its own, from the source checkout (its peers and
    overlays are no part of the package); --kernels too where the device has cooperative matrices."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "bench_conv.py").exists():
        console.print("--conv: benchmarks/bench_conv.py is not here (it runs from the source checkout)")
        return
    runs = [["--small"] if quick or dev.policy.name == "cpu" else []]
    if "cooperative_matrix" in dev.capabilities:
        runs.append(["--kernels"] + (["--quick"] if quick else []))
    for extra in runs:
        cmd = [sys.executable, "-m", "benchmarks.bench_conv", *extra]
        console.print("convolutions (" + " ".join(["python", *cmd[1:]]) + ")")
        subprocess.run(cmd, cwd=root, check=False)


if __name__ == "__main__":
    sys.exit(main())
