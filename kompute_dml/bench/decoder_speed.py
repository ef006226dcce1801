"""Greedy generation with the key/value cache (kompute_dml/bench/decoders.py: GPT-2, Llama,
random weights): the prompt's ms and the new tokens per second of ours (the cache on the device at
one capacity, onnx_backend/generation.py: a first generation, which plans the prompt and the step,
the same generation again, a cache that grows by a row per step, its pasts padded to their
bucket (onnx_backend/cache_padding.py), and the same unpadded: a plan per step), the same loop as
a user's onnxruntime session with our execution provider (host arrays), onnxruntime CPU (the
same step model, its cache in host arrays) and PyTorch CUDA eager float32 (and float16 on CUDA)
with its own cache; the tokens of all compared. Tokens/s are
the new tokens over their steps' whole time (a first generation's plans included).

    python -m kompute_dml.bench.decoder_speed [--size small] [--prompt 128] [--new 32] [--batch 1] [--variant fp16]
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Any

import numpy as np

from . import decoders, gpu_clock


def _per_token(times: list[float]) -> float:
    return sum(times[1:]) / len(times[1:])


def _prompt_ms(run: Any) -> float:
    """The median of 10 prompt steps (a generation of one token) after the GPU's clock is held up."""
    gpu_clock.hold(run, 1.0)
    walls = []
    for _ in range(10):
        t0 = time.perf_counter()
        run()
        walls.append(time.perf_counter() - t0)
    return 1e3 * sorted(walls)[len(walls) // 2]


def _line(who: str, times: list[float], batch: int) -> str:
    """The prompt's ms and the steps' rate: tokens/s over the batch's rows, ms per step."""
    step = _per_token(times)
    return f"  {who:12} prompt {times[0] * 1e3:8.2f} ms   {batch / step:8.1f} tokens/s ({step * 1e3:.2f} ms per step)"


def _ep_session(path: str, device_memory: bool = False) -> Any:
    """An onnxruntime session of the model with our execution provider, or None where it is not built."""
    try:
        import kompute_dml.ort as kort

        kort.get_library_path()
    except (ImportError, FileNotFoundError) as e:
        print(f"  (no execution provider row: {e})")
        return None
    import onnxruntime as ort

    return ort.InferenceSession(path, sess_options=kort.session_options(device_memory=device_memory))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--decoders", default="gpt2,llama")
    ap.add_argument("--variant", default="fp32", choices=decoders.VARIANTS,
                    help="the step model's form for ours and onnxruntime (torch runs the float32 module, and its float16 copy)")
    ap.add_argument("--node-by-node", action="store_true", help="also time ours without whole-graph plans")
    args = ap.parse_args(argv)
    import onnxruntime as ort
    import torch

    from kompute_dml.onnx_backend import CPU, Backend, generation

    for name in args.decoders.split(","):
        dec = decoders.build(name, args.size, variant=args.variant)
        rep = Backend.prepare(str(dec.path), "CPU")
        cpu = sorted({p.op_type for p in rep.placement if p.target == CPU})
        prompt = np.random.default_rng(0).integers(1, decoders.VOCAB, (args.batch, args.prompt))
        # the process's first steps (its pipelines) at another capacity: the timed generation still
        # plans its own prompt and step
        decoders.greedy(rep, dec, prompt[:, :max(1, args.prompt // 2)], 3)
        ours, t_ours = decoders.greedy(rep, dec, prompt, args.new + 1)
        warm, t_warm = decoders.greedy(rep, dec, prompt, args.new + 1)
        near = max(1, args.prompt - 8)  # a new prompt length in the same bucket (generation.CAPACITY_ROWS)
        near_tokens, t_near = decoders.greedy(rep, dec, prompt[:, :near], args.new + 1)
        decoders.greedy(rep, dec, prompt, 3, static=False)  # first plans of the first lengths
        # a cache that grows by a row per step: its pasts padded to their bucket (cache_padding.py) and,
        # with that off, a plan per step
        grow, t_grow = decoders.greedy(rep, dec, prompt, args.new + 1, static=False)
        # a prompt of a new length in a bucket seen (the prompt's padding checked at another length first)
        decoders.greedy(rep, dec, prompt[:, :near + 1], 2, static=False)
        grow_near, t_grow_near = decoders.greedy(rep, dec, prompt[:, :near], args.new + 1, static=False)
        rep.state.cache_padding.enabled = False
        unpadded, t_unpadded = decoders.greedy(rep, dec, prompt, args.new + 1, static=False)
        t_new_length = decoders.greedy(rep, dec, prompt[:, :near - 1], 1, static=False)[1][0]  # its own plan
        rep.state.cache_padding.enabled = True
        sess = ort.InferenceSession(str(dec.path), providers=["CPUExecutionProvider"])
        theirs, t_ort = decoders.ort_greedy(sess, dec, prompt, args.new + 1)
        ep = _ep_session(str(dec.path))  # the same loop through our execution provider: host arrays in and out
        if ep is not None:
            decoders.ort_greedy(ep, dec, prompt, 3)
            ep_tokens, t_ep = decoders.ort_greedy(ep, dec, prompt, args.new + 1)
            # and with IO binding: the device-memory provider keeps the presents on the device
            ep_io = _ep_session(str(dec.path), device_memory=True)
            decoders.ort_greedy_io(ep_io, dec, prompt, 3)
            io_tokens, t_io = decoders.ort_greedy_io(ep_io, dec, prompt, args.new + 1)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        # torch's GPU clock up after onnxruntime's CPU runs left the GPU idle (gpu_clock.py), as ours is held
        gpu_clock.hold(partial(decoders.torch_greedy, dec, prompt, 3, dev), 1.0)
        ref, t_torch = decoders.torch_greedy(dec, prompt, args.new + 1, dev)
        half: list[Any] = []
        if dev == "cuda":  # the fp16 peer with its cache (its tokens may differ: float16 logits)
            gpu_clock.hold(partial(decoders.torch_greedy, dec, prompt, 3, dev, half=True), 1.0)
            half = list(decoders.torch_greedy(dec, prompt, args.new + 1, dev, half=True))
        print(f"{name} ({args.size}, {args.variant}), batch {args.batch}, prompt {args.prompt}, {args.new} new tokens; "
              f"CPU nodes: {', '.join(cpu) or 'none'}; tokens equal torch: {ours == ref}, onnxruntime: {theirs == ref}")
        print(_line("kompute_dml", t_ours, args.batch) + "  (first generation: the prompt's plan and the step's)")
        print(_line("kompute_dml", t_warm, args.batch) + f"  (again: plans kept; tokens equal: {warm == ours})")
        print(_line("kompute_dml", t_near, args.batch) + f"  (a {near}-token prompt after them: its bucket's plans)")
        print(_line("kompute_dml", t_grow, args.batch) + f"  (a growing cache, padded to its bucket; tokens equal: "
                                                      f"{grow == ours})")
        print(_line("kompute_dml", t_grow_near, args.batch) + f"  (a growing cache, a {near}-token prompt: its "
                                                           f"bucket's plans; tokens equal: {grow_near == near_tokens})")
        print(_line("kompute_dml", t_unpadded, args.batch) + f"  (a growing cache's first generation unpadded: a plan "
                                                          f"per step; tokens equal: {unpadded == ours}; a "
                                                          f"{near - 1}-token prompt unpadded: {t_new_length * 1e3:.2f} ms)")
        if ep is not None:
            print(_line("ours via EP", t_ep, args.batch) + f"  (onnxruntime with our execution provider, the "
                                                        f"cache in host arrays; tokens equal: {ep_tokens == ours})")
            print(_line("EP, IO bound", t_io, args.batch) + f"  (its device-memory variant, the presents bound on "
                                                         f"the device; tokens equal: {io_tokens == ours})")
        print(_line("onnxruntime", t_ort, args.batch))
        print(_line(f"torch {dev}", t_torch, args.batch))
        if half:
            print(_line("torch fp16", half[1], args.batch) + f"  (tokens equal torch fp32: {half[0] == ref})")
        if args.node_by_node:
            rep.state.node_by_node = True
            decoders.greedy(rep, dec, prompt, 3)
            nbn, t_nbn = decoders.greedy(rep, dec, prompt, args.new + 1)
            rep.state.node_by_node = False
            print(_line("node by node", t_nbn, args.batch) + f"  (tokens equal torch: {nbn == ref})")
        cap = generation.greedy(rep, prompt, args.new + 1).capacity
        kept = _prompt_ms(partial(generation.greedy, rep, prompt, 1, capacity=cap))
        peer = _prompt_ms(partial(decoders.torch_greedy, dec, prompt, 1, dev))
        print(f"  prompt, plans kept (median of 10, the GPU's clock held): ours {kept:.2f} ms, torch {dev} {peer:.2f} ms, "
              f"onnxruntime {_prompt_ms(partial(decoders.ort_greedy, sess, dec, prompt, 1)):.2f} ms")
        rows = [("first", t_ours), ("again", t_warm), ("growing", t_grow), ("unpadded", t_unpadded)]
        for label, t in rows + ([("via EP", t_ep), ("EP, IO bound", t_io)] if ep is not None else []):
            print(f"  {label}: ours / torch tokens/s: {_per_token(t_torch) / _per_token(t):.2f}; ours / onnxruntime: "
                  f"{_per_token(t_ort) / _per_token(t):.2f}; prompt torch/ours {t_torch[0] / t[0]:.2f}"
                  + (f"; ours / torch fp16 tokens/s: {_per_token(half[1]) / _per_token(t):.2f}" if half else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
