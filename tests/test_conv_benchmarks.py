"""The convolution benchmarks' own correctness on any device: benchmarks/coop_peak_f16.py (the float16
cooperative-matrix ceiling: its emulated variants run the harness, data layout and exact check; the
check fails on a wrong count of trips; the tensor-core run where the device has them) and
`bench_conv --kernels --quick` (benchmarks/bench_conv_kernels.py: every contender compiles, runs and
is within its precision of the float64 reference); `--swish-forms` on small layers."""

from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pytest


def _peak_overlay_or_skip() -> None:
    """The float16 ceiling's overlay (benchmarks/overlay_peak.py) is built where its SPIR-V is
    stale; a machine without glslangValidator (the GPU machine) runs it only where it was carried."""
    from benchmarks import overlay_peak

    if overlay_peak.build() != 0 and shutil.which("glslangValidator") is None:
        pytest.skip("the coop_peak overlay is not built and glslangValidator is missing: it cannot be built here")


def test_coop_peak_f16_emulated_checks(dev):
    _peak_overlay_or_skip()
    from benchmarks.coop_peak_f16 import CaseF16, measure
    from benchmarks.overlay_peak import PeakConfigF16

    res = measure(dev, emulated=True, quick=True, target_ms=1.0, repeats=1, log=lambda m: None)
    assert res is not None and res["rows"] and all(r["check"] for r in res["rows"]) and res["best"] is not None
    case = CaseF16(dev, PeakConfigF16(2, 2, 3, True), 3, np.random.default_rng(1))
    case.run(3)
    assert case.check(3)[0] and not case.check(2)[0]


def test_coop_peak_f16_tensor_cores(dev):
    _peak_overlay_or_skip()
    from benchmarks.coop_peak_f16 import measure
    from benchmarks.overlay_peak import F16_SHAPE, unavailable

    why = unavailable(dev, False, F16_SHAPE)
    if why:
        assert measure(dev, quick=True, log=lambda m: None) is None
        pytest.skip(f"the tensor-core run: {why}")
    res = measure(dev, quick=True, target_ms=1.0, repeats=1, log=lambda m: None)
    assert res["best"] is not None and all(r["check"] for r in res["rows"])


def test_bench_conv_kernels_quick(monkeypatch, tmp_path):
    _peak_overlay_or_skip()
    import benchmarks.bench_conv_kernels as bk

    monkeypatch.setattr(bk, "ROWS", bk.ROWS[:1] + bk.ROWS[-1:])  # a 3x3 and a 1x1 layer
    out = tmp_path / "rows.json"
    bk.run_kernels(argparse.Namespace(quick=True, tiles=False, rounds=1, n=2, json=str(out)))
    rows = json.loads(out.read_text())["rows"]
    kernels = {(r["type"], r["kernel"]) for r in rows}
    assert {("float16", "tiled"), ("float16", "coopmat"), ("float32", "coopmat f16 w")} <= kernels
    for r in rows:  # tiled FLOAT32 at float32's precision, the half-precision kernels at float16's
        assert r["err"] < (1e-5 if (r["type"], r["kernel"]) == ("float32", "tiled") else 2e-3), r
        assert (r["ceiling"] is not None) == r["kernel"].startswith("coopmat")  # (emulated here: no measurement)


def test_bench_small_layers_quick(monkeypatch, capsys):
    """benchmarks/bench_small_layers.py on two layers and a pool: every candidate compiles, runs and
    agrees with the others (the script stops where they disagree)."""
    import benchmarks.bench_small_layers as bs

    monkeypatch.setattr(bs, "CONVS", [bs.CONVS[0], bs.CONVS[-1]])
    monkeypatch.setattr(bs, "POOLS", [bs.POOLS[0]])
    monkeypatch.setattr("sys.argv", ["bench_small_layers", "--quick", "--rounds", "1", "--n", "2"])
    bs.main()
    out = capsys.readouterr().out
    assert out.count(" | ") > 10 and "dispatches" in out and "pool_avg" in out


def test_activation_overlays_quick(monkeypatch, capsys):
    """`bench_conv --swish-forms` (benchmarks/overlay_act.py) on small layers: the overlay's exact forms
    give the policy's bits (the product's form, the exact form in every output), so their timings
    compare the same results."""
    import benchmarks.bench_conv_pointwise as bp
    from benchmarks import overlay_act

    try:
        overlay_act.load()
    except RuntimeError:
        if shutil.which("glslangValidator") is None:
            pytest.skip("the activation overlay is not built and glslangValidator is missing: it cannot be built here")
        raise
    monkeypatch.setattr(bp, "FORM_ROWS", [(1, 8, 24, 10, bp.SWISH), (2, 8, 16, 6, bp.HARD_SWISH)])
    args = argparse.Namespace(rounds=1, n=2)
    bp.run_forms(args)
    out = capsys.readouterr().out
    same = [line.split()[-1] for line in out.splitlines() if line.lstrip().startswith(("s0 ", "s1 "))]
    assert same == ["True"] * 4, out
