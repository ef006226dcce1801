"""Device: the public face of one Vulkan physical device at one DirectML feature level.

It reads the arguments, the physical device's limits and the policy, and hands execution to
its runtime Engine (kompute_dml/runtime/engine.py: the kp Manager, the lock, memory,
caches, submission). A Device left open is released with its last reference (the helpers' caches
are its own: `caches`), or at interpreter exit by kp's own exit callback (kp Manager.destroy waits
for the device and writes the pipeline cache file).
Recordings of many executions (Device.record, Device.capture) are in recording.py.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..core.dtypes import HIGHEST_FEATURE_LEVEL, DataType, FeatureLevel
from ..core.errors import DeviceError, DMLError, invalid
from ..core.inputs import as_host_array, check_dml_dtype
from ..core.ints import as_int
from ..core.tensor_desc import TensorDesc, validate_desc
from ..ops import compile_operator
from ..runtime import DispatchPlan, Engine, Profile, binding_window, encode
from ..runtime.policy import policy_for, requested_capabilities
from ..runtime.vulkan_info import PhysicalDeviceInfo, physical_devices
from .memory import Buffer, Tensor, buffer_with, packed_desc_for
from .recording import Recording


def list_devices() -> list[dict[str, Any]]:
    """Every Vulkan physical device the loader reports, with its limits."""
    return [d.as_dict() for d in physical_devices()]


def _coerce_budget(budget: object, info: PhysicalDeviceInfo) -> int:
    if budget is None:
        heaps = sum(info.memory_heaps)
        return heaps if heaps > 0 else 1 << 31
    value = as_int(budget, "memory_budget", "a number of bytes (an integer) or None")
    if value < 4096:
        raise invalid("memory_budget", f"must be at least 4096 bytes, got {value}")
    return value


def coerce_feature_level(level: object) -> FeatureLevel:
    if level is None:
        return HIGHEST_FEATURE_LEVEL
    if isinstance(level, FeatureLevel):
        return level
    if isinstance(level, str) and level.lower().startswith("0x"):
        try:
            level = int(level, 16)
        except ValueError:
            raise invalid("feature_level", f"{level!r} is not a DML_FEATURE_LEVEL") from None
    if isinstance(level, str):
        name = level.upper().replace(".", "_")
        name = name if name.startswith("FL_") else f"FL_{name}"
        if name in FeatureLevel.__members__:
            return FeatureLevel[name]
        raise invalid("feature_level", f"{level!r} is not a DML_FEATURE_LEVEL")
    if isinstance(level, (int, np.integer)) and not isinstance(level, bool):
        value = int(level)
        if value in {m.value for m in FeatureLevel}:
            return FeatureLevel(value)
        raise invalid("feature_level", f"0x{value:x} is not a DML_FEATURE_LEVEL value")
    raise invalid("feature_level", f"must be a FeatureLevel, got {type(level).__name__}")


class Device:
    """A Vulkan device running DirectML operators at `feature_level`.

    Thread-safe: its Engine makes every kp call under one re-entrant lock.
    """

    def __init__(
        self,
        device_index: int = 0,
        feature_level: FeatureLevel | int | None = None,
        *,
        memory_budget: int | None = None,
        transfer_commands: bool | None = None,
        features: Any = None,
    ) -> None:
        self.feature_level = coerce_feature_level(feature_level)
        # the helpers' caches of this device (compiled operators, constants, tables: functional/, ops/act_table.py),
        # held here so that they go with it: in module-level dicts they kept a dropped device and its Vulkan device
        self.caches: dict[str, Any] = {}
        requested = requested_capabilities(features)
        infos = physical_devices()
        if not infos:
            raise DeviceError("no Vulkan physical device found (install mesa-vulkan-drivers for lavapipe)")
        index = as_int(device_index, "device_index")
        if not 0 <= index < len(infos):
            raise invalid("device_index", f"must be in [0, {len(infos)}), got {device_index}")
        self.index = index
        self.info: PhysicalDeviceInfo = infos[self.index]
        self.name = self.info.name
        self.uuid = self.info.uuid  # VULKAN:<uuid> names it (runtime/selection.py); CUDA's UUID on NVIDIA
        self.device_type = self.info.device_type
        self.limits: Mapping[str, Any] = types.MappingProxyType(dict(self.info.limits))
        self.memory_budget = _coerce_budget(memory_budget, self.info)
        self.engine = Engine(
            self.index, requested, memory_budget=self.memory_budget, device_name=self.name,
            max_allocations=int(self.limits.get("max_memory_allocation_count") or 4096),
            host_memory=self.device_type == "cpu",  # a CPU device's memory is this host's RAM
        )
        # buffers beyond maxStorageBufferRange are bound a window at a time (runtime/encode.py)
        self.engine.programs.window_range, self.engine.programs.window_align = binding_window(self.limits)
        # The optional capabilities enabled on this device, and the per-device policy that
        # picks paths and kernel families. Dense and row-contiguous copies and fills run as
        # transfer commands where the policy says so; `transfer_commands` (or
        # KDML_TRANSFER=0/1) overrides that choice.
        self.capabilities: frozenset[str] = self.engine.capabilities
        # (M, N, K, A, B, C, result type (VkComponentTypeKHR), saturating, scope) per shape
        self.cooperative_matrix_shapes: tuple[tuple[int, ...], ...] = self.engine.cooperative_matrix_shapes
        # VK_NV_cooperative_matrix2 (capability cooperative_matrix_workgroup): the workgroup-scope
        # shapes (M, N, K granularity, A, B, C, result, saturating, scope, work-group invocations) and
        # limits (max work-group size, max dimension, reserved shared memory); empty without it
        self.cooperative_matrix_flexible_shapes: tuple[tuple[int, ...], ...] = self.engine.cooperative_matrix_flexible_shapes
        self.cooperative_matrix2_limits: tuple[int, ...] = self.engine.cooperative_matrix2_limits
        self.policy = policy_for(self.device_type, self.capabilities, self.limits, transfer_commands=transfer_commands,
                                 coop_shapes=self.cooperative_matrix_shapes)
        self.transfer_commands = self.policy.transfer_commands
        self.engine.completion_word = self.policy.completion == "word"
        self.engine.set_adaptive_spin(self.policy.wait_spin_cap_us)
        self.engine.shared_first_runs = self.policy.first_run == "shared"
        self.engine.pipeline_threads = self.policy.pipeline_threads
        self.engine.set_order(encode.levels if self.policy.barrier_levels else encode.program_order)

    def __repr__(self) -> str:
        return f"Device({self.index}, {self.name!r}, feature_level={self.feature_level.name})"

    # ---- memory ------------------------------------------------------------------
    def buffer(self, nbytes_or_data: int | bytes | bytearray | np.ndarray) -> Buffer:
        """Device memory: a size in bytes, or data (bytes, bytearray, numpy array) to upload."""
        if isinstance(nbytes_or_data, (bytes, bytearray, memoryview, np.ndarray)):
            data = nbytes_or_data
            n = data.nbytes if isinstance(data, (np.ndarray, memoryview)) else len(data)
            if n == 0:
                raise invalid("data", "must not be empty")
            if isinstance(data, np.ndarray) and data.flags.c_contiguous:
                return buffer_with(self, data)
            buf = Buffer(self, n)
            buf.write(data)
            return buf
        return Buffer(self, nbytes_or_data)  # type: ignore[arg-type]

    def tensor(self, array: Any) -> Tensor:
        """Upload an array as a packed tensor (a 0-d array becomes sizes (1,)): numpy, Python
        numbers and lists, CPU objects with __array__ / __dlpack__ (kompute_dml/core/inputs.py)."""
        arr = np.ascontiguousarray(as_host_array(array, "array"))
        desc = packed_desc_for(arr)
        return Tensor(buffer_with(self, arr, desc.byte_size), desc, 0)

    def empty(self, desc: TensorDesc | int | tuple[int, ...], dtype: Any = np.float32) -> Tensor:
        """A new buffer holding one tensor of `desc` at offset 0 (contents zero); a shape (an int
        or a tuple of sizes) and `dtype` (a numpy dtype or DataType) stand for a packed desc."""
        if not isinstance(desc, TensorDesc):
            sizes = (as_int(desc, "shape"),) if not isinstance(desc, (tuple, list)) else tuple(
                as_int(v, "shape") for v in desc)
            dt = dtype if isinstance(dtype, DataType) else check_dml_dtype(np.dtype(dtype), "dtype")
            desc = TensorDesc(dt, sizes)
        validate_desc(desc, "desc")
        return Tensor(Buffer(self, desc.byte_size), desc, 0)

    def host_array(self, shape: int | tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray:
        """A zeroed numpy array in host memory this device reads and writes directly
        (pinned, host-visible Vulkan memory): `buffer.write(a)`, `dev.tensor(a)`,
        `buffer.read_into(a)` and `tensor.numpy(out=a)` with such an array (or a contiguous
        view into it) copy between it and device memory without a staging copy. The memory
        is freed with the last array made from it."""
        dt = np.dtype(dtype)
        sizes = (as_int(shape, "shape"),) if not isinstance(shape, tuple) else tuple(as_int(v, "shape") for v in shape)
        if any(v < 0 for v in sizes):
            raise invalid("shape", f"sizes must not be negative, got {sizes}")
        nbytes = math.prod(sizes) * dt.itemsize
        mem = self.engine.host_memory(max(nbytes, 1))
        return np.asarray(mem)[:nbytes].view(dt).reshape(sizes)

    # ---- operators ---------------------------------------------------------------
    def compile(self, op_desc: Any, *, allow_half_precision: bool = False) -> Any:
        """Validate an operator descriptor at this device's feature level and pick its shaders.
        `allow_half_precision`: DirectML's DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION (FLOAT32
        operators that take it may compute in float16: CONVOLUTION's tensor-core kernel)."""
        self.engine.check_open()
        return compile_operator(self, op_desc, bool(allow_half_precision))

    def warmup(self, op_descs: Iterable[Any]) -> int:
        """Compile operator descriptors and create every pipeline their executions will use,
        so the first execution builds none (kept on disk for later processes: see
        runtime/disk_cache.py). Returns how many dispatch plans were prepared."""
        plans = [p for desc in op_descs for p in self.compile(desc).plans if isinstance(p, DispatchPlan)]
        self.engine.prepare_many(plans)  # compiled together
        return len(plans)

    @contextlib.contextmanager
    def record(self) -> Iterator[Recording]:
        """Record many executions into one submission, submitted when the block exits."""
        rec = Recording(self)
        yield rec
        rec.submit()

    @contextlib.contextmanager
    def capture(self) -> Iterator[Recording]:
        """Record every operator execution this thread makes on this device while the block
        runs (functional helpers included: their outputs are allocated, nothing runs) into
        one Recording, which the caller submits or compiles (`Recording.compile`). Reading
        a captured output before submission reads what it held before."""
        rec = Recording(self)
        with self.engine.capture_into(rec):
            yield rec

    def uncaptured(self) -> Any:
        """A context in which this thread's executions run even while it captures (a constant an
        operator computes on the device when it is compiled: ops/act_table.py)."""
        return self.engine.capture_into(None)

    def synchronize(self) -> None:
        """Wait for every submission made with `wait=False`."""
        self.engine.synchronize()

    @contextlib.contextmanager
    def profile(self) -> Iterator[Profile]:
        """Device time per dispatch while the block runs: `with dev.profile() as p: ...`,
        then `print(p)` or `p.rows` / `p.table(by="scope" | "variant")`
        (kompute_dml/runtime/profile.py). Profiled work runs one submission at a time."""
        engine = self.engine
        with engine.lock:
            engine.check_open()
            if engine.profile is not None:
                raise DMLError("a profile is already open on this Device")
            engine.synchronize()
            p = Profile(engine.manager, float(self.limits.get("timestamp_period_ns") or 1.0), engine.guarded, engine.first_runs.order)
            engine.profile = p
        try:
            yield p
        finally:
            with engine.lock:
                engine.profile = None

    @property
    def active_profile(self) -> Profile | None:
        """The profile open on this device (Device.profile), else None."""
        return self.engine.profile

    # ---- state -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.engine.closed


    def close(self) -> None:
        """Release every Vulkan object of this device."""
        self.engine.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Cache and memory counters: programs (pipelines shared per shader variant and
        specialization constants) and pipelines_created (compiled by the driver),
        descriptor_sets (written so far: one per dispatch encoded anew, held by the recorded
        submissions that bind it and runtime/encode.EncodeCache), recorded_sequences (cached submissions; word_sequences: those whose
        own kp sequence completes by a completion word), sequences_created (kp sequences
        recorded for cached submissions: at their second run), first_runs (first runs through
        the shared sequence, runtime/replay.py), live_buffers, pooled_buffers,
        allocated_bytes (device memory of live buffers), staging_bytes (host memory the
        transfers hold), pipeline_cache_loaded_bytes (pipeline cache data read from disk at
        open)."""
        return self.engine.stats()
