"""MULTIHEAD_ATTENTION (ops/attention.py, the device policy's kernel) against PyTorch CUDA's
scaled_dot_product_attention in the same process where torch.cuda is available, else against
numpy (float64 einsum, one call), and against kompute_dml's own unfused chain (GEMM -> softmax ->
GEMM, the exported graphs' path where the attention is not fused: the scale as GEMM's alpha) with --unfused.

    python -m benchmarks.bench_attention [--json FILE] [--rounds 5] [--n 20] [--rows WORDS] [--unfused]
    python -m benchmarks.bench_attention --small [--kernel rows|tiled]     # lavapipe

Ours runs N executions of one compiled operator in one `with dev.record() as rec:`; torch runs N
launches, then synchronizes; a sample is the slope (t(N) - t(1)) / (N - 1) (timing.slopes) and the
figure the median over rounds, contenders alternating. TFLOP/s = 2 x batch x heads x queries x keys
x (head size + value head size) / time (causal rows count every pair, as torch's figure would).
ratio = theirs / ours (> 1: ours is faster). Each row's output is checked against float64 numpy
where that is cheap (max |error| printed), and the kernel's variant named.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import slopes
from kompute_dml.runtime.attention_policy import ATTENTION_KERNELS

DT = kdml.DataType


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    b: int
    h: int
    s: int  # query rows
    t: int  # new key rows
    d: int
    dt: DT
    kv_heads: int = 0  # 0: h
    past: int = 0
    causal: bool = False


ROWS = [
    Row("BERT-base 8x128 f32", 8, 12, 128, 128, 64, DT.FLOAT32),
    Row("BERT-base 8x128 f16", 8, 12, 128, 128, 64, DT.FLOAT16),
    Row("BERT-base 64x256 f16", 64, 12, 256, 256, 64, DT.FLOAT16),
    Row("long 1x4096 h16 f16", 1, 16, 4096, 4096, 64, DT.FLOAT16),
    Row("GPT-2 causal 4x512 f16", 4, 12, 512, 512, 64, DT.FLOAT16, causal=True),
    Row("Llama GQA prompt 1x512 d128 f16", 1, 32, 512, 512, 128, DT.FLOAT16, kv_heads=8, causal=True),
    Row("Llama GQA decode 8x1 past 1024 d128 f16", 8, 32, 1, 1, 128, DT.FLOAT16, kv_heads=8, past=1024),
    Row("decode 1x1 past 2048 d64 f32", 1, 12, 1, 1, 64, DT.FLOAT32, past=2048),
    Row("Llama GQA decode 1x1 past 1024 d128 f16", 1, 32, 1, 1, 128, DT.FLOAT16, kv_heads=8, past=1024),
    Row("decode 8x1 past 512 d64 f16", 8, 12, 1, 1, 64, DT.FLOAT16, past=512),
    Row("decode 32x1 past 2048 d64 f16", 32, 12, 1, 1, 64, DT.FLOAT16, past=2048),
    Row("ViT-B 32x197 f32", 32, 12, 197, 197, 64, DT.FLOAT32),
    Row("d256 2x256 f16", 2, 8, 256, 256, 256, DT.FLOAT16),
    Row("Whisper-small 8x1500 h4 f16", 8, 4, 1500, 1500, 64, DT.FLOAT16),
    Row("Whisper-small 8x1500 h4 f32", 8, 4, 1500, 1500, 64, DT.FLOAT32),
    Row("BERT-base 64x256 f32", 64, 12, 256, 256, 64, DT.FLOAT32),
    Row("Whisper-small 1x1500 h4 f32", 1, 4, 1500, 1500, 64, DT.FLOAT32),
    Row("GPT-2 causal 4x512 f32", 4, 12, 512, 512, 64, DT.FLOAT32, causal=True),
    Row("ViT-B 32x197 f16", 32, 12, 197, 197, 64, DT.FLOAT16),
]
SMALL = [
    Row("tiny 2x16 h4 d16 f32", 2, 4, 16, 16, 16, DT.FLOAT32),
    Row("2x128 h4 d16 f32", 2, 4, 128, 128, 16, DT.FLOAT32),
    Row("1x256 h4 d64 f32", 1, 4, 256, 256, 64, DT.FLOAT32),
    Row("causal 1x128 h12 d64 f16", 1, 12, 128, 128, 64, DT.FLOAT16, causal=True),
    Row("GQA decode 2x1 past 256 d64 f32", 2, 8, 1, 1, 64, DT.FLOAT32, kv_heads=2, past=256),
]


def reference(q, k, v, group: int, causal: bool) -> np.ndarray:
    """float64 attention over [B, H, S, D] query and [B, Hkv, T, D] keys / values."""
    k, v = np.repeat(k, group, axis=1).astype(np.float64), np.repeat(v, group, axis=1).astype(np.float64)
    s = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64), k) / np.sqrt(q.shape[-1])
    if causal:
        sq, tk = s.shape[-2:]
        s = np.where(np.arange(tk)[None, :] <= np.arange(sq)[:, None] + tk - sq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhst,bhtd->bhsd", p / p.sum(-1, keepdims=True), v)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--unfused", action="store_true", help="also time kompute_dml's GEMM -> softmax -> GEMM chain")
    ap.add_argument("--kernel", choices=ATTENTION_KERNELS, help="force the attention kernel (else the device policy's)")
    ap.add_argument("--allow-half-precision", action="store_true",
                    help="compile with allow_half_precision (FLOAT16 on the tensor cores: float16 weights)")
    ap.add_argument("--rows", default="", help="keep the rows whose name contains one of these comma-separated words")
    args = ap.parse_args()
    keep = [w for w in args.rows.split(",") if w]
    torch = None if args.small else cuda_torch()
    dev = kdml.Device()
    if args.kernel:
        dev.policy = dataclasses.replace(dev.policy, attention_kernel=args.kernel)
    print(f"device: {dev.name} (attention kernel: {dev.policy.attention_kernel}); torch: "
          f"{torch.cuda.get_device_name() if torch else 'none (numpy float64, one call)'}")
    rng = np.random.default_rng(0)
    results = []
    for r in (SMALL if args.small else ROWS):
        if keep and not any(w in r.name for w in keep):
            continue
        hkv = r.kv_heads or r.h
        npd = r.dt.numpy_dtype
        q = rng.standard_normal((r.b, r.h, r.s, r.d)).astype(npd)
        k = rng.standard_normal((r.b, hkv, r.past + r.t, r.d)).astype(npd)
        v = rng.standard_normal((r.b, hkv, r.past + r.t, r.d)).astype(npd)
        bshd = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(x.shape[0], x.shape[2], -1)  # noqa: E731
        qt, kt, vt = dev.tensor(bshd(q)), dev.tensor(bshd(k[:, :, r.past:])), dev.tensor(bshd(v[:, :, r.past:]))
        pk = dev.tensor(np.ascontiguousarray(k[:, :, :r.past])) if r.past else None
        pv = dev.tensor(np.ascontiguousarray(v[:, :, :r.past])) if r.past else None
        out = dev.empty(kdml.TensorDesc(r.dt, (r.b, r.s, r.h * r.d)))
        ins = [qt, kt, vt, None, None, None, None, None, None, pk, pv]
        fields = dict(query_tensor=qt.desc, key_tensor=kt.desc, value_tensor=vt.desc, stacked_query_key_tensor=None,
                      stacked_key_value_tensor=None, stacked_query_key_value_tensor=None, bias_tensor=None,
                      mask_tensor=None, relative_position_bias_tensor=None,
                      past_key_tensor=None if pk is None else pk.desc, past_value_tensor=None if pv is None else pv.desc,
                      output_tensor=out.desc, output_present_key_tensor=None, output_present_value_tensor=None,
                      scale=1 / np.sqrt(r.d), mask_filter_value=-10000.0, causal=r.causal)
        if hkv != r.h:
            op = dev.compile(kdml.MultiheadAttention1Desc(**fields, past_sequence_lengths_tensor=None,
                                                          query_head_count=r.h, key_value_head_count=hkv),
                             allow_half_precision=args.allow_half_precision)
            ins.append(None)
        else:
            op = dev.compile(kdml.MultiheadAttentionDesc(**fields, head_count=r.h),
                             allow_half_precision=args.allow_half_precision)
        op.execute(ins, [out, None, None])

        def ours(n: int, op=op, ins=ins, outs=(out, None, None)) -> None:
            with dev.record() as rec:
                for _ in range(n):
                    rec.execute(op, ins, list(outs))

        err = None
        if r.b * r.h * r.s * (r.past + r.t) * r.d <= 1 << 27:
            want = reference(q, k, v, r.h // hkv, r.causal).transpose(0, 2, 1, 3).reshape(r.b, r.s, -1)
            err = float(np.abs(out.numpy().astype(np.float64) - want).max())
        contenders = {"ours": ours}
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x).cuda() for x in (q, k, v))
            sdpa = torch.nn.functional.scaled_dot_product_attention
            extra = {"enable_gqa": True} if hkv != r.h else {}

            def theirs(n: int, a=(tq, tk, tv), extra=extra, causal=r.causal and r.s > 1, sdpa=sdpa) -> None:
                for _ in range(n):
                    sdpa(*a, is_causal=causal, **extra)
                torch.cuda.synchronize()

            contenders["torch"] = theirs
        if args.unfused and hkv == r.h and not r.past and not r.causal:
            qh = dev.tensor(q)
            kh = dev.tensor(np.ascontiguousarray(k.transpose(0, 1, 3, 2)))
            vh = dev.tensor(v)
            scale = float(1 / np.sqrt(r.d))

            def unfused(n: int, qh=qh, kh=kh, vh=vh, scale=scale) -> None:
                with dev.capture() as rec:  # the helpers' executions, recorded (nothing runs yet)
                    for _ in range(n):  # the exported chain as the ONNX backend runs it: MatMul -> Mul as GEMM's alpha
                        kdml.matmul(kdml.softmax(kdml.gemm(qh, kh, alpha=scale)), vh)
                rec.submit()

            contenders["unfused"] = unfused
        med = slopes(contenders, args.rounds, args.n)
        flops = 2 * r.b * r.h * r.s * (r.past + r.t) * 2 * r.d
        row = {"name": r.name, "variant": op.variants[0], "max_abs_error": err, "ours_us": med["ours"] * 1e6,
               "ours_TFLOPs": flops / med["ours"] / 1e12}
        for who in ("torch", "unfused"):
            if who in med:
                row.update({f"{who}_us": med[who] * 1e6, f"{who}_ratio": med[who] / med["ours"]})
        if torch is None and err is not None:  # numpy's one call, for scale
            t0 = time.perf_counter()
            reference(q, k, v, r.h // hkv, r.causal)
            row.update(numpy_us=(time.perf_counter() - t0) * 1e6, numpy_ratio=(time.perf_counter() - t0) / med["ours"])
        results.append(row)
        peers = " | ".join(f"{w} {row[f'{w}_us']:10.1f} us ratio {row[f'{w}_ratio']:6.2f}"
                           for w in ("torch", "unfused", "numpy") if f"{w}_us" in row)
        print(f"{r.name:42s} {row['variant']:14s} ours {row['ours_us']:10.1f} us {row['ours_TFLOPs']:7.3f} TFLOP/s"
              + (f" | {peers}" if peers else "") + (f" | max err {err:.2e}" if err is not None else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": dev.name, "kernel": dev.policy.attention_kernel,
                                               "rows": results}, indent=1))
    dev.close()


if __name__ == "__main__":
    main()
