"""Two GPUs from two threads of one process, a run's output copies made inside kp's wait (the
GIL taken back once per run: transfers.early_copies, kp's Sequence.kdml_wait_copy) or after it
(taken back twice: the ablation, early_copies swapped for a function returning None), in the
order in the wait, after the wait, in the wait, each against GPU 0 alone plus GPU 1 alone
(kompute_dml.bench.scaling's workers and clock warm-up).

    python -m benchmarks.wait_copy_ablation [--shape 8x128] [--seconds 4]
"""

from __future__ import annotations

import argparse


def main() -> None:
    from kompute_dml.bench import scaling
    from kompute_dml.onnx_backend import device_graph, transfers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8x128")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    b, s = map(int, args.shape.split("x"))
    alone1 = None
    for mode in ("in the wait", "after the wait", "in the wait"):
        device_graph.early_copies = transfers.early_copies if mode == "in the wait" else (lambda plan: None)
        one = scaling.threads("bert256", [0], b, s, args.seconds)
        two = scaling.threads("bert256", [0, 1], b, s, args.seconds)
        if alone1 is None:
            alone1 = scaling.threads("bert256", [1], b, s, args.seconds)[0]
        print(f"{mode:<16} GPU0 {one[0]:.0f} seq/s ({one[1]:.0f} us CPU/run); two threads {two[0]:.0f} "
              f"({two[1]:.0f} us CPU/run) = {two[0] / (one[0] + alone1):.3f} of GPU0 + GPU1 alone ({alone1:.0f}); "
              f"x GPU0 {two[0] / one[0]:.2f}; clocks {two[2]}", flush=True)
    device_graph.early_copies = transfers.early_copies


if __name__ == "__main__":
    main()
