"""Device: one kp.Manager on one Vulkan physical device, at one DirectML feature level."""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import sys
import threading
import types
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import kp
import numpy as np

from .dtypes import HIGHEST_FEATURE_LEVEL, FeatureLevel
from .errors import DeviceError, DMLError, InvalidArgumentError, OutOfMemoryError, UnsupportedError, invalid
from .policy import policy_for, requested_capabilities
from .memory import Buffer, Tensor, packed_desc_for
from .runtime import EncodedDispatch, PipelineCache, encode, record_dispatches
from .tensor_desc import TensorDesc, validate_desc
from .vulkan_info import PhysicalDeviceInfo, physical_devices


def list_devices() -> list[dict[str, Any]]:
    """Every Vulkan physical device the loader reports, with its limits."""
    return [d.as_dict() for d in physical_devices()]


_HOST_HEADROOM = 512 << 20  # bytes of host RAM a CPU device always leaves free


def _host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _coerce_budget(budget: object, info: PhysicalDeviceInfo) -> int:
    if budget is None:
        heaps = sum(info.memory_heaps)
        return heaps if heaps > 0 else 1 << 31
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise invalid("memory_budget", f"must be a number of bytes (int) or None, got {type(budget).__name__}")
    if budget < 4096:
        raise invalid("memory_budget", f"must be at least 4096 bytes, got {budget}")
    return int(budget)


def _coerce_feature_level(level: object) -> FeatureLevel:
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
        if value in FeatureLevel._value2member_map_:
            return FeatureLevel(value)
        if value > HIGHEST_FEATURE_LEVEL and value in (0x6300, 0x6400):
            raise UnsupportedError(
                f"feature_level: 0x{value:x} is above the highest level implemented (0x{HIGHEST_FEATURE_LEVEL:x})"
            )
        raise invalid("feature_level", f"0x{value:x} is not a DML_FEATURE_LEVEL value")
    raise invalid("feature_level", f"must be a FeatureLevel, got {type(level).__name__}")


_MANAGER_LOCK = threading.Lock()  # kp.kdml_request_features applies to the next kp.Manager
_LIVE_DEVICES: weakref.WeakSet[Device] = weakref.WeakSet()


def _create_manager(index: int, requested: frozenset[str] | None) -> Any:
    spin_us = os.environ.get("KDML_WAIT_SPIN_US")
    with _MANAGER_LOCK:
        if hasattr(kp, "kdml_request_features"):
            kp.kdml_request_features(None if requested is None else sorted(requested))
        if spin_us is not None and hasattr(kp, "kdml_set_wait_spin_ns"):
            kp.kdml_set_wait_spin_ns(max(0, int(float(spin_us) * 1000)))
        return kp.Manager(index)


@atexit.register
def _close_live_devices() -> None:
    """Release every Device's Vulkan objects while the interpreter is intact: left to the
    garbage collector at exit, kp objects die in any order, after the Vulkan driver's own
    teardown has begun ("free(): invalid pointer" and SIGABRT seen on NVIDIA's driver)."""
    for d in list(_LIVE_DEVICES):
        with contextlib.suppress(Exception):
            d.close()


class Device:
    """A Vulkan device running DirectML operators at `feature_level`.

    Thread-safe: kp is not, so every kp call happens under one re-entrant lock.
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
        self.feature_level = _coerce_feature_level(feature_level)
        requested = requested_capabilities(features)
        infos = physical_devices()
        if not infos:
            raise DeviceError("no Vulkan physical device found (install mesa-vulkan-drivers for lavapipe)")
        if isinstance(device_index, bool) or not isinstance(device_index, (int, np.integer)):
            raise invalid("device_index", f"must be an integer, got {type(device_index).__name__}")
        if not 0 <= int(device_index) < len(infos):
            raise invalid("device_index", f"must be in [0, {len(infos)}), got {device_index}")
        self.index = int(device_index)
        self.info: PhysicalDeviceInfo = infos[self.index]
        self.name = self.info.name
        self.device_type = self.info.device_type
        self.limits: Mapping[str, Any] = types.MappingProxyType(dict(self.info.limits))
        self.memory_budget = _coerce_budget(memory_budget, self.info)
        # The optional capabilities enabled on this device (none until the runtime enables
        # device features), and the per-device policy that picks paths and kernel families.
        # Dense and row-contiguous copies and fills run as transfer commands where the policy
        # says so; `transfer_commands` (or KDML_TRANSFER=0/1) overrides that choice.
        self._allocated = 0  # bytes of Vulkan memory held by live buffers (device + staging copies)
        self._allocations = 0  # vkAllocateMemory calls held by live buffers
        self._lock = threading.RLock()
        try:
            self._mgr = _create_manager(self.index, requested)
        except Exception as e:  # kp raises plain RuntimeError
            raise DeviceError(f"could not create a Vulkan device on {self.name}: {e}") from e
        enabled = getattr(self._mgr, "kdml_enabled_features", lambda: [])()
        self.capabilities = frozenset(str(n) for n in enabled)
        # (M, N, K, A, B, C, result type (VkComponentTypeKHR), saturating, scope) per shape
        shapes = getattr(self._mgr, "kdml_cooperative_matrix_shapes", lambda: [])()
        self.cooperative_matrix_shapes: tuple[tuple[int, ...], ...] = tuple(tuple(int(v) for v in s) for s in shapes)
        self.policy = policy_for(self.device_type, self.capabilities, self.limits, transfer_commands=transfer_commands)
        self.transfer_commands = self.policy.transfer_commands
        _LIVE_DEVICES.add(self)
        self._pipelines = PipelineCache(self)
        self._replays: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._replay_capacity = 256
        self._live_buffers: weakref.WeakValueDictionary[int, Buffer] = weakref.WeakValueDictionary()
        self._closed = False
        self._dummy = Buffer(self, 16)  # bound where an optional tensor is absent

    def __repr__(self) -> str:
        return f"Device({self.index}, {self.name!r}, feature_level={self.feature_level.name})"

    # ---- memory ------------------------------------------------------------------
    def _alloc_words(self, words: int) -> Any:
        """One kp `device` tensor of `words` zeroed 32-bit words (device memory + staging copy).

        kp 0.9 ignores the VkResult of vkAllocateMemory and binds the null handle it leaves,
        which crashes the process (seen on lavapipe under RLIMIT_AS). So allocation failure
        is never left to the driver: every request is checked first against this Device's
        memory budget (default: the size of its memory heaps), the allocation-count limit and,
        on a CPU device (whose "device memory" is the process's RAM), the host's available
        memory; OutOfMemoryError is raised before kp is called."""
        nbytes = words * 4
        cost = 2 * nbytes  # kp allocates a device-local buffer and a host-visible staging buffer
        with self._lock:
            self._check_open()
            if self._allocated + cost > self.memory_budget and self._trim_pools():
                import gc

                gc.collect()  # pooled buffers just released: let their memory go first
            if self._allocated + cost > self.memory_budget:
                raise OutOfMemoryError(
                    f"could not allocate {nbytes} bytes: this Device holds {self._allocated} bytes of its "
                    f"{self.memory_budget}-byte memory budget (each buffer takes its size twice: device "
                    "memory and a staging copy); free buffers or raise Device(memory_budget=...)"
                )
            max_count = int(self.limits.get("max_memory_allocation_count") or 4096)
            if self._allocations + 2 > max_count:
                raise OutOfMemoryError(
                    f"could not allocate a buffer: {self._allocations} Vulkan allocations are live, "
                    f"maxMemoryAllocationCount is {max_count}"
                )
            if self.device_type == "cpu":
                avail = _host_available_bytes()
                # the staging copy, the device copy and the zeroed upload array, plus headroom
                if avail is not None and 3 * nbytes + _HOST_HEADROOM > avail:
                    raise OutOfMemoryError(
                        f"could not allocate {nbytes} bytes: the host (whose RAM is this CPU device's "
                        f"memory) has only {avail} bytes available"
                    )
            try:
                t = self._mgr.tensor_t(np.zeros(words, dtype=np.uint32), kp.TensorTypes.device)
                self._sync_to_device([t])
            except MemoryError as e:
                raise OutOfMemoryError(f"could not allocate {nbytes} bytes: {e}") from e
            except RuntimeError as e:
                msg = str(e)
                if "OutOfDeviceMemory" in msg or "OutOfHostMemory" in msg or "memory" in msg.lower():
                    raise OutOfMemoryError(f"could not allocate {nbytes} bytes of device memory: {msg}") from e
                raise DeviceError(f"buffer allocation failed: {msg}") from e
            self._allocated += cost
            self._allocations += 2
            return t

    def _trim_pools(self) -> int:
        """Drop the functional helpers' pooled buffers that nothing else uses (see
        functional.py); returns how many were dropped."""
        pool = self.__dict__.get("_helper_pool")
        if not pool:
            return 0
        keep = [b for b in pool if sys.getrefcount(b) > 3]  # the pool, `b`, the argument
        dropped = len(pool) - len(keep)
        pool[:] = keep
        return dropped

    def _track_buffer(self, buf: Buffer) -> None:
        self._live_buffers[buf.serial] = buf
        cost = 2 * buf._kp.size() * 4
        weakref.finalize(buf, Device._buffer_released, weakref.ref(self), buf.serial, cost)

    @staticmethod
    def _buffer_released(dev_ref: weakref.ref[Device], serial: int, cost: int = 0) -> None:
        dev = dev_ref()
        if dev is None:
            return
        with dev._lock:
            dev._allocated -= cost
            dev._allocations -= 2
            if dev._closed:
                return
            dev._pipelines.forget_buffer(serial)
            for key in [k for k in dev._replays if serial in k[1]]:
                del dev._replays[key]

    def _sync_to_device(self, tensors: list[Any]) -> None:
        self._eval([kp.OpTensorSyncDevice(tensors)])

    def _sync_to_host(self, tensors: list[Any]) -> None:
        self._eval([kp.OpTensorSyncLocal(tensors)])

    def _eval(self, ops: list[Any]) -> None:
        with self._lock:
            self._check_open()
            seq = self._mgr.sequence()
            for op in ops:
                seq.record(op)
            self._run(seq)

    def _run(self, seq: Any) -> None:
        try:
            seq.eval()
        except RuntimeError as e:
            raise DeviceError(f"Vulkan submission failed (device lost?): {e}") from e

    def buffer(self, nbytes_or_data: int | bytes | bytearray | np.ndarray) -> Buffer:
        """Device memory: a size in bytes, or data (bytes, bytearray, numpy array) to upload."""
        if isinstance(nbytes_or_data, (bytes, bytearray, memoryview, np.ndarray)):
            data = nbytes_or_data
            n = data.nbytes if isinstance(data, (np.ndarray, memoryview)) else len(data)
            if n == 0:
                raise invalid("data", "must not be empty")
            buf = Buffer(self, n)
            buf.write(data)
            return buf
        return Buffer(self, nbytes_or_data)  # type: ignore[arg-type]

    def tensor(self, array: Any) -> Tensor:
        """Upload a numpy array as a packed tensor (a 0-d array becomes sizes (1,))."""
        arr = np.ascontiguousarray(array)
        desc = packed_desc_for(arr)
        buf = Buffer(self, desc.byte_size)
        buf.write(arr)
        return Tensor(buf, desc, 0)

    def empty(self, desc: TensorDesc) -> Tensor:
        """A new buffer holding one tensor of `desc` at offset 0 (contents zero)."""
        validate_desc(desc, "desc")
        return Tensor(Buffer(self, desc.byte_size), desc, 0)

    # ---- operators ---------------------------------------------------------------
    def compile(self, op_desc: Any) -> Any:
        """Validate an operator descriptor at this device's feature level and pick its shaders."""
        from .ops import compile_operator

        self._check_open()
        return compile_operator(self, op_desc)

    @contextlib.contextmanager
    def record(self) -> Iterator[Recording]:
        """Record many executions into one submission, submitted when the block exits."""
        rec = Recording(self)
        yield rec
        rec.submit()

    def _submit(self, dispatches: list[EncodedDispatch], replay_key: tuple[Any, ...] | None = None) -> None:
        if all(d.skip for d in dispatches):
            return  # e.g. an exact in-place copy: nothing to submit
        with self._lock:
            self._check_open()
            seq = self._replays.get(replay_key) if replay_key is not None else None
            if seq is None:
                seq = self._mgr.sequence()
                record_dispatches(seq, dispatches)
                if replay_key is not None:
                    self._replays[replay_key] = seq
                    while len(self._replays) > self._replay_capacity:
                        self._replays.popitem(last=False)
            elif replay_key is not None:
                self._replays.move_to_end(replay_key)
            self._run(seq)
            for d in dispatches:
                for b in d.write_buffers:
                    b._device_newer = True

    def _submit_recording(self, items: list[tuple[Any, list[Any]]]) -> None:
        """Submit a recording's executions. Its kp sequence is cached like an eager
        operator's: a recording of the same operators on the same buffers and offsets
        (a loop body, say) replays it without encoding or recording anything."""
        key = (
            "rec",
            tuple(t.buffer.serial for _, bound in items for t in bound if t is not None),
            tuple((op.serial, tuple(t.offset if t is not None else -1 for t in bound)) for op, bound in items),
        )
        with self._lock:
            self._check_open()
            seq = self._replays.get(key)
            if seq is None:
                self._submit([encode(self, plan, bound) for op, bound in items for plan in op.plans], replay_key=key)
                return
            self._replays.move_to_end(key)
            self._run(seq)
            for op, bound in items:
                self._mark_written(op.plans, bound)

    @staticmethod
    def _mark_written(plans: Any, bound: list[Any]) -> None:
        """After a replayed submission: the buffers its plans write are newer on the device."""
        for plan in plans:
            for i in plan.writes:
                bound[i].buffer._device_newer = True

    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError("the device has been closed")

    def close(self) -> None:
        """Release every Vulkan object of this device."""
        with self._lock:
            if self._closed:
                return
            self._replays.clear()
            self._pipelines.clear()
            self._closed = True
            self._mgr.destroy()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        return {
            "pipelines": len(self._pipelines),
            "pipeline_hits": self._pipelines.hits,
            "pipeline_misses": self._pipelines.misses,
            "recorded_sequences": len(self._replays),
            "live_buffers": len(self._live_buffers),
            "pooled_buffers": len(self.__dict__.get("_helper_pool", ())),
            "allocated_bytes": self._allocated,
        }


class Recording:
    """Executions gathered by `with dev.record() as rec:`; one submission at the end.

    Each `rec.execute` validates its bindings at once (so a bad call raises inside the
    block and nothing is submitted); dependent dispatches get memory barriers.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        # (op, validated bindings): encoded at submission, unless the device has this very
        # recording (same ops, same buffers and offsets) cached as a kp sequence already.
        # Holding the bindings keeps the bound tensors alive until submission: a buffer
        # collected mid-recording would otherwise take its pipelines with it.
        self._items: list[tuple[Any, list[Any]]] = []
        self._count = 0
        self._done = False

    def execute(self, op: Any, inputs: Any, outputs: Any) -> None:
        if self._done:
            raise DMLError("this recording was already submitted")
        if getattr(op, "device", None) is not self.device:
            raise InvalidArgumentError("op: was compiled for another Device (or is not a compiled operator)")
        with self.device._lock:
            self.device._check_open()
            bound = op._check_bindings(inputs, outputs)
            if op.is_inplace_noop(bound):
                return
            self._items.append((op, bound))
            self._count += len(op.plans)

    def submit(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self._count:
                self.device._submit_recording(self._items)
        finally:
            self._items = []

    def __len__(self) -> int:
        return self._count
