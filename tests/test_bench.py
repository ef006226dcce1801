"""`kompute-dml bench`: the quick run end to end, the row arithmetic, the report, the peers.

Never asserts timings (the machine is shared); only structure, arithmetic on given figures
and the correctness flags, which compare every output with an independent numpy reference."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.bench.cases import Env, copy_case, diagonal_case, identity_case, matmul_case, trilu_case
from kompute_dml.bench.gpu_peers import ArrayModulePeer, mm_close
from kompute_dml.bench.harness import Case, run_case, summarize
from kompute_dml.bench.report import goals, markdown, peers_in
from kompute_dml.bench.timing import BATCH_MAX, BATCH_MIN, batch_count
from kompute_dml.cli.main import main as cli_main


def test_bench_quick_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    # --gpu off: the same rows and peers on every device (a GPU device would add GPU rows)
    assert cli_main(["bench", "--quick", "--rounds", "2", "--gpu", "off", "--json", str(out), "--plot", str(png)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "ceiling" in printed and "latency" in printed
    r = json.loads(out.read_text())
    # piped (capsys is no terminal): a progress line per row on standard error
    assert captured.err.count("kompute-dml bench: [") == len(r["rows"]), captured.err
    for key in ("command", "machine", "rows", "latency", "goals", "ceiling_gbps", "rounds", "method"):
        assert key in r, key
    m = r["machine"]
    for key in ("cpu_model", "cpu_cores", "device", "kp", "numpy", "onnxruntime"):
        assert key in m, key
    assert r["ceiling_gbps"] > 0
    ops = {row["op"] for row in r["rows"]}
    assert "ACTIVATION_IDENTITY" in ops and "COPY" in ops
    for row in r["rows"]:
        assert row["metric"] in ("GB/s", "GOPS")
        assert row["amount"] > 0
        assert "numpy_s" in row, row["op"]
        if "ours_s" in row:
            unit = "gbps" if row["metric"] == "GB/s" else "gops"
            assert row[f"ours_{unit}"] > 0
            assert row["ratio_numpy"] > 0
            if row["memory_bound"]:
                assert row["fraction_of_ceiling"] > 0
        else:
            assert row.get("error"), row["op"]
        assert row.get("correct") in (None, True), row
    lat = r["latency"]
    for key in ("eager_execute_us", "eager_after_recording_us", "eager_functional_us", "recorded_per_op_us_distinct_outputs",
                "recorded_per_op_us_same_output", "recorded_per_op_us_chain"):
        assert lat[key] > 0, key
    assert {g["goal"] for g in r["goals"]} and all("met" in g for g in r["goals"])
    assert png.stat().st_size > 10_000


def test_bench_gpu_mode_without_gpu_peers(tmp_path, capsys):
    """GPU mode end to end on one row: ours recorded, the ceiling measured once by ours (no
    GPU peer asked for), the GPU goals."""
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    argv = ["bench", "--quick", "--rounds", "2", "--gpu", "on", "--no-torch", "--no-cupy", "--only", "float32 4096x4000",
            "--json", str(out), "--markdown", str(md)]
    assert cli_main(argv) == 0
    r = json.loads(out.read_text())
    assert r["mode"] == "gpu" and r["timing"] == "recorded" and r["gpu_peers"] == {}
    assert r["ceiling_label"].startswith("ours") and r["ceiling_gbps"] > 0
    [row] = r["rows"]
    assert row["op"] == "COPY (strided)" and row["correct"] is True and row["batch"] >= 2
    assert row["fraction_of_ceiling"] == pytest.approx(row["ours_gbps"] / r["ceiling_gbps"])
    assert "PyTorch" in r["goals"][0]["goal"] and r["goals"][0]["measured"] is None
    assert "| COPY (strided) | float32 | 4096x4000 | GB/s |" in md.read_text()


# ---- arithmetic on given figures ---------------------------------------------------------
def _case(metric: str = "GB/s", memory_bound: bool = True, shape: tuple[int, ...] = (1024, 1024)) -> Case:
    return Case("COPY", "float32", shape, metric, 8e9, ours=None, memory_bound=memory_bound,
                peers={"numpy": lambda: None}, gpu_peers={"torch": lambda n: lambda: None})


def test_summarize_ratios_and_ceiling_fractions():
    row = summarize(_case(), {"ours": 2.0, "numpy": 4.0, "torch": 1.0, "eager": 3.0}, ceiling_gbps=16.0)
    assert row["ours_gbps"] == pytest.approx(4.0)
    assert row["numpy_gbps"] == pytest.approx(2.0) and row["torch_gbps"] == pytest.approx(8.0)
    assert row["ratio_numpy"] == pytest.approx(2.0)  # ours twice as fast as numpy
    assert row["ratio_torch"] == pytest.approx(0.5)  # half as fast as torch
    assert row["fraction_of_ceiling"] == pytest.approx(0.25)
    assert row["fraction_of_ceiling_torch"] == pytest.approx(0.5)
    assert row["eager_s"] == 3.0 and row["ceiling_gbps"] == 16.0


def test_summarize_compute_rows_have_no_ceiling_fraction():
    row = summarize(_case("GOPS", memory_bound=False), {"ours": 2.0, "torch": 4.0}, ceiling_gbps=16.0)
    assert row["ours_gops"] == pytest.approx(4.0) and row["ratio_torch"] == pytest.approx(2.0)
    assert not any(k.startswith(("fraction", "ceiling")) for k in row)


def test_batch_count_targets_the_batch_duration_within_bounds():
    assert batch_count(0.002, 1, target=0.02) == 10
    assert batch_count(0.004, 40, target=0.02) == 200
    assert batch_count(1e-9, 1) == BATCH_MAX
    assert batch_count(5.0, 1) == BATCH_MIN


def test_mm_close_rejects_a_wrong_element():
    ref = np.arange(12, dtype=np.float64).reshape(3, 4) * 100
    assert mm_close(ref.astype(np.float32).astype(np.float64), ref, s=1e-3, k=64)
    bad = ref.copy()
    bad[1, 2] += 1.0
    assert not mm_close(bad, ref, s=1e-3, k=64)


# ---- report ---------------------------------------------------------------------------------
def _result(rows: list[dict], gpu: bool) -> dict:
    lat = {"op": "ACTIVATION_IDENTITY float32 64x64", "reps": 3, "eager_execute_us": 15.0, "eager_functional_us": 30.0,
           "recorded_per_op_us_same_output": 7.0, "recorded_per_op_us_distinct_outputs": 7.5, "recorded_per_op_us_chain": 9.0}
    machine = {"cpu_model": "cpu", "cpu_cores": 16, "cpu_features": ["avx2"], "load_average": [1.0, 1.0, 1.0],
               "device": "dev", "feature_level": "FL_6_2", "kp": "0.9.0", "numpy": "2", "onnxruntime": "1", "onnx": "1",
               "python": "3.12"}
    return {"command": "kompute-dml bench", "date": "today", "seconds": 1.0, "rounds": 3, "machine": machine,
            "timing": "recorded" if gpu else "execute", "gpu_peers": {"torch": "2.11"} if gpu else {},
            "ceiling_gbps": 16.0, "ceiling_method": "a copy", "ceiling_label": "copy", "rows": rows, "latency": lat,
            "goals": goals(rows, lat, gpu=gpu)}


def test_markdown_without_gpu_peers_keeps_the_cpu_columns():
    row = summarize(Case("COPY", "int8", (4096, 4096), "GB/s", 8e9, ours=None, peers={"numpy": lambda: None}),
                    {"ours": 2.0, "numpy": 4.0}, ceiling_gbps=16.0)
    lines = markdown(_result([row], gpu=False)).splitlines()
    assert "| operator | dtype | shape | unit | ours | us/op | eager us | numpy | ours/numpy | % ceil |" in lines
    assert "| COPY | int8 | 4096x4096 | GB/s | 4.00 | 2000000 | - | 2.00 | 2.00 | 25.0 |" in lines
    text = "\n".join(lines)
    assert "torch" not in text


def test_markdown_and_goals_with_gpu_peers():
    big = summarize(_case(shape=(4096, 4096)), {"ours": 2.0, "torch": 1.0}, ceiling_gbps=16.0)  # 64 MiB: counts
    small = summarize(_case(shape=(4096, 4095)), {"ours": 9.0, "torch": 1.0}, ceiling_gbps=16.0)  # < 64 MiB: not a goal
    mm = summarize(Case("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "int8x int8", (16, 4096, 4096), "GOPS", 5e11, ours=None,
                        memory_bound=False, gpu_peers={"torch": lambda n: lambda: None, "torch_int_mm": lambda n: lambda: None}),
                   {"ours": 1.0, "torch": 0.5, "torch_int_mm": 0.25}, ceiling_gbps=16.0)
    result = _result([big, small, mm], gpu=True)
    assert peers_in(result["rows"]) == ["torch", "torch_int_mm"]
    lines = markdown(result).splitlines()
    assert ("| operator | dtype | shape | unit | ours | us/op | eager us | torch | ours/torch | torch_int_mm | "
            "ours/torch_int_mm | % ceil | torch % ceil |") in lines
    assert "| COPY | float32 | 4096x4096 | GB/s | 4.00 | 2000000 | - | 8.00 | 0.50 | - | - | 25.0 | 50.0 |" in lines
    assert ("| MATRIX_MULTIPLY_INTEGER_TO_FLOAT | int8x int8 | 16x4096x4096 | GOPS | 500.00 | 1000000 | - | 1000 | 0.50 | "
            "2000 | 0.25 | - | - |") in lines
    g = {x["goal"].split(" (")[0]: x for x in result["goals"]}
    assert g["memory-bound rows from 64 MiB vs PyTorch CUDA"]["measured"] == pytest.approx(0.5)
    assert "worst of 1;" in result["goals"][0]["goal"]
    assert g["memory-bound rows from 64 MiB vs PyTorch CUDA"]["met"] is False
    assert g["eager small-op latency"]["met"] is True and g["recorded small op"]["met"] is True


# ---- the GPU rows' code on this device, with host-side peers --------------------------------
def _gpu_rows(env: Env) -> list[Case]:
    return [
        identity_case(env, "float16", (64, 96)),
        *(copy_case(env, "int8", (48, 80), kind) for kind in ("packed", "transpose", "strided", "broadcast")),
        diagonal_case(env, "float32", (40, 72)),
        diagonal_case(env, "int8", (72, 40), offset=-3, value=2.0),
        trilu_case(env, "float32", (56, 40), upper=True),
        trilu_case(env, "int8", (40, 56), upper=False),
        trilu_case(env, "float32", (48, 48), upper=True, with_input=False, value=1),
        trilu_case(env, "float32", (48, 64), upper=False, with_input=False, value=2.5),
        matmul_case(env, "int8", (16, 64, 48), full=True),
        matmul_case(env, "uint8", (40, 96, 32), full=True),
        matmul_case(env, "uint8", (24, 32, 16), full=False),
    ]


def _check_rows(env: Env, peer: str, expect_missing: set[str]) -> None:
    for case in _gpu_rows(env):
        row = run_case(case, rounds=2, recorded=True, ceiling_gbps=10.0, batch_target=0.002)
        name = f"{row['op']} {row['dtype']} {row['shape']}"
        assert row["correct"] is True, name
        assert row["timing"] == "recorded" and BATCH_MIN <= row["batch"] <= BATCH_MAX
        if any(row["op"].startswith(p) for p in expect_missing):
            assert peer in row["peer_errors"], name
            continue
        assert row.get("peer_correct", {}).get(peer) is True, (name, row.get("peer_errors"))
        assert row[f"ratio_{peer}"] > 0


def test_gpu_rows_with_numpy_as_the_array_module_peer(dev):
    """CuPy's code path, run by numpy on the host: every row it has an equivalent for."""
    env = Env(kdml, dev, np.random.default_rng(7), cpu_peers=False, gpu=[ArrayModulePeer(np, "cupy", lambda: None)])
    _check_rows(env, "cupy", {"MATRIX_MULTIPLY", "DIAGONAL_MATRIX1 (triu, no", "DIAGONAL_MATRIX1 (tril, no",
                              "DIAGONAL_MATRIX (offset"})


def test_gpu_rows_with_torch_on_the_host(dev):
    """The torch peers (copy_, eye, triu/tril, _int_mm and its dequantization) on the CPU:
    each output equals the numpy reference, including uint8 A and M <= 16 (padded)."""
    from kompute_dml.bench.gpu_peers import TorchPeer

    pytest.importorskip("torch")
    peer = TorchPeer("cpu")
    env = Env(kdml, dev, np.random.default_rng(8), cpu_peers=False, gpu=[peer])
    _check_rows(env, "torch", set())
    assert peer.ceiling(1 << 20, rounds=2) > 0
    lat = peer.latency(reps=2)
    assert lat["torch_copy_synchronize_us"] > 0 and lat["torch_per_launch_us"] > 0


def test_latency_in_a_process_of_its_own():
    """latency_proc: our figures from a fresh process (the bench's default), and a clear error
    naming the side where the process fails."""
    from kompute_dml.bench import latency_proc

    lat = latency_proc.measure("ours", reps=2)
    for key in ("eager_execute_us", "eager_after_recording_us", "recorded_per_op_us_chain"):
        assert lat[key] > 0, key
    with pytest.raises(RuntimeError, match="^latency of nonesuch"):
        latency_proc.measure("nonesuch", reps=2)


def test_gpu_clock_hold_runs_for_its_time_at_least_once():
    from kompute_dml.bench import gpu_clock

    calls: list[float] = []
    assert gpu_clock.hold(lambda: calls.append(0.0), 0.0) == 1 == len(calls)  # a zero time: still one call
    t0 = time.perf_counter()
    n = gpu_clock.hold(lambda: time.sleep(0.01), 0.05)
    assert time.perf_counter() - t0 >= 0.05 and n >= 2


def test_gpu_clock_reads_nvidia_smi_or_says_none(monkeypatch, tmp_path):
    from kompute_dml.bench import gpu_clock

    monkeypatch.setattr(gpu_clock.shutil, "which", lambda name: None)
    assert gpu_clock.sm_clock_mhz() is None
    fake = tmp_path / "nvidia-smi"  # prints what nvidia-smi prints for one GPU
    fake.write_text("#!/bin/sh\necho 1980\n")
    fake.chmod(0o755)
    monkeypatch.setattr(gpu_clock.shutil, "which", lambda name: str(fake))
    assert gpu_clock.sm_clock_mhz() == 1980
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert gpu_clock.sm_clock_mhz() is None


def test_bench_decoders_and_scaling_sections_run_their_modules(dev, monkeypatch, capsys):
    """--decoders, --conv and --scaling run kompute_dml.bench.decoder_speed, benchmarks/bench_conv.py
    (its small shapes on lavapipe), kompute_dml.bench.scaling, shared_device and batcher after the table,
    with the names and shapes given (the modules themselves: tests/test_decoders.py, on a GPU host)."""
    from kompute_dml.bench import batcher, decoder_speed, scaling, shared_device

    calls = []
    monkeypatch.setattr(decoder_speed, "main", lambda argv: calls.append(("decoders", argv)) or 0)
    monkeypatch.setattr(scaling, "main", lambda argv: calls.append(("scaling", argv)) or 0)
    monkeypatch.setattr(shared_device, "main", lambda argv: calls.append(("shared", argv)) or 0)
    monkeypatch.setattr(batcher, "main", lambda argv: calls.append(("batcher", argv)) or 0)
    import subprocess

    real_run = subprocess.run

    def run(cmd, **kw):
        if "benchmarks.bench_conv" in cmd:
            return calls.append(("conv", cmd[1:]))
        return real_run(cmd, **kw)

    monkeypatch.setattr(subprocess, "run", run)
    assert cli_main(["bench", "--quick", "--rounds", "2", "--gpu", "off", "--only", "COPY", "--no-transfers",
                     "--decoders", "gpt2", "--scaling", "1x16", "--conv"]) == 0
    batch_rows = [("batcher", ["--seq", "128", "--max-delay-ms", "0,2", "--seconds", "2"])]
    out = capsys.readouterr().out
    if "batcher: skipped" in out:  # (no torch: the batcher's model is a torch export)
        batch_rows = []
    conv = [("conv", ["-m", "benchmarks.bench_conv", "--small"])]
    if "cooperative_matrix" in dev.capabilities:  # the tensor-core kernels too (a GPU)
        conv.append(("conv", ["-m", "benchmarks.bench_conv", "--kernels", "--quick"]))
    assert calls == [("decoders", ["--decoders", "gpt2"]), *conv, ("scaling", ["--shapes", "1x16", "--seconds", "2"]),
                     ("shared", ["--copies", "2", "--shapes", "1x128,8x128", "--seconds", "1"]), *batch_rows]
    assert "python -m kompute_dml.bench.scaling" in out and "python -m kompute_dml.bench.shared_device" in out
    assert not batch_rows or "python -m kompute_dml.bench.batcher" in out
