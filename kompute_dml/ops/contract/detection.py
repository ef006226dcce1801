"""The detection networks' families of the contract: shaders/roi_align.comp (ops/roi_align.py: ROI_ALIGN
and ROI_ALIGN1), shaders/roi_pooling.comp (ops/roi_pooling.py) and shaders/max_unpooling.comp
(ops/max_unpooling.py), read as `contract.detection.<NAME>`. Imports nothing from kompute_dml (the
build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)

# ---- ROI_ALIGN / ROI_ALIGN1: an output element per invocation. Offsets in elements (the batch
# indices' in words); the output's element count, C, the input's height and width, the output's,
# the batch count; the input's strides (N, C, H, W), the ROIs' (region, coordinate), the batch
# indices', the output's (N, C, H, W); SpatialScaleX / Y, InputPixelOffset, OutputPixelOffset,
# OutOfBoundsInputValue; Minimum / MaximumSamplesPerOutput (the maximum capped by kompute_dml's
# loop bound); flags (1: MAX, 2: NEAREST_NEIGHBOR, 4: AlignRegionsToCorners). A variant per type.
ROI_ALIGN_PUSH = block("x_off", "r_off", "b_off", "y_off", "total", "c", "ih", "iw", "oh", "ow", "n", "xs[4]", "rs[2]",
                       "bs", "ys[4]", "scale_x:f32", "scale_y:f32", "in_off:f32", "out_off:f32", "oob:f32", "min_s",
                       "max_s", "flags")
ROI_ALIGN = family("roi_align", "roi_align.comp", "roi_align_{t}", ROI_ALIGN_PUSH, _L256, t=("f32", "f16"),
                   defines=lambda t: {"F16": int(t == "f16")})
# ---- ROI_POOLING: an output element per invocation. Offsets in elements; the output's element
# count, C, the batch count, the input's height and width, PooledSize (height, width); the input's
# strides (N, C, H, W), the ROIs' (region, field), the output's (N, C, H, W); SpatialScale.
ROI_POOL_PUSH = block("x_off", "r_off", "y_off", "total", "c", "n", "ih", "iw", "ph", "pw", "xs[4]", "rs[2]", "ys[4]",
                      "scale:f32")
ROI_POOL = family("roi_pool", "roi_pooling.comp", "roi_pool_{t}", ROI_POOL_PUSH, _L256, t=("f32", "f16"),
                  defines=lambda t: {"F16": int(t == "f16")})
# ---- MAX_UNPOOLING: pass 0 an output element per invocation (zeroed), pass 1 an input element per
# invocation (its value written at its index, row-major over the output's sizes, when below the
# output's element count). Offsets in elements of their tensors; the pass, the input's and the
# output's element counts, the input's sizes, the input's, the indices' and the output's strides,
# the output's sizes. A variant per value width and index width (bits copied: every type).
UNPOOL_PUSH = block("x_off", "i_off", "y_off", "pass", "n_in", "n_out", "isz[4]", "xs[4]", "ids[4]", "ys[4]", "osz[4]")
UNPOOL = family("max_unpool", "max_unpooling.comp", "max_unpool_b{bits}_i{ib}", UNPOOL_PUSH, _L256,
                bits=(8, 16, 32, 64), ib=(32, 64), defines=lambda bits, ib: {"ELEM_BITS": bits, "INDEX_BITS": ib})
