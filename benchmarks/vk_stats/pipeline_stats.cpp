// pipeline_stats: what the driver made of one compute shader, from VK_KHR_pipeline_executable_properties
// (register count, shared and local memory, whatever statistics this driver reports), so a
// kernel's occupancy is read, not guessed (benchmarks/kernel_stats.py runs it per operator).
//
//   pipeline_stats SPV PUSH_BYTES BINDINGS [ID=VALUE ...]
//
// SPV: SPIR-V of a compute shader reading BINDINGS storage buffers of set 0 (bindings 0..N-1)
// and PUSH_BYTES of push constants; ID=VALUE: uint32 specialization constants. The device is
// created with every feature it reports except the robustness ones (which change code
// generation), like kompute_dml's device would use them. Prints one line per statistic:
//   stat <executable name> | <statistic> = <value>
// Build: g++ -O2 -std=c++17 -o pipeline_stats pipeline_stats.cpp -lvulkan
#include <vulkan/vulkan.h>

#include "../vk_common.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>



static bool hasExtension(VkPhysicalDevice pd, const char* name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> ext(n);
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
    for (auto& e : ext) if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

static std::string value(const VkPipelineExecutableStatisticKHR& s) {
    switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: return s.value.b32 ? "true" : "false";
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: return std::to_string(s.value.i64);
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: return std::to_string(s.value.u64);
        default: return std::to_string(s.value.f64);
    }
}

int main(int argc, char** argv) {
    if (argc < 4) { std::fprintf(stderr, "usage: %s SPV PUSH_BYTES BINDINGS [ID=VALUE ...]\n", argv[0]); return 2; }
    const uint32_t pushBytes = uint32_t(std::atoi(argv[2])), bindings = uint32_t(std::atoi(argv[3]));
    std::vector<VkSpecializationMapEntry> entries;
    std::vector<uint32_t> specData;
    for (int i = 4; i < argc; ++i) {
        unsigned id = 0, v = 0;
        if (std::sscanf(argv[i], "%u=%u", &id, &v) != 2) { std::fprintf(stderr, "bad constant %s\n", argv[i]); return 2; }
        entries.push_back({id, uint32_t(specData.size() * 4), 4});
        specData.push_back(v);
    }

    VkInstance inst = createInstance(VK_API_VERSION_1_3);
    uint32_t n = 1;
    VkPhysicalDevice pd;
    vkEnumeratePhysicalDevices(inst, &n, &pd);
    if (n == 0) { std::fprintf(stderr, "no Vulkan device\n"); return 1; }
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(pd, &props);
    std::printf("device %s\n", props.deviceName);
    if (!hasExtension(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
        std::printf("no %s on this device\n", VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
        return 3;
    }

    // every reported feature on, robustness off
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, &pe};
    const bool coop = hasExtension(pd, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, coop ? (void*)&cm : (void*)&pe};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, &f13};
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    f2.features.robustBufferAccess = VK_FALSE;
    f13.robustImageAccess = VK_FALSE;
    cm.cooperativeMatrixRobustBufferAccess = VK_FALSE;
    std::vector<const char*> exts{VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME};
    if (coop) exts.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueCount = 1;
    qi.pQueuePriorities = &prio;
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &f2};
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    di.enabledExtensionCount = uint32_t(exts.size());
    di.ppEnabledExtensionNames = exts.data();
    VkDevice dev;
    CHECK(vkCreateDevice(pd, &di, nullptr, &dev));

    std::vector<uint32_t> spv = readSpv(argv[1]);
    VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    si.codeSize = spv.size() * 4;
    si.pCode = spv.data();
    VkShaderModule mod;
    CHECK(vkCreateShaderModule(dev, &si, nullptr, &mod));
    std::vector<VkDescriptorSetLayoutBinding> lb(bindings);
    for (uint32_t b = 0; b < bindings; ++b)
        lb[b] = {b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = bindings;
    dl.pBindings = lb.data();
    VkDescriptorSetLayout dsl;
    CHECK(vkCreateDescriptorSetLayout(dev, &dl, nullptr, &dsl));
    VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, pushBytes};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &dsl;
    pl.pushConstantRangeCount = pushBytes ? 1 : 0;
    pl.pPushConstantRanges = &pr;
    VkPipelineLayout layout;
    CHECK(vkCreatePipelineLayout(dev, &pl, nullptr, &layout));
    VkSpecializationInfo spec{uint32_t(entries.size()), entries.data(), specData.size() * 4, specData.data()};
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, mod, "main",
                entries.empty() ? nullptr : &spec};
    ci.layout = layout;
    VkPipeline pipe;
    CHECK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, nullptr, &pipe));

    auto getProps = (PFN_vkGetPipelineExecutablePropertiesKHR)vkGetDeviceProcAddr(dev, "vkGetPipelineExecutablePropertiesKHR");
    auto getStats = (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(dev, "vkGetPipelineExecutableStatisticsKHR");
    VkPipelineInfoKHR pinfo{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, nullptr, pipe};
    uint32_t ne = 0;
    CHECK(getProps(dev, &pinfo, &ne, nullptr));
    std::vector<VkPipelineExecutablePropertiesKHR> ex(ne, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR});
    CHECK(getProps(dev, &pinfo, &ne, ex.data()));
    for (uint32_t e = 0; e < ne; ++e) {
        std::printf("stat %s | subgroup size = %u\n", ex[e].name, ex[e].subgroupSize);
        VkPipelineExecutableInfoKHR einfo{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, nullptr, pipe, e};
        uint32_t ns = 0;
        CHECK(getStats(dev, &einfo, &ns, nullptr));
        std::vector<VkPipelineExecutableStatisticKHR> st(ns, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
        CHECK(getStats(dev, &einfo, &ns, st.data()));
        for (auto& s : st) std::printf("stat %s | %s = %s\n", ex[e].name, s.name, value(s).c_str());
    }
    vkDestroyPipeline(dev, pipe, nullptr);
    vkDestroyPipelineLayout(dev, layout, nullptr);
    vkDestroyDescriptorSetLayout(dev, dsl, nullptr);
    vkDestroyShaderModule(dev, mod, nullptr);
    vkDestroyDevice(dev, nullptr);
    vkDestroyInstance(inst, nullptr);
    return 0;
}
