#version 450
// The smallest useful dispatch for vk_floor: one word per invocation, one work group.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer Data { uint d[]; };
void main() { d[gl_GlobalInvocationID.x] += 1u; }
