#version 450
// The value band of DIAGONAL_MATRIX / DIAGONAL_MATRIX1 over an output whose other
// elements were already written by transfer commands (zero fill or input copy): each
// invocation writes at most one element, x = y + begin + k for k < band, if 0 <= x < cols.
// Used for narrow bands (a diagonal); see ops/diagonal.py. 8/16-bit elements are merged
// into their word with STORE_FIELD (the neighbours are other output elements, already
// written by the fill, and possibly other invocations' band elements).
//
// @variant diag_band_b8  ELEM_BITS=8
// @variant diag_band_b16 ELEM_BITS=16
// @variant diag_band_b32 ELEM_BITS=32
// @variant diag_band_b64 ELEM_BITS=64

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
#if ELEM_BITS >= 32
layout(std430, binding = 0) writeonly buffer OutBuf { uint dst[]; };
#else
layout(std430, binding = 0) buffer OutBuf { uint dst[]; };
#endif

layout(push_constant) uniform PC {
    uint out_off;     // element offset of element 0
    uint total;       // rows_total * band invocations
    uint band;        // value elements per row at most
    uint rows;        // matrix height
    uint cols;        // matrix width
    int begin;        // clamped to [-(rows + band), cols] on the host: no overflow below
    uint row_stride;  // output strides, in elements
    uint b1_size;     // inner batch dimension (1 if none)
    uint b1_stride;
    uint b0_stride;   // outer batch dimension
    uint value_lo;
    uint value_hi;
} pc;

void main() {
    uint i = linear_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= pc.total) return;
    uint r = i / pc.band;
    uint k = i - r * pc.band;
    uint y = r % pc.rows;
    uint rb = r / pc.rows;
    int x = int(y) + pc.begin + int(k);
    if (x < 0 || uint(x) >= pc.cols) return;
    uint b1 = rb % pc.b1_size;
    uint b0 = rb / pc.b1_size;
    uint e = pc.out_off + b0 * pc.b0_stride + b1 * pc.b1_stride + y * pc.row_stride + uint(x);
#if ELEM_BITS == 64
    dst[2u * e] = pc.value_lo;
    dst[2u * e + 1u] = pc.value_hi;
#elif ELEM_BITS == 32
    dst[e] = pc.value_lo;
#else
    const uint per_word = 32u / uint(ELEM_BITS);
    uint sh = (e % per_word) * uint(ELEM_BITS);
    STORE_FIELD(dst, e / per_word, sh, uint(ELEM_BITS), pc.value_lo);
#endif
}
