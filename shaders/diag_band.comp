#version 450
// The value band of DIAGONAL_MATRIX / DIAGONAL_MATRIX1 over an output whose other
// elements were already written by transfer commands (zero fill or input copy): each
// invocation writes at most one element, x = y + begin + k for k < band, if 0 <= x < cols.
// Used for narrow bands (a diagonal) of 32/64-bit outputs; see ops/diagonal.py.
//
// @variant diag_band_b32 ELEM_BITS=32
// @variant diag_band_b64 ELEM_BITS=64

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) writeonly buffer OutBuf { uint dst[]; };

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
#else
    dst[e] = pc.value_lo;
#endif
}
