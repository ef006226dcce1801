"""DirectML's MULTIHEAD_ATTENTION (DML_MULTIHEAD_ATTENTION_OPERATOR_DESC, feature level 6_1) and
MULTIHEAD_ATTENTION1 (DML_MULTIHEAD_ATTENTION1_OPERATOR_DESC, 6_3: key / value head counts below
the query's, past sequence lengths per batch):

    [bias added to query / key / value] -> Query x Key^T * Scale -> [+ RelativePositionBias]
    -> [+ MaskFilterValue where the mask says padding] -> Softmax -> x Value

over the keys of the past (past key / value, first) and the new ones; the present outputs hold
both. One dispatch of shaders/attention.comp (on GPUs the "blocked" kernel for many query rows, the
"tiled" one for few: a work group per batch, head and block of query rows, key / value tiles in
shared memory, online softmax; the tensor-core kernel for FLOAT16 where the device has them; the
"rows" kernel on CPU devices: the device policy's attention_kernel), and one more where present outputs are
bound. ops/attention_layout.py reads the tensors as one problem; docs/attention.md has the
semantics, what kompute_dml reads into the pages where they are silent, and the error bound.

kompute_dml's extensions (no DirectML field): `causal` (query row i attends the keys up to
past + key rows - query rows + i: a decoder's mask without a mask tensor; MULTIHEAD_ATTENTION1 with
past sequence lengths is causal without it), and `split_heads` (query, key, value and output as
4-D [batch, sequence, heads, head size] with any strides, so a [batch, heads, sequence, head
size] buffer binds through its strides: the exported graphs' attention, onnx_backend/fusion_attention.py).
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), the head counts, mask type and
extension flags, then the tensors' sizes against each other (attention_layout.resolve), the
page's one data type, non-overlapping outputs and 32-bit addressing.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional.constants import device_constant
from ..runtime import DispatchPlan, TransferPlan, grid_for
from . import contract
from .attention_gemm import gemm_plans, gemm_takes
from .attention_layout import COOP_ROWS, Problem, blocked_for, coop_choice, key_splits, plans_ahead, resolve, rows_fit, tile_for
from .attention_rules import attention_rule
from .base import CompiledOperator, validate_tensors
from .contract import attention as C
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_I32 = frozenset({DataType.INT32})
_FLOAT_FIELDS = (("query_tensor", (3, 5)), ("key_tensor", (3, 5)), ("value_tensor", (3, 5)),
                 ("stacked_query_key_tensor", (5, 5)), ("stacked_key_value_tensor", (5, 5)),
                 ("stacked_query_key_value_tensor", (5, 5)), ("bias_tensor", (1, 5)))


def _table(psl: bool) -> tuple[tuple[str, str, tuple[int, int], frozenset[DataType]], ...]:
    """The page's tensor support table (MULTIHEAD_ATTENTION1: its page gives none; kompute_dml's is
    MULTIHEAD_ATTENTION's plus the past sequence lengths, INT32 or UINT32 [batch])."""
    return (*((f, "optional input", dims, FLOATS) for f, dims in _FLOAT_FIELDS),
            ("mask_tensor", "optional input", (1, 5), _I32),
            ("relative_position_bias_tensor", "optional input", (4, 5), FLOATS),
            ("past_key_tensor", "optional input", (4, 5), FLOATS),
            ("past_value_tensor", "optional input", (4, 5), FLOATS),
            *((("past_sequence_lengths_tensor", "optional input", (1, 5), INTS_32),) if psl else ()),
            ("output_tensor", "output", (3, 5), FLOATS),
            ("output_present_key_tensor", "optional output", (4, 5), FLOATS),
            ("output_present_value_tensor", "optional output", (4, 5), FLOATS))


MULTIHEAD_ATTENTION = OperatorSupport("MULTIHEAD_ATTENTION", 164, (row(FL.FL_6_1, *_table(False)),))
MULTIHEAD_ATTENTION1 = OperatorSupport("MULTIHEAD_ATTENTION1", 172, (row(FL.FL_6_3, *_table(True)),))


class MultiheadAttentionMaskType(enum.IntEnum):
    """DML_MULTIHEAD_ATTENTION_MASK_TYPE (DirectML.h's values)."""

    NONE = 0
    KEY_SEQUENCE_LENGTH = 1  # [1, batch]: key j is padding from the batch's length on
    KEY_SEQUENCE_END_START = 2  # [2, batch]: ends (exclusive), then starts (inclusive)
    KEY_QUERY_SEQUENCE_LENGTH_START_END = 3  # [3 batch + 2]: the key lengths, then packed query / key starts
    BOOLEAN = 4  # [batch, heads, sequence, total keys]: 0 is padding


@dataclass(frozen=True)
class MultiheadAttentionDesc:
    """DML_MULTIHEAD_ATTENTION_OPERATOR_DESC { QueryTensor, KeyTensor, ValueTensor,
    StackedQueryKeyTensor, StackedKeyValueTensor, StackedQueryKeyValueTensor, BiasTensor,
    MaskTensor, RelativePositionBiasTensor, PastKeyTensor, PastValueTensor, OutputTensor,
    OutputPresentKeyTensor, OutputPresentValueTensor, Scale, MaskFilterValue, HeadCount, MaskType }.
    Sizes, the mask types and what kompute_dml reads where the page is silent: docs/attention.md.
    kompute_dml's extensions: `causal`, `split_heads` (the module's docstring)."""

    query_tensor: TensorDesc | None
    key_tensor: TensorDesc | None
    value_tensor: TensorDesc | None
    stacked_query_key_tensor: TensorDesc | None
    stacked_key_value_tensor: TensorDesc | None
    stacked_query_key_value_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    mask_tensor: TensorDesc | None
    relative_position_bias_tensor: TensorDesc | None
    past_key_tensor: TensorDesc | None
    past_value_tensor: TensorDesc | None
    output_tensor: TensorDesc
    output_present_key_tensor: TensorDesc | None
    output_present_value_tensor: TensorDesc | None
    scale: float
    mask_filter_value: float
    head_count: int
    mask_type: int = MultiheadAttentionMaskType.NONE
    causal: bool = False
    split_heads: bool = False


@dataclass(frozen=True)
class MultiheadAttention1Desc:
    """DML_MULTIHEAD_ATTENTION1_OPERATOR_DESC: MULTIHEAD_ATTENTION's fields plus
    PastSequenceLengthsTensor (after PastValueTensor), and QueryHeadCount / KeyValueHeadCount in
    place of HeadCount (query head h reads key / value head h / (QueryHeadCount /
    KeyValueHeadCount)). Past sequence lengths: batch b's past is the first lengths[b] rows of the
    past tensors, and the attention is causal (docs/attention.md: kompute_dml's reading, the page
    says "TBD")."""

    query_tensor: TensorDesc | None
    key_tensor: TensorDesc | None
    value_tensor: TensorDesc | None
    stacked_query_key_tensor: TensorDesc | None
    stacked_key_value_tensor: TensorDesc | None
    stacked_query_key_value_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    mask_tensor: TensorDesc | None
    relative_position_bias_tensor: TensorDesc | None
    past_key_tensor: TensorDesc | None
    past_value_tensor: TensorDesc | None
    past_sequence_lengths_tensor: TensorDesc | None
    output_tensor: TensorDesc
    output_present_key_tensor: TensorDesc | None
    output_present_value_tensor: TensorDesc | None
    scale: float
    mask_filter_value: float
    query_head_count: int
    key_value_head_count: int
    mask_type: int = MultiheadAttentionMaskType.NONE
    causal: bool = False
    split_heads: bool = False


def _float32(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise invalid(name, f"must be a FLOAT, got {type(value).__name__} {value!r}")
    try:
        return float(struct.unpack("<f", struct.pack("<f", float(value)))[0])
    except (OverflowError, ValueError):
        raise invalid(name, f"{value!r} is outside the float32 range") from None


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and int(value) in (0, 1)):
        return bool(value)
    raise invalid(name, f"must be a bool (True / False, 1 / 0), got {type(value).__name__} {value!r}")


def _heads(value: Any, name: str) -> int:
    n = as_int(value, name)
    if n < 1:
        raise invalid(name, f"must be at least 1, got {n}")
    return n


def _mask_type(desc: Any) -> int:
    kind = as_int(desc.mask_type, "mask_type")
    if kind not in set(MultiheadAttentionMaskType):
        raise invalid("mask_type", f"must be a DML_MULTIHEAD_ATTENTION_MASK_TYPE (0 to 4), got {kind}")
    if desc.mask_tensor is None:
        return 0  # no mask: its type is not read
    if kind == 0:
        raise invalid("mask_type", "a mask tensor needs a mask type other than NONE (0)")
    return kind


def validate(device: Device, desc: Any) -> tuple[Problem, int, bool, float, float]:
    """The descriptor's problem, mask type, causality, scale and filter value (every rule checked)."""
    support = SUPPORT[type(desc)]
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    if isinstance(desc, MultiheadAttention1Desc):
        heads = _heads(desc.query_head_count, "query_head_count")
        kv_heads = _heads(desc.key_value_head_count, "key_value_head_count")
        if heads % kv_heads:
            raise invalid("key_value_head_count", f"must divide query_head_count ({heads}), got {kv_heads}")
    else:
        heads = kv_heads = _heads(desc.head_count, "head_count")
    kind = _mask_type(desc)
    causal = _flag(desc.causal, "causal")
    split = _flag(desc.split_heads, "split_heads")
    scale = _float32(desc.scale, "scale")
    filt = _float32(desc.mask_filter_value, "mask_filter_value")
    p = resolve(desc, heads, kv_heads, split)
    floats = [(f, getattr(desc, f)) for f in support.fields
              if getattr(desc, f) is not None and f not in ("mask_tensor", "past_sequence_lengths_tensor")]
    dt = desc.output_tensor.data_type
    for f, t in floats:
        if t.data_type != dt:
            raise invalid(f"{f}.data_type", f"must equal output_tensor's ({dt.name}): the page's tensors share one "
                                            f"DataType, got {t.data_type.name}")
    outs = [(f, getattr(desc, f)) for f in support.outputs if getattr(desc, f) is not None]
    for f, t in outs:
        check_no_overlap(t.sizes, t.effective_strides, f)
    present = [(f, getattr(desc, f)) for f in support.fields if getattr(desc, f) is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    return p, kind, causal, scale, filt


def _flags(desc: Any, p: Problem, causal: bool) -> int:
    psl = getattr(desc, "past_sequence_lengths_tensor", None)
    return ((C.MHA_F_BIAS if desc.bias_tensor is not None else 0)
            | (C.MHA_F_RB if desc.relative_position_bias_tensor is not None else 0)
            | (C.MHA_F_PAST if desc.past_key_tensor is not None else 0)
            | (C.MHA_F_PSL if psl is not None else 0)
            | (C.MHA_F_PSL_UNSIGNED if psl is not None and psl.data_type == DataType.UINT32 else 0)
            | (C.MHA_F_CAUSAL if causal else 0)
            | (C.MHA_F_PRESENT_K if desc.output_present_key_tensor is not None else 0)
            | (C.MHA_F_PRESENT_V if desc.output_present_value_tensor is not None else 0)
            | (C.MHA_F_NEW_KV if p.kv_seq else 0))


# shader binding -> descriptor field (q, k and v: the field that holds them, attention_layout.Problem.source)
_SHADER_FIELDS = ("q", "k", "v", "bias_tensor", "mask_tensor", "relative_position_bias_tensor", "past_key_tensor",
                  "past_value_tensor", "past_sequence_lengths_tensor", "output_tensor", "output_present_key_tensor",
                  "output_present_value_tensor")
_OFFSETS = ("q_off", "k_off", "v_off", "bias_off", "mask_off", "rb_off", "pk_off", "pv_off", "psl_off", "o_off",
            "prk_off", "prv_off")
_WORDS = ("mask_tensor", "past_sequence_lengths_tensor")  # offsets in 4-byte words


def compile_attention(device: Device, desc: Any, *, allow_half_precision: bool = False) -> CompiledOperator:
    """`allow_half_precision` (DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION): the tensor-core
    kernel keeps each softmax weight as one float16 and takes the device's exp, and takes FLOAT32
    too, its query, key and value converted to float16 as they load (the looser bounds of
    docs/attention.md); the other kernels are unchanged by it."""
    support = SUPPORT[type(desc)]
    p, kind, causal, scale, filt = validate(device, desc)
    names = support.inputs + support.outputs
    entry = {f: i for i, f in enumerate(names) if getattr(desc, f) is not None}
    fields = [p.source.get(f, f) for f in _SHADER_FIELDS]
    bindings = (*(entry.get(f) for f in fields), len(names))  # the geometry constant after every field
    size = desc.output_tensor.data_type.size
    slots = C.MHA_PUSH.slots(**{o: (entry[f], 4 if f in _WORDS else size) for o, f in zip(_OFFSETS, fields)
                                if f in entry})
    t = "f32" if size == 4 else "f16"
    kernel = device.policy.attention_kernel
    coop = coop_choice(device, desc, p, kernel, size, allow_half_precision)
    two = coop is None and gemm_takes(device, desc, p, causal)  # two GEMM dispatches (ops/attention_gemm.py)
    blocked = blocked_for(device, p, kernel) if coop is None and not two else None
    tile = tile_for(p) if (kernel != "rows" or not rows_fit(p)) and coop is None and blocked is None and not two else None
    if not two and coop is None and blocked is None and tile is None and device.device_type == "cpu" and not rows_fit(p):
        two = gemm_takes(device, desc, p, causal, any_size=True)  # the rows kernel past llvmpipe's loop limit
        if not two:
            raise UnsupportedError(f"key_tensor: {p.past + p.kv_seq} keys of head size {p.dqk} pass the rows kernel's loop "
                                   "limit on this CPU device (runtime/llvmpipe.py), and the two-GEMM kernel does not take them")
    maxg = device.limits["max_compute_work_group_count"][0]
    common = dict(batch=p.batch, seq=p.seq, kv_seq=p.kv_seq, past=p.past, present=p.present, heads=p.heads,
                  group=p.heads // p.kv_heads, dqk=p.dqk, dv=p.dv, scale=scale, mask_filter=filt, mask_type=kind,
                  flags=_flags(desc, p, causal), **{o: 0 for o in _OFFSETS})
    out = (entry["output_tensor"],)
    constants: list[Tensor] = []
    plans: list[DispatchPlan | TransferPlan] = []
    if two:
        plans, constants = gemm_plans(device, desc, p, entry, scale, len(names) + 1)  # type: ignore[assignment]
    elif coop is not None:
        variant, spec = coop
        blocks = cdiv(p.seq, COOP_ROWS)
        count = p.batch * p.heads * blocks * spec[0]
        _addressing(count, "query blocks x heads x batch")
        plans.append(DispatchPlan(variant=variant, bindings=bindings,
                                  push=C.MHA_PUSH.pack(**common, blocks=blocks, splits=1, chunk=0),
                                  groups=grid_for(count, spec[0], maxg), writes=out, offset_slots=slots, spec=spec))
    elif blocked is not None:  # (query rows per work group)
        family = C.MHA_BLOCKED[blocked]
        local = family.local_size[0]
        blocks = cdiv(p.seq, blocked)
        count = p.batch * p.heads * blocks * local
        _addressing(count, "query blocks x heads x batch")
        plans.append(DispatchPlan(variant=family.name(t=t), bindings=bindings,
                                  push=C.MHA_PUSH.pack(**common, blocks=blocks, splits=1, chunk=0),
                                  groups=grid_for(count, local, maxg), writes=out, offset_slots=slots))
    elif tile is not None:
        bq, bk, _ = C.MHA_TILES[tile]
        blocks = cdiv(p.seq, bq)
        keys = p.past + p.kv_seq
        splits = key_splits(device, p.batch * p.heads * blocks, keys)
        chunk = cdiv(cdiv(keys, splits), bk) * bk
        splits = cdiv(keys, chunk)
        count = p.batch * p.heads * blocks * splits * 128
        _addressing(count, "query blocks x heads x batch x key chunks")
        push = C.MHA_PUSH.pack(**common, blocks=blocks, splits=splits, chunk=chunk)
        if splits == 1:
            plans.append(DispatchPlan(variant=C.MHA_TILED.name(t=t, tile=tile), bindings=bindings, push=push,
                                      groups=grid_for(count, 128, maxg), writes=out, offset_slots=slots))
        else:  # the chunks' partials to the operator's scratch (entry len(names) + 1), then combined
            words = splits * p.batch * p.heads * p.seq * (p.dv + 2)
            _addressing(words, "split partials")
            sdesc = TensorDesc(DataType.UINT32, (words,))
            # not zeroed: every work group writes its rows' partials, empty chunks included
            constants.append(Tensor.scratch(device, sdesc))
            scratch = (*bindings, len(names) + 1)
            n = p.batch * p.heads * p.seq * cdiv(p.dv, 1 if size == 4 else 2)
            _addressing(n, "output element pairs")
            plans += [DispatchPlan(variant=C.MHA_SPLIT.name(t=t, tile=tile), bindings=scratch, push=push,
                                   groups=grid_for(count, 128, maxg), writes=(len(names) + 1,), offset_slots=slots),
                      DispatchPlan(variant=C.MHA_COMBINE.name(t=t), bindings=scratch, push=push,
                                   groups=grid_for(n, 256, maxg), writes=out, offset_slots=slots)]
    else:
        blocks = cdiv(p.dv, C.MHA_ROW_CHUNK)
        count = p.batch * p.heads * p.seq * blocks
        _addressing(count, "query rows x heads x batch")
        plans.append(DispatchPlan(variant=C.MHA_ROWS.name(t=t), bindings=bindings,
                                  push=C.MHA_PUSH.pack(**common, blocks=blocks, splits=1, chunk=0),
                                  groups=grid_for(count, 64, maxg), writes=out, offset_slots=slots))
    presents = [entry[f] for f in ("output_present_key_tensor", "output_present_value_tensor") if f in entry]
    if presents:
        ept = 1 if size == 4 else 2
        per_row = (cdiv(p.dqk, ept) if desc.output_present_key_tensor is not None else 0) + \
            (cdiv(p.dv, ept) if desc.output_present_value_tensor is not None else 0)
        n = p.batch * p.kv_heads * p.present * per_row
        _addressing(n, "present elements")
        plans.append(DispatchPlan(variant=C.MHA_PRESENT.name(t=t), bindings=bindings,
                                  push=C.MHA_PUSH.pack(**common, blocks=0, splits=1, chunk=0),
                                  groups=grid_for(n, 256, maxg), writes=tuple(presents), offset_slots=slots))
    geometry = np.array(p.geometry(), np.uint32)
    constants.insert(0, device_constant(device, geometry, ("mha-geometry", geometry.tobytes())))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants)


def _addressing(n: int, what: str) -> None:
    if n >= 1 << 32:
        raise UnsupportedError(f"output_tensor: {what} ({n} invocations) exceed the kernel's 32-bit indexing")


SUPPORT = {MultiheadAttentionDesc: MULTIHEAD_ATTENTION, MultiheadAttention1Desc: MULTIHEAD_ATTENTION1}
EXPORTS = {"MultiheadAttentionMaskType": MultiheadAttentionMaskType}


def _example(mha1: bool, form: str = "qkv") -> Any:
    """Valid descriptors for tests/test_specs.py: the separate tensors (every optional one), or one
    stacked form (`form`: "sqk", "skv", "sqkv")."""
    f32 = lambda *s: TensorDesc(DataType.FLOAT32, s)  # noqa: E731
    b, s, h, d, past = 2, 3, 2, 4, 0 if form == "skv" else 2  # without its stacked key / value: no keys
    q = f32(b, s, h * d)
    fields: dict[str, Any] = dict(
        query_tensor=q if form in ("qkv", "skv") else None, key_tensor=q if form == "qkv" else None,
        value_tensor=q if form in ("qkv", "sqk") else None,
        stacked_query_key_tensor=f32(b, s, h, 2, d) if form == "sqk" else None,
        stacked_key_value_tensor=f32(b, s, h, 2, d) if form == "skv" else None,
        stacked_query_key_value_tensor=f32(b, s, h, 3, d) if form == "sqkv" else None,
        bias_tensor=f32(3 * h * d), mask_tensor=TensorDesc(DataType.INT32, (1, b)),
        relative_position_bias_tensor=f32(b, h, s, past + s), past_key_tensor=f32(b, h, past, d) if past else None,
        past_value_tensor=f32(b, h, past, d) if past else None, output_tensor=q, output_present_key_tensor=f32(b, h, past + s, d),
        output_present_value_tensor=f32(b, h, past + s, d), scale=0.5, mask_filter_value=-10000.0,
        mask_type=MultiheadAttentionMaskType.KEY_SEQUENCE_LENGTH)
    if mha1:
        return MultiheadAttention1Desc(**fields, past_sequence_lengths_tensor=TensorDesc(DataType.INT32, (b,)) if past
                                       else None,
                                       query_head_count=h, key_value_head_count=h)
    return MultiheadAttentionDesc(**fields, head_count=h)


_FORMS = {"stacked_query_key_tensor": "sqk", "stacked_key_value_tensor": "skv", "stacked_query_key_value_tensor": "sqkv"}
# one query / key / value form is needed, past key and value go together (OperatorSpec.tied_fields)
TIED_FIELDS = ("query_tensor", "key_tensor", "value_tensor", *_FORMS, "past_key_tensor", "past_value_tensor")


def _spec(desc: type, support: OperatorSupport) -> OperatorSpec:
    mha1 = desc is MultiheadAttention1Desc

    def field_example(f: str) -> Any:
        return _example(mha1, _FORMS.get(f, "qkv"))

    # onnxruntime's contrib nodes on it (onnx_backend/handlers_attention.py)
    onnx = (OnnxOp("GroupQueryAttention", "com.microsoft", "multihead_attention", check=float_input),) if mha1 else \
        (OnnxOp("Attention", "com.microsoft", "multihead_attention", check=float_input),
         OnnxOp("MultiHeadAttention", "com.microsoft", "multihead_attention", check=float_input),
         # ONNX's own (opset 23, 24): onnx_backend/handlers_onnx_attention.py
         OnnxOp("Attention", "", "multihead_attention", check=attention_rule))
    return OperatorSpec(desc, support, compile_attention,
                        (C.MHA_TILED, *C.MHA_BLOCKED.values(), C.MHA_ROWS, C.MHA_PRESENT, C.MHA_SPLIT, C.MHA_COMBINE,
                         C.MHA_COOP, C.MHA_COOP_HALF, C.MHA_COOP32, contract.GEMM_SOFTMAX),
                        helpers=("multihead_attention",), onnx=onnx, ahead=plans_ahead, example=lambda: _example(mha1),
                        flags=("allow_half_precision",),
                        field_example=field_example, tied_fields=TIED_FIELDS)


SPECS = tuple(_spec(d, s) for d, s in SUPPORT.items())
