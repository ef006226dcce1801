#!/usr/bin/env bash
# One-command, idempotent set-up for kompute_dml on Debian 12 (run as root).
#   1. Debian packages (Vulkan loader + lavapipe + validation layers + glslang)
#   2. a virtual environment at .venv
#   3. kp 0.9.0 built offline from its PyPI source, wheel cached in .cache/wheels
#   4. the project installed in editable mode (which compiles the SPIR-V)
# Each step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
WHEELS="$ROOT/.cache/wheels"
# A machine-wide copy of the kp wheel lets a fresh clone skip the 70 s build.
SHARED_WHEELS="${KDML_WHEEL_CACHE:-/var/cache/kompute-dml/wheels}"
KP_VERSION=0.9.0

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# ---- 1. Debian packages -------------------------------------------------------
DEB_PACKAGES=(libvulkan-dev libvulkan1 mesa-vulkan-drivers glslang-tools spirv-tools
              libfmt-dev pybind11-dev vulkan-validationlayers vulkan-tools
              cmake g++ make patch python3-venv python3-dev curl xz-utils)
missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ---- 2. virtual environment -----------------------------------------------------
if [ ! -x "$PY" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
stamp_reqs="$VENV/.requirements.sha"
reqs_sha=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ "$(cat "$stamp_reqs" 2>/dev/null)" != "$reqs_sha" ]; then
  say "installing Python requirements"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q -r requirements-dev.txt
  echo "$reqs_sha" > "$stamp_reqs"
fi

# ---- 3. kp, patched, built offline and cached -------------------------------------
# kp 0.9.0's PyPI source with the patch series scripts/kp-patches/NN-*.patch applied in order;
# what each patch adds, and the patch levels 1-13: scripts/kp-patches/README.md.
# The patched build is 0.9.0+kdml17 (pyproject.toml pins it).
KP_LOCAL_VERSION="$KP_VERSION+kdml17"
KP_PATCH_LEVEL=17
PATCHES=("$ROOT"/scripts/kp-patches/[0-9][0-9]-*.patch)
# The wheel's cache key: the series concatenated in order (what scripts/kp-patch.sh prints).
patch_sha=$(bash "$ROOT/scripts/kp-patch.sh" | sha256sum | cut -c1-12)
# kp counts as installed when it is built from this very series (a stamp beside the venv) and
# has the patches' operations.
kp_stamp="$VENV/.kp-patch.sha"
kp_ok() { [ "$(cat "$kp_stamp" 2>/dev/null)" = "$patch_sha" ] && "$PY" -c "import kp, sys; sys.exit(0 if getattr(kp, 'kdml_patch_level', 0) >= $KP_PATCH_LEVEL and all(hasattr(kp, n) for n in ('OpMemoryBarrier', 'OpCopyRegions', 'OpFillRegions', 'OpDispatch', 'OpGlobalBarrier')) else 1)" 2>/dev/null; }
if ! kp_ok; then
  mkdir -p "$WHEELS/$patch_sha"
  whl=$(ls "$WHEELS/$patch_sha"/kp-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ] && ls "$SHARED_WHEELS/$patch_sha"/kp-*.whl >/dev/null 2>&1; then
    cp "$SHARED_WHEELS/$patch_sha"/kp-*.whl "$WHEELS/$patch_sha"/
    whl=$(ls "$WHEELS/$patch_sha"/kp-*.whl | head -1)
  fi
  if [ -z "$whl" ]; then
    say "building kp $KP_LOCAL_VERSION from its PyPI source (offline, about 70 s)"
    build="$ROOT/.cache/kp-build"
    rm -rf "$build" && mkdir -p "$build"
    "$PY" -m pip download -q --no-deps --no-binary :all: -d "$build" "kp==$KP_VERSION"
    tar xzf "$build/kp-$KP_VERSION.tar.gz" -C "$build"
    for p in "${PATCHES[@]}"; do patch -d "$build/kp-$KP_VERSION" -p1 < "$p"; done
    PATH="$VENV/bin:$PATH" \
    KOMPUTE_OPT_INSTALL=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
    KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON \
    KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON \
      "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$WHEELS/$patch_sha" "$build/kp-$KP_VERSION"
    whl=$(ls "$WHEELS/$patch_sha"/kp-*.whl | head -1)
    rm -rf "$build"
    { mkdir -p "$SHARED_WHEELS/$patch_sha" && cp "$whl" "$SHARED_WHEELS/$patch_sha"/; } 2>/dev/null || true
  fi
  say "installing $(basename "$whl")"
  "$PY" -m pip install -q --no-deps --force-reinstall "$whl"
  echo "$patch_sha" > "$kp_stamp"
  kp_ok || { echo "kp installed but the kompute_dml patch ops are missing" >&2; exit 1; }
fi

# ---- 4. the project, editable, with its SPIR-V ----------------------------------
if ! "$PY" -c "import kompute_dml" 2>/dev/null || ! "$VENV/bin/kompute-dml" --help >/dev/null 2>&1; then  # (entry point moved: reinstall)
  say "installing kompute_dml in editable mode"
  "$PY" -m pip install -q --no-build-isolation --no-deps -e .
fi
# The onnxruntime plugin EP (native/ort_ep -> kompute_dml/ort/*.so), rebuilt when a source is newer
# than the library; built only where onnxruntime's headers can be had (scripts/ort-headers.sh).
ep_lib=$(ls kompute_dml/ort/libkompute_dml_ep*.so 2>/dev/null | head -1 || true)
if [ -z "$ep_lib" ] || [ -n "$(find native/ort_ep setup.py -newer "$ep_lib" -type f 2>/dev/null)" ]; then
  say "building the onnxruntime plugin EP (native/ort_ep)"
  "$PY" setup.py -q build_ext --inplace || say "the plugin EP was not built: kompute_dml.ort is unavailable"
fi
# Always re-check the SPIR-V: cheap when nothing changed, rebuilds stale variants.
"$PY" tools/build_spirv.py --quiet
say "ready: $("$PY" -c 'import kp, kompute_dml; print("kompute_dml", kompute_dml.__version__)')"
