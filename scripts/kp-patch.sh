#!/usr/bin/env bash
# Print kompute_dml's kp 0.9.0 patch series (scripts/kp-patches/NN-*.patch) concatenated in
# order: one patch, which GNU patch applies section by section, giving the same tree as the
# series. scripts/setup.sh keys its kp wheel cache by this output's sha-256. A GPU machine's
# .gpu/setup-offline.sh reads the single file, so a command there starts with
#   bash scripts/kp-patch.sh > scripts/kp-0.9.0-kompute-dml.patch   (ignored by git)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/kp-patches"
cat [0-9][0-9]-*.patch
