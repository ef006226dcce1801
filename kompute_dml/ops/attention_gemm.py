"""MULTIHEAD_ATTENTION's two-GEMM kernel (ops/attention.py takes it from the device policy's
attention_gemm_min_flops): FLOAT32 problems too large for the fused kernels to beat the unfused
chain, as two dispatches of shaders/gemm.comp (contract.GEMM_SOFTMAX):

1. the scores, Query x Key^T * Scale [+ RelativePositionBias] (GEMM's alpha and C); per row and
   16 BLK-column tile (at most SMX_TILES of them) the epilogue takes the tile's maximum, stores
   exp(score - maximum) to a scratch [batch x heads, query rows, keys] and the maximum and the sum
   of those weights to another;
2. softmax(scores) x Value: each row's partials merged, each weight staged times exp(its tile's
   maximum - the row's), the product scaled by 1 / the row's sum, written to the output through
   its strides.

The unfused chain's two products less its softmax pass (a read and a write of every score). It
takes no mask tensor, bias, past or present outputs, causality, GQA's shared heads or stacked
tensors, and scores within one binding window; anything else keeps the other kernels. The
arithmetic is the other kernels' (docs/attention.md): each product by fma over k in order, the
scale and the bias rounded once each, exp by kdml_exp_le0, the sum of a row's weights in tile
order, one reciprocal per row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.ints import cdiv
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan
from . import contract
from .attention_layout import Problem, View
from .gemm import gemm_grid, staging_flags
from .gemm_blocks import choose_block
from .split_range import binding_window, fits

if TYPE_CHECKING:
    from ..device.device import Device

SMX_TILES = contract.GEMM_SMX_TILES  # the scores' column tiles per row at most (gemm.comp's shared factors)
_ABSENT = ("bias_tensor", "mask_tensor", "past_key_tensor", "past_value_tensor", "past_sequence_lengths_tensor",
           "output_present_key_tensor", "output_present_value_tensor")


def gemm_takes(device: Device, desc: Any, p: Problem, causal: bool, any_size: bool = False) -> bool:
    """Whether the two-GEMM kernel takes this problem under the device's policy (`any_size`: below its
    attention_gemm_min_flops too)."""
    if desc.output_tensor.data_type != DataType.FLOAT32 or causal or p.past or not p.kv_seq or p.kv_heads != p.heads:
        return False
    if any(getattr(desc, f, None) is not None for f in _ABSENT):
        return False
    if any(v.base for v in p.views.values()):  # stacked tensors: their views start inside the binding
        return False
    return shape_takes(device, p.batch, p.heads, p.seq, p.kv_seq, p.dqk, p.dv, any_size)


def shape_takes(device: Device, batch: int, heads: int, seq: int, keys: int, dqk: int, dv: int,
                any_size: bool = False) -> bool:
    """The policy's size rule (attention_gemm_min_flops of 4 b h q k d, unless `any_size`), both dispatches'
    shared memory within the device's, and scores within one binding in at most SMX_TILES column tiles a row."""
    if not any_size and 4 * batch * heads * seq * keys * dqk < device.policy.attention_gemm_min_flops:
        return False
    blocks = _blocks(device, batch * heads, seq, keys, dqk, dv)
    if blocks is None or cdiv(keys, 16 * blocks[0]) > SMX_TILES:
        return False
    scores = batch * heads * seq * keys
    return scores < 1 << 31 and fits([TensorDesc(DataType.FLOAT32, (scores,))], binding_window(device.limits))


def _shared_bytes(mode: str, blk: int) -> int:
    """gemm.comp's shared memory in the GEMM_SOFTMAX variants: the staged A and B tiles (16 stage rows of
    16 BLK floats each), then the scores' row reductions (s: 17 + 1 floats a row) or the product's factors
    and reciprocals (x: SMX_TILES + 1 floats a row)."""
    tm = 16 * blk
    return 2 * 16 * tm * 4 + tm * 4 * (18 if mode == "s" else SMX_TILES + 1)


def _blocks(device: Device, nmat: int, seq: int, keys: int, dqk: int, dv: int) -> tuple[int, int] | None:
    """The scores' and the product's BLK: the GEMM rule's, halved until the variant's shared memory fits the
    device's (None: not even BLK 2 does)."""
    smem = int(device.limits.get("max_compute_shared_memory_size", 16384))
    out = []
    for mode, (m, n, k) in (("s", (seq, keys, dqk)), ("x", (seq, dv, keys))):
        blk = choose_block(device.policy.gemm_tiles, m, n, nmat, k)
        while blk > 2 and _shared_bytes(mode, blk) > smem:
            blk //= 2
        if _shared_bytes(mode, blk) > smem:
            return None
        out.append(blk)
    return out[0], out[1]


def _strides(prefix: str, view: View | None, names: tuple[str, str, str, str]) -> dict[str, int]:
    """A GEMM operand's (batch, channel = head, row, column) strides from a view (b, h, s, d); the
    names say which of s and d is the row: ("sb", "sc", "sm", "sk") takes s as m and d as k."""
    st = (0, 0, 0, 0) if view is None else (view.sb, view.sh, view.ss, view.sd)
    return {f"{prefix}_{n}": s for n, s in zip(names, st)}


def gemm_plans(device: Device, desc: Any, p: Problem, entry: dict[str, int], scale: float,
               first_constant: int) -> tuple[list[DispatchPlan], list[Tensor]]:
    """The two dispatches and their scratch tensors (the operator's constants from `first_constant`);
    `entry`: the descriptor's fields -> their index in the operator's tensor list."""
    nmat, keys = p.batch * p.heads, p.kv_seq
    blk_s, blk_x = _blocks(device, nmat, p.seq, keys, p.dqk, p.dv)  # type: ignore[misc]  (gemm_takes: not None)
    tiles = cdiv(keys, 16 * blk_s)  # the scores' column tiles: partials per row
    scores = Tensor.scratch(device, TensorDesc(DataType.FLOAT32, (nmat * p.seq * keys,)))
    stats = Tensor.scratch(device, TensorDesc(DataType.FLOAT32, (nmat * p.seq * tiles * 2,)))
    si, ti = first_constant, first_constant + 1
    q, k, v, o = (entry[p.source.get(n, n)] for n in ("q", "k", "v", "output_tensor"))
    rb = entry.get("relative_position_bias_tensor")
    packed = dict(sb=p.heads * p.seq * keys, sc=p.seq * keys, sm=keys)
    common = dict(a_off=0, b_off=0, c_off=0, o_off=0, nmat=nmat, nc=p.heads, act_p1=0)
    fam, maxg = contract.GEMM_SOFTMAX, device.limits["max_compute_work_group_count"]

    def plan(mode: str, blk: int, m: int, n: int, kk: int, values: dict[str, Any], bindings: tuple[int | None, ...],
             writes: tuple[int, ...]) -> DispatchPlan:
        a_st = tuple(values[f"a_{s}"] for s in ("sb", "sc", "sm", "sk"))
        b_st = tuple(values[f"b_{s}"] for s in ("sb", "sc", "sk", "sn"))
        flags = values.pop("flags") | staging_flags(m, n, kk, a_st, b_st)
        total = cdiv(m, 16 * blk) * cdiv(n, 16 * blk) * nmat
        slots = {f"{x}_off": (bindings[i], 4) for i, x in enumerate("abco") if bindings[i] is not None}
        return DispatchPlan(variant=fam.name(t="f32", blk=blk, mode=mode), bindings=bindings,
                            push=fam.pack(**common, **values, m=m, n=n, k=kk, flags=flags),
                            groups=gemm_grid(total, maxg), writes=writes, offset_slots=fam.slots(**slots))

    score_values = dict(**_strides("a", p.views["q"], ("sb", "sc", "sm", "sk")),
                        **_strides("b", p.views["k"], ("sb", "sc", "sn", "sk")),
                        **_strides("c", p.views.get("rb") if rb is not None else None, ("sb", "sc", "sm", "sn")),
                        o_sb=packed["sb"], o_sc=packed["sc"], o_sm=keys, o_sn=1, alpha=scale,
                        beta=1.0 if rb is not None else 0.0, kchunk=0, act_p0=0,
                        flags=contract.GEMM_F_HAS_C if rb is not None else 0)
    context_values = dict(a_sb=packed["sb"], a_sc=packed["sc"], a_sm=keys, a_sk=1,
                          **_strides("b", p.views["v"], ("sb", "sc", "sk", "sn")),
                          **_strides("c", None, ("sb", "sc", "sm", "sn")),
                          **_strides("o", p.views["o"], ("sb", "sc", "sm", "sn")), alpha=1.0, beta=0.0,
                          kchunk=tiles, flags=0, act_p0=(16 * blk_s).bit_length() - 1)
    plans = [plan("s", blk_s, p.seq, keys, p.dqk, score_values, (q, k, rb, si, None, None, ti), (si, ti)),
             plan("x", blk_x, p.seq, p.dv, keys, context_values, (si, v, None, o, None, None, ti), (o,))]
    return plans, [scores, stats]
