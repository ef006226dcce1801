"""`kompute-dml`: info (devices, limits, support matrix), bench, run MODEL.onnx."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.table import Table

from . import common


def _cmd_info(args: argparse.Namespace) -> int:
    from .. import __version__
    from ..core.errors import DMLError
    from ..device.device import Device, coerce_feature_level, list_devices
    from ..ops import SPECS, support_matrix

    console = common.console()
    try:
        index = common.parse_device(args.device)
        devices = list_devices()
        level = coerce_feature_level(args.feature_level)
    except (DMLError, common.DeviceArgError) as e:
        print(f"kompute-dml info: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"version": __version__, "feature_level": level.label, "devices": devices,
                          "operators": [_spec_row(s) for s in SPECS], "support": support_matrix(level)},
                         indent=1, default=list))
        return 0
    console.print(f"kompute_dml {__version__}")
    for d in devices:
        console.print(f"[bold]device {d['index']}[/bold]: {d['name']} ({d['device_type']}, Vulkan {d['api_version']})")
        console.print(f"  {'uuid (KDML_DEVICE=VULKAN:<uuid> picks it)':42} {d['uuid'] or 'unknown'}", highlight=False)
        for k, v in d["limits"].items():
            console.print(f"  {k:42} {v}")
        console.print(f"  {'memory heaps (bytes)':42} {list(d['memory_heaps'])}")
    try:
        dev = Device(index, level)
        console.print(f"feature level: {dev.feature_level.name} (0x{int(dev.feature_level):x})")
        console.print(f"capabilities: {', '.join(sorted(dev.capabilities)) or 'none'}")
        console.print("policy: " + ", ".join(f"{k} {v}" for k, v in dev.policy.describe().items()))
        dev.close()
    except DMLError as e:
        print(f"kompute-dml info: error: device {index} unusable: {e}", file=sys.stderr)
        return 2
    console.print("[bold]operators[/bold] (SPECS of kompute_dml/ops/<op>.py):")
    for s in SPECS:
        r = _spec_row(s)
        line = (f"  {r['operator']} (from {r['introduced']}): kdml.{r['descriptor']}"
                f"({', '.join(r['inputs'])} -> {', '.join(r['outputs'])}); {len(r['variants'])} shader variants")
        if r["helpers"]:
            line += "; helpers " + ", ".join(r["helpers"])
        if r["onnx"]:
            line += "; ONNX " + ", ".join(r["onnx"])
        console.print(line, highlight=False)
    table = Table(title=f"Support at feature level {level.label}")
    for col in ("operator", "tensor", "kind", "dims", "types"):
        table.add_column(col, overflow="fold")
    for row in support_matrix(level):
        table.add_row(*(row[c] for c in ("operator", "tensor", "kind", "dims", "types")))
    console.print(table)
    return 0


def _spec_row(spec: Any) -> dict[str, Any]:
    """One operator's spec as plain values (the `info` table and its --json)."""
    return {"operator": spec.name, "descriptor": spec.desc_type.__name__, "introduced": spec.introduced.label,
            "inputs": list(spec.inputs), "outputs": list(spec.outputs), "helpers": list(spec.helpers),
            "onnx": [f"{o.domain + '.' if o.domain else ''}{o.op_type}" for o in spec.onnx],
            "variants": sorted(spec.variants)}


def _cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    from ..bench import main as bench_main

    return int(bench_main(rest) or 0)


def _cmd_run(args: argparse.Namespace, rest: list[str]) -> int:
    from .run import main as run_main

    return int(run_main(rest) or 0)


def _cmd_generate(args: argparse.Namespace, rest: list[str]) -> int:
    from .generate import main as generate_main

    return int(generate_main(rest) or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kompute-dml", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="devices, feature level, limits and the support matrix")
    info.add_argument("--device", default=None, help=common.HELP)
    info.add_argument("--feature-level", default=None, help="e.g. 5_1 or 0x5100 (default: highest implemented)")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser("bench", help="benchmarks with peers side by side (see `kompute-dml bench --help`)", add_help=False)
    sub.add_parser("run", help="run an ONNX model through the backend (see `kompute-dml run --help`)", add_help=False)
    sub.add_parser("generate", help="greedy generation through a decoder step model (see `kompute-dml generate --help`)",
                   add_help=False)
    args, rest = ap.parse_known_args(argv)
    if args.command == "info":
        if rest:
            ap.error(f"unrecognized arguments: {' '.join(rest)}")
        return _cmd_info(args)
    handler: Any = {"bench": _cmd_bench, "run": _cmd_run, "generate": _cmd_generate}[args.command]
    return handler(args, rest)


if __name__ == "__main__":
    sys.exit(main())
