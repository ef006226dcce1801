#!/bin/sh
# Build and run vk_floor (see vk_floor.cpp): bash benchmarks/vk_floor/run.sh [N] [DEVICE]
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${VK_FLOOR_BUILD:-/tmp/vk_floor}
mkdir -p "$out"
[ -f "$here/touch.spv" ] || glslangValidator -V -o "$out/touch.spv" "$here/touch.comp" >/dev/null
spv="$here/touch.spv"; [ -f "$spv" ] || spv="$out/touch.spv"
g++ -O2 -std=c++17 -o "$out/vk_floor" "$here/vk_floor.cpp" -lvulkan
"$out/vk_floor" "$spv" "${1:-3000}" "${2:-0}"
