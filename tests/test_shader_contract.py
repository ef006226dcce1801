"""The host/shader contract (kompute_dml/ops/contract.py) and its check in tools/build_spirv.py.

The shaders of the tree must agree with the table; a push-constant block, work-group size or
`// @variant` list that differs from it must fail the build. The failing cases compile small
shaders generated from a family's declaration (then altered), so they do not depend on what
the real shaders contain beyond the family they stand for.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kompute_dml.ops import contract
from kompute_dml.ops.contract import COPY, COPY_VEC, MMC, ShaderFamily, check_build, check_variant, reflect

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


def shader_text(fam: ShaderFamily, push=None, local=None, variants=None, member_type: str = "uint") -> str:
    """A compute shader declaring `push` (default: the family's block) and `variants`."""
    push = fam.push if push is None else push
    x, y, z = local or fam.local_size or (1, 1, 1)
    members = "\n".join(f"    {member_type if i == 1 else 'uint'} {m}" + (f"[{n}];" if n > 1 else ";")
                        for i, (m, n) in enumerate(push))
    uses = " + ".join(f"uint(pc.{m}{'[0]' if n > 1 else ''})" for m, n in push)
    lines = "\n".join(f"// @variant {v}" for v in (variants or fam.variants))
    return (f"#version 450\n{lines}\nlayout(local_size_x = {x}, local_size_y = {y}, local_size_z = {z}) in;\n"
            "layout(std430, binding = 0) buffer B { uint b[]; };\n"
            f"layout(push_constant) uniform PC {{\n{members}\n}} pc;\n"
            f"void main() {{ b[gl_GlobalInvocationID.x] = {uses}; }}\n")


def compile_text(tmp_path: Path, text: str, name: str = "t") -> bytes:
    src, out = tmp_path / f"{name}.comp", tmp_path / f"{name}.spv"
    src.write_text(text)
    subprocess.run([GLSLANG, "-V", "--target-env", "vulkan1.1", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out.read_bytes()


def test_the_tree_agrees_with_the_table():
    """Every `// @variant` line is named by a family and the reverse; every built variant's
    push-constant block and work-group size are its family's (what `make spirv` checks)."""
    declared = {name: src.name for name, (src, _) in builder().discover().items()}
    manifest = json.loads((ROOT / "kompute_dml" / "spirv" / "manifest.json").read_text())
    built = {name: (ROOT / "kompute_dml" / "spirv" / f"{name}.spv").read_bytes() for name in manifest}
    assert built, "no SPIR-V built: run make spirv"
    assert check_build(declared, built) == ([], set())


def test_family_names():
    assert COPY.name(bits=32) == "copy_b32"
    assert MMC.name(emulated="x", a="r", b="n") == "mmc8x_rn"
    assert len(MMC.variants) == len(set(MMC.variants)) == 3 * 4 * len(dict(MMC.params)["emulated"])
    assert len(contract.by_variant()) == sum(len(f.variants) for f in contract.FAMILIES)
    with pytest.raises(ValueError, match="bits=12 is not one of"):
        COPY.name(bits=12)
    with pytest.raises(ValueError, match="takes"):
        COPY.name()
    assert (COPY.words, COPY.offset("size"), COPY.offset("out_stride")) == (28, 4, 20)


@needs_glslang
def test_reflection_reads_the_block(tmp_path):
    data = compile_text(tmp_path, shader_text(COPY))
    r = reflect(data)
    assert r.push == tuple((m, 4 * w, n) for m, w, n in COPY.layout())
    assert r.local_size == COPY.local_size and r.problems == ()
    assert check_variant(COPY, "copy_b8", data) == []


@needs_glslang
@pytest.mark.parametrize("change", ["extra member", "swapped members", "shorter array", "local size", "float member"])
def test_a_changed_shader_breaks_the_contract(tmp_path, change):
    push, local, member_type = list(COPY.push), None, "uint"
    if change == "extra member":
        push.insert(3, ("extra", 1))
    elif change == "swapped members":
        push[0], push[1] = push[1], push[0]
    elif change == "shorter array":
        push[4] = ("size", 4)
    elif change == "local size":
        local = (128, 1, 1)
    else:
        member_type = "float"  # the second member
    errors = check_variant(COPY, "copy_b8", compile_text(tmp_path, shader_text(COPY, push, local, member_type=member_type)))
    expected = {"local size": "work-group size (128, 1, 1)", "float member": "out_off: not a 32-bit integer"}
    assert errors and expected.get(change, "the push-constant block is") in errors[0], errors


def test_variant_lines_and_table_must_match(tmp_path):
    (tmp_path / "copy.comp").write_text(shader_text(COPY, variants=("copy_b8", "copy_b16", "copy_b32", "copy_b128")))
    declared = {name: src.name for name, (src, _) in builder().discover(tmp_path).items()}
    errors, _ = check_build(declared, {}, (COPY,))
    assert errors == [
        "shaders/copy.comp declares variant(s) copy_b128 that no family of kompute_dml/ops/contract.py names",
        "kompute_dml/ops/contract.py names variant(s) copy_b64 that no `// @variant` line of shaders/copy.comp declares",
    ]


@needs_glslang
@pytest.mark.parametrize("agrees", [True, False])
def test_build_fails_and_drops_the_variant(tmp_path, monkeypatch, capsys, agrees):
    """tools/build_spirv.build on one shader: exit 1 and the variant out of the manifest where
    its push-constant block differs from the table, exit 0 and in the manifest where it agrees."""
    b = builder()
    src_dir, out_dir = tmp_path / "shaders", tmp_path / "spirv"
    src_dir.mkdir()
    push = COPY_VEC.push if agrees else (*COPY_VEC.push, ("first_vec", 1))
    (src_dir / "copy_vec.comp").write_text(shader_text(COPY_VEC, push))
    discover = b.discover
    monkeypatch.setattr(b, "OUT_DIR", out_dir)
    monkeypatch.setattr(b, "discover", lambda: discover(src_dir))
    fake = type(sys)("contract_subset")
    fake.check_build = functools.partial(check_build, families=(COPY_VEC,))  # type: ignore[attr-defined]
    monkeypatch.setattr(b, "load_contract", lambda: fake)
    rc = b.build(force=True, quiet=True)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    err = capsys.readouterr().err
    if agrees:
        assert (rc, "copy_vec" in manifest) == (0, True), err
    else:
        assert (rc, "copy_vec" in manifest) == (1, False)
        assert "copy_vec (copy_vec.comp): the push-constant block is {in_off@0, out_off@1, count@2, first_vec@3}" in err
