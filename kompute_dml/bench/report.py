"""Output of `kompute-dml bench`: goals, the terminal table, Markdown, the plot, files.

Peer columns follow the peers present in the rows (numpy and onnxruntime on a CPU device;
PyTorch and CuPy added on a GPU), so a run without GPU peers prints today's columns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .cases import fmt_shape

PEER_ORDER = ("numpy", "ort", "torch", "torch_int_mm", "cupy")
CPU_PEERS = ("numpy", "ort")
SHORT = {"numpy": "np", "torch_int_mm": "int_mm"}
PLOT_LABELS = {"numpy": "numpy", "ort": "onnxruntime CPU", "torch": "PyTorch CUDA", "torch_int_mm": "torch._int_mm (GEMM only)",
               "cupy": "CuPy"}
COLORS = {"ours": "#1f77b4", "numpy": "#ff7f0e", "ort": "#2ca02c", "torch": "#d62728", "torch_int_mm": "#9467bd",
          "cupy": "#8c564b"}
GPU_RATIO_GOAL = 0.95  # issue 14: each memory-bound row at >= 0.95x PyTorch CUDA


def _f(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def _u(row: dict[str, Any]) -> str:
    return "gbps" if row["metric"] == "GB/s" else "gops"


def peers_in(rows: list[dict[str, Any]]) -> list[str]:
    """The peers with a figure in any row, in PEER_ORDER (unknown names last)."""
    found = {k[: -len("_s")] for r in rows for k in r if k.endswith("_s")} - {"ours", "eager", "ceiling"}
    return [p for p in PEER_ORDER if p in found] + sorted(found - set(PEER_ORDER))


def _ceil_pct(row: dict[str, Any], who: str = "ours") -> str:
    key = "fraction_of_ceiling" if who == "ours" else f"fraction_of_ceiling_{who}"
    return _f(100 * row[key], 1) if key in row else "-"


# ---- goals -------------------------------------------------------------------------------
def _tensor_bytes(row: dict[str, Any]) -> int:
    """The size of a memory-bound row's output tensor (0 where its dtype is not one type)."""
    try:
        return int(np.prod(row["shape"])) * np.dtype(row["dtype"]).itemsize
    except TypeError:
        return 0


def goals(rows: list[dict[str, Any]], lat: dict[str, Any], gpu: bool = False) -> list[dict[str, Any]]:
    """The targets this run is measured against: the CPU device's (lavapipe) or, for a GPU
    run, issue 14's (every large memory-bound row >= 0.95x PyTorch; latency)."""
    out: list[dict[str, Any]] = []

    def add(name: str, target: str, val: Any, met: bool | None) -> None:
        out.append({"goal": name, "target": target, "measured": val, "met": met})

    def find(op: str, shape: list[int], dtype: str = "float32") -> dict[str, Any] | None:
        return next((r for r in rows if r["op"] == op and r["shape"] == shape and r["dtype"] == dtype), None)

    def ratio_goal(name: str, row: dict[str, Any] | None, peer: str, need: float) -> None:
        val = row.get(f"ratio_{peer}") if row else None
        add(name, f">= {need}", val, None if val is None else bool(val >= need))

    if gpu:
        big = [r for r in rows if r.get("memory_bound") and "ratio_torch" in r and _tensor_bytes(r) >= 64 << 20]
        worst = min((r["ratio_torch"] for r in big), default=None)
        met = sum(r["ratio_torch"] >= GPU_RATIO_GOAL for r in big)
        add(f"memory-bound rows from 64 MiB vs PyTorch CUDA (worst of {len(big)}; {met} met)", f">= {GPU_RATIO_GOAL}",
            worst, None if worst is None else met == len(big))
        limits = (("eager small-op latency (us)", "eager_execute_us", 20.0),
                  ("recorded small op (us/op, distinct outputs)", "recorded_per_op_us_distinct_outputs", 8.0))
    else:
        ratio_goal("identity 64 MiB vs numpy.copyto", find("ACTIVATION_IDENTITY", [4096, 4096]), "numpy", 0.8)
        ratio_goal("DIAGONAL_MATRIX 4096^2 f32 vs numpy zero+fill_diagonal", find("DIAGONAL_MATRIX", [4096, 4096]), "numpy", 1.0)
        ratio_goal("DIAGONAL_MATRIX1 triu 4096^2 f32 vs numpy.triu", find("DIAGONAL_MATRIX1 (triu)", [4096, 4096]), "numpy", 1.0)
        mm = find("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", [1024, 1024, 1024], "int8x int8")
        ratio_goal("matmul int8xint8 1024^3 vs onnxruntime", mm, "ort", 1.0)
        limits = (("eager small-op latency (us)", "eager_execute_us", 150.0),
                  ("recorded small op (us/op, distinct outputs)", "recorded_per_op_us_distinct_outputs", 30.0))
    for name, key, lim in limits:
        v = lat.get(key)
        add(name, f"<= {lim}", v, None if v is None else bool(v <= lim))
    return out


# ---- terminal --------------------------------------------------------------------------
def _ours_means(result: dict[str, Any]) -> str:
    if result.get("timing") == "recorded":
        return "ours = N executions of a compiled op in one dev.record(), time per execution"
    return "ours = re-evaluated compiled op"


def _latency_line(lat: dict[str, Any]) -> str:
    after = lat.get("eager_after_recording_us")
    text = (f"eager op.execute {lat['eager_execute_us']:.1f} us"
            + (f" ({after:.1f} right after a recording)" if after is not None else "")
            + f", eager functional {lat['eager_functional_us']:.1f} us; "
            f"recorded (100 per submission) {lat['recorded_per_op_us_distinct_outputs']:.1f} us/op distinct outputs, "
            f"{lat['recorded_per_op_us_same_output']:.1f} same output, {lat['recorded_per_op_us_chain']:.1f} chained")
    if "torch_copy_synchronize_us" in lat:
        text += (f"; torch: copy_ + synchronize {lat['torch_copy_synchronize_us']:.1f} us, "
                 f"{lat['torch_per_launch_us']:.1f} us per launch (100 then synchronize)")
    if lat.get("method"):
        text += f" ({lat['method']})"
    return text


def render(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    m = result["machine"]
    console.print(f"[bold]kompute-dml bench[/bold] on {m['device']} | {m['cpu_model']} x{m['cpu_cores']} | "
                  f"kp {m['kp']} numpy {m['numpy']} onnxruntime {m['onnxruntime']}"
                  + "".join(f" {k} {v}" for k, v in (result.get("gpu_peers") or {}).items())
                  + f" | load {m.get('load_average')}")
    for name, why in (result.get("gpu_peers_skipped") or {}).items():
        console.print(f"{name}: not a peer in this run ({why})")
    peers = peers_in(result["rows"])
    t = Table(title=f"{_ours_means(result)}; ratio = ours / peer (throughput); ceiling = {result['ceiling_label']}",
              title_justify="left")
    cols = [("operator", "left"), ("dtype", "left"), ("shape", "left"), ("unit", "left"), ("ours", "right"),
            ("us/op", "right"), ("eager us", "right")]
    for p in peers:
        cols += [(p if p != "torch_int_mm" else "int_mm", "right"), (f"x {SHORT.get(p, p)}", "right")]
    cols += [("% ceil", "right"), ("ok", "center")]
    for col, just in cols:
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    for r in result["rows"]:
        u = _u(r)
        ok = r.get("correct")
        cells = [r["op"], r["dtype"], fmt_shape(r["shape"]), r["metric"], _f(r.get(f"ours_{u}")),
                 _f(r["ours_s"] * 1e6, 1) if "ours_s" in r else (r.get("error") or "-")[:40],
                 _f(r["eager_s"] * 1e6, 1) if "eager_s" in r else "-"]
        for p in peers:
            cells += [_f(r.get(f"{p}_{u}")), _f(r.get(f"ratio_{p}"))]
        cells += [_ceil_pct(r), "-" if ok is None else ("yes" if ok else "[red]NO[/red]")]
        t.add_row(*cells)
    console.print(t)
    if result.get("matmul_module"):
        mt = Table(title="kompute_dml.bench.matmul run()", title_justify="left")
        keys = list(dict.fromkeys(k for r in result["matmul_module"] for k in r))
        for k in keys:
            mt.add_column(k, overflow="fold")
        for r in result["matmul_module"]:
            mt.add_row(*(_f(r.get(k)) if not isinstance(r.get(k), (list, tuple)) else fmt_shape(r[k]) for k in keys))
        console.print(mt)
    console.print(f"[bold]latency[/bold] ({result['latency']['op']}): {_latency_line(result['latency'])}")
    console.print(f"[bold]ceiling[/bold]: {result['ceiling_method']}: {result['ceiling_gbps']:.1f} GB/s (read + write)")
    for r in result["rows"]:
        bad = {k: v for k, v in (r.get("peer_correct") or {}).items() if not v}
        if bad or r.get("peer_errors"):
            console.print(f"peers of {r['op']} {r['dtype']} {fmt_shape(r['shape'])}: "
                          + "; ".join([f"{k} output WRONG" for k in bad] + [f"{k}: {v[:120]}" for k, v in
                                                                          (r.get("peer_errors") or {}).items()]))
    g = Table(title="goals", title_justify="left")
    for col in ("goal", "target", "measured", "met"):
        g.add_column(col, overflow="fold")
    for x in result["goals"]:
        met = x["met"]
        g.add_row(x["goal"], x["target"], _f(x["measured"]),
                  "-" if met is None else ("[green]yes[/green]" if met else "[red]no[/red]"))
    console.print(g)


# ---- Markdown ----------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    """The run as Markdown: machine, the table, latency, goals (for benchmarks/RESULTS.md)."""
    m = result["machine"]
    rows = result["rows"]
    peers = peers_in(rows)
    # the GPU peers' own fractions of the ceiling (the JSON has the CPU peers' too)
    gpu_pct = [p for p in peers if p not in CPU_PEERS and any(f"fraction_of_ceiling_{p}" in r for r in rows)]
    gpu = "".join(f", {k} {v}" for k, v in (result.get("gpu_peers") or {}).items())
    lines = [
        f"Command: `{result['command']}` ({result['date']}, {result['seconds']:.0f} s, median of {result['rounds']} interleaved rounds)",
        "",
        f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores ({', '.join(m['cpu_features'])}), load average at the end "
        f"{', '.join(f'{x:.1f}' for x in (m.get('load_average') or []))}; device {m['device']} ({m['feature_level']}); "
        f"kp {m['kp']}, numpy {m['numpy']}, onnxruntime {m['onnxruntime']}, onnx {m['onnx']}, Python {m['python']}{gpu}.",
        "",
        f"{_ours_means(result)}. Ceiling: {result['ceiling_method']}, {result['ceiling_gbps']:.1f} GB/s (read + write).",
        "",
    ]
    head = ["operator", "dtype", "shape", "unit", "ours", "us/op", "eager us"]
    for p in peers:
        head += [p, f"ours/{p}"]
    head += ["% ceil"] + [f"{p} % ceil" for p in gpu_pct]
    lines += ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * 4 + ["---:"] * (len(head) - 4)) + " |"]
    for r in rows:
        u = _u(r)
        if "ours_s" not in r and not any(f"{p}_s" in r for p in peers):
            lines.append(f"| {r['op']} | {r['dtype']} | {fmt_shape(r['shape'])} | {r['metric']} | "
                         f"not measured: {(r.get('error') or '')[:90]} |" + " |" * (len(head) - 5))
            continue
        cells = [r["op"], r["dtype"], fmt_shape(r["shape"]), r["metric"], _f(r.get(f"ours_{u}")),
                 _f(r["ours_s"] * 1e6, 1) if "ours_s" in r else "-", _f(r["eager_s"] * 1e6, 1) if "eager_s" in r else "-"]
        for p in peers:
            cells += [_f(r.get(f"{p}_{u}")), _f(r.get(f"ratio_{p}"))]
        cells += [_ceil_pct(r)] + [_ceil_pct(r, p) for p in gpu_pct]
        lines.append("| " + " | ".join(cells) + " |")
    lat = result["latency"]
    lines += [
        "",
        f"Latency ({lat['op']}, median of {lat['reps']}): {_latency_line(lat)}.",
        "",
        "| goal | target | measured | met |",
        "| --- | --- | ---: | --- |",
    ]
    for g in result["goals"]:
        met = "-" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {g['target']} | {_f(g['measured'])} | {met} |")
    return "\n".join(lines) + "\n"


# ---- plot ----------------------------------------------------------------------------------
def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "ours_s" in r or any(k.endswith("_s") for k in r)]
    gb = [r for r in rows if r["metric"] == "GB/s"]
    mm = [r for r in rows if r["metric"] == "GOPS"]
    fig, axes = plt.subplots(2, 1, figsize=(max(10, 0.55 * len(gb) + 4), 10), gridspec_kw={"height_ratios": [3, 1.3]})
    series = [("ours", f"kompute_dml ({result['machine']['device']})")] + [(p, PLOT_LABELS.get(p, p)) for p in peers_in(rows)]

    def bars(ax: Any, rs: list[dict[str, Any]], unit: str, ylabel: str) -> None:
        xs = np.arange(len(rs))
        w = 0.8 / len(series)
        for i, (k, label) in enumerate(series):
            vals = [r.get(f"{k}_{unit}") or 0.0 for r in rs]
            ax.bar(xs + (i - (len(series) - 1) / 2) * w, vals, w, label=label, color=COLORS.get(k))
        if unit == "gbps" and result.get("ceiling_gbps"):
            ax.axhline(result["ceiling_gbps"], color="grey", ls="--", lw=1,
                       label=f"ceiling: {result['ceiling_label']} ({result['ceiling_gbps']:.0f} GB/s)")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{r['op'].replace('ACTIVATION_', '').replace('MATRIX_MULTIPLY_INTEGER_TO_FLOAT', 'MMITF')}\n"
                            f"{r['dtype']} {fmt_shape(r['shape'])}" for r in rs], rotation=35, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")

    bars(axes[0], gb, "gbps", "GB/s (read + written), log scale")
    peers = ", ".join(PLOT_LABELS.get(p, p) for p in peers_in(rows))
    axes[0].set_title(f"kompute-dml bench: {result['machine']['device']} vs {peers} on "
                      f"{result['machine']['cpu_model']} x{result['machine']['cpu_cores']}", fontsize=10)
    if mm:
        bars(axes[1], mm, "gops", "GOPS, log scale")
    else:
        axes[1].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(console: Any, result: dict[str, Any], json_path: str | None, md_path: str | None, png_path: str | None) -> None:
    for path, write in ((json_path, lambda p: Path(p).write_text(json.dumps(result, indent=1, default=str))),
                        (md_path, lambda p: Path(p).write_text(markdown(result))),
                        (png_path, lambda p: plot(result, p))):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write(path)
            console.print(f"wrote {path}")
