"""Smoke test of `kompute-dml bench --quick`: it runs, and its JSON has every section.

Never asserts timings (the machine is shared); only structure and correctness flags."""

from __future__ import annotations

import json

from kompute_dml.cli import main as cli_main


def test_bench_quick_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    assert cli_main(["bench", "--quick", "--rounds", "2", "--json", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "ceiling" in printed and "latency" in printed
    r = json.loads(out.read_text())
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
    for key in ("eager_execute_us", "eager_functional_us", "recorded_per_op_us_distinct_outputs",
                "recorded_per_op_us_same_output", "recorded_per_op_us_chain"):
        assert lat[key] > 0, key
    assert {g["goal"] for g in r["goals"]} and all("met" in g for g in r["goals"])
    assert png.stat().st_size > 10_000
