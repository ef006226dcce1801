"""DYNAMIC_QUANTIZE_LINEAR (FLOAT32 -> UINT8, packed) per input size, against PyTorch CUDA in the
same process where it is importable (the same arithmetic as a chain of torch kernels: aminmax,
the scale and zero point on the device, x / scale, round, add, clamp, cast).

    python -m benchmarks.bench_dql                                # 64 Ki to 64 Mi elements
    python -m benchmarks.bench_dql --sizes 65536,1048576          # lavapipe, no torch
    python -m benchmarks.bench_dql --geometries 4096,4 1024,1     # the policy's dql_geometry choices

Ours runs N executions in one `with dev.record() as rec:`; torch N launches of its chain, then
synchronizes. A sample is the slope (t(N) - t(1)) / (N - 1) (timing.slopes): one submission's or
synchronize's fixed cost cancels; the figure is the median over rounds, ours and torch
alternating. GB/s counts 4 + 1 bytes per element (the input read once, the output written),
though ours reads the input twice (min / max, then the quantization). `--profile` adds the
device time of each of ours' two dispatches (Device.profile). After timing, ours' output, scale
and zero point are checked bit for bit against the numpy reference (tests/quantize_reference.py)
and, where importable, onnxruntime.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes
from tests.quantize_reference import dynamic_quantize_ref

DT = kdml.DataType
TD = kdml.TensorDesc


def ours(dev, x: np.ndarray):
    n = x.size
    op = dev.compile(kdml.DynamicQuantizeLinearDesc(TD(DT.FLOAT32, (n,)), TD(DT.UINT8, (n,)), TD(DT.FLOAT32, (1,)),
                                                    TD(DT.UINT8, (1,))))
    xt = dev.tensor(x)
    outs = [dev.empty(TD(DT.UINT8, (n,))), dev.empty(TD(DT.FLOAT32, (1,))), dev.empty(TD(DT.UINT8, (1,)))]

    def run(k: int) -> None:
        with dev.record() as rec:
            for _ in range(k):
                rec.execute(op, [xt], outs)

    return op, xt, outs, run


def torch_chain(x: np.ndarray):
    import torch

    xt = torch.from_numpy(x).cuda()

    def once():
        lo, hi = torch.aminmax(xt)
        lo, hi = torch.clamp(lo, max=0), torch.clamp(hi, min=0)
        scale = torch.where(hi == lo, torch.ones_like(hi), (hi - lo) / 255)
        zp = torch.clamp(torch.round(0 - lo / scale), 0, 255)
        return torch.clamp(torch.round(xt / scale) + zp, 0, 255).to(torch.uint8), scale, zp

    def run(k: int) -> None:
        for _ in range(k):
            once()
        torch.cuda.synchronize()

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="65536,1048576,6291456,25165824,67108864")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--geometries", nargs="*", default=[],
                    help="ELEMENTS,LOADS pairs (DevicePolicy.dql_geometry) timed side by side; default the policy's")
    args = ap.parse_args()
    dev = kdml.Device()
    geometries = [tuple(int(v) for v in g.split(",")) for g in args.geometries] or [dev.policy.dql_geometry]
    print(f"device: {dev.name}")
    try:
        import torch

        has_torch = not args.no_torch and torch.cuda.is_available()
    except ImportError:
        has_torch = False
    try:
        import onnxruntime as ort
        from onnx import TensorProto as T
        from onnx import helper

        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, None)],
                              [helper.make_tensor_value_info(nm, t, None) for nm, t in
                               (("y", T.UINT8), ("s", T.FLOAT), ("z", T.UINT8))])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except ImportError:
        sess = None
    rng = np.random.default_rng(0)
    print("| elements | geometry | ours us | ours GB/s | torch chain us | ratio | bits vs reference | vs onnxruntime |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- | --- |")
    policy = dev.policy
    for n in (int(s) for s in args.sizes.split(",")):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        mine = {}
        for g in geometries:  # each geometry's operator compiled under a policy that picks it
            dev.policy = dataclasses.replace(policy, dql_geometry=g)
            mine[g] = ours(dev, x)
        dev.policy = policy
        runs = {g: m[3] for g, m in mine.items()} | ({"torch": torch_chain(x)} if has_torch else {})
        t = slopes(runs, args.rounds, args.reps)
        t_torch = t.get("torch")
        ry, rs, rz = dynamic_quantize_ref(x, np.uint8)
        oy = os_ = oz = None
        if sess is not None:
            oy, os_, oz = sess.run(None, {"x": x})
        for g, (op, xt, outs, _) in mine.items():
            t_ours = t[g]
            y, s, z = outs[0].numpy(), outs[1].numpy()[0], outs[2].numpy()[0]
            same = bool((y == ry).all() and np.float32(s).view(np.uint32) == np.float32(rs).view(np.uint32) and z == rz)
            vs_ort = "-" if oy is None else str(bool(
                (y == oy).all() and np.float32(s).view(np.uint32) == np.float32(os_).view(np.uint32) and z == oz))
            gbs = 5 * n / t_ours / 1e9
            tt = f"{t_torch * 1e6:.1f}" if t_torch else "-"
            ratio = f"{t_torch / t_ours:.2f}" if t_torch else "-"
            print(f"| {n} | {g[0]},{g[1]} | {t_ours * 1e6:.1f} | {gbs:.0f} | {tt} | {ratio} | {same} | {vs_ort} |", flush=True)
            if args.profile:
                with dev.profile() as p:
                    op.execute([xt], outs)
                print(p)
        del mine
    dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
