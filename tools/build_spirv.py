#!/usr/bin/env python3
"""Compile shaders/*.comp to SPIR-V, one file per declared variant.

A shader declares its variants in comment lines:
    // @variant copy_b8  ELEM_BITS=8
Each variant is compiled with glslangValidator and those #defines into
kompute_dml/spirv/<name>.spv. kompute_dml/spirv/manifest.json records a hash of the
source (with its #includes), the defines and the compiler flags, so that unchanged
variants are skipped and the runtime can detect stale SPIR-V.

This file is imported by setup.py (build_py) and run by `make spirv`; it uses only the
standard library.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHADER_DIR = ROOT / "shaders"
OUT_DIR = ROOT / "kompute_dml" / "spirv"
FLAGS = ["-V", "--target-env", "vulkan1.1"]
_VARIANT_RE = re.compile(r"^//\s*@variant\s+(\w+)((?:\s+\w+=\S+)*)\s*$")
_INCLUDE_RE = re.compile(r'^\s*#include\s+"([^"]+)"', re.M)


def source_digest(path: Path, defines: dict[str, str], shader_dir: Path = SHADER_DIR) -> str:
    """Hash of a shader's text, every file it includes, its defines and the flags."""
    h = hashlib.sha256()
    seen: set[Path] = set()

    def feed(p: Path) -> None:
        if p in seen:
            return
        seen.add(p)
        text = p.read_text()
        h.update(p.name.encode() + b"\0" + text.encode())
        for inc in _INCLUDE_RE.findall(text):
            feed(shader_dir / inc)

    feed(path)
    h.update(json.dumps([sorted(defines.items()), FLAGS]).encode())
    return h.hexdigest()


def discover(shader_dir: Path = SHADER_DIR) -> dict[str, tuple[Path, dict[str, str]]]:
    variants: dict[str, tuple[Path, dict[str, str]]] = {}
    for src in sorted(shader_dir.glob("*.comp")):
        for line in src.read_text().splitlines():
            m = _VARIANT_RE.match(line.strip())
            if not m:
                continue
            name = m.group(1)
            if name in variants:
                raise SystemExit(f"variant {name} declared twice ({variants[name][0].name}, {src.name})")
            defines = dict(kv.split("=", 1) for kv in m.group(2).split())
            variants[name] = (src, defines)
    return variants


def _compile(glslang: str, name: str, src: Path, defines: dict[str, str], out: Path) -> str | None:
    cmd = [glslang, *FLAGS, *[f"-D{k}={v}" for k, v in defines.items()], "-o", str(out), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return f"{name} ({src.name} {defines}):\n{res.stdout}{res.stderr}"
    return None


def build(force: bool = False, quiet: bool = False) -> int:
    glslang = shutil.which("glslangValidator")
    if glslang is None:
        print("glslangValidator not found: install Debian's glslang-tools (make test does it)", file=sys.stderr)
        return 1
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    manifest_path = OUT_DIR / "manifest.json"
    try:
        old = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        old = {}
    variants = discover()
    manifest: dict[str, dict[str, object]] = {}
    jobs = []
    for name, (src, defines) in variants.items():
        digest = source_digest(src, defines)
        manifest[name] = {"source": src.name, "defines": defines, "sha256": digest}
        out = OUT_DIR / f"{name}.spv"
        if not force and out.exists() and old.get(name, {}).get("sha256") == digest:
            continue
        jobs.append((name, src, defines, out))
    errors = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for err in pool.map(lambda j: _compile(glslang, *j), jobs):
            if err:
                errors.append(err)
    for stale in OUT_DIR.glob("*.spv"):
        if stale.stem not in variants:
            stale.unlink()
    if errors:
        print("SPIR-V build failed:\n" + "\n".join(errors), file=sys.stderr)
        for name, *_ in jobs:
            manifest.pop(name, None)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if not quiet:
        print(f"SPIR-V: {len(jobs)} compiled, {len(variants) - len(jobs)} up to date -> {OUT_DIR}")
    return 1 if errors else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="recompile every variant")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    return build(force=args.force, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
