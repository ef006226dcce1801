// What the benchmarks' Vulkan C++ tools (vk_floor/, vk_stats/) share: a VkResult check that exits
// with the failing call, reading a SPIR-V file into words, and the Vulkan instance.
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

// A Vulkan instance of `apiVersion`, no layers or extensions (each tool picks its device).
static inline VkInstance createInstance(uint32_t apiVersion) {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = apiVersion;
    VkInstanceCreateInfo ii{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ii.pApplicationInfo = &app;
    VkInstance inst;
    CHECK(vkCreateInstance(&ii, nullptr, &inst));
    return inst;
}
