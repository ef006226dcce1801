// vk_floor: what one submission costs on this Vulkan device, from the C API alone (no kp,
// no Python): the latency floor under kompute_dml's eager executions (benchmarks/latency.py).
//
// For each command-buffer payload (empty; one global barrier; barrier + one 64-invocation
// dispatch; barrier + a 16 KiB vkCmdCopyBuffer) and each way of learning that the work is
// done, the median / p10 / p90 of N back-to-back submissions, in microseconds:
//   fence-wait  reset a reused fence, submit, vkWaitForFences (blocking)
//   fence-spin  reset, submit, poll vkGetFenceStatus (what kp's patch does)
//   word-spin   the command buffer ends by writing a host-visible word; poll the word,
//               (`word`), then the fence (`+fence`: how late the fence reports the same end)
//   timeline    submit signalling a timeline semaphore value, poll its counter
// and the host cost of vkResetFences and of vkQueueSubmit alone.
//
// Build and run (benchmarks/vk_floor/run.sh): glslangValidator makes touch.spv, g++ the binary.
#include <vulkan/vulkan.h>

#include "../vk_common.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <vector>


using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Stats { double med, p10, p90; };
static Stats stats(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * v.size()))]; };
    return {at(0.5), at(0.1), at(0.9)};
}

struct Ctx {
    VkPhysicalDevice pd{};
    VkDevice dev{};
    VkQueue queue{};
    VkCommandPool pool{};
    VkBuffer dbuf{}, sbuf{}, hbuf{};  // device data (64 KiB), copy source, host word
    VkDeviceMemory dmem{}, smem{}, hmem{};
    volatile uint32_t* word{};
    VkPipeline pipe{};
    VkPipelineLayout layout{};
    VkDescriptorSet set{};
};

static uint32_t memType(VkPhysicalDevice pd, uint32_t bits, VkMemoryPropertyFlags want) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((bits >> i & 1) && (mp.memoryTypes[i].propertyFlags & want) == want) return i;
    std::fprintf(stderr, "no memory type\n");
    std::exit(1);
}

static void makeBuffer(Ctx& c, VkDeviceSize size, VkMemoryPropertyFlags props, VkBuffer* b, VkDeviceMemory* m) {
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    CHECK(vkCreateBuffer(c.dev, &bi, nullptr, b));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(c.dev, *b, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = memType(c.pd, req.memoryTypeBits, props);
    CHECK(vkAllocateMemory(c.dev, &ai, nullptr, m));
    CHECK(vkBindBufferMemory(c.dev, *b, *m, 0));
}

static void globalBarrier(VkCommandBuffer cb, VkPipelineStageFlags src, VkPipelineStageFlags dst,
                          VkAccessFlags srcA, VkAccessFlags dstA) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, srcA, dstA};
    vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

enum Payload { EMPTY, BARRIER, DISPATCH, COPY };
static const char* kPayload[] = {"empty", "barrier", "barrier+dispatch", "barrier+copy 16KiB"};

static const VkAccessFlags kAll = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                  VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
static const VkPipelineStageFlags kStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

// How the command buffer writes its completion word: not at all; vkCmdFillBuffer between a
// barrier from every earlier command and one to the host; the same without the barrier to the
// host (what kp's patch records); vkCmdUpdateBuffer in place of the fill.
enum Word { NONE, FILL, FILL_NO_HOST_BARRIER, UPDATE };

static VkCommandBuffer beginCommandBuffer(Ctx& c) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = c.pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(c.dev, &ai, &cb));
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(cb, &bi));
    return cb;
}

// The payload's command after its global barrier (DISPATCH or COPY; nothing for the others).
static void recordCommand(Ctx& c, VkCommandBuffer cb, Payload p) {
    if (p == DISPATCH) {
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipe);
        vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.layout, 0, 1, &c.set, 0, nullptr);
        vkCmdDispatch(cb, 1, 1, 1);
    } else if (p == COPY) {
        VkBufferCopy region{0, 0, 16384};
        vkCmdCopyBuffer(cb, c.sbuf, c.dbuf, 1, &region);
    }
}

static VkCommandBuffer record(Ctx& c, Payload p, Word word) {
    VkCommandBuffer cb = beginCommandBuffer(c);
    if (p != EMPTY) globalBarrier(cb, kStages, kStages, kAll, kAll);
    recordCommand(c, cb, p);
    if (word != NONE) {  // after everything before it: then one word the host polls
        globalBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, kAll,
                      VK_ACCESS_TRANSFER_WRITE_BIT);
        if (word == UPDATE) {
            const uint32_t one = 1;
            vkCmdUpdateBuffer(cb, c.hbuf, 0, 4, &one);
        } else {
            vkCmdFillBuffer(cb, c.hbuf, 0, 4, 1u);
        }
        if (word != FILL_NO_HOST_BARRIER)
            globalBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                          VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT);
    }
    CHECK(vkEndCommandBuffer(cb));
    return cb;
}


static void setup(Ctx& c, const char* spvPath, int deviceIndex) {
    VkInstance inst = createInstance(VK_API_VERSION_1_2);
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(inst, &n, nullptr);
    std::vector<VkPhysicalDevice> pds(n);
    vkEnumeratePhysicalDevices(inst, &n, pds.data());
    if (deviceIndex >= int(n)) { std::fprintf(stderr, "no device %d\n", deviceIndex); std::exit(1); }
    c.pd = pds[deviceIndex];
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(c.pd, &props);
    std::printf("device: %s\n", props.deviceName);
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &nq, qf.data());
    uint32_t fam = 0;
    while (fam < nq && !(qf[fam].queueFlags & VK_QUEUE_COMPUTE_BIT)) fam++;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = fam;
    qi.queueCount = 1;
    qi.pQueuePriorities = &prio;
    VkPhysicalDeviceTimelineSemaphoreFeatures tl{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES};
    tl.timelineSemaphore = VK_TRUE;
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.pNext = &tl;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    CHECK(vkCreateDevice(c.pd, &di, nullptr, &c.dev));
    vkGetDeviceQueue(c.dev, fam, 0, &c.queue);
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.queueFamilyIndex = fam;
    CHECK(vkCreateCommandPool(c.dev, &pi, nullptr, &c.pool));

    makeBuffer(c, 65536, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, &c.dbuf, &c.dmem);
    makeBuffer(c, 65536, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, &c.sbuf, &c.smem);
    makeBuffer(c, 256, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, &c.hbuf, &c.hmem);
    void* p;
    CHECK(vkMapMemory(c.dev, c.hmem, 0, 256, 0, &p));
    c.word = static_cast<volatile uint32_t*>(p);

    std::vector<uint32_t> spv = readSpv(spvPath);
    VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    si.codeSize = spv.size() * 4;
    si.pCode = spv.data();
    VkShaderModule mod;
    CHECK(vkCreateShaderModule(c.dev, &si, nullptr, &mod));
    VkDescriptorSetLayoutBinding b{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = 1;
    li.pBindings = &b;
    VkDescriptorSetLayout dsl;
    CHECK(vkCreateDescriptorSetLayout(c.dev, &li, nullptr, &dsl));
    VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &dsl;
    CHECK(vkCreatePipelineLayout(c.dev, &pli, nullptr, &c.layout));
    VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, mod, "main", nullptr};
    cpi.layout = c.layout;
    CHECK(vkCreateComputePipelines(c.dev, VK_NULL_HANDLE, 1, &cpi, nullptr, &c.pipe));
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
    VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = 1;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    VkDescriptorPool dp;
    CHECK(vkCreateDescriptorPool(c.dev, &dpi, nullptr, &dp));
    VkDescriptorSetAllocateInfo dai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    dai.descriptorPool = dp;
    dai.descriptorSetCount = 1;
    dai.pSetLayouts = &dsl;
    CHECK(vkAllocateDescriptorSets(c.dev, &dai, &c.set));
    VkDescriptorBufferInfo dbi{c.dbuf, 0, 65536};
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = c.set;
    w.descriptorCount = 1;
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = &dbi;
    vkUpdateDescriptorSets(c.dev, 1, &w, 0, nullptr);
}

static std::vector<double> timeIt(int n, const std::function<void()>& f) {
    for (int i = 0; i < 50; i++) f();
    std::vector<double> t(n);
    for (int i = 0; i < n; i++) {
        auto a = Clock::now();
        f();
        t[i] = us(a, Clock::now());
    }
    return t;
}

static void row(const char* payload, const char* how, const std::vector<double>& t) {
    Stats s = stats(t);
    std::printf("%-20s %-12s %8.2f %8.2f %8.2f\n", payload, how, s.med, s.p10, s.p90);
}

int main(int argc, char** argv) {
    const char* spv = argc > 1 ? argv[1] : "touch.spv";
    int n = argc > 2 ? std::atoi(argv[2]) : 3000;
    int deviceIndex = argc > 3 ? std::atoi(argv[3]) : 0;
    Ctx c;
    setup(c, spv, deviceIndex);
    VkFence fence;
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    CHECK(vkCreateFence(c.dev, &fi, nullptr, &fence));
    VkSemaphoreTypeCreateInfo sti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, nullptr, VK_SEMAPHORE_TYPE_TIMELINE, 0};
    VkSemaphoreCreateInfo sci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &sti};
    VkSemaphore sem;
    CHECK(vkCreateSemaphore(c.dev, &sci, nullptr, &sem));
    uint64_t semValue = 0;

    std::printf("%-20s %-12s %8s %8s %8s   (us, %d submissions each)\n", "payload", "completion", "median", "p10", "p90", n);
    for (int p = EMPTY; p <= COPY; p++) {
        VkCommandBuffer cb = record(c, Payload(p), NONE);
        VkCommandBuffer cbw = record(c, Payload(p), FILL);
        VkSubmitInfo sub{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        sub.commandBufferCount = 1;
        sub.pCommandBuffers = &cb;
        row(kPayload[p], "fence-wait", timeIt(n, [&] {
            CHECK(vkResetFences(c.dev, 1, &fence));
            CHECK(vkQueueSubmit(c.queue, 1, &sub, fence));
            CHECK(vkWaitForFences(c.dev, 1, &fence, VK_TRUE, UINT64_MAX));
        }));
        row(kPayload[p], "fence-spin", timeIt(n, [&] {
            CHECK(vkResetFences(c.dev, 1, &fence));
            CHECK(vkQueueSubmit(c.queue, 1, &sub, fence));
            while (vkGetFenceStatus(c.dev, fence) == VK_NOT_READY) {}
        }));
        // time from vkQueueSubmit to the word (and to the fence after it); the fence is
        // waited outside the measured span before the next submission
        auto wordTimes = [&](VkCommandBuffer wcb, std::vector<double>* toFence) {
            VkSubmitInfo subw = sub;
            subw.pCommandBuffers = &wcb;
            std::vector<double> toWord;
            timeIt(n, [&] {
                CHECK(vkResetFences(c.dev, 1, &fence));
                *c.word = 0;
                auto a = Clock::now();
                CHECK(vkQueueSubmit(c.queue, 1, &subw, fence));
                while (*c.word != 1u) {}
                auto b = Clock::now();
                while (vkGetFenceStatus(c.dev, fence) == VK_NOT_READY) {}
                toWord.push_back(us(a, b));
                if (toFence) toFence->push_back(us(a, Clock::now()));
            });
            return toWord;
        };
        std::vector<double> toFence;
        row(kPayload[p], "word", wordTimes(cbw, &toFence));
        row(kPayload[p], "word+fence", toFence);
        row(kPayload[p], "word:nohost", wordTimes(record(c, Payload(p), FILL_NO_HOST_BARRIER), nullptr));
        row(kPayload[p], "word:update", wordTimes(record(c, Payload(p), UPDATE), nullptr));
        row(kPayload[p], "timeline", timeIt(n, [&] {
            uint64_t v = ++semValue;
            VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
            ts.signalSemaphoreValueCount = 1;
            ts.pSignalSemaphoreValues = &v;
            VkSubmitInfo s = sub;
            s.pNext = &ts;
            s.signalSemaphoreCount = 1;
            s.pSignalSemaphores = &sem;
            CHECK(vkQueueSubmit(c.queue, 1, &s, VK_NULL_HANDLE));
            uint64_t got = 0;
            do { CHECK(vkGetSemaphoreCounterValue(c.dev, sem, &got)); } while (got < v);
        }));
        if (p == BARRIER) {
            std::vector<double> reset, submit;
            timeIt(n, [&] {
                auto a = Clock::now();
                CHECK(vkResetFences(c.dev, 1, &fence));
                auto b = Clock::now();
                CHECK(vkQueueSubmit(c.queue, 1, &sub, fence));
                auto d = Clock::now();
                while (vkGetFenceStatus(c.dev, fence) == VK_NOT_READY) {}
                reset.push_back(us(a, b));
                submit.push_back(us(b, d));
            });
            row("  host: reset", "", reset);
            row("  host: submit", "", submit);
            row("  host: status", "", timeIt(n, [&] { (void)vkGetFenceStatus(c.dev, fence); }));
        }
    }
    // Device time of each payload command alone: timestamps (ALL_COMMANDS) around it, after
    // the global barrier, in us (what benchmarks/latency.py --ops reports for an operator).
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(c.pd, &props);
    VkQueryPoolCreateInfo qpi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qpi.queryCount = 2;
    VkQueryPool qp;
    CHECK(vkCreateQueryPool(c.dev, &qpi, nullptr, &qp));
    for (int p = DISPATCH; p <= COPY; p++) {
        VkCommandBuffer cb = beginCommandBuffer(c);
        vkCmdResetQueryPool(cb, qp, 0, 2);
        globalBarrier(cb, kStages, kStages, kAll, kAll);
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, qp, 0);
        recordCommand(c, cb, Payload(p));
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, qp, 1);
        CHECK(vkEndCommandBuffer(cb));
        VkSubmitInfo sub{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        sub.commandBufferCount = 1;
        sub.pCommandBuffers = &cb;
        std::vector<double> t;
        for (int i = 0; i < 200; i++) {
            CHECK(vkResetFences(c.dev, 1, &fence));
            CHECK(vkQueueSubmit(c.queue, 1, &sub, fence));
            CHECK(vkWaitForFences(c.dev, 1, &fence, VK_TRUE, UINT64_MAX));
            uint64_t ts[2];
            CHECK(vkGetQueryPoolResults(c.dev, qp, 0, 2, sizeof ts, ts, 8, VK_QUERY_RESULT_64_BIT));
            t.push_back(double(ts[1] - ts[0]) * props.limits.timestampPeriod / 1000.0);
        }
        row(p == DISPATCH ? "  device: dispatch" : "  device: copy 16KiB", "", t);
    }
    return 0;
}
