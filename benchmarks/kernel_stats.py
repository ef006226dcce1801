"""What the driver made of the matrix-product kernels: registers, shared and local memory per
pipeline (VK_KHR_pipeline_executable_properties, through benchmarks/vk_stats/pipeline_stats.cpp),
and the work groups per SM they allow, for the production choice of each shape and for
alternative tile configurations, so occupancy is read rather than guessed.

    python -m benchmarks.kernel_stats [--shapes 8192x8192x8192,4096x4096x4096] [--alternatives]
        [--configs 128x128x64/64x64,...] [--include DIR]
    python -m benchmarks.kernel_stats --shapes "" --overlay benchmarks/out/spirv_attention \
        --variants mha_f32_blocked64:256:112:13,mha_f32_blocked64x3:256:112:13

Builds the C++ tool with g++ (-lvulkan; Vulkan headers with VK_KHR_cooperative_matrix, e.g. the
GPU bundle's), then per case compiles the operator through kompute_dml (the variant and
specialization constants it would dispatch) and runs the tool on that SPIR-V. The per-SM
bounds use the H100's 65,536 registers, 228 KiB shared memory and 64 warps per SM (--sm-*
to change them); registers are allocated per warp in units of 256 (8 per invocation). The shared
bound overstates what the driver gives these pipelines: work groups of 18 KiB ran two per SM, never
three (`coop_peak.py --source shared`, benchmarks/history/README.md "what a GEMM step costs"); pass
`--sm-shared` to apply a measured figure.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import kompute_dml as kdml
from kompute_dml.ops.matmul_coop import TileConfig, compile_coop
from kompute_dml.ops.matmul_integer import compile_matmul_integer
from kompute_dml.runtime.shaders import load_spirv

HERE = Path(__file__).resolve().parent
D = kdml.DataType
# alternatives to the production tile (bench_coop.py's staging entries that ran there)
ALTERNATIVES = {
    "128x128x64 w64x32 2 stages lean Bn": TileConfig(128, 128, 64, 64, 32, lean=True, b_rows="n"),
    "128x128x64 w64x64 2 stages lean Bn": TileConfig(128, 128, 64, 64, 64, lean=True, b_rows="n"),
    "128x256x64 w64x64 1 stage lean Bn": TileConfig(128, 256, 64, 64, 64, stages=1, lean=True, b_rows="n"),
    "64x64x128 w32x32 1 stage lean Bn": TileConfig(64, 64, 128, 32, 32, stages=1, lean=True, b_rows="n"),
}


def build_tool(include: str | None) -> Path:
    out = Path(tempfile.gettempdir()) / "kdml_pipeline_stats"
    cmd = ["g++", "-O2", "-std=c++17", *(["-I", include] if include else []), "-o", str(out),
           str(HERE / "vk_stats" / "pipeline_stats.cpp"), "-lvulkan"]
    subprocess.run(cmd, check=True)
    return out


def desc_for(m: int, k: int, n: int, b_colmajor: bool) -> kdml.MatrixMultiplyIntegerToFloatDesc:
    f = kdml.TensorDesc
    return kdml.MatrixMultiplyIntegerToFloatDesc(
        f(D.INT8, (m, k)), f(D.FLOAT32, (1, 1)), None, f(D.INT8, (k, n), (1, k) if b_colmajor else None),
        f(D.FLOAT32, (1, 1)), None, None, f(D.FLOAT32, (m, n)))


def stats(tool: Path, variant: str, push_words: int, spec: tuple[int, ...], bindings: int = 8) -> dict[str, str]:
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(load_spirv(variant))
        f.flush()
        args = [str(tool), f.name, str(4 * push_words), str(bindings), *(f"{i}={v}" for i, v in enumerate(spec))]
        res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode:
        return {"error": (res.stdout + res.stderr).strip().splitlines()[-1]}
    out = {}
    for line in res.stdout.splitlines():
        if line.startswith("stat "):
            name, val = line.split("|", 1)[1].split(" = ", 1)
            out[name.strip()] = val.strip()
    return out


def stat(st: dict[str, str], pattern: str) -> int | None:
    """The first integer statistic whose name matches `pattern` (the driver names them)."""
    return next((int(v) for k, v in st.items() if re.search(pattern, k, re.I) and v.isdigit()), None)


def per_sm(st: dict[str, str], invocations: int, args: argparse.Namespace) -> str:
    """Work groups per SM as the warp, register and shared-memory limits allow (the driver's
    register count and shared memory size)."""
    regs, shared = stat(st, r"regist"), stat(st, r"shared")
    warps = -(-invocations // 32)
    bounds = [args.sm_warps // warps]
    if regs:
        bounds.append(args.sm_regs // (warps * 32 * (-(-regs // 8) * 8)))
    if shared:
        bounds.append(args.sm_shared // shared)
    return f"{min(bounds)} work groups per SM ({warps * min(bounds)} warps; bounds warps/regs/shared {bounds})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096,512x384x1536")
    ap.add_argument("--alternatives", action="store_true", help="also the tiles of ALTERNATIVES (largest shape)")
    ap.add_argument("--configs", help="also these tiles (coop_ksplit.py's BMxBNxBK/WMxWN[/kS][/s2][/t], "
                    "comma-separated; largest shape)")
    ap.add_argument("--include", help="Vulkan headers for the C++ tool (-I)")
    ap.add_argument("--variants", default="", help="also these variants (no specialization constants), comma-separated "
                    "NAME:INVOCATIONS:PUSH_BYTES:BINDINGS")
    ap.add_argument("--overlay", action="append", default=[], help="a folder of overlay SPIR-V (benchmarks/out/...)")
    ap.add_argument("--sm-regs", type=int, default=65536)
    ap.add_argument("--sm-shared", type=int, default=228 * 1024)
    ap.add_argument("--sm-warps", type=int, default=64)
    args = ap.parse_args()
    tool = build_tool(args.include)
    dev = kdml.Device()
    print(f"device: {dev.name}; matmul family: {dev.policy.matmul_family}")
    from kompute_dml.runtime import shaders

    for folder in args.overlay:
        shaders.add_overlay(Path(folder))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    cases = []
    for m, k, n in shapes:
        for colmajor in (True, False):
            op = compile_matmul_integer(dev, desc_for(m, k, n, colmajor))
            cases.append((f"{m}x{k}x{n} B {'col' if colmajor else 'row'}-major (production)", op))
    if args.alternatives:
        m, k, n = shapes[0]
        for name, cfg in ALTERNATIVES.items():
            try:
                cases.append((f"{m}x{k}x{n} B col-major {name}", compile_coop(dev, desc_for(m, k, n, True), config=cfg)))
            except kdml.UnsupportedError as e:
                print(f"{name}: cannot run here ({e})")
    if args.configs:
        from benchmarks.coop_ksplit import parse_config

        m, k, n = shapes[0]
        for text in args.configs.split(","):
            try:
                cases.append((f"{m}x{k}x{n} B col-major {text}", compile_coop(dev, desc_for(m, k, n, True), config=parse_config(text))))
            except kdml.UnsupportedError as e:
                print(f"{text}: cannot run here ({e})")
    for name, op in cases:
        plan = op.plans[0]
        wg = int(plan.spec[0]) if plan.spec else 0  # local_size_x_id 0 in every matrix-product shader
        st = stats(tool, plan.variant, len(plan.push), tuple(int(v) for v in plan.spec))
        print(f"\n{name}: {plan.variant} spec {tuple(plan.spec)}")
        for key, val in st.items():
            print(f"    {key} = {val}")
        if wg and "error" not in st:
            print(f"    => {per_sm(st, wg, args)}")
    for text in filter(None, args.variants.split(",")):
        name, wg, push, binds = text.split(":")
        st = stats(tool, name, int(push) // 4, (), int(binds))
        print(f"\n{name}:")
        for key, val in st.items():
            print(f"    {key} = {val}")
        if "error" not in st:
            print(f"    => {per_sm(st, int(wg), args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
