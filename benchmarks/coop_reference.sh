#!/bin/sh
# NVIDIA's own cooperative-matrix GEMM sample on this device: the reference for what a Vulkan
# shared-memory kernel (VK_KHR_cooperative_matrix, `--shmem`) and a workgroup-scope one
# (VK_NV_cooperative_matrix2) reach here, beside which benchmarks/bench_coop.py states ours.
#
#   bash benchmarks/coop_reference.sh SAMPLE_DIR HEADERS_DIR [DIM ...]
#
# SAMPLE_DIR: a checkout of github.com/jeffbolznv/vk_cooperative_matrix_perf (MIT; it ships its
# SPIR-V precompiled); HEADERS_DIR: Vulkan-Headers' include/ new enough for its extensions (1.4.317 or
# later: VK_EXT_shader_float8; the offline bundle has 1.4.309). Neither is part of this repository: on
# an offline GPU machine, carry them (e.g. under the git-ignored .gpu/ref/). Builds with g++ and
# -lvulkan, then runs the sample per DIM (default 4096 8192) and prints one line per case: the
# tile, the layout of B and TFlops (here tera-operations per second, 2*M*N*K per multiply).
# Slow: the 8-bit cases at 4096 took about 4 minutes on the H100 (the sample fills its matrices
# on the host per case).
set -e
sample=$(cd "$1" && pwd); headers=$(cd "$2" && pwd); shift 2
out=${COOP_REFERENCE_BUILD:-/tmp/coop_reference}
mkdir -p "$out"
# only the 8-bit input types are built in (the sample tests every advertised type, about 1.5 s a
# case at 4096: minutes): one line added after its loop's `VkScopeKHR scope = target.scope;`
sed '/VkScopeKHR scope = target.scope;/a\
        if (AType != VK_COMPONENT_TYPE_SINT8_KHR \&\& AType != VK_COMPONENT_TYPE_UINT8_KHR) continue;' \
  "$sample/src/vk_cooperative_matrix_perf.cpp" > "$out/perf_8bit.cpp"
grep -q "VK_COMPONENT_TYPE_UINT8_KHR) continue;" "$out/perf_8bit.cpp" || { echo "the sample's loop changed: no 8-bit filter" >&2; exit 1; }
g++ -O2 -std=c++17 -I"$headers" -o "$out/vk_cooperative_matrix_perf" "$out/perf_8bit.cpp" -lvulkan
cd "$sample"   # the sample loads shaders/*.spv relative to the working directory
"$out/vk_cooperative_matrix_perf" --dump-coopmat-properties --dim=256 2>&1 | grep -E "int8|properties" || true
for dim in ${*:-4096 8192}; do
  echo "== --dim=$dim"
  stdbuf -oL "$out/vk_cooperative_matrix_perf" --dim="$dim" 2>&1 |
    awk '/^shader:/ {shader=$2} /cooperativeMatrixProps/ {props=$0} /TFlops/ {print shader, "|", props, "|", $0; fflush()}'
done
