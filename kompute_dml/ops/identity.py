"""DML_ACTIVATION_IDENTITY (seed 004) and kompute_dml's all-type strided COPY.

Both are a bitwise strided copy; variants differ only by element width. When input and
output are both dense in the same element order after merging dimensions, the packed
16-byte-per-invocation variant is used. Devices whose policy has memory_kernel "gpu" take
the multi-vector, row-tiled and shared-memory-transposing variants of gpu_memory.py where
their preconditions hold.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import invalid
from ..core.ints import cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import ALL_TYPES, FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed_like, as_tensor, compile_cached, device_of, pooled_empty
from ..functional.recent_calls import BoundCall, RecentCalls
from ..runtime import DispatchPlan, TransferPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .gpu_memory import plan_copy_gpu
from .onnx_types import dml_tensor_value
from .spec import OnnxOp, OperatorSpec
from .split_range import binding_window, fits, split_outer
from .transfer_plans import plan_copy_transfer

if TYPE_CHECKING:
    from ..device.device import Device

ACTIVATION_IDENTITY = OperatorSupport(
    "ACTIVATION_IDENTITY", 38,
    (
        row(FL.FL_1_0, ("input_tensor", "input", (4, 4), FLOATS), ("output_tensor", "output", (4, 4), FLOATS)),
        row(FL.FL_2_0, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),
        row(FL.FL_3_0, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), FLOATS)),
    ),
)

# kompute_dml's own strided copy (ONNX Identity): every type, 1-8 dimensions, all levels.
COPY = OperatorSupport(
    "COPY", None,
    (row(FL.FL_1_0, ("input_tensor", "input", (1, 8), ALL_TYPES), ("output_tensor", "output", (1, 8), ALL_TYPES)),),
)


# data-type family (element width in bytes) -> SPIR-V variant
COPY_VARIANTS = {w: contract.COPY.name(bits=8 * w) for w in (1, 2, 4, 8)}
PACKED_VARIANT = contract.COPY_PACKED.name()
PACKED_TAIL_VARIANT = contract.COPY_PACKED_TAIL.name()
LOCAL_SIZE = 256
MAX_RANK = 8


@dataclass(frozen=True)
class ActivationIdentityDesc:
    """DML_ACTIVATION_IDENTITY_OPERATOR_DESC: OutputTensor = InputTensor (in place allowed)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class CopyDesc:
    """kompute_dml extension: strided element copy of any of the eleven data types."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


class CompiledCopy(CompiledOperator):
    allows_inplace = True


def plan_copy(
    src: TensorDesc, dst: TensorDesc, max_groups: int = 65535, transfers: Any = False, kernel: str = "cpu",
    window: tuple[int, int] = (0, 16),
) -> list[DispatchPlan | TransferPlan]:
    """Dispatches copying every element of src (binding 0) to dst (binding 1): a transfer
    copy when rows are contiguous in both and `transfers(regions)` (or `transfers` is True),
    else compute shaders of the `kernel` family (DevicePolicy.memory_kernel). `window`: the
    device's binding window; tensors beyond it (a transfer copy takes any size) are copied in
    parts along their outermost dimensions by the generic shader (ops/split_range.py)."""
    width = dst.data_type.size
    if transfers:
        t = plan_copy_transfer(dst.sizes, src.effective_strides, dst.effective_strides, width)
        if t is not None and (transfers is True or transfers(len(t.regions))):
            return [t]
    if not fits((src, dst), window):
        return split_outer((src, dst), [[d, d] for d in range(dst.dimension_count)], window,
                           lambda parts: plan_copy(parts[0], parts[1], max_groups, kernel="generic"))
    if kernel == "gpu":
        gpu = plan_copy_gpu(src, dst, max_groups)
        if gpu is not None:
            return list(gpu)
    sizes, (s_in, s_out) = merge_dims(dst.sizes, src.effective_strides, dst.effective_strides)
    if kernel != "generic" and len(sizes) == 1 and (sizes[0] == 1 or (s_in[0] == 1 and s_out[0] == 1)):
        # Whole work groups of 16-byte vectors without a branch, then the rest (< 256
        # vectors and the last 1..15 bytes) in one invocation (see copy_packed.comp).
        nbytes = sizes[0] * width
        bulk = (nbytes // 16) // LOCAL_SIZE * LOCAL_SIZE
        plans: list[DispatchPlan | TransferPlan] = []
        if bulk:
            plans.append(DispatchPlan(
                variant=PACKED_VARIANT, bindings=(0, 1), push=contract.COPY_PACKED.pack(in_off=0, out_off=0, count=bulk),
                groups=grid_for(bulk, LOCAL_SIZE, max_groups), writes=(1,),
                offset_slots=contract.COPY_PACKED.slots(in_off=(0, 16), out_off=(1, 16)),
            ))
        if nbytes > bulk * 16:
            tail = contract.COPY_PACKED_TAIL
            plans.append(DispatchPlan(
                variant=PACKED_TAIL_VARIANT, bindings=(0, 1),
                push=tail.pack(in_off=0, out_off=0, count=nbytes, first_vec=bulk), groups=(1, 1, 1), writes=(1,),
                offset_slots=tail.slots(in_off=(0, 16), out_off=(1, 16)),
            ))
        return plans
    rank = len(sizes)
    pad = [0] * (MAX_RANK - rank)
    count = dst.element_count
    per_inv = max(1, 4 // width)
    push = contract.COPY.pack(in_off=0, out_off=0, count=count, rank=rank, size=[*sizes, *pad], in_stride=[*s_in, *pad],
                              out_stride=[*s_out, *pad])
    plan: list[DispatchPlan | TransferPlan] = [
        DispatchPlan(
            variant=COPY_VARIANTS[width], bindings=(0, 1), push=push,
            groups=grid_for(cdiv(count, per_inv), LOCAL_SIZE, max_groups), writes=(1,),
            offset_slots=contract.COPY.slots(in_off=(0, width), out_off=(1, width)),
        )
    ]
    return plan


def plan_region_copy(
    data_type: Any, sizes: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int], src_start: int,
    dst_start: int, src_index: int, dst_index: int, max_groups: int = 65535, transfers: Any = False,
    kernel: str = "cpu",
) -> list[DispatchPlan | TransferPlan]:
    """Dispatches copying the elements dst[dst_start + sum(c * dst_strides)] =
    src[src_start + sum(c * src_strides)] for every coordinate c < sizes, between the bound
    tensors at binding-list indices `src_index` and `dst_index`; starts in elements from the
    bound tensors' offsets; source strides may be negative (every element read lies in the
    source). The parts of DML_JOIN and the window of DML_SLICE1: a transfer copy (regions moved
    by the starts) or, where both starts are on the 16-byte grid of a binding and the strides
    are not negative, any of plan_copy's shader plans with their offset words moved by the
    starts; else the portable copy_b* with the starts packed into its offset words (its 32-bit
    address arithmetic wraps, so a negative stride is its two's complement)."""
    width = data_type.size
    remap = {0: src_index, 1: dst_index}
    extra = {src_index: src_start * width, dst_index: dst_start * width}
    if transfers:
        t = plan_copy_transfer(sizes, src_strides, dst_strides, width, src_index, dst_index)
        if t is not None and (transfers is True or transfers(len(t.regions))):
            regions = t.regions + np.array([extra[src_index], extra[dst_index], 0], dtype=np.int64)
            return [TransferPlan("copy", t.bindings, regions, t.writes)]
    if min(src_strides, default=0) >= 0 and extra[src_index] % 16 == 0 and extra[dst_index] % 16 == 0:
        src = TensorDesc(data_type, tuple(sizes), tuple(src_strides))
        dst = TensorDesc(data_type, tuple(sizes), tuple(dst_strides))
        out: list[DispatchPlan | TransferPlan] = []
        for p in plan_copy(src, dst, max_groups, False, kernel):
            assert isinstance(p, DispatchPlan)
            push = list(p.push)
            for word, idx, unit in p.offset_slots:
                push[word] += extra[remap[idx]] // unit
            out.append(dataclasses.replace(
                p, bindings=tuple(remap[b] for b in p.bindings), writes=tuple(remap[w] for w in p.writes),
                push=tuple(push), offset_slots=tuple((w, remap[i], u) for w, i, u in p.offset_slots)))
        return out
    msizes, (s_in, s_out) = merge_dims(sizes, src_strides, dst_strides)
    rank = len(msizes)
    pad = [0] * (MAX_RANK - rank)
    count = math.prod(sizes)
    push = contract.COPY.pack(
        in_off=src_start, out_off=dst_start, count=count, rank=rank, size=[*msizes, *pad],
        in_stride=[s & 0xFFFFFFFF for s in s_in] + pad, out_stride=[*s_out, *pad])
    return [DispatchPlan(
        variant=COPY_VARIANTS[width], bindings=(src_index, dst_index), push=push,
        groups=grid_for(cdiv(count, max(1, 4 // width)), LOCAL_SIZE, max_groups), writes=(dst_index,),
        offset_slots=contract.COPY.slots(in_off=(src_index, width), out_off=(dst_index, width)),
    )]


def _compile(device: Device, desc: ActivationIdentityDesc | CopyDesc, support: OperatorSupport) -> CompiledOperator:
    fields = ("input_tensor", "output_tensor")
    validate_tensors(support, device.feature_level, desc, fields, ("output_tensor",))
    i, o = desc.input_tensor, desc.output_tensor
    if i.data_type != o.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({i.data_type.name}), got {o.data_type.name}")
    if i.dimension_count != o.dimension_count:
        raise invalid(
            "output_tensor.sizes", f"dimension count must equal input_tensor's ({i.dimension_count}), got {o.dimension_count}"
        )
    if i.sizes != o.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {i.sizes}, got {o.sizes}")
    check_no_overlap(o.sizes, o.effective_strides, "output_tensor")
    policy = device.policy
    plans = plan_copy(
        i, o, device.limits["max_compute_work_group_count"][0],
        lambda regions: policy.copies_by_transfer(o.byte_size, regions), policy.memory_kernel, binding_window(device.limits),
    )
    return CompiledCopy(device, desc, support, ("input_tensor",), ("output_tensor",), plans)


def compile_identity(device: Device, desc: ActivationIdentityDesc) -> CompiledOperator:
    return _compile(device, desc, ACTIVATION_IDENTITY)


def compile_copy(device: Device, desc: CopyDesc) -> CompiledOperator:
    return _compile(device, desc, COPY)


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# (id(x), operator, id(out), id(device)) -> BoundCall: a call on the same Tensor objects again
_unary_calls: RecentCalls[BoundCall] = RecentCalls()


def _unary_copy(x: Any, desc_type: type, out: Tensor | None, device: Device | None) -> Tensor:
    ready = _unary_calls.get((id(x), id(desc_type), id(out), id(device)))
    if ready is not None:
        return ready.run(out)
    dev = device_of(x, out, device=device)
    t = as_tensor(x, dev)
    res_desc = _packed_like(t.desc)
    result = out if out is not None else pooled_empty(dev, res_desc)
    op = compile_cached(dev, desc_type(t.desc, result.desc))
    op.execute([t], [result])
    # a numpy x (mutable) is uploaded at every call; a capture's calls bind new tensors (a plan)
    if t is x and (out is None or type(out) is Tensor) and dev.engine.capturing is None:
        bound = Tensor.trusted(t.buffer, t.desc, t.offset)
        _unary_calls.add((x, desc_type, out, device), BoundCall(op, [bound], res_desc, result.desc, out))
    return result


def identity(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_ACTIVATION_IDENTITY: FLOAT32/FLOAT16, 1-8 dimensions; output packed unless `out` is given."""
    return _unary_copy(x, ActivationIdentityDesc, out, device)


def copy(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """Strided element-wise copy of any of the eleven data types (ONNX Identity)."""
    return _unary_copy(x, CopyDesc, out, device)


# ---- specs (kompute_dml/ops/spec.py) ------------------------------------------------------
_COPY_SHADERS = (contract.COPY, contract.COPY_PACKED, contract.COPY_PACKED_TAIL, contract.COPY_VEC, contract.COPY_TILE,
                 contract.ROWS_COPY)
SPECS = (
    OperatorSpec(ActivationIdentityDesc, ACTIVATION_IDENTITY, compile_identity, _COPY_SHADERS, helpers=("identity",)),
    OperatorSpec(CopyDesc, COPY, compile_copy, _COPY_SHADERS, helpers=("copy",),
                 onnx=(OnnxOp("Identity", "", "copy", check=dml_tensor_value),
                       # inference: a copy, the mask all true (onnx_backend/handlers.py)
                       OnnxOp("Dropout", "", "copy", check=dml_tensor_value))),
)
