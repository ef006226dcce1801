#version 450
// Strided element-wise copy: ACTIVATION_IDENTITY and kdml.copy for every data type.
// The copy is bitwise (identity is exact for NaN payloads and signed zeros), so
// variants differ only by element width.
//
// @variant copy_b8   ELEM_BITS=8
// @variant copy_b16  ELEM_BITS=16
// @variant copy_b32  ELEM_BITS=32
// @variant copy_b64  ELEM_BITS=64
//
// Each invocation handles ELEMS_PER_INV consecutive output elements (row-major over
// the merged shape). For sub-word types that is one 32-bit word's worth, so when the
// output run is contiguous and word-aligned the word is written whole, with no
// atomics; otherwise each element is merged into its word with atomicAnd/atomicOr so
// that neighbouring bytes that are not output elements never change.

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
layout(std430, binding = 1) buffer OutBuf { uint dst[]; };

#define MAX_RANK 8
layout(push_constant) uniform PC {
    uint in_off;    // offset of element 0, in elements
    uint out_off;
    uint count;     // number of elements
    uint rank;      // merged dimension count, 1..8
    uint size[MAX_RANK];
    uint in_stride[MAX_RANK];
    uint out_stride[MAX_RANK];
} pc;

#if ELEM_BITS == 64
#define ELEMS_PER_INV 1u
#else
#define ELEMS_PER_INV (32u / ELEM_BITS)
#endif

void main() {
    uint inv = linear_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint first = inv * ELEMS_PER_INV;
    if (first >= pc.count) return;
    uint n = min(ELEMS_PER_INV, pc.count - first);

    // Coordinates of `first`, then walk forward with carries.
    uint coord[MAX_RANK];
    uint rem = first;
    for (int d = int(pc.rank) - 1; d >= 0; --d) {
        coord[d] = rem % pc.size[d];
        rem /= pc.size[d];
    }
    uint in_addr = pc.in_off, out_addr = pc.out_off;
    for (uint d = 0u; d < pc.rank; ++d) {
        in_addr += coord[d] * pc.in_stride[d];
        out_addr += coord[d] * pc.out_stride[d];
    }

#if ELEM_BITS == 64
    dst[2u * out_addr] = src[2u * in_addr];
    dst[2u * out_addr + 1u] = src[2u * in_addr + 1u];
#elif ELEM_BITS == 32
    dst[out_addr] = src[in_addr];
#else
    uint vals[ELEMS_PER_INV];
    uint outs[ELEMS_PER_INV];
    for (uint k = 0u; k < ELEMS_PER_INV; ++k) {
        if (k < n) {
            uint sh = (in_addr % ELEMS_PER_INV) * uint(ELEM_BITS);
            vals[k] = bitfieldExtract(src[in_addr / ELEMS_PER_INV], int(sh), ELEM_BITS);
            outs[k] = out_addr;
        }
        // advance to the next element in row-major order
        for (int d = int(pc.rank) - 1; d >= 0; --d) {
            coord[d] += 1u;
            in_addr += pc.in_stride[d];
            out_addr += pc.out_stride[d];
            if (coord[d] < pc.size[d]) break;
            in_addr -= coord[d] * pc.in_stride[d];
            out_addr -= coord[d] * pc.out_stride[d];
            coord[d] = 0u;
        }
    }
    bool whole_word = (n == ELEMS_PER_INV) && (outs[0] % ELEMS_PER_INV == 0u);
    for (uint k = 1u; k < ELEMS_PER_INV; ++k) whole_word = whole_word && (outs[k] == outs[0] + k);
    if (whole_word) {
        uint word = 0u;
        for (uint k = 0u; k < ELEMS_PER_INV; ++k) word |= vals[k] << (k * uint(ELEM_BITS));
        dst[outs[0] / ELEMS_PER_INV] = word;
    } else {
        for (uint k = 0u; k < n; ++k) {
            uint sh = (outs[k] % ELEMS_PER_INV) * uint(ELEM_BITS);
            STORE_FIELD(dst, outs[k] / ELEMS_PER_INV, sh, uint(ELEM_BITS), vals[k]);
        }
    }
#endif
}
