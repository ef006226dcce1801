"""Moving values between host and device for a prepared model: constants uploaded once,
downloads cached, and the buffer arena each node reuses from run to run."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto, numpy_helper

import kompute_dml as kdml
from kompute_dml.core.ints import cdiv
from kompute_dml.device.memory import packed_desc_for

from ..functional import _pool_take
from ..runtime import staging
from ..runtime.replay import HostCopies
from .constant_arena import ConstantArena, expected_bytes
from .fallback import CpuSegment
from .file_weights import FileWeights
from .handlers_values import BOOL, is_packed
from .host_eval import SHAPE_ONLY, evaluate
from .plan_context import _block
from .values import _DML_NUMPY, DeviceValue, RunStats, _value_shape, check_bindable

# The host memory a model's first plan takes for its plans' inputs and outputs on GPUs (host_io): room for
# IO_HEADROOM times what the first plan moves (a batch of 8 after a batch of 1), at least IO_MIN_BYTES and at
# most PLAN_IO_BYTES (MiniLM's inputs at 64 x 256 take 384 KiB, BERT-base's 8 x 128 outputs 3 MiB). Pinned
# memory costs its allocation (32 MiB: 18 ms on the H100's host, device_graph.PROGRAM_OUT_BYTES), which a
# first run pays: it took 8 MiB for ResNet-50's 4 KB of logits.
PLAN_IO_BYTES = {"in": 1 << 20, "out": 8 << 20}
IO_HEADROOM = 8
IO_MIN_BYTES = 256 << 10

if TYPE_CHECKING:
    import onnx

    from .rep import BackendRep
    from .run_state import RunState


# the types whose raw_data is the array's bytes as numpy reads them (little-endian hosts)
_RAW_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
              TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT16: np.int16,
              TensorProto.UINT16: np.uint16, TensorProto.INT32: np.int32, TensorProto.UINT32: np.uint32,
              TensorProto.INT64: np.int64, TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_}


def constant_array(t: TensorProto, weights: FileWeights | None = None) -> np.ndarray:
    """An initializer's values: a read-only view of its raw bytes where they are the array
    (a plain type, little-endian host), else numpy_helper's copy. A model's weights are read
    at its first run, where those copies were 8-12% of a warm first run on the H100 host
    (ResNet-18's 47 MB, Llama's; benchmarks/cold_start.py times first runs). `weights`: the
    bytes the model was read from, where raw_data is viewed without protobuf's copy (file_weights.py)."""
    dt = _RAW_TYPES.get(t.data_type)
    if dt is not None and t.HasField("raw_data") and sys.byteorder == "little" and not t.external_data:
        dims = tuple(t.dims)
        raw = (weights.raw(t) if weights is not None else None) or t.raw_data
        if len(raw) == int(np.prod(dims, dtype=np.int64)) * np.dtype(dt).itemsize:
            return np.frombuffer(raw, dt).reshape(dims)
    return numpy_helper.to_array(t)


class ValueTransfers:
    """BackendRep's value methods (a mixin: the attributes below are set by BackendRep.__init__)."""

    device: kdml.Device
    constants: dict[str, TensorProto]
    file_weights: FileWeights | None
    state: RunState
    folded_outputs: set[str]
    graph: onnx.GraphProto

    # ---- values ------------------------------------------------------------------
    def constant_host(self, name: str) -> np.ndarray:
        arr = self.state.host_constants.get(name)
        if arr is None:
            arr = constant_array(self.constants[name], self.file_weights)
            self.state.host_constants[name] = arr
        return arr

    def host(self, value: Any, stats: RunStats) -> Any:
        """The host form of a value (numpy / list / None), downloading device tensors once."""
        if isinstance(value, DeviceValue):
            if value._host is None:
                arr = value.tensor.numpy().reshape(value.shape)
                value._host = arr.astype(np.bool_) if value.dtype == np.bool_ else arr
                stats.downloads += 1
            return value._host
        if isinstance(value, list):
            return [self.host(v, stats) for v in value]
        return value

    def is_constant(self, name: str | None) -> bool:
        """An initializer no feed overrides, or a host node's output computed from such alone."""
        return name is not None and (name in self.constants or name in self.folded_outputs) and name not in self.state.feeds_now

    # ---- nodes resolved on the host ------------------------------------------------
    def _single_node_segment(self, idx: int) -> CpuSegment:
        seg = self.state.single_node_segments.get(idx)
        if seg is None:
            node = self.graph.node[idx]
            seg = CpuSegment(self, -1 - idx, [idx])  # type: ignore[arg-type]
            seg.outputs = [o for o in node.output if o]
            self.state.single_node_segments[idx] = seg
        return seg

    def _host_node(self, idx: int, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        """A node that reads no input data (analysis.py): numpy (host_eval.py), else the CPU
        engine for this one node. A node of constants alone (`folded_outputs`: e.g. a
        DequantizeLinear of a whole quantized table) is evaluated once per model, not per input
        shape, and its outputs are then constants: uploaded once (to_device), shared by plans."""
        folded = self.state.folded_values.get(idx)
        if folded is not None:
            return folded
        if node.op_type not in SHAPE_ONLY:
            ins = [self.host(v, stats) for v in ins]
        key = self.state.host_memo.key(idx, node, ins, _value_shape)
        hit = self.state.host_memo.get(key)
        if hit is not None:
            return list(hit)

        def on_cpu() -> list[Any]:
            seg = self._single_node_segment(idx)
            values = dict(zip(node.input, ins))
            return list(seg.run([values[n] if n in values else self.constant_host(n) for n in seg.inputs]))

        outs = evaluate(node, ins, _value_shape, on_cpu)
        names = [o for o in node.output if o]
        if names and all(o in self.folded_outputs for o in names):  # (their inputs are no feed: analysis.py)
            self.state.folded_values[idx] = outs
            self.state.host_constants.update((o, v) for o, v in zip(node.output, outs) if o and isinstance(v, np.ndarray))
        else:
            self.state.host_memo.put(key, outs)
        return outs

    def to_device(self, value: Any, stats: RunStats, name: str | None = None) -> kdml.Tensor:
        """The kdml.Tensor for a (non-empty) tensor value; constants are uploaded once."""
        if isinstance(value, DeviceValue):
            return value.tensor
        if name is not None and self.is_constant(name):
            return self._constant_on_device(name, stats)
        return self.upload_group([np.asarray(value)], stats, (name,))[0]

    def weight_to_device(self, name: str, rows: int, stats: RunStats) -> kdml.Tensor:
        """Constant `name`, the B of an integer product with `rows` rows of A, in the device
        policy's layout for it (DevicePolicy.weight_layout): a 2-D weight transposed once at
        upload where that is "columns" (a column-major descriptor over the same values; kept
        beside the row-major upload where other products use that), else as to_device.
        Where the policy stores weights as columns for some numbers of rows and not for others,
        both layouts go up at the first product: a later plan with another number of rows (a new
        sequence length, gemv's few rows or the tensor cores' many) uploads nothing (on the H100,
        transposing and uploading MiniLM's 36 weights took 15-25 ms of the first 8 x 128 run after
        a 1 x 5 one: RESULTS.md); the weights then take twice their memory on the device. Where
        every number of rows takes columns (tensor-core GPUs), only they go up."""
        shape = self.constant_host(name).shape
        policy = self.device.policy
        if policy.weights != "columns" or len(shape) != 2 or min(shape) < 2:
            return self._constant_on_device(name, stats)
        columns = policy.weight_layout(rows) == "columns"
        if policy.weight_layout(1) != policy.weight_layout(1 << 30):   # both layouts in use
            self._constant_on_device(name, stats, not columns)
        return self._constant_on_device(name, stats, columns)

    def constant_as(self, name: str, dtype: Any, stats: RunStats) -> kdml.Tensor:
        """Constant `name` converted to `dtype` on the host (numpy's astype: float32 to float16
        rounds to nearest even, beyond 65504 to infinity) and uploaded once per model and type
        (half_precision.py: a float32 weight for a float16 product)."""
        return self._constant_on_device(name, stats, dtype=np.dtype(dtype))

    def _constant_on_device(self, name: str, stats: RunStats, columns: bool = False,
                            dtype: np.dtype | None = None) -> kdml.Tensor:
        """Constant `name` on the device, uploaded once per layout: as it is, or (`columns`, 2-D)
        its transpose under a column-major descriptor of the original shape; `dtype`: converted to it."""
        key = f"{name}#columns" if columns else name
        if dtype is not None:
            key += f"#{dtype.str}"
        dv = self.state.device_constants.get(key)
        if dv is None:
            arr = self.constant_host(name)
            if dtype is not None:
                arr = arr.astype(dtype)
            check_bindable(self.device, arr.nbytes)
            if self.state.constant_arena is None:
                self.state.constant_arena = ConstantArena(self.device, expected_bytes(self.constants))
            t = self.state.constant_arena.tensor(np.ascontiguousarray(arr.T if columns else arr))
            if columns:
                t = kdml.Tensor(t.buffer, kdml.TensorDesc(t.desc.data_type, arr.shape, (1, arr.shape[0])), t.offset)
            dv = self.state.device_constants[key] = DeviceValue(t, arr.shape, arr.dtype)
            stats.constant_uploads += 1
        return dv.tensor

    def _arena_get(self, key: tuple[Any, ...]) -> Any:
        hit = self.state.arena.get(key)
        if hit is not None:
            self.state.arena.move_to_end(key)
        return hit

    def _arena_put(self, key: tuple[Any, ...], value: Any) -> None:
        self.state.arena[key] = value
        while len(self.state.arena) > self.state.arena_capacity:
            self.state.arena.popitem(last=False)

    def out_tensor(self, sizes: Sequence[int], dtype: Any, over: Any = None) -> kdml.Tensor:
        """The current node's next output buffer, the same one on every run of this layout
        (`over` is not reused node by node: the value may be read again)."""
        desc = kdml.TensorDesc(kdml.DataType.from_numpy(dtype), tuple(sizes) if len(sizes) else (1,))
        self.state.slot += 1
        key = (self.state.cur_node, "out", self.state.slot, desc)
        t = self._arena_get(key)
        if t is None:
            check_bindable(self.device, desc.byte_size)
            t = self._arena_alloc(lambda: self.device.empty(desc))
            self._arena_put(key, t)
        return t

    def _arena_alloc(self, make: Any) -> Any:
        """make() (an allocation for the arena); where the device's memory (or its budget) is
        full, the arena's buffers are dropped first and make() is tried again: the arena keeps
        every node's output for the next run, more than one run holds at once (MiniLM 64x256
        node by node on lavapipe: over its 2 GB), while the values still live hold their own."""
        try:
            return make()
        except kdml.OutOfMemoryError:
            self.state.arena.clear()  # (the retry's allocation collects reference cycles itself: runtime/engine.py)
            return make()

    def upload_group(self, arrays: list[np.ndarray], stats: RunStats,
                     names: tuple[str | None, ...] | None = None) -> list[kdml.Tensor]:
        """Upload host arrays for the current node in one transfer, into a buffer (16-byte
        aligned parts) that this node reuses on every run with the same layouts. When every
        array is a named graph value, a later node of the same run that needs the same values
        binds the same upload (e.g. the Q, K and V products of one quantized activation)."""
        named = names is not None and all(names)
        if named and names in self.state.uploads:
            return list(self.state.uploads[names])
        arrays = [np.ascontiguousarray(a) for a in arrays]
        descs = [packed_desc_for(a) for a in arrays]
        self.state.slot += 1
        key = (self.state.cur_node, "in", self.state.slot, tuple(descs))
        hit = self._arena_get(key)
        if hit is None:
            offsets, total = [], 0
            for d in descs:
                offsets.append(total)
                total += cdiv(d.byte_size, 16) * 16
            check_bindable(self.device, total)
            buf = self._arena_alloc(lambda: self.device.buffer(total))
            hit = (buf, offsets, [kdml.Tensor(buf, d, o) for d, o in zip(descs, offsets)], total)
            self._arena_put(key, hit)
        buf, offsets, tensors, total = hit
        if len(arrays) == 1:
            buf.write(arrays[0])
        else:
            raw = np.zeros(total, np.uint8)
            for a, off in zip(arrays, offsets):
                raw[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
            buf.write(raw)
        stats.uploads += 1
        if named:
            self.state.uploads[names] = tensors  # type: ignore[index]
        return list(tensors)

    def release(self) -> None:
        """Drop the device buffers kept for reuse between runs (and the uploaded constants)."""
        with self.state.lock:
            self.state.arena.clear()
            self.state.device_constants.clear()
            self.state.constant_arena = None
            self.state.plans.clear()  # whole-graph programs (device_graph.py) and their buffers
            self.state.plan_parent.clear()
            self.state.plan_buffers.clear()
            self.state.plan_io.clear()
            self.state.cache_padding.release()  # its padded pasts and outputs kept from step to step


def device_results(values: list[Any], device: kdml.Device) -> list[Any]:
    """device_result of each value, the copies in one submission (a capture: record() would
    submit each helper call by itself)."""
    with device.capture() as rec:
        results = [device_result(v, device, rec) for v in values]
    rec.submit()
    return results


def device_result(v: Any, device: kdml.Device, rec: Any) -> Any:
    """An output handed to the caller on the device: a new packed Tensor of its ONNX shape (a
    rank-0 value as shape (1,)), copied there from a device value or uploaded from a host one;
    what no DirectML tensor holds (bool, strings, sequences, empty values) as the host form."""
    if isinstance(v, DeviceValue):
        if v.dtype == BOOL:
            return v.tensor.numpy().reshape(v.shape).astype(BOOL)
        # a pooled buffer of the plans' size class: a decoder's presents grow by a row per step,
        # and the buffers of outputs the caller has dropped (the last step's) fit the next ones
        dt, sizes = v.tensor.desc.data_type, v.tensor.desc.sizes
        buf = _pool_take(device, _block(kdml.TensorDesc(dt, sizes).byte_size))
        copy_into(rec, v.tensor, kdml.Tensor(buf, kdml.TensorDesc(dt, sizes), 0))
        return kdml.Tensor(buf, kdml.TensorDesc(dt, v.shape if v.shape else (1,)), 0)
    if isinstance(v, (np.ndarray, np.generic)) and v.dtype in _DML_NUMPY and v.size:
        return device.tensor(np.ascontiguousarray(v).reshape(v.shape if v.shape else (1,)))
    return [np.array(e, copy=True) for e in v] if isinstance(v, list) else v if v is None else np.array(v, copy=True)


def copy_into(rec: Any, src: kdml.Tensor, dst: kdml.Tensor) -> None:
    """src's elements into packed `dst` (another buffer), recorded into `rec` (a capture): a packed
    src's bytes as a transfer (no COPY compiled for a new shape: a decoder's every step), else COPY."""
    if is_packed(src):
        rec.copy_tensor(src, dst)
    else:
        kdml.copy(src, out=dst)


def early_copies(outputs: Sequence[tuple[str, Any]], out_at: dict[int, int], out_host: np.ndarray,
                 result_array: Any) -> tuple[dict[int, np.ndarray], HostCopies] | None:
    """For a GraphPlan's run: the caller's arrays (`result_array(k, shape, dtype)`) of the outputs
    its program copies to host memory (output k at byte `out_at[k]` of `out_host`), below the size
    the copy threads split (staging.PARALLEL_BYTES), and their copies for the wait's native call
    (replay.HostCopies), so that a run takes the GIL back once, not after its wait and again after
    the copy (docs/serving.md); None where there are none."""
    arrays: dict[int, np.ndarray] = {}
    items = []
    for k, (_name, v) in enumerate(outputs):
        at = out_at.get(k)
        if at is None or not isinstance(v, DeviceValue) or v.dtype == BOOL or v.tensor.nbytes >= staging.PARALLEL_BYTES:
            continue
        arr = arrays[k] = result_array(k, v.shape, v.tensor.dtype)
        items.append((arr.ctypes.data, out_host.ctypes.data + at, v.tensor.nbytes))
    return (arrays, HostCopies(items)) if items else None


def host_io(rep: BackendRep, key: str, nbytes: int) -> np.ndarray:
    """Host memory (Device.host_array) of at least nbytes for the plans' inputs ("in") or
    outputs ("out"): one per model and direction, shared by its plans (runs never overlap),
    grown by plan_context's size classes (a plan made before keeps the smaller one it recorded).
    Where the policy prepares for other input shapes (GPUs), the first has room for larger ones (IO_HEADROOM):
    pinned memory cost a first run of a larger shape 2.1 ms on the H100 (benchmarks/plan_split.py at 16a7ab2, 8x128)."""
    arr = rep.state.plan_io.get(key)
    if arr is None or arr.nbytes < nbytes:
        if arr is None and rep.device.policy.prepare_siblings:
            nbytes = max(nbytes, min(PLAN_IO_BYTES[key], max(IO_HEADROOM * nbytes, IO_MIN_BYTES)))
        arr = rep.state.plan_io[key] = rep.device.host_array(_block(nbytes), np.uint8)
    return arr
