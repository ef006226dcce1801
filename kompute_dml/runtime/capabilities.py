"""The optional device capabilities kompute_dml knows, and which of them a caller allows
(`Device(features=...)`, KDML_FEATURES): the device enables the allowed ones it reports
(kompute_dml/device/device.py); kompute_dml/runtime/policy.py chooses paths from the enabled set."""

from __future__ import annotations

import os

# Names of the optional device capabilities kompute_dml knows (dev.capabilities holds the
# enabled subset). Each is one Vulkan feature (or extension + feature) the runtime turns on
# when the physical device reports it.
CAPABILITIES = (
    "storage_buffer_8bit",  # VkPhysicalDevice8BitStorageFeatures.storageBuffer8BitAccess
    "storage_buffer_16bit",  # VkPhysicalDevice16BitStorageFeatures.storageBuffer16BitAccess
    "shader_int8",  # VkPhysicalDeviceShaderFloat16Int8Features.shaderInt8
    "shader_float16",  # VkPhysicalDeviceShaderFloat16Int8Features.shaderFloat16
    "shader_int16",  # VkPhysicalDeviceFeatures.shaderInt16
    "shader_int64",  # VkPhysicalDeviceFeatures.shaderInt64
    "integer_dot_product",  # VkPhysicalDeviceShaderIntegerDotProductFeatures
    "subgroup_size_control",  # VkPhysicalDeviceSubgroupSizeControlFeatures (+ computeFullSubgroups)
    "vulkan_memory_model",  # VkPhysicalDeviceVulkanMemoryModelFeatures
    "cooperative_matrix",  # VK_KHR_cooperative_matrix
    # VK_NV_cooperative_matrix2: workgroup-scope matrices with flexible dimensions (its other
    # features stay off: glslang 13 cannot compile them); needs cooperative_matrix
    "cooperative_matrix_workgroup",
    "maintenance4",  # VkPhysicalDeviceMaintenance4Features (SPIR-V 1.6 LocalSizeId work-group sizes)
)

FEATURES_ENV = "KDML_FEATURES"


def requested_capabilities(features: object) -> frozenset[str] | None:
    """The capabilities a caller allows: `features` (an iterable of names, "none", or None
    for the environment's KDML_FEATURES, itself "all" when unset). None means all."""
    from ..core.errors import invalid

    if features is None:
        features = os.environ.get(FEATURES_ENV, "all")
    if isinstance(features, str):
        text = features.strip().lower()
        if text in ("", "all"):
            return None
        if text == "none":
            return frozenset()
        names = [n.strip() for n in text.split(",") if n.strip()]
    else:
        try:
            names = [str(n) for n in features]  # type: ignore[attr-defined]
        except TypeError:
            raise invalid("features", f"must be 'all', 'none' or a list of capability names, got {features!r}") from None
    unknown = sorted(set(names) - set(CAPABILITIES))
    if unknown:
        raise invalid("features", f"unknown capability {', '.join(unknown)} (known: {', '.join(CAPABILITIES)}, all, none)")
    return frozenset(names)
