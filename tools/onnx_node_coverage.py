"""Every onnx backend node test case (onnx.backend.test, built in memory) through kompute_dml's
Backend on the default device: per case whether it passed and where its nodes ran (the device,
the host's shape arithmetic, or onnxruntime's CPU provider), summed per ONNX op type.

    python tools/onnx_node_coverage.py [--pattern REGEX] [--json FILE] [--cases]

A case counts "on the device" when it passed with no node on the CPU provider and at least one on
the device; "passed on the CPU" when it passed with a node there (a type, attribute or dimension
kompute_dml leaves to onnxruntime; "(at run time)" where a device node fell back when it ran); "failed"
when onnx's runner reported a failure or error.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
import unittest
import warnings
from typing import Any

from onnx.backend.test import BackendTest

from kompute_dml.onnx_backend import CPU, VULKAN, Backend


class _Recording(Backend):
    reps: list[Any] = []

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> Any:  # type: ignore[override]
        rep = super().prepare(model, device, **kwargs)
        cls.reps.append(rep)
        return rep


def run(pattern: str) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = BackendTest(_Recording, __name__)
    runner.include(pattern)
    case = runner.test_cases["OnnxBackendNodeModelTest"]
    names = sorted(n for n in dir(case) if re.match(pattern, n) and n.endswith("_cpu"))
    rows = []
    for name in names:
        _Recording.reps.clear()
        result = unittest.TestResult()
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            case(name).run(result)
        placed = [(p.op_type, p.target) for rep in _Recording.reps for p in rep.placement]
        # a device node that fell back at run time (a type or shape the plan refused: RunStats.events)
        placed += [("(at run time)", CPU) for rep in _Recording.reps if rep.last_run is not None
                   and (rep.last_run.runtime_fallbacks or rep.last_run.cpu_segments)
                   and not any(p.target == CPU for p in rep.placement)]
        status = ("skipped" if result.skipped else "failed" if result.failures or result.errors else "passed")
        why = "; ".join(str(e[1]).strip().splitlines()[-1][:200] for e in result.failures + result.errors)
        ops = sorted({op for op, _ in placed} - {"Constant"})
        rows.append({"case": name, "status": status, "ops": ops, "why": why, "seconds": time.perf_counter() - t0,
                     "vulkan": sum(t == VULKAN for _, t in placed), "cpu": sum(t == CPU for _, t in placed),
                     "cpu_ops": sorted({op for op, t in placed if t == CPU})})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pattern", default=r"^test_.*_cpu$", help="onnx case names to include (a regex)")
    ap.add_argument("--json", default=None, help="write every case's row here")
    ap.add_argument("--cases", action="store_true", help="also print a line per case not wholly on the device")
    args = ap.parse_args(argv)
    rows = run(args.pattern)
    per_op: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in rows:
        kind = ("failed" if r["status"] == "failed" else "skipped" if r["status"] == "skipped"
                else "device" if r["cpu"] == 0 and r["vulkan"] > 0 else "cpu" if r["cpu"] else "host")
        r["kind"] = kind
        for op in r["ops"] or ["(none)"]:
            per_op[op][kind] += 1
    print("| op type | cases | on the device | passed with CPU nodes | host only | failed | skipped |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for op in sorted(per_op):
        c = per_op[op]
        print(f"| {op} | {sum(c.values())} | {c['device']} | {c['cpu']} | {c['host']} | {c['failed']} | {c['skipped']} |")
    total = collections.Counter(r["kind"] for r in rows)
    print(f"\n{len(rows)} cases: {total['device']} wholly on the device, {total['cpu']} passed with CPU nodes, "
          f"{total['host']} host only, {total['failed']} failed, {total['skipped']} skipped")
    if args.cases:
        for r in rows:
            if r["kind"] != "device":
                print(f"{r['case']}: {r['kind']} {r['cpu_ops'] or ''} {r['why']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
