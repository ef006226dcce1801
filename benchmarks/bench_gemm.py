"""GEMM (shaders/gemm.comp, the portable float32-accumulating kernel; FLOAT16 also on cooperative
matrices, shaders/gemm_coop.comp) against PyTorch CUDA matmuls.

Run on the H100 (or anywhere: without torch/CUDA only our rows are timed):
    python -m benchmarks.bench_gemm [--rounds 5] [--quick] [--json out.json]
    python -m benchmarks.bench_gemm --families [--rounds 5] [--json out.json]
The first table runs every case on the device's automatic family (its variant is printed).
Cases: BERT-base self-attention as the ONNX backend issues it (batch 8, 12 heads, sequence 128,
head size 32: scores Q x K^T with K bound as a transposed strided view, then probs x V with V
strided), the BERT feed-forward product 1024 x 768 x 3072, and square 1024^3 / 4096^3; FLOAT32
and FLOAT16 each.
1. Correctness first, on every timed case: sampled rows of the output against the float64
   reference under docs/gemm.md's bound (tests/gemm_reference.py); FAIL voids the timings.
2. Timing, interleaved rounds, median seconds per execution (N executions per recorded sequence,
   a call lasting about 50 ms): ours; torch_f32 (TF32 off: float32 FMAs, the same arithmetic
   class) and torch_f16 (cuBLAS on tensor cores, float32 accumulation) on contiguous copies.
   GFLOPS = 2 * batch * M * N * K / s / 1e9; ratio = torch's seconds / ours (> 1: ours faster).
`--families`: FLOAT16 only, 1024^3, 4096^3 and 8 x 128 batched 256^3 (A, B of shape (8, 128, 256,
256)) plus the attention products, each on the cooperative-matrix family ("coopmat": tensor cores,
where the device has them, else "coopmat-emulated" with --emulated), the tiled kernel forced, and
torch.matmul fp16; printed side by side with the ratios tiled / coop (the family's speed-up) and
torch / coop (> 1: ours faster). Correctness first as above, under the family's bound.
`--blocks`: FLOAT32 on the tiled kernel with each register block forced (b2, b4, b8: 32, 64 and
128-square tiles) beside torch fp32, on Whisper's encoder products, the small families' and the cases
above, and the device policy's choice (its first variant named; `gemms_*`: split-K, ops/gemm_split.py)
timed beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import time_interleaved
from kompute_dml.ops.gemm import compile_gemm
from kompute_dml.ops.gemm_coop import CoopTile, subgroup_size
from tests.gemm_reference import check

D = kdml.DataType
TD = kdml.TensorDesc
SAMPLE = 8  # output rows checked per matrix (first matrices only)


def family_cases(quick: bool) -> list[dict[str, Any]]:
    """--families: square products, a batched one, and the attention products."""
    if quick:
        return [dict(name="96x200x130", kind="plain", m=96, k=200, n=130),
                dict(name="batched 2x3x64^3", kind="plain", m=64, k=64, n=64, batch=(2, 3))]
    return [dict(name="1024^3", kind="plain", m=1024, k=1024, n=1024),
            dict(name="4096^3", kind="plain", m=4096, k=4096, n=4096),
            dict(name="batched 8x128x256^3", kind="plain", m=256, k=256, n=256, batch=(8, 128)),
            *cases(False)[:2], dict(name="1024x768x3072", kind="plain", m=1024, k=768, n=3072),
            dict(name="512^3", kind="plain", m=512, k=512, n=512), dict(name="2048^3", kind="plain", m=2048, k=2048, n=2048),
            dict(name="batched 96x128x64x128", kind="plain", m=128, k=64, n=128, batch=(96,)),
            dict(name="12000x256x1024", kind="plain", m=12000, k=256, n=1024),
            dict(name="12000x1024x256", kind="plain", m=12000, k=1024, n=256),
            dict(name="1024x256x768", kind="plain", m=1024, k=256, n=768),
            dict(name="128x256x768", kind="plain", m=128, k=256, n=768),
            dict(name="128x1024x256", kind="plain", m=128, k=1024, n=256)]


def cases(quick: bool) -> list[dict[str, Any]]:
    b, h, s, d = (2, 4, 64, 32) if quick else (8, 12, 128, 32)
    out = [dict(name=f"attn_scores b{b}h{h}s{s}d{d}", kind="scores", b=b, h=h, s=s, d=d),
           dict(name=f"attn_context b{b}h{h}s{s}d{d}", kind="context", b=b, h=h, s=s, d=d)]
    for m, k, n in ([(96, 200, 130)] if quick else [(1024, 768, 3072), (1024, 1024, 1024), (4096, 4096, 4096)]):
        out.append(dict(name=f"{m}x{k}x{n}", kind="plain", m=m, k=k, n=n))
    return out


class Ours:
    """One case bound on the device: descriptor, operator, tensors, and the logical operands."""

    def __init__(self, dev: kdml.Device, case: dict[str, Any], dt: D, rng: np.random.Generator,
                 kernel: str | None = None, config: CoopTile | None = None) -> None:
        npd = dt.numpy_dtype
        self.kernel = "coopmat" if kernel in ("coopmat", "coopmat-emulated") else "tiled"  # which bound
        if case["kind"] == "plain":
            m, k, n = case["m"], case["k"], case["n"]
            batch = tuple(case.get("batch", ()))
            a = rng.standard_normal((*batch, m, k)).astype(npd)
            b = rng.standard_normal((*batch, k, n)).astype(npd)
            at, bt = dev.tensor(a), dev.tensor(b)
            ad, bd, bview, self.batch = at.desc, bt.desc, bt, int(np.prod(batch))
            self.a, self.b = a, b
            self.m, self.n, self.k = m, n, k
        else:
            bs, h, s, d = case["b"], case["h"], case["s"], case["d"]
            # K and V as the projections store them: (B, S, H, D)
            stored = rng.standard_normal((bs, s, h, d)).astype(npd)
            st = dev.tensor(stored)
            if case["kind"] == "scores":
                a = rng.standard_normal((bs, h, s, d)).astype(npd)
                bd = TD(dt, (bs, h, d, s), (s * h * d, d, 1, h * d))  # K^T over K's storage
                self.b = np.transpose(stored, (0, 2, 3, 1))
                self.m, self.n, self.k = s, s, d
            else:
                a = np.abs(rng.standard_normal((bs, h, s, s))).astype(npd) / s
                bd = TD(dt, (bs, h, s, d), (s * h * d, d, h * d, 1))  # V (B, H, S, D) over its storage
                self.b = np.transpose(stored, (0, 2, 1, 3))
                self.m, self.n, self.k = s, d, s
            at = dev.tensor(a)
            ad, self.a, self.batch = at.desc, a, bs * h
            bview = kdml.Tensor(st.buffer, bd, st.offset)
        od = TD(dt, (*self.a.shape[:-2], self.m, self.n))
        self.out = dev.empty(od)
        desc = kdml.GemmDesc(ad, bd, None, od, alpha=0.125 if case["kind"] == "scores" else 1.0)
        self.op = dev.compile(desc) if kernel is None else compile_gemm(dev, desc, kernel=kernel, config=config)
        self.alpha = 0.125 if case["kind"] == "scores" else 1.0
        self.dev, self.ins = dev, [at, bview, None]

    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def check(self) -> bool:
        self.op.execute(self.ins, [self.out])
        got = self.out.numpy()
        a, b = self.a, np.broadcast_to(self.b, (*self.a.shape[:-2], *self.b.shape[-2:]))
        if a.ndim == 4:
            got, a, b = got[:1, :2], a[:1, :2], b[:1, :2]
        rows = slice(0, SAMPLE) if got.shape[-2] > SAMPLE else slice(None)
        try:
            check(got[..., rows, :], a[..., rows, :], b, None, False, False, self.alpha, 1.0, self.kernel)
            return True
        except AssertionError as e:
            print("    FAIL:", e)
            return False

    def make(self, count: int) -> Any:
        def call() -> None:
            with self.dev.record() as rec:
                for _ in range(count):
                    rec.execute(self.op, self.ins, [self.out])
        return call


def torch_peers(ours: Ours, types: tuple[str, ...] = ("torch_f32", "torch_f16")) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    cuda = torch.device("cuda")
    peers = {}
    for name, tdt in (("torch_f32", torch.float32), ("torch_f16", torch.float16)):
        if name not in types:
            continue
        a = torch.from_numpy(np.ascontiguousarray(ours.a.astype(np.float32))).to(cuda, tdt)
        b = torch.from_numpy(np.ascontiguousarray(ours.b.astype(np.float32))).to(cuda, tdt)
        out = torch.empty((*ours.a.shape[:-2], ours.m, ours.n), dtype=tdt, device=cuda)

        def make(count: int, a: Any = a, b: Any = b, out: Any = out) -> Any:
            def call() -> None:
                for _ in range(count):
                    torch.matmul(a, b, out=out)
                torch.cuda.synchronize()
            return call
        peers[name] = make
    return peers


def families(dev: kdml.Device, args: argparse.Namespace, rng: np.random.Generator) -> tuple[list[dict[str, Any]], bool]:
    """--families: FLOAT16 on the cooperative-matrix family, the tiled kernel and torch fp16, as ratios."""
    coop = "coopmat" if dev.policy.gemm_family == "coopmat" else "coopmat-emulated" if args.emulated else None
    if coop is None:
        print("this device has no cooperative-matrix FLOAT16 family (--emulated times the emulated one)")
        return [], True
    rows, ok = [], True
    print(f"{'case':<28} {'coop variant':<14} {'coop us':>10} {'tiled us':>10} {'torch us':>10} {'coop TFLOPS':>12} "
          f"{'tiled/coop':>11} {'torch/coop':>11}")
    for case in family_cases(args.quick):
        ours = {k: Ours(dev, case, D.FLOAT16, rng, kernel=k) for k in (coop, "tiled")}
        good = all(o.check() for o in ours.values())
        ok &= good
        makes = {"coop": ours[coop].make, "tiled": ours["tiled"].make, **torch_peers(ours[coop], ("torch_f16",))}
        secs = time_interleaved(makes, args.rounds)
        flops = ours[coop].flops()
        torch_s = secs.get("torch_f16")
        row = {"case": case["name"], "type": "FLOAT16", "family": coop, "variant": ours[coop].op.plans[0].variant,
               "correct": good, **{f"{k}_us": v * 1e6 for k, v in secs.items()},
               **{f"{k}_tflops": flops / v / 1e12 for k, v in secs.items()}}
        rows.append(row)
        torch_txt = f"{torch_s * 1e6:10.1f}" if torch_s else f"{'-':>10}"
        ratio = f"{torch_s / secs['coop']:11.2f}" if torch_s else f"{'-':>11}"
        print(f"{case['name']:<28} {row['variant']:<14} {secs['coop'] * 1e6:10.1f} {secs['tiled'] * 1e6:10.1f} {torch_txt} "
              f"{flops / secs['coop'] / 1e12:12.1f} {secs['tiled'] / secs['coop']:11.2f} {ratio}"
              f"{'' if good else '  FAIL'}", flush=True)
    return rows, ok


# --sweep: tiles of the cooperative-matrix family to time against each other (CoopTile(bm, bn, wm, wn, bk))
SWEEP_TILES = [CoopTile(128, 128, 64, 32), CoopTile(128, 128, 64, 32, bk=64, stages=1), CoopTile(128, 128, 32, 64),
               CoopTile(128, 128, 32, 32), CoopTile(128, 128, 32, 32, bk=64, stages=1), CoopTile(128, 64, 32, 32),
               CoopTile(64, 128, 32, 32), CoopTile(64, 64, 32, 32), CoopTile(64, 64, 32, 32, bk=64),
               CoopTile(64, 64, 16, 32), CoopTile(64, 64, 32, 32, group_m=1), CoopTile(32, 32, 16, 16),
               # the convolution's tiles (ops/conv_coop.conv_tiles) and their neighbours
               CoopTile(64, 32, 16, 16, bk=64, stages=1), CoopTile(32, 64, 16, 16, bk=64, stages=1),
               CoopTile(64, 64, 16, 16, bk=64, stages=1), CoopTile(128, 64, 32, 16, bk=64, stages=1)]


def sweep(dev: kdml.Device, args: argparse.Namespace, rng: np.random.Generator) -> tuple[list[dict[str, Any]], bool]:
    """--sweep: every SWEEP_TILES tile that runs here, per --families case, against the tiled kernel (us)."""
    coop = "coopmat" if dev.policy.gemm_family == "coopmat" else "coopmat-emulated"
    sg = subgroup_size(dev)
    rows, ok = [], True
    for case in family_cases(args.quick):
        if args.only and not any(o in case["name"] for o in args.only):
            continue
        base = Ours(dev, case, D.FLOAT16, rng, kernel="tiled")
        makes, names = {"tiled": base.make}, {}
        for tile in SWEEP_TILES:
            if tile.problems(sg, "r", "c", dev.limits, coop != "coopmat"):
                continue
            name = f"{tile.bm}x{tile.bn}/{tile.wm}x{tile.wn}/k{tile.bk}"
            ours = Ours(dev, case, D.FLOAT16, rng, kernel=coop, config=tile)
            good = ours.check()
            ok &= good
            makes[name], names[name] = ours.make, ours
        secs = time_interleaved(makes, args.rounds)
        flops = base.flops()
        best = min((k for k in secs if k != "tiled"), key=secs.__getitem__)
        print(f"{case['name']}: tiled {secs['tiled'] * 1e6:.1f} us; best {best} {secs[best] * 1e6:.1f} us "
              f"({flops / secs[best] / 1e12:.1f} TFLOPS)")
        print("   " + "  ".join(f"{k}{'' if names[k].op.plans[0].spec[8] == 2 else '/s1'}"
                                f"{'' if names[k].op.plans[0].spec[7] == 8 else '/g' + str(names[k].op.plans[0].spec[7])}"
                                f" {v * 1e6:.1f}" for k, v in secs.items() if k != "tiled"), flush=True)
        rows.append({"case": case["name"], **{f"{k}_us": v * 1e6 for k, v in secs.items()}})
    return rows, ok


def block_cases(quick: bool) -> list[dict[str, Any]]:
    """--blocks: float32 products of the encoders (Whisper's at batch 8 x 1,500 frames, hidden 256; the
    small families' at batch 8 x 128), classifiers and a decoding step."""
    if quick:
        return [dict(name="96x200x130", kind="plain", m=96, k=200, n=130),
                dict(name="attn_scores b2h2s300d64", kind="scores", b=2, h=2, s=300, d=64)]
    out = [dict(name="12000x256x1024", kind="plain", m=12000, k=256, n=1024),
            dict(name="12000x1024x256", kind="plain", m=12000, k=1024, n=256),
            dict(name="attn_scores b8h4s1500d64", kind="scores", b=8, h=4, s=1500, d=64),
            dict(name="attn_context b8h4s1500d64", kind="context", b=8, h=4, s=1500, d=64),
            *cases(False), dict(name="2048x2048x2048", kind="plain", m=2048, k=2048, n=2048),
            dict(name="1024x4096x1024", kind="plain", m=1024, k=4096, n=1024),
            dict(name="8192x4096x1024", kind="plain", m=8192, k=4096, n=1024),
            dict(name="4096x1024x4096", kind="plain", m=4096, k=1024, n=4096),
            dict(name="8192x2048x2048", kind="plain", m=8192, k=2048, n=2048),
            # the families' products at batch 8 x 128 (hidden 256, feed-forward 1,024; ViT's 197 tokens),
            # a classifier at batch 8 and 1, a decoding step's
            *(dict(name=f"{m}x{k}x{n}", kind="plain", m=m, k=k, n=n) for m, n, k in (
                (1024, 256, 256), (1024, 1024, 256), (1024, 256, 1024), (1576, 256, 256), (1576, 1024, 256),
                (1576, 256, 1024), (8, 1000, 1024), (1, 1000, 1024), (1, 768, 256),
                # base size (hidden 768, feed-forward 3,072): BERT at batch 8 x 128 and 1 x 128, ViT-B/16 at
                # batch 8 and 1 (197 tokens): QKV, output, FC1, FC2
                *((m, n, k) for m in (1024, 1576, 128, 197) for n, k in ((2304, 768), (768, 768), (3072, 768),
                                                                          (768, 3072)))))]
    return list({c["name"]: c for c in out}.values())  # (BERT-base's 1024 x 768 x 3072 is also one of cases())


def blocks(dev: kdml.Device, args: argparse.Namespace, rng: np.random.Generator) -> tuple[list[dict[str, Any]], bool]:
    """--blocks: the float32 tiled kernel with each register block forced (contract.GEMM_TILES), and torch fp32."""
    from kompute_dml.ops import gemm
    from kompute_dml.ops.contract import GEMM_TILES as blocks
    rows, ok = [], True
    choose = gemm.gemm_block
    print(f"{'case':<28} {'policy':<12} {'policy us':>10} " + " ".join(f"{f'b{b} us':>10}" for b in blocks)
          + f" {'torch us':>10} {'best TFLOPS':>12} {'torch/best':>11}")
    for case in block_cases(args.quick):
        if args.only and not any(w in case["name"] for w in args.only):
            continue
        ours = {"policy": Ours(dev, case, D.FLOAT32, rng, kernel="tiled")}
        for blk in blocks:
            gemm.gemm_block = lambda *_a, blk=blk: blk  # type: ignore[assignment]
            try:
                ours[f"b{blk}"] = Ours(dev, case, D.FLOAT32, rng, kernel="tiled")
            finally:
                gemm.gemm_block = choose  # type: ignore[assignment]
        good = all(o.check() for o in ours.values())
        ok &= good
        makes = {k: o.make for k, o in ours.items() if k != "policy"}
        secs = time_interleaved({**makes, "policy": ours["policy"].make, **torch_peers(ours["b4"], ("torch_f32",))},
                                args.rounds)
        flops = ours["b4"].flops()
        best = min(makes, key=secs.__getitem__)
        torch_s = secs.get("torch_f32")
        rows.append({"case": case["name"], "policy": ours["policy"].op.plans[0].variant, "correct": good,
                     **{f"{k}_us": v * 1e6 for k, v in secs.items()}})
        print(f"{case['name']:<28} {ours['policy'].op.plans[0].variant:<12} {secs['policy'] * 1e6:10.1f} "
              + " ".join(f"{secs[f'b{b}'] * 1e6:10.1f}" for b in blocks)
              + (f" {torch_s * 1e6:10.1f}" if torch_s else f" {'-':>10}")
              + f" {flops / secs[best] / 1e12:12.1f}" + (f" {torch_s / secs[best]:11.2f}" if torch_s else f" {'-':>11}")
              + ("" if good else "  FAIL"), flush=True)
    return rows, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--families", action="store_true", help="FLOAT16: cooperative matrices vs tiled vs torch fp16")
    ap.add_argument("--emulated", action="store_true", help="with --families: the emulated family where no tensor cores")
    ap.add_argument("--sweep", action="store_true", help="the --families cases on every tile of SWEEP_TILES")
    ap.add_argument("--only", nargs="*", default=[], help="with --sweep or --blocks: the cases whose names contain one of these")
    ap.add_argument("--blocks", action="store_true", help="FLOAT32: the tiled kernel's register blocks vs torch fp32")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    dev = kdml.Device()
    print(f"device: {dev.name}")
    if args.families or args.sweep or args.blocks:
        rows, ok = (sweep if args.sweep else blocks if args.blocks else families)(dev, args, rng)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        dev.close()
        return 0 if ok else 1
    rows, ok = [], True
    for case in cases(args.quick):
        for dt in (D.FLOAT32, D.FLOAT16):
            ours = Ours(dev, case, dt, rng)
            good = ours.check()
            ok &= good
            makes = {"ours": ours.make, **torch_peers(ours)}
            secs = time_interleaved(makes, args.rounds)
            row = {"case": case["name"], "type": dt.name, "variant": ours.op.plans[0].variant, "correct": good,
                   **{f"{k}_us": v * 1e6 for k, v in secs.items()},
                   **{f"{k}_gflops": ours.flops() / v / 1e9 for k, v in secs.items()}}
            rows.append(row)
            peers = "  ".join(f"{k} {ours.flops() / v / 1e9:9.1f} GFLOPS ({v / secs['ours']:.2f}x)"
                              for k, v in secs.items() if k != "ours")
            print(f"{case['name']:<28} {dt.name:<8} {ours.op.plans[0].variant:<12} "
                  f"{'OK  ' if good else 'FAIL'} ours {secs['ours'] * 1e6:9.1f} us {ours.flops() / secs['ours'] / 1e9:9.1f} "
                  f"GFLOPS  {peers}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    dev.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
