"""Physical-device facts straight from the Vulkan loader (kp exposes only a few).

Uses ctypes on libvulkan.so.1: a throwaway VkInstance, vkEnumeratePhysicalDevices (same
order kp uses for its device index), vkGetPhysicalDeviceProperties and
vkGetPhysicalDeviceMemoryProperties. Only the leading part of VkPhysicalDeviceLimits is
declared; the rest of the struct is covered by a generous byte tail.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import DeviceError

u32 = ctypes.c_uint32
u64 = ctypes.c_uint64
i32 = ctypes.c_int32
f32 = ctypes.c_float

DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}


class _Limits(ctypes.Structure):
    _fields_ = [
        ("maxImageDimension1D", u32), ("maxImageDimension2D", u32), ("maxImageDimension3D", u32),
        ("maxImageDimensionCube", u32), ("maxImageArrayLayers", u32), ("maxTexelBufferElements", u32),
        ("maxUniformBufferRange", u32), ("maxStorageBufferRange", u32), ("maxPushConstantsSize", u32),
        ("maxMemoryAllocationCount", u32), ("maxSamplerAllocationCount", u32),
        ("bufferImageGranularity", u64), ("sparseAddressSpaceSize", u64),
        ("maxBoundDescriptorSets", u32),
        ("maxPerStageDescriptorSamplers", u32), ("maxPerStageDescriptorUniformBuffers", u32),
        ("maxPerStageDescriptorStorageBuffers", u32), ("maxPerStageDescriptorSampledImages", u32),
        ("maxPerStageDescriptorStorageImages", u32), ("maxPerStageDescriptorInputAttachments", u32),
        ("maxPerStageResources", u32),
        ("maxDescriptorSetSamplers", u32), ("maxDescriptorSetUniformBuffers", u32),
        ("maxDescriptorSetUniformBuffersDynamic", u32), ("maxDescriptorSetStorageBuffers", u32),
        ("maxDescriptorSetStorageBuffersDynamic", u32), ("maxDescriptorSetSampledImages", u32),
        ("maxDescriptorSetStorageImages", u32), ("maxDescriptorSetInputAttachments", u32),
        ("maxVertexInputAttributes", u32), ("maxVertexInputBindings", u32),
        ("maxVertexInputAttributeOffset", u32), ("maxVertexInputBindingStride", u32),
        ("maxVertexOutputComponents", u32),
        ("maxTessellationGenerationLevel", u32), ("maxTessellationPatchSize", u32),
        ("maxTessellationControlPerVertexInputComponents", u32),
        ("maxTessellationControlPerVertexOutputComponents", u32),
        ("maxTessellationControlPerPatchOutputComponents", u32),
        ("maxTessellationControlTotalOutputComponents", u32),
        ("maxTessellationEvaluationInputComponents", u32),
        ("maxTessellationEvaluationOutputComponents", u32),
        ("maxGeometryShaderInvocations", u32), ("maxGeometryInputComponents", u32),
        ("maxGeometryOutputComponents", u32), ("maxGeometryOutputVertices", u32),
        ("maxGeometryTotalOutputComponents", u32),
        ("maxFragmentInputComponents", u32), ("maxFragmentOutputAttachments", u32),
        ("maxFragmentDualSrcAttachments", u32), ("maxFragmentCombinedOutputResources", u32),
        ("maxComputeSharedMemorySize", u32), ("maxComputeWorkGroupCount", u32 * 3),
        ("maxComputeWorkGroupInvocations", u32), ("maxComputeWorkGroupSize", u32 * 3),
        ("subPixelPrecisionBits", u32), ("subTexelPrecisionBits", u32), ("mipmapPrecisionBits", u32),
        ("maxDrawIndexedIndexValue", u32), ("maxDrawIndirectCount", u32),
        ("maxSamplerLodBias", f32), ("maxSamplerAnisotropy", f32),
        ("maxViewports", u32), ("maxViewportDimensions", u32 * 2), ("viewportBoundsRange", f32 * 2),
        ("viewportSubPixelBits", u32), ("minMemoryMapAlignment", ctypes.c_size_t),
        ("minTexelBufferOffsetAlignment", u64), ("minUniformBufferOffsetAlignment", u64),
        ("minStorageBufferOffsetAlignment", u64),
        ("minTexelOffset", i32), ("maxTexelOffset", u32), ("minTexelGatherOffset", i32), ("maxTexelGatherOffset", u32),
        ("minInterpolationOffset", f32), ("maxInterpolationOffset", f32), ("subPixelInterpolationOffsetBits", u32),
        ("maxFramebufferWidth", u32), ("maxFramebufferHeight", u32), ("maxFramebufferLayers", u32),
        ("framebufferColorSampleCounts", u32), ("framebufferDepthSampleCounts", u32),
        ("framebufferStencilSampleCounts", u32), ("framebufferNoAttachmentsSampleCounts", u32),
        ("maxColorAttachments", u32), ("sampledImageColorSampleCounts", u32),
        ("sampledImageIntegerSampleCounts", u32), ("sampledImageDepthSampleCounts", u32),
        ("sampledImageStencilSampleCounts", u32), ("storageImageSampleCounts", u32), ("maxSampleMaskWords", u32),
        ("timestampComputeAndGraphics", u32), ("timestampPeriod", f32),
        ("_rest", ctypes.c_uint8 * 512),
    ]


class _Properties(ctypes.Structure):
    _fields_ = [
        ("apiVersion", u32), ("driverVersion", u32), ("vendorID", u32), ("deviceID", u32),
        ("deviceType", u32), ("deviceName", ctypes.c_char * 256), ("pipelineCacheUUID", ctypes.c_uint8 * 16),
        ("limits", _Limits),
        ("_tail", ctypes.c_uint8 * 256),
    ]


class _MemoryType(ctypes.Structure):
    _fields_ = [("propertyFlags", u32), ("heapIndex", u32)]


class _MemoryHeap(ctypes.Structure):
    _fields_ = [("size", u64), ("flags", u32)]


class _MemoryProperties(ctypes.Structure):
    _fields_ = [
        ("memoryTypeCount", u32), ("memoryTypes", _MemoryType * 32),
        ("memoryHeapCount", u32), ("memoryHeaps", _MemoryHeap * 16),
    ]


class _AppInfo(ctypes.Structure):
    _fields_ = [
        ("sType", u32), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
        ("applicationVersion", u32), ("pEngineName", ctypes.c_char_p), ("engineVersion", u32),
        ("apiVersion", u32),
    ]


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", u32), ("pNext", ctypes.c_void_p), ("flags", u32),
        ("pApplicationInfo", ctypes.POINTER(_AppInfo)),
        ("enabledLayerCount", u32), ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", u32), ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


class _Maintenance3(ctypes.Structure):  # VkPhysicalDeviceMaintenance3Properties (Vulkan 1.1)
    _fields_ = [("sType", u32), ("pNext", ctypes.c_void_p), ("maxPerSetDescriptors", u32),
                ("maxMemoryAllocationSize", u64)]


class _Properties2(ctypes.Structure):  # VkPhysicalDeviceProperties2; the properties as raw bytes
    _fields_ = [("sType", u32), ("pNext", ctypes.c_void_p), ("properties", ctypes.c_uint8 * 1024)]


_VULKAN_1_1 = (1 << 22) | (1 << 12)


class _Subgroup(ctypes.Structure):  # VkPhysicalDeviceSubgroupProperties (Vulkan 1.1)
    _fields_ = [("sType", u32), ("pNext", ctypes.c_void_p), ("subgroupSize", u32), ("supportedStages", u32),
                ("supportedOperations", u32), ("quadOperationsInAllStages", u32)]


class _IDProperties(ctypes.Structure):  # VkPhysicalDeviceIDProperties (Vulkan 1.1)
    _fields_ = [("sType", u32), ("pNext", ctypes.c_void_p), ("deviceUUID", ctypes.c_uint8 * 16),
                ("driverUUID", ctypes.c_uint8 * 16), ("deviceLUID", ctypes.c_uint8 * 8), ("deviceNodeMask", u32),
                ("deviceLUIDValid", u32)]


def _properties_1_1(lib: Any, handle: int) -> tuple[int | None, int | None, str]:
    """(maxMemoryAllocationSize, subgroupSize, deviceUUID): the largest single vkAllocateMemory
    (4 GiB - 2 MiB on an H100), the default subgroup width (32 there, 8 on lavapipe) and the
    device's UUID as 32 hex digits (on NVIDIA the UUID CUDA and nvidia-smi report as GPU-...)."""
    ids = _IDProperties(1000071004, None)
    sub = _Subgroup(1000094000, ctypes.cast(ctypes.pointer(ids), ctypes.c_void_p), 0, 0, 0, 0)
    m3 = _Maintenance3(1000168000, ctypes.cast(ctypes.pointer(sub), ctypes.c_void_p), 0, 0)
    p2 = _Properties2(1000059001, ctypes.cast(ctypes.pointer(m3), ctypes.c_void_p))
    fn = getattr(lib, "vkGetPhysicalDeviceProperties2", None)
    if fn is None:
        return None, None, ""
    fn(ctypes.c_void_p(handle), ctypes.byref(p2))
    return int(m3.maxMemoryAllocationSize) or None, int(sub.subgroupSize) or None, bytes(ids.deviceUUID).hex()


@dataclass(frozen=True)
class PhysicalDeviceInfo:
    index: int
    name: str
    device_type: str
    api_version: str
    vendor_id: int
    device_id: int
    limits: dict[str, Any] = field(default_factory=dict)
    memory_heaps: tuple[int, ...] = ()
    uuid: str = ""  # VkPhysicalDeviceIDProperties.deviceUUID, 32 hex digits ("" before Vulkan 1.1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "device_type": self.device_type,
            "api_version": self.api_version, "vendor_id": self.vendor_id, "device_id": self.device_id,
            "limits": dict(self.limits), "memory_heaps": list(self.memory_heaps), "uuid": self.uuid,
        }


def _version(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


@functools.lru_cache(maxsize=1)
def physical_devices() -> tuple[PhysicalDeviceInfo, ...]:
    try:
        lib = ctypes.CDLL("libvulkan.so.1")
    except OSError as e:
        raise DeviceError(f"Vulkan loader libvulkan.so.1 not found ({e}); run `make test` to install it") from e
    app = _AppInfo(0, None, b"kompute_dml", 1, b"kompute_dml", 1, (1 << 22) | (1 << 12))
    info = _InstanceCreateInfo(1, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    lib.vkCreateInstance.restype = ctypes.c_int32
    res = lib.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if res != 0:
        raise DeviceError(f"vkCreateInstance failed with VkResult {res}: no usable Vulkan driver")
    try:
        count = u32(0)
        lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * max(count.value, 1))()
        lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        out = []
        for i in range(count.value):
            props = _Properties()
            lib.vkGetPhysicalDeviceProperties(ctypes.c_void_p(handles[i]), ctypes.byref(props))
            mem = _MemoryProperties()
            lib.vkGetPhysicalDeviceMemoryProperties(ctypes.c_void_p(handles[i]), ctypes.byref(mem))
            lim = props.limits
            limits = {
                "max_storage_buffer_range": lim.maxStorageBufferRange,
                "min_storage_buffer_offset_alignment": lim.minStorageBufferOffsetAlignment,
                "max_texel_buffer_elements": lim.maxTexelBufferElements,
                "max_push_constants_size": lim.maxPushConstantsSize,
                "max_compute_work_group_count": tuple(lim.maxComputeWorkGroupCount),
                "max_compute_work_group_size": tuple(lim.maxComputeWorkGroupSize),
                "max_compute_work_group_invocations": lim.maxComputeWorkGroupInvocations,
                "max_compute_shared_memory_size": lim.maxComputeSharedMemorySize,
                "timestamp_period_ns": lim.timestampPeriod,  # one timestamp tick
                "max_memory_allocation_count": lim.maxMemoryAllocationCount,
                "max_bound_descriptor_sets": lim.maxBoundDescriptorSets,
                "max_per_stage_descriptor_storage_buffers": lim.maxPerStageDescriptorStorageBuffers,
            }
            alloc, subgroup, uuid = (
                _properties_1_1(lib, int(handles[i] or 0)) if props.apiVersion >= _VULKAN_1_1 else (None, None, "")
            )
            limits["max_memory_allocation_size"] = alloc
            limits["subgroup_size"] = subgroup
            heaps = tuple(mem.memoryHeaps[h].size for h in range(mem.memoryHeapCount))
            out.append(
                PhysicalDeviceInfo(
                    index=i, name=props.deviceName.decode(errors="replace"),
                    device_type=DEVICE_TYPES.get(props.deviceType, "other"),
                    api_version=_version(props.apiVersion), vendor_id=props.vendorID,
                    device_id=props.deviceID, limits=limits, memory_heaps=heaps, uuid=uuid,
                )
            )
        return tuple(out)
    finally:
        lib.vkDestroyInstance(instance, None)
