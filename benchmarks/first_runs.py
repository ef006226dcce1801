"""First runs of new input shapes through the ONNX backend, each in fresh processes: how
reliably a new sequence length's first run stays under a budget (issues 22 and 23: 50 ms),
and what a setting changes, processes of each setting interleaved so that a host's drift
reaches every setting alike.

One untimed process per model comes first (it fills the pipeline cache on disk). Each
process runs what encoder_speed.py runs before its timings (prepare, one run at 1 x 5),
then per shape its first run and `--steady` more (median), ours only, and what parts of the
first run took (PARTS: waits for running heads, allocations (requests: a plan's buffers are
made on kp's threads, a wait for one falls in the encoding), flushes, encoding, submissions,
recording heads, garbage collections) and how many pipelines it created; every first run over
the budget is listed with its parts after the summary. Settings are environment assignments
(`--settings "KDML_PLAN_FLUSH_MS=0;KDML_PLAN_FLUSH_MS=2"`, or `PYTHONPATH=<tree>` to compare two
trees); the order of settings turns every round.

    python -m benchmarks.first_runs --models minilm --processes 4

`--cold`: no untimed process, and each process gets an empty pipeline cache on disk of its own
(KDML_CACHE_DIR), as on a machine's first run: its first runs compile the pipelines (the NVIDIA
driver keeps a shader cache of its own: `--settings ";__GL_SHADER_DISK_CACHE=0"` compares it on
and off). `--late S`: after the steady runs, S seconds idle and `--steady` runs more (their
median: the `late` column), to tell a slowdown that passes from one that stays. The `MHz`
column is the GPU's SM clock just before the first run (nvidia-smi, where found): after seconds
of host work (a compile) the H100 runs at 345-540 MHz until a second or more of sustained work
raises it (kompute_dml/bench/gpu_clock.py), which is what made MiniLM 3x slower in steady state
in a process that had compiled its pipelines. The `new` column counts the
pipelines all of a row's first runs created (none where the policy prepared them ahead).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from kompute_dml.bench import encoder_speed, gpu_clock
from kompute_dml.bench.timing import Stopwatch, clocked, median, once, series

# the parts of a first run each child times (child's spots), as the summary lists them
PARTS = ("waits", "alloc", "flush", "encode", "submit", "own", "gc")
CHILD = [sys.executable, "-m", "benchmarks.first_runs", "--child"]


def _timed(owner: type, name: str, spent: dict[str, float], key: str) -> None:
    """Add the time every call of owner.name takes to spent[key]."""
    setattr(owner, name, clocked(getattr(owner, name), lambda s: spent.__setitem__(key, spent[key] + s)))


def child(model_name: str, shapes: list[tuple[int, int]], steady: int, late: float) -> None:
    from kompute_dml.device import recording
    from kompute_dml.onnx_backend import Backend
    from kompute_dml.runtime import engine, inflight, replay

    # inside each first run: waits for running heads, allocations, and the flushes' parts
    spots = {"waits": (inflight.InFlight, "finish"), "alloc": (engine.Engine, "allocate"),
             "flush": (recording.Recording, "flush"), "encode": (engine.Engine, "_encode"),
             "submit": (inflight.InFlight, "start"), "own": (replay.Replay, "own")}
    spent = dict.fromkeys((*spots, "gc"), 0.0)
    for key, (owner, name) in spots.items():
        _timed(owner, name, spent, key)
    watch = Stopwatch()

    def on_gc(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            watch.start()
        else:
            spent["gc"] += watch.stop()

    gc.callbacks.append(on_gc)
    model = encoder_speed.load_model(model_name)
    rep = Backend.prepare(str(model.path), "CPU")
    rep.run(encoder_speed.bert_models.random_feeds(1, 5, model.vocab, np.random.default_rng(0)))
    for b, s in shapes:
        feeds = encoder_speed.bert_models.random_feeds(b, s, model.vocab, np.random.default_rng([0, b, s]))
        mhz = gpu_clock.sm_clock_mhz()
        spent.update(dict.fromkeys(spent, 0.0))
        created = rep.device.engine.stats()["pipelines_created"]
        first = once(lambda f=feeds: rep.run(f)) * 1e3
        created = rep.device.engine.stats()["pipelines_created"] - created
        parts = {k: v * 1e3 for k, v in spent.items()}
        plan = rep.last_run.plan_seconds * 1e3
        times = series(lambda f=feeds: rep.run(f), steady)
        late_times = []
        if late > 0 and steady:
            time.sleep(late)
            late_times = series(lambda f=feeds: rep.run(f), steady)
        print(json.dumps({"shape": f"{b}x{s}", "first": first, "plan": plan, "mhz": mhz, "created": created, **parts,
                          "steady": median(times) * 1e3 if times else None,
                          "late": median(late_times) * 1e3 if late_times else None}), flush=True)
    rep.release()


def _median_or_na(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="minilm,bert256")
    ap.add_argument("--shapes", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("1x16,8x128,64x256"))
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per model and setting")
    ap.add_argument("--steady", type=int, default=5, help="runs after each first run (their median is shown)")
    ap.add_argument("--settings", default="", help="';'-separated settings, each 'NAME=value[,NAME=value]' ('' = as is)")
    ap.add_argument("--budget", type=float, default=50.0, help="first-run budget in ms (counted per shape)")
    ap.add_argument("--cold", action="store_true",
                    help="no untimed process; each process an empty KDML_CACHE_DIR of its own (compiles)")
    ap.add_argument("--late", type=float, default=0.0, metavar="S",
                    help="after the steady runs, S seconds idle and as many runs again (the late column)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.shapes, args.steady, args.late)
        return
    settings = args.settings.split(";")
    shape_arg = ",".join(f"{b}x{s}" for b, s in args.shapes)
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for model in args.models.split(","):
        if not args.cold:  # one untimed process first: what a fresh machine compiles goes to the disk cache
            subprocess.run([*CHILD, model, "--shapes", shape_arg, "--steady", "0"],
                           capture_output=True, check=True)
        for r in range(args.processes):
            # the order turns every round (A B B A ...): on the H100 host the first process of
            # a round ran up to 10 ms faster than the second, whichever tree or setting it had
            for setting in (settings if r % 2 == 0 else settings[::-1]):
                env = dict(os.environ)
                env.update(kv.split("=", 1) for kv in setting.split(",") if kv)
                with tempfile.TemporaryDirectory(prefix="kdml-cold-") if args.cold else contextlib.nullcontext() as empty:
                    if empty is not None:
                        env["KDML_CACHE_DIR"] = empty
                    out = subprocess.run([*CHILD, model, "--shapes", shape_arg,
                                          "--steady", str(args.steady), "--late", str(args.late)],
                                         env=env, capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"{model} [{setting}] failed:\n{out.stderr[-3000:]}")
                for line in out.stdout.splitlines():
                    if line.startswith("{"):
                        r = json.loads(line)
                        results.setdefault((model, r["shape"], setting or "as is"), []).append(r)
    print(f"{'model':8} {'shape':7} {'setting':28} first ms: median [min-max] (<= {args.budget:g} ms)  planning  steady  late  MHz"
          "  new  (medians within the first run: " + ", ".join(PARTS) + ")")
    for (model, shape, setting), rs in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        firsts = [r["first"] for r in rs]
        within = sum(f <= args.budget for f in firsts)
        steady = [r["steady"] for r in rs if r["steady"] is not None]
        late = [r["late"] for r in rs if r.get("late") is not None]
        print(f"{model:8} {shape:7} {setting:28} {statistics.median(firsts):6.1f} [{min(firsts):.1f}-{max(firsts):.1f}]"
              f" ({within}/{len(firsts)})  {statistics.median(r['plan'] for r in rs):6.1f}"
              f"  {statistics.median(steady) if steady else float('nan'):6.2f}"
              f"  {statistics.median(late) if late else float('nan'):6.2f}"
              f"  {_median_or_na([r['mhz'] for r in rs if r.get('mhz')]):>4}"
              f"  {sum(r['created'] for r in rs):3d}"  # pipelines its first runs created, all processes
              "  (" + ", ".join(f"{statistics.median(r[k] for r in rs):.1f}" for k in PARTS) + ")")
    if len(args.shapes) > 1:  # every shape's first runs together, per model and setting
        for model in args.models.split(","):
            for setting in settings:
                rs = [r for (m, _s, st), v in results.items() if m == model and st == (setting or "as is") for r in v]
                firsts = [r["first"] for r in rs]
                print(f"{model:8} {'all':7} {setting or 'as is':28} {statistics.median(firsts):6.1f} "
                      f"[{min(firsts):.1f}-{max(firsts):.1f}] ({sum(f <= args.budget for f in firsts)}/{len(firsts)})"
                      f"  {statistics.median(r['plan'] for r in rs):6.1f}")
    over = [(model, shape, setting, r) for (model, shape, setting), rs in results.items() for r in rs
            if r["first"] > args.budget]
    for model, shape, setting, r in over:  # what each miss spent
        print(f"over {args.budget:g} ms: {model} {shape} [{setting}] {r['first']:.1f} ms, planning {r['plan']:.1f}, "
              f"{r['created']} pipelines created; " + ", ".join(f"{k} {r[k]:.1f}" for k in PARTS))


if __name__ == "__main__":
    main()
