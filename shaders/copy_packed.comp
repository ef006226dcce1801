#version 450
// Packed byte-range copy (both tensors dense after merging, same element order):
// the fast path of ACTIVATION_IDENTITY / copy for every data type. Each invocation
// moves one 16-byte uvec4; the final partial word (sub-word types) is merged so that
// bytes past the tensor's end never change.
//
// @variant copy_packed

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

// Offsets are multiples of 16 bytes, so the uvec4 views are aligned.
layout(std430, binding = 0) readonly buffer InBuf4 { uvec4 src4[]; };
layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
layout(std430, binding = 1) writeonly buffer OutBuf4 { uvec4 dst4[]; };
layout(std430, binding = 1) buffer OutBuf { uint dst[]; };

layout(push_constant) uniform PC {
    uint in_off;     // in 16-byte units
    uint out_off;    // in 16-byte units
    uint nbytes;     // bytes to copy
} pc;

void main() {
    uint v = linear_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint full_vecs = pc.nbytes / 16u;
    if (v < full_vecs) {
        dst4[pc.out_off + v] = src4[pc.in_off + v];
        return;
    }
    if (v != full_vecs) return;
    // Tail: up to 15 bytes, handled by one invocation word by word.
    uint tail = pc.nbytes - full_vecs * 16u;
    uint in_w = (pc.in_off + v) * 4u, out_w = (pc.out_off + v) * 4u;
    for (uint w = 0u; w * 4u < tail; ++w) {
        uint bytes = min(4u, tail - w * 4u);
        if (bytes == 4u) {
            dst[out_w + w] = src[in_w + w];
        } else {
            uint value = src[in_w + w] & ((1u << (bytes * 8u)) - 1u);
            STORE_FIELD(dst, out_w + w, 0u, bytes * 8u, value);
        }
    }
}
