"""`kompute-dml generate STEP.onnx --prompt 5,6,7 [--prompt ...] [--new 32] [--eos ID]`.

Greedy generation through a decoder step model (onnx_backend/generation.py: the cache on the
device, at one capacity where the model takes position_ids): each prompt is a row of the batch
(rows of several lengths are left-padded), each step's new tokens print as the device gives them,
then one line of timing. User errors (a missing or unreadable file, a model that is no decoder
step, bad token ids or options, a device this machine lacks) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .common import HELP, DeviceArgError, parse_device


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kompute-dml generate", description=__doc__.split("\n\n")[1].replace("\n", " "))
    ap.add_argument("model", help="the decoder step's .onnx file: (input_ids, attention_mask[, position_ids], "
                                  "past...) -> (logits, present...)")
    ap.add_argument("--prompt", "-p", action="append", required=True, metavar="IDS",
                    help="comma-separated token ids; repeat for more rows of the batch")
    ap.add_argument("--new", type=int, default=32, help="new tokens per row (default 32)")
    ap.add_argument("--eos", type=int, default=None, help="a token id that ends a row (and, on every row, the run)")
    ap.add_argument("--growing", action="store_true",
                    help="grow the cache by a row per step (its pasts padded to a bucket where the model allows)")
    ap.add_argument("--device", default="CPU", help=HELP)
    return ap


def _prompts(texts: list[str]) -> list[list[int]]:
    """Each --prompt as its token ids."""
    rows = []
    for text in texts:
        try:
            rows.append([int(t) for t in text.replace(" ", "").split(",") if t])
        except ValueError:
            raise ValueError(f"--prompt {text!r}: comma-separated integer token ids") from None
        if not rows[-1]:
            raise ValueError(f"--prompt {text!r}: no token ids")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from ..core.errors import DMLError
    from ..onnx_backend import Backend, generation

    def fail(message: str) -> int:
        print(f"kompute-dml generate: error: {message}", file=sys.stderr)
        return 2

    if not Path(args.model).is_file():
        return fail(f"no such model file: {args.model}")
    try:
        ids, mask = generation.left_pad(_prompts(args.prompt))
        index = parse_device(args.device)
        device = "CPU" if str(args.device).strip().upper() in ("CPU", "CPU:0") else f"VULKAN:{index}"
        rep = Backend.prepare(args.model, device)
        steps = generation.stream(rep, ids, args.new, prompt_mask=None if mask.all() else mask, eos=args.eos,
                                  static=False if args.growing else None)
    except (ValueError, DeviceArgError, DMLError) as e:  # (InvalidArgumentError is a DMLError and a ValueError)
        return fail(str(e))
    times, t0 = [], time.perf_counter()
    for tokens in steps:
        times.append(time.perf_counter() - t0)
        print(" ".join(str(int(t)) for t in tokens), flush=True)
        t0 = time.perf_counter()
    per_step = sum(times[1:]) / max(1, len(times) - 1)
    print(f"{len(times)} step(s) of {ids.shape[0]} row(s): prompt {times[0] * 1e3:.2f} ms, then {per_step * 1e3:.2f} ms "
          f"per step ({ids.shape[0] / per_step if len(times) > 1 else 0:.1f} tokens/s) on {rep.device.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
