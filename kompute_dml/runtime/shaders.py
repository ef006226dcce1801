"""Loads the SPIR-V variants built by tools/build_spirv.py, refusing missing or stale ones, and
variants that need device capabilities a device did not enable."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from ..core.errors import DeviceError, UnsupportedError

SPIRV_DIR = Path(__file__).resolve().parents[1] / "spirv"
# Present in a source checkout / editable install; absent in an installed wheel.
SOURCE_DIR = Path(__file__).resolve().parents[2] / "shaders"
FIX = "rebuild it with `make spirv` (or `pip install -e .`, which runs the same build)"


class ShaderBuildError(DeviceError):
    """The SPIR-V for a shader variant is missing or older than its GLSL source."""


_OVERLAYS: list[Path] = []  # add_overlay: benchmark-only SPIR-V directories


def add_overlay(spirv_dir: Path) -> None:
    """Also load the variants of a benchmark overlay's build (tools/build_spirv.py --overlay;
    benchmarks/overlay_*.py): its directory's manifest joins the production one for this process."""
    spirv_dir = Path(spirv_dir).resolve()
    if spirv_dir not in _OVERLAYS:
        _OVERLAYS.append(spirv_dir)
        _manifest.cache_clear()
        load_spirv.cache_clear()


@functools.lru_cache(maxsize=1)
def _manifest() -> dict[str, dict[str, object]]:
    """variant -> its manifest entry ("dir": where its .spv lies), the production build's and the overlays'."""
    out: dict[str, dict[str, object]] = {}
    for spirv_dir in (SPIRV_DIR, *_OVERLAYS):
        path = spirv_dir / "manifest.json"
        try:
            data: dict[str, dict[str, object]] = json.loads(path.read_text())
        except (OSError, ValueError):
            raise ShaderBuildError(f"SPIR-V manifest {path} is missing: {FIX}") from None
        out.update({name: {**entry, "dir": str(spirv_dir)} for name, entry in data.items() if name not in out})
    return out


def variant_digest(name: str) -> str | None:
    """The sha256 of variant `name`'s built SPIR-V (None: no such variant)."""
    entry = _manifest().get(name)
    return None if entry is None else str(entry.get("sha256"))


@functools.lru_cache(maxsize=1)
def _builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("_kdml_build_spirv", SOURCE_DIR.parent / "tools" / "build_spirv.py")
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def _table_inputs(source: str) -> dict[str, dict[str, str]]:
    """The compile inputs of each variant of the families of shader `source`, as the family table
    (kompute_dml/ops/contract) gives them now: its #defines and generated push block. Only that
    source's families are expanded (the whole table took 0.18 s of a process's first run). Empty
    where the tree has no table (an installed wheel)."""
    builder = _builder()
    if builder is None or not builder.CONTRACT.exists():
        return {}
    families = tuple(f for f in builder.load_contract().FAMILIES if f.source == source)
    return {name: inputs for name, (_, inputs) in builder.discover(families, shader_dir=SOURCE_DIR).items()}


@functools.cache
def built_after_sources(spirv_dir: Path, source_dir: Path) -> bool:
    """True where the production manifest was written after every file the build reads (the
    shaders, kompute_dml/ops with its contract, tools/build_spirv.py): the build checked each
    variant's digest against those files when it wrote the manifest, so none is stale and the
    per-variant check (the contract's import and the digests: 90 ms of a first run on the H100)
    can be skipped. Any such file newer than the manifest (an edit, a checkout) means the check."""
    try:
        built = (spirv_dir / "manifest.json").stat().st_mtime_ns
        ops = spirv_dir.parent / "ops"
        inputs = [*source_dir.rglob("*"), *ops.glob("*.py"), *(ops / "contract").glob("*.py"),
                  source_dir.parent / "tools" / "build_spirv.py"]
        return all(p.stat().st_mtime_ns < built for p in inputs)
    except OSError:
        return False


@functools.cache
def load_spirv(name: str) -> bytes:
    entry = _manifest().get(name)
    spv = Path(str(entry["dir"])) / f"{name}.spv" if entry is not None else SPIRV_DIR / f"{name}.spv"
    if entry is None or not spv.exists():
        raise ShaderBuildError(f"SPIR-V variant {name!r} is missing from {SPIRV_DIR}: {FIX}")
    src = SOURCE_DIR / str(entry["source"])
    checked = entry["dir"] == str(SPIRV_DIR) and built_after_sources(SPIRV_DIR, SOURCE_DIR)
    if not checked and src.exists() and (SOURCE_DIR.parent / "tools" / "build_spirv.py").exists():
        builder = _builder()
        if builder is not None:
            # the table's inputs where it names the variant (a changed push block or #define is
            # stale too), else the manifest's (a benchmark overlay's variants)
            defines = _table_inputs(str(entry["source"])).get(name) or {str(k): str(v) for k, v in dict(entry["defines"]).items()}  # type: ignore[call-overload]
            if builder.source_digest(src, defines) != entry["sha256"]:
                raise ShaderBuildError(f"SPIR-V variant {name!r} is stale: {src.name} or its family in "
                                       f"kompute_dml/ops/contract changed since it was built; {FIX}")
    data = spv.read_bytes()
    if len(data) % 4 or data[:4] != b"\x03\x02\x23\x07":
        raise ShaderBuildError(f"{spv} is not a SPIR-V module: {FIX}")
    return data


def variant_names() -> list[str]:
    return sorted(_manifest())


def required_capabilities(name: str) -> frozenset[str]:
    """The device capabilities (kompute_dml/runtime/policy.py names) variant `name`'s SPIR-V declares,
    as recorded by tools/build_spirv.py from its OpCapability instructions."""
    entry = _manifest().get(name)
    if entry is None:
        raise ShaderBuildError(f"SPIR-V variant {name!r} is missing from {SPIRV_DIR}: {FIX}")
    return frozenset(str(c) for c in entry.get("capabilities", ()))  # type: ignore[attr-defined]


def check_capabilities(name: str, enabled: frozenset[str]) -> None:
    """UnsupportedError naming what is missing where variant `name` needs capabilities beyond
    `enabled` (a device's `capabilities`): refused here, never handed to the driver."""
    missing = sorted(required_capabilities(name) - enabled)
    if missing:
        raise UnsupportedError(
            f"kernel: shader variant {name!r} needs the device capabilit{'ies' if len(missing) > 1 else 'y'} "
            f"{', '.join(missing)}, which the device did not enable (enabled: {', '.join(sorted(enabled)) or 'none'})"
        )
