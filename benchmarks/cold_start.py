"""A model's first run in a fresh process: `Backend.prepare` and the first `run`, with an empty
pipeline cache on disk (KDML_CACHE_DIR) and the NVIDIA driver's own shader cache off
(__GL_SHADER_DISK_CACHE=0), as on a machine's first use ("cold"), then again in a second process
reading the cache the first one wrote ("warm"). Settings are environment assignments, each
measured in `--processes` fresh processes, interleaved:

    python -m benchmarks.cold_start --family distilbert-int8 --settings "KDML_PIPELINE_THREADS=1;"
    python -m benchmarks.cold_start --family llama --settings ";SIBLINGS_IN_FIRST_RUN=1"
    python -m benchmarks.cold_start --family resnet18 --settings ";NO_PROGRAM_RECORD=1"
    python -m benchmarks.cold_start --family bert-fp16 --settings ";SIBLINGS_WITH_PLAN=1"
    python -m benchmarks.cold_start --family bert-fp16 --settings ";PYTHONPATH=/path/to/another/tree"
    python -m benchmarks.cold_start --family resnet50 --ep    # an InferenceSession with the plugin EP

`--ep`: "prepare" is the onnxruntime InferenceSession's creation with kompute_dml's plugin EP
(kompute_dml.ort.session_options), the first run its first `run`; "its plan" is not known there (0).

One line per setting: medians of prepare and first-run seconds, cold and warm, the cold first
run's planning (in it), the pipelines the cold first run created, and the cold process's next
runs (its second, and the slowest in the AFTER_SECONDS after the first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# -P: the working directory is not put first on the child's sys.path, so a setting's PYTHONPATH
# (another tree's kompute_dml) comes first; this tree is appended to it
CHILD = [sys.executable, "-P", "-m", "benchmarks.cold_start", "--child"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# An ablation setting ("SIBLINGS_IN_FIRST_RUN=1"): the siblings (onnx_backend/siblings.py) made inside
# the first run, as before they moved to a thread of their own (runtime/pipelines.Programs.prepare_later)
SIBLINGS_IN_FIRST_RUN = "SIBLINGS_IN_FIRST_RUN"
# Another ("NO_PROGRAM_RECORD=1"): no pipelines of earlier processes made at prepare (runtime/program_record.py)
NO_PROGRAM_RECORD = "NO_PROGRAM_RECORD"
# Another ("SIBLINGS_WITH_PLAN=1"): the siblings' background batch started as the plan is made, before
# its first run (GraphPlan.start_siblings), as before they waited for that run
SIBLINGS_WITH_PLAN = "SIBLINGS_WITH_PLAN"
# after the first run, runs for this long: the slowest of them (one held up by the siblings' compiles)
AFTER_SECONDS = 3.0


def _ep_session(path: str) -> object:
    """An InferenceSession with the plugin EP, as the BackendRep attributes the child reads: run(feeds)
    (output arrays), no plan seconds, the EP's device (its stats)."""
    import types

    import onnxruntime as ort

    import kompute_dml.ort as kort
    from kompute_dml.onnx_backend import backend

    sess = ort.InferenceSession(path, sess_options=kort.session_options())
    device = next(iter(backend._devices.values()))
    return types.SimpleNamespace(run=lambda feeds: sess.run(None, feeds),
                                 last_run=types.SimpleNamespace(plan_seconds=0.0), device=device)


def child(family: str, size: str, batch: int, seq: int, after_runs: bool, ep: bool = False) -> None:
    import numpy as np

    from kompute_dml.bench import families
    from kompute_dml.bench.timing import once
    from kompute_dml.onnx_backend import Backend

    if os.environ.get(SIBLINGS_IN_FIRST_RUN) == "1":
        from kompute_dml.runtime import pipelines

        pipelines.Programs.prepare_later = lambda self, plans, threads: self.prepare_many(list(plans), threads)

    if os.environ.get(NO_PROGRAM_RECORD) == "1":
        from kompute_dml.runtime import pipelines

        pipelines.Programs.warm = lambda self, threads: 0

    if os.environ.get(SIBLINGS_WITH_PLAN) == "1":
        from kompute_dml.onnx_backend import device_graph

        made = device_graph.GraphPlan.__init__

        def with_plan(self, *a, **k):  # type: ignore[no-untyped-def]
            made(self, *a, **k)
            self.start_siblings()
        device_graph.GraphPlan.__init__ = with_plan

    path = families.build(family, size)
    rep: list = []
    prepare = once(lambda: rep.append(_ep_session(str(path)) if ep else Backend.prepare(str(path), "CPU")))
    feeds = families.feeds(family, batch, seq, np.random.default_rng(0), size)
    first = once(lambda: rep[0].run(feeds))
    plan = rep[0].last_run.plan_seconds
    stats = rep[0].device.engine.stats()
    got = {"prepare": prepare, "first": first, "plan": plan, "created": stats["pipelines_created"]}
    if after_runs:  # (the cold process's: the table reports those)
        after = [once(lambda: rep[0].run(feeds))]
        while sum(after) < AFTER_SECONDS:
            after.append(once(lambda: rep[0].run(feeds)))
        got.update({"second": after[0], "slowest after": max(after)})
    print(json.dumps(got), flush=True)


def _run(env: dict[str, str], args: argparse.Namespace, after_runs: bool) -> dict[str, float]:
    cmd = [*CHILD, args.family, "--size", args.size, "--shape", args.shape, *(["--after-runs"] if after_runs else []),
           *(["--ep"] if args.ep else [])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"child failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="distilbert-int8", help="a family of kompute_dml.bench.families")
    ap.add_argument("--size", default="small")
    ap.add_argument("--shape", default="1x128", help="batch x sequence of the first run")
    ap.add_argument("--processes", type=int, default=2, help="fresh processes per setting")
    ap.add_argument("--settings", default="", help="';'-separated settings, each 'NAME=value[,NAME=value]' ('' = as is)")
    ap.add_argument("--child", nargs="?", const=None, default=False)
    ap.add_argument("--after-runs", action="store_true", help=argparse.SUPPRESS)  # (a child's: the later runs)
    ap.add_argument("--ep", action="store_true", help="through onnxruntime's InferenceSession with the plugin EP")
    args = ap.parse_args()
    if args.child is not False:
        b, s = (int(v) for v in args.shape.split("x"))
        child(args.child, args.size, b, s, args.after_runs, args.ep)
        return
    from kompute_dml.bench import families

    families.build(args.family, args.size)  # exported once, before any timed process
    settings = args.settings.split(";") if args.settings else [""]
    rows: dict[str, dict[str, list[float]]] = {s: {} for s in settings}
    for _ in range(args.processes):
        for setting in settings:
            env = {**os.environ, "__GL_SHADER_DISK_CACHE": "0"}
            env.update(kv.split("=", 1) for kv in setting.split(",") if kv)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), ROOT) if p)
            with tempfile.TemporaryDirectory() as cache:
                env["KDML_CACHE_DIR"] = cache
                for phase in ("cold", "warm"):  # the second process reads what the first wrote
                    got = _run(env, args, phase == "cold")
                    for key, value in got.items():
                        rows[setting].setdefault(f"{phase} {key}", []).append(value)
    print(f"{args.family} ({args.size}) first run at {args.shape}{' through the plugin EP' if args.ep else ''}, "
          f"{args.processes} processes per setting; seconds (medians)")
    # "its plan": the first run's planning (GraphPlan.plan_seconds: with a cold driver cache, the
    # compiles of its own pipelines); the rest of the first run is its execution and what holds it up
    # "second", "slowest after": the cold process's next run and the slowest of its runs in the
    # AFTER_SECONDS after the first (the siblings compile in the background meanwhile)
    print("setting | cold prepare | cold first run | its plan | pipelines created | second run | slowest after | "
          "warm prepare | warm first run")
    for setting, r in rows.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        print(f"{setting or '(as is)'} | {med['cold prepare']:.2f} | {med['cold first']:.3f} | {med['cold plan']:.3f} | "
              f"{med['cold created']:.0f} | {med['cold second']:.3f} | {med['cold slowest after']:.3f} | "
              f"{med['warm prepare']:.2f} | {med['warm first']:.3f} (all: {', '.join(f'{v:.3f}' for v in r['warm first'])})")


if __name__ == "__main__":
    main()
