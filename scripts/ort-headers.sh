#!/usr/bin/env bash
# onnxruntime's C API headers (with the plugin EP API, onnxruntime >= 1.23), which build the
# plugin EP library (native/ort_ep). Debian 12 has no package of them, so they come from the
# arch-independent headers of Debian's libonnxruntime-dev in unstable: the .deb named by sid's
# package index, checked against the SHA256 that index gives, unpacked into .cache/ort-headers
# (and a machine-wide copy, like the kp wheel). Prints the include directory; exits 1, saying
# why on stderr, where they cannot be had (no network): the package then builds without the EP.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="$PWD/.cache/ort-headers"
SHARED="${KDML_ORT_HEADERS_CACHE:-/var/cache/kompute-dml/ort-headers}"
MIRROR="${KDML_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
MIN_API=23
ok() { [ -f "$1/onnxruntime_ep_c_api.h" ] && \
       [ "$(sed -n 's/^#define ORT_API_VERSION \([0-9]*\).*/\1/p' "$1/onnxruntime_c_api.h")" -ge $MIN_API ]; }
for dir in "$DEST/include" "$SHARED/include"; do
  if ok "$dir"; then
    [ "$dir" = "$DEST/include" ] || { mkdir -p "$DEST" && cp -r "$dir" "$DEST/"; }
    echo "$DEST/include"; exit 0
  fi
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! curl -fsS --max-time 120 "$MIRROR/dists/sid/main/binary-amd64/Packages.xz" -o "$tmp/Packages.xz"; then
  echo "ort-headers: cannot reach $MIRROR (the plugin EP is built only with onnxruntime's headers)" >&2; exit 1
fi
xz -dc "$tmp/Packages.xz" > "$tmp/Packages"
entry=$(awk '/^Package: libonnxruntime-dev$/{p=1} p&&/^$/{exit} p' "$tmp/Packages")
file=$(printf '%s\n' "$entry" | sed -n 's/^Filename: //p')
sha=$(printf '%s\n' "$entry" | sed -n 's/^SHA256: //p')
if [ -z "$file" ] || [ -z "$sha" ]; then echo "ort-headers: no libonnxruntime-dev in sid's index" >&2; exit 1; fi
curl -fsS --max-time 300 "$MIRROR/$file" -o "$tmp/dev.deb"
echo "$sha  $tmp/dev.deb" | sha256sum -c --quiet - || { echo "ort-headers: $file fails its SHA256" >&2; exit 1; }
dpkg-deb -x "$tmp/dev.deb" "$tmp/x"
inc="$tmp/x/usr/include/onnxruntime"
ok "$inc" || { echo "ort-headers: $file has no plugin EP API (ORT_API_VERSION < $MIN_API)" >&2; exit 1; }
rm -rf "$DEST/include" && mkdir -p "$DEST/include"
cp "$inc"/*.h "$DEST/include/"
basename "$file" > "$DEST/include/SOURCE"
{ mkdir -p "$SHARED" && rm -rf "$SHARED/include" && cp -r "$DEST/include" "$SHARED/"; } 2>/dev/null || true
echo "$DEST/include"
