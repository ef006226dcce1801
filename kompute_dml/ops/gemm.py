"""DirectML's GEMM operator (DML_GEMM_OPERATOR_DESC): Output = alpha * op(A) x op(B) + beta * C
for FLOAT32 and FLOAT16 tensors, op = the identity or a transposition of the last two dimensions.

The page's rules: every tensor has one DataType and one DimensionCount (4 from 1_0; 2 to 4 from
4_0: { [BatchCount], [ChannelCount], rows, columns }); A is {.., M, K} ({.., K, M} transposed),
B {.., K, N} ({.., N, K} transposed), the output {.., M, N} and C, when present, the output's
Sizes. The batch and channel sizes of A, B, C and the output are equal: an operand shared by
every matrix is expressed by strides of 0 (DirectML's broadcasting), as are a C row or column
repeated over the output. FusedActivation (ops/conv_fused.py): None, ACTIVATION_IDENTITY, RELU,
LEAKY_RELU, SIGMOID, HARD_SIGMOID, HARD_SWISH, TANH, ELU, SWISH, ELEMENT_WISE_CLIP and
ACTIVATION_GELU (either form), applied to each output as the output type holds it by the
standalone operator's own function, so the fused result is the bits of GEMM then the activation;
others are refused (UnsupportedError naming `fused_activation`).

One dispatch (shaders/gemm.comp, the "tiled" family): every matrix of the batch, every tensor through
its own strides and offset, float32 accumulation over k in increasing order by fma, the epilogue
alpha * S + beta * C with each product and the sum rounded once, then the fused activation (the
`a` variants; docs/gemm.md states the order and derives the error bound the tests check). FLOAT16
products may take the cooperative-matrix family instead (ops/gemm_coop.py, shaders/gemm_coop.comp:
tensor cores, their own bound in docs/gemm.md), as the device policy decides
(DevicePolicy.gemm_family_for). Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature
level's table (InvalidArgumentError / UnsupportedError naming the field), the fused activation, then
the page's constraints and the scalar fields (InvalidArgumentError whose message starts with the
field), then a non-overlapping output and 32-bit element addressing.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, TransferPlan
from . import contract, gemm_split, gemm_stream
from .act_table import act_table, gemm_bindings, uses_table
from .base import CompiledOperator, validate_tensors
from .conv_fused import ACT_NONE, fused_words
from .elementwise_plan import check_addressable
from .gemm_blocks import BIG_TILES_MIN, BLK8_MIN_K, BLK8_MIN_TILES, RECT_MIN_TILES, choose_block, gemm_block  # noqa: F401
from .gemm_coop import CoopTile, plan_gemm_coop
from .gemm_split import SPLIT_FROM_K
from .onnx_types import FLOAT32_NUMPY, float_input, quantized_product
from .spec import OnnxOp, OperatorSpec
from .split_range import binding_window, fits, split_outer

if TYPE_CHECKING:
    from ..device.device import Device

# ---- GEMM from DML_GEMM_OPERATOR_DESC's page ------------------------
# The page's two rows: 4 dimensions from 1_0, 2 to 4 from 4_0 ({[BatchCount], [ChannelCount], ...});
# FLOAT32 and FLOAT16 for every tensor.
GEMM = OperatorSupport("GEMM", 54, tuple(
    row(level, ("a_tensor", "input", dims, FLOATS), ("b_tensor", "input", dims, FLOATS),
         ("c_tensor", "optional input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
    for level, dims in ((FL.FL_1_0, (4, 4)), (FL.FL_4_0, (2, 4)))))


SUPPORT = GEMM
LOCAL = 256  # invocations per work group (16 x 16)
_U32 = 1 << 32


class MatrixTransform(IntEnum):
    """DML_MATRIX_TRANSFORM (DirectML.h)."""

    NONE = 0
    TRANSPOSE = 1


DML_MATRIX_TRANSFORM_NONE = MatrixTransform.NONE
DML_MATRIX_TRANSFORM_TRANSPOSE = MatrixTransform.TRANSPOSE


@dataclass(frozen=True)
class GemmDesc:
    """DML_GEMM_OPERATOR_DESC { ATensor, BTensor, CTensor (optional), OutputTensor, TransA,
    TransB, Alpha, Beta, FusedActivation }: Output = alpha * TransA(A) x TransB(B) + beta * C
    (C absent: alpha * TransA(A) x TransB(B); beta is then ignored). trans_a / trans_b are
    DML_MATRIX_TRANSFORM values (MatrixTransform.NONE = 0, TRANSPOSE = 1); alpha and beta are
    FLOATs (Python numbers rounded to float32; a finite value beyond float32's range is refused).
    fused_activation: None or an activation descriptor whose tensors are None (the module
    docstring's list), applied to every output."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    c_tensor: TensorDesc | None
    output_tensor: TensorDesc
    trans_a: int = MatrixTransform.NONE
    trans_b: int = MatrixTransform.NONE
    alpha: float = 1.0
    beta: float = 1.0
    fused_activation: Any = None


def _transform(value: Any, field: str) -> bool:
    v = as_int(value, field)
    if v not in (MatrixTransform.NONE, MatrixTransform.TRANSPOSE):
        raise invalid(field, f"must be DML_MATRIX_TRANSFORM_NONE (0) or DML_MATRIX_TRANSFORM_TRANSPOSE (1), got {v}")
    return v == MatrixTransform.TRANSPOSE


def as_float32(value: Any, field: str) -> float:
    """A FLOAT field: a real number (not a bool) rounded to float32; InvalidArgumentError for
    anything else and for a finite value that float32 cannot hold (it would become infinite)."""
    if isinstance(value, (bool, np.bool_)) or (not isinstance(value, (int, float)) and not hasattr(value, "__float__")):
        raise invalid(field, f"must be a real number (a float32 value), got {type(value).__name__}")
    try:
        x = float(value)
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except (TypeError, ValueError) as e:
        raise invalid(field, f"must be a real number (a float32 value), got {value!r}") from e
    except OverflowError:
        raise invalid(field, f"{value!r} is beyond float32's range (|x| < 3.4028235e38)") from None


def pad4(desc: TensorDesc) -> tuple[list[int], list[int]]:
    """Sizes and strides left-padded to 4 dimensions (batch, channel, rows, columns); a size-1
    dimension's stride is 0."""
    k = 4 - desc.dimension_count
    sizes = [1] * k + list(desc.sizes)
    strides = [0] * k + list(desc.effective_strides)
    return sizes, [0 if s == 1 else st for s, st in zip(sizes, strides)]


@dataclass(frozen=True)
class GemmShape:
    """What the plan needs: `nb` x `nc` matrices of op(A) M x K by op(B) K x N, and per tensor
    its (batch, channel, row, column) strides in op() terms (A: b, c, m, k; B: b, c, k, n)."""

    nb: int
    nc: int
    m: int
    n: int
    k: int
    a_st: tuple[int, int, int, int]
    b_st: tuple[int, int, int, int]
    c_st: tuple[int, int, int, int]
    o_st: tuple[int, int, int, int]


def check_gemm(desc: GemmDesc) -> tuple[GemmShape, float, float]:
    """The page's constraints and the scalar fields (after validate_tensors); the shape and
    alpha, beta as float32 values."""
    a, b, c, y = desc.a_tensor, desc.b_tensor, desc.c_tensor, desc.output_tensor
    for f in ("b_tensor", "c_tensor", "output_tensor"):
        t: TensorDesc | None = getattr(desc, f)
        if t is None:
            continue
        if t.data_type != a.data_type:
            raise invalid(f"{f}.data_type", f"must equal a_tensor's ({a.data_type.name}), got {t.data_type.name}")
        if t.dimension_count != a.dimension_count:
            raise invalid(f"{f}.sizes", f"dimension count must equal a_tensor's ({a.dimension_count}), "
                                        f"got {t.dimension_count}")
    ta, tb = _transform(desc.trans_a, "trans_a"), _transform(desc.trans_b, "trans_b")
    alpha, beta = as_float32(desc.alpha, "alpha"), as_float32(desc.beta, "beta")
    *batch_a, a0, a1 = a.sizes
    *batch_b, b0, b1 = b.sizes
    m, k = (a1, a0) if ta else (a0, a1)
    kb, n = (b1, b0) if tb else (b0, b1)
    if kb != k:
        dim = len(b.sizes) - (1 if tb else 2)
        raise invalid("b_tensor.sizes", f"K (size {dim}{', trans_b' if tb else ''}) must equal a_tensor's K ({k}"
                                        f"{', trans_a' if ta else ''}), got {kb}")
    if batch_b != batch_a:
        raise invalid("b_tensor.sizes", f"batch and channel sizes must equal a_tensor's {tuple(batch_a)} (an operand "
                                        f"shared by every matrix has stride 0 there), got {tuple(batch_b)}")
    want = (*batch_a, m, n)
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (a_tensor's batch sizes, M, N), got {y.sizes}")
    if c is not None and c.sizes != y.sizes:
        raise invalid("c_tensor.sizes", f"must equal output_tensor's {y.sizes} (broadcast with stride 0), got {c.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    sz, a_st = pad4(a)
    b_st = pad4(b)[1]
    if ta:
        a_st[2], a_st[3] = a_st[3], a_st[2]
    if tb:
        b_st[2], b_st[3] = b_st[3], b_st[2]
    c_st = pad4(c)[1] if c is not None else [0, 0, 0, 0]
    o_st = pad4(y)[1]
    shape = GemmShape(sz[0], sz[1], m, n, k, tuple(a_st), tuple(b_st), tuple(c_st), tuple(o_st))  # type: ignore[arg-type]
    return shape, alpha, beta


def gemm_grid(total: int, limits: Any) -> tuple[int, int, int]:
    """`total` work groups as an (x, y, z) grid within the device's maxComputeWorkGroupCount; the
    shader folds it back (L = x + X (y + Y z)) and returns at once past `total`."""
    mx, my, mz = (int(v) for v in limits)
    gx = min(total, mx, 65535)
    rest = cdiv(total, gx)
    gy = min(rest, my)
    gz = cdiv(rest, gy)
    gy = cdiv(rest, gz)  # balanced: no more idle groups than needed
    gx = cdiv(total, gy * gz)
    if gz > mz or gx * gy * gz >= _U32:
        raise UnsupportedError(f"a_tensor.sizes: {total} work groups exceed the device's dispatch grid "
                               f"(maxComputeWorkGroupCount {tuple(limits)})")
    return (gx, gy, gz)


def keeps_speed_with_activation(device: Device, float16: bool, m: int, n: int, k: int, nmat: int) -> bool:
    """Whether the kernel the policy picks for this product keeps its speed with a fused activation:
    the tiled kernel with a block of DevicePolicy.gemm_act_blocks, unless the product alone takes the
    128 x 64 tile over K >= SPLIT_FROM_K (docs/gemm.md, "Fused activation")."""
    if device.policy.gemm_family_for(float16, m, n, k) != "tiled":
        return False
    if gemm_block(device.policy.gemm_tiles, float16, False, m, n, nmat, k) == "8x4" and k >= SPLIT_FROM_K:
        return False  # the 128 x 64 tile (no activation variant), then the activation's own dispatch (docs/gemm.md)
    return gemm_block(device.policy.gemm_tiles, float16, True, m, n, nmat, k) in device.policy.gemm_act_blocks  # (square)


def gemm_dispatch(device: Device, desc: GemmDesc, shape: GemmShape, alpha: float, beta: float, variant: str, total: int,
                  flags: int, spec: tuple[int, ...] = (), act: tuple[int, ...] = (ACT_NONE, 0, 0),
                  grid: tuple[int, int, int] | None = None) -> DispatchPlan:
    """The dispatch of a family reading GEMM_PUSH: `total` work groups folded into the grid (or `grid` as
    given: gemm_stream's), `flags` beyond HAS_C, `act` the fused activation's words (conv_fused.fused_words):
    its kind the ACT variants' last specialization constant, its parameters in the push block."""
    flags |= contract.GEMM_F_HAS_C if desc.c_tensor is not None else 0
    if act[0] != ACT_NONE:
        spec = (*spec, act[0])
    values: dict[str, Any] = dict(a_off=0, b_off=0, c_off=0, o_off=0, m=shape.m, n=shape.n, k=shape.k,
                                  nmat=shape.nb * shape.nc, nc=shape.nc, alpha=alpha,
                                  beta=beta if desc.c_tensor is not None else 0.0, flags=flags, kchunk=0,
                                  act_p0=act[1], act_p1=act[2])
    for p, st in (("a", shape.a_st), ("b", shape.b_st), ("c", shape.c_st), ("o", shape.o_st)):
        names = ("sb", "sc", "sm", "sk") if p == "a" else ("sb", "sc", "sk", "sn") if p == "b" else ("sb", "sc", "sm", "sn")
        values.update({f"{p}_{nm}": s for nm, s in zip(names, st)})
    size = desc.a_tensor.data_type.size
    fam = contract.GEMM  # GEMM_COOP shares its block
    return DispatchPlan(
        variant=variant,
        bindings=gemm_bindings(desc.a_tensor.data_type, act),
        push=fam.pack(**values),
        groups=grid or gemm_grid(total, device.limits["max_compute_work_group_count"]),
        writes=(3,),
        offset_slots=fam.slots(a_off=(0, size), b_off=(1, size), c_off=(2, size), o_off=(3, size)),
        spec=spec,
    )


def plan_gemm(device: Device, desc: GemmDesc, shape: GemmShape, alpha: float, beta: float,
              act: tuple[int, ...] = (ACT_NONE, 0, 0), square: bool = False) -> DispatchPlan:
    """The tiled kernel's dispatch (shaders/gemm.comp); `act`: the fused activation's words; `square`:
    square register blocks only (gemm_block)."""
    dt = desc.a_tensor.data_type
    blk = gemm_block(device.policy.gemm_tiles, dt == DataType.FLOAT16, square or act[0] != ACT_NONE, shape.m, shape.n,
                     shape.nb * shape.nc, shape.k)
    tm, tn = (16 * side for side in contract.block_sides(blk))
    total = cdiv(shape.m, tm) * cdiv(shape.n, tn) * shape.nb * shape.nc
    if total >= 1 << 31:
        raise UnsupportedError(f"a_tensor.sizes: {total} tiles of {tm} x {tn} exceed the shader's 31-bit count")
    flags = staging_flags(shape.m, shape.n, shape.k, shape.a_st, shape.b_st)
    variant = contract.GEMM.name(t="f16" if dt == DataType.FLOAT16 else "f32", blk=blk, act=act_suffix(act))
    return gemm_dispatch(device, desc, shape, alpha, beta, variant, total, flags, act=act)


def staging_flags(m: int, n: int, k: int, a_st: tuple[int, ...], b_st: tuple[int, ...]) -> int:
    """The tiled kernel's staging along the unit stride (a_st: b, c, m, k; b_st: b, c, k, n): A by m
    where m is contiguous (a transposed A), B by k where k is contiguous (a transposed B)."""
    flags = 0
    if m > 1 and a_st[2] == 1 and not (k > 1 and a_st[3] == 1):
        flags |= contract.GEMM_F_A_MFAST
    if k > 1 and b_st[2] == 1 and not (n > 1 and b_st[3] == 1):
        flags |= contract.GEMM_F_B_KFAST
    return flags


def act_suffix(act: tuple[int, ...]) -> str:
    """The variants' `act` parameter: "a" (the ACT variants) where an activation is fused."""
    return "" if act[0] == ACT_NONE else "a"


def compile_gemm(device: Device, desc: GemmDesc, kernel: str | None = None,
                 config: CoopTile | None = None, square: bool = False) -> CompiledOperator:
    """GEMM on the family the device policy chooses (DevicePolicy.gemm_family_for): forced by
    `kernel` or KDML_GEMM_KERNEL ("tiled", "stream", "coopmat", "coopmat-emulated"; FLOAT32 products the tiled
    family takes run on gemm_stream.py's kernel where its rule or "stream" says so); `config`: a forced tile of
    the cooperative-matrix families (tests, benchmarks); `square`: the tiled kernel's square blocks only."""
    validate_tensors(SUPPORT, device.feature_level, desc, SUPPORT.fields, SUPPORT.outputs)
    act = tuple(fused_words(device, desc.fused_activation, "GEMM", gelu=True))
    _, alpha, beta = check_gemm(desc)
    descs = [getattr(desc, f) for f in SUPPORT.fields]
    present = [(i, f, d) for i, (f, d) in enumerate(zip(SUPPORT.fields, descs)) if d is not None]
    check_addressable([f for _, f, _ in present], [d for _, _, d in present])
    dt = desc.a_tensor.data_type

    def plans_for(d: GemmDesc) -> list[DispatchPlan | TransferPlan]:
        sh = check_gemm(d)[0]
        family = device.policy.gemm_family_for(dt == DataType.FLOAT16, sh.m, sh.n, sh.k, kernel)
        coop = plan_gemm_coop(device, dt, sh, family, config, act_suffix(act)) if family not in ("tiled", "stream") else None
        if coop is not None:
            return [gemm_dispatch(device, d, sh, alpha, beta, coop.variant, coop.groups, coop.flags, coop.spec, act)]
        tiled_forced = (kernel or device.policy.gemm_kernel) == "tiled"  # (the streaming kernel's A / B baseline)
        stream = None if tiled_forced else gemm_stream.stream_dispatch(device, dt, sh, act, family == "stream")
        if stream is not None:
            return [gemm_dispatch(device, d, sh, alpha, beta, stream[0], math.prod(stream[1]), 0, act=act, grid=stream[1])]
        return [plan_gemm(device, d, sh, alpha, beta, act, square)]

    def table() -> list[Any]:  # the constant at TABLE_ENTRY where the plans read it
        return [act_table(device, desc.fused_activation, act)] if uses_table(dt, act) else []

    window = binding_window(device.limits)
    tensors = [d for _, _, d in present]
    if fits(tensors, window):
        plans = plans_for(desc)
        sh = check_gemm(desc)[0]
        split = (gemm_split.split_plans(device, plans[0], sh.m, sh.n, sh.k, sh.nb * sh.nc, gemm_grid)  # type: ignore[arg-type]
                 if plans[0].variant.startswith("gemm_") else None)
        if split is not None:  # few tiles over a long K (ops/gemm_split.py; its reduce applies the activation itself)
            return CompiledOperator(device, desc, SUPPORT, SUPPORT.inputs, SUPPORT.outputs, split[0], constants=[split[1]])
        return CompiledOperator(device, desc, SUPPORT, SUPPORT.inputs, SUPPORT.outputs, plans, constants=table())
    # a value beyond one binding: the matrices in parts (batch, then channel), then A's, C's and the
    # output's rows, then B's, C's and the output's columns (ops/split_range.py); K is never cut (a
    # B of K rows beyond one binding stays refused)
    rank = desc.a_tensor.dimension_count
    ta, tb = _transform(desc.trans_a, "trans_a"), _transform(desc.trans_b, "trans_b")
    levels = [[lv - (4 - rank) if lv >= 4 - rank else None for _ in present] for lv in (0, 1) if lv >= 4 - rank]
    rows = {0: rank - 1 if ta else rank - 2, 1: None, 2: rank - 2, 3: rank - 2}
    cols = {0: None, 1: rank - 2 if tb else rank - 1, 2: rank - 1, 3: rank - 1}
    levels += [[rows[i] for i, _, _ in present], [cols[i] for i, _, _ in present]]

    def part(ds: list[TensorDesc]) -> list[DispatchPlan | TransferPlan]:
        parts = dict(zip((f for _, f, _ in present), ds))
        return plans_for(dataclasses.replace(desc, **parts))  # type: ignore[arg-type]

    plans = split_outer(tensors, levels, window, part, [i for i, _, _ in present])  # type: ignore[arg-type]
    return CompiledOperator(device, desc, SUPPORT, SUPPORT.inputs, SUPPORT.outputs, plans, constants=table())


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
_RNN_ACTIVATIONS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh"), "RNN": ("tanh",)}


def rnn_rule(op_type: str) -> Any:
    """ONNX LSTM / GRU / RNN as onnx_backend/handlers_rnn.py runs them on GEMM and the activations:
    float32 / float16, the default activations, no clip, no LSTM peepholes or input_forget, layout 0."""
    def rule(t: Any) -> str:
        dt = t.elem(0) if t.inputs else None
        if dt is not None and dt not in (np.float32, np.float16):
            return f"type {dt} is not float32/float16"
        acts = t.attr("activations", None)
        if acts is not None:
            names = [(a.decode() if isinstance(a, bytes) else str(a)).lower() for a in acts]
            default = _RNN_ACTIVATIONS[op_type]
            if any(n != default[k % len(default)] for k, n in enumerate(names)):
                return f"activations {names} other than {list(default)}"
        if t.attr("clip", None) is not None:
            return "clip"
        if int(t.attr("input_forget", 0) or 0) or int(t.attr("layout", 0) or 0):
            return "input_forget or layout 1"
        if op_type == "LSTM" and t.inputs > 7 and t.given(7):
            return "peepholes (P)"
        return ""
    return rule


SPECS = (OperatorSpec(GemmDesc, SUPPORT, compile_gemm, (contract.GEMM, contract.GEMM_SPLIT, contract.GEMM_REDUCE,
                                                       contract.GEMM_COOP, contract.gemm_stream.GEMM_STREAM), helpers=("gemm", "matmul"),
                      onnx=(OnnxOp("MatMul", "", "matmul", check=float_input), OnnxOp("Gemm", "", "gemm", check=float_input),
                            OnnxOp("FusedMatMul", "com.microsoft", "gemm", check=float_input),
                            OnnxOp("Einsum", "", "matmul", check=float_input),
                            # step by step on GEMM and the activations (onnx_backend/handlers_rnn.py)
                            *(OnnxOp(op, "", "gemm", check=rnn_rule(op)) for op in _RNN_ACTIVATIONS),
                            # one GEMM against the twiddle factors (onnx_backend/handlers_dft.py)
                            OnnxOp("DFT", "", "gemm", check=float_input), OnnxOp("STFT", "", "gemm", check=float_input),
                            # its operands dequantized, [then quantized] (onnx_backend/handlers_qlinear.py)
                            OnnxOp("QGemm", "com.microsoft", "gemm", check=quantized_product((0, 3), 1, FLOAT32_NUMPY)))),)
EXPORTS = {"MatrixTransform": MatrixTransform}  # the transform fields' enum, exported as kdml.MatrixTransform
