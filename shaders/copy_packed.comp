#version 450
// Packed byte-range copy (both tensors dense after merging, same element order):
// the fast path of ACTIVATION_IDENTITY / copy for every data type.
//
// @variant copy_packed       TAIL=0
// @variant copy_packed_tail  TAIL=1
//
// copy_packed moves whole work groups' worth of 16-byte vectors, one uvec4 per
// invocation, with no branch: its grid is exact (a folded 2-D grid, only possible for
// bindings above 256 MiB, over-covers; those extra invocations clamp to the last vector
// and store the value it gets anyway). lavapipe (Mesa 22.3) turns every SSBO access into a
// per-SIMD-lane scalar loop that also tests the execution mask lane by lane, so the bulk
// path has no control flow at all (measured: the former `if (v < full_vecs)` with the
// tail inline cost about 30% of the bandwidth).
// copy_packed_tail (one invocation) copies what is left: fewer than 256 vectors and the
// final 1..15 bytes, word by word; the last partial word is merged so that bytes past the
// tensor's end never change.

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#if TAIL
layout(local_size_x = 1) in;
#else
layout(local_size_x = 256) in;
#endif

// Offsets are multiples of 16 bytes, so the uvec4 views are aligned.
#if TAIL
layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
layout(std430, binding = 1) buffer OutBuf { uint dst[]; };
#else
layout(std430, binding = 0) readonly buffer InBuf4 { uvec4 src4[]; };
layout(std430, binding = 1) writeonly buffer OutBuf4 { uvec4 dst4[]; };
#endif

layout(push_constant) uniform PC {
    uint in_off;     // in 16-byte units
    uint out_off;    // in 16-byte units
    uint count;      // copy_packed: vectors to copy (>= 1); copy_packed_tail: total bytes
#if TAIL
    uint first_vec;  // copy_packed_tail: the first vector copy_packed did not cover
#endif
} pc;

void main() {
#if TAIL
    uint tail = pc.count - pc.first_vec * 16u;
    uint in_w = (pc.in_off + pc.first_vec) * 4u, out_w = (pc.out_off + pc.first_vec) * 4u;
    for (uint w = 0u; w * 4u < tail; ++w) {
        uint bytes = min(4u, tail - w * 4u);
        if (bytes == 4u) {
            dst[out_w + w] = src[in_w + w];
        } else {
            uint value = src[in_w + w] & ((1u << (bytes * 8u)) - 1u);
            STORE_FIELD(dst, out_w + w, 0u, bytes * 8u, value);
        }
    }
#else
    uint v = min(linear_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x, pc.count - 1u);
    dst4[pc.out_off + v] = src4[pc.in_off + v];
#endif
}
