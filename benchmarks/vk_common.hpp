// What the benchmarks' Vulkan C++ tools (vk_floor/, vk_stats/) share: a VkResult check that exits
// with the failing call, and reading a SPIR-V file into words.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#define CHECK(x)                                                                    \
    do {                                                                            \
        VkResult r_ = (x);                                                          \
        if (r_ != VK_SUCCESS) { std::fprintf(stderr, "%s: %d\n", #x, r_); std::exit(1); } \
    } while (0)

static inline std::vector<uint32_t> readSpv(const char* path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) { std::fprintf(stderr, "cannot read %s\n", path); std::exit(1); }
    std::vector<uint32_t> w(size_t(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(w.data()), std::streamsize(w.size() * 4));
    return w;
}
