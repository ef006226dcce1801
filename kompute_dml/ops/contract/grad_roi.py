"""ROI_ALIGN_GRAD's families of the contract (ops/grad_roi_align.py, shaders/grad_roi_align.comp), read
as `contract.grad_roi.<NAME>`. Imports nothing from kompute_dml (the build loads the contract
package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)

# ---- ROI_ALIGN_GRAD: two stages. `win` (MAX only): an InputGradient element (roi, c, y, x) per
# invocation, recomputing ROI_ALIGN1's samples and storing which one its maximum was (the operator's
# scratch); `gather`: an OutputGradient element (n, c, y, x) per invocation, summing the samples of
# every region that read it (no atomics). Offsets in elements (x: InputTensor, g: InputGradientTensor,
# r: ROITensor, y: OutputGradientTensor; b: BatchIndicesTensor in words); the input's height, width
# and strides (N, C, H, W), InputPixelOffset, OutputPixelOffset, OutOfBoundsInputValue, Minimum /
# MaximumSamplesPerOutput (capped as ROI_ALIGN1's) and flags (1: MAX, 2: NEAREST_NEIGHBOR,
# 4: AlignRegionsToCorners): the members shaders/roi_align_common.glsl reads, named as ROI_ALIGN_PUSH's.
# The rest of the geometry is the operator's constant. A variant per stage and type.
GRAD_ROI_PUSH = block("x_off", "g_off", "r_off", "b_off", "y_off", "ih", "iw", "xs[4]", "in_off:f32", "out_off:f32",
                      "oob:f32", "min_s", "max_s", "flags")
GRAD_ROI = family("grad_roi_align", "grad_roi_align.comp", "grad_roi_align_{k}_{t}", GRAD_ROI_PUSH, _L256,
                  k=("win", "gather"), t=("f32", "f16"),
                  defines=lambda k, t: {"WIN": int(k == "win"), "F16": int(t == "f16")})
