"""Plans of the "gpu" memory-kernel family (DevicePolicy.memory_kernel == "gpu").

Copies (ACTIVATION_IDENTITY, COPY) and DIAGONAL_MATRIX[1] on devices whose compute units
want several independent 16-byte accesses in flight per invocation and coalesced rows:

- `copy_vec` (shaders/copy_vec.comp): both tensors dense in the same order, VECS vectors
  per invocation (+ copy_packed_tail for the last 1..15 bytes);
- `copy_tile_b*` (shaders/copy_tile.comp): transposing copies through shared memory;
- `rows_copy_b*`, `rows_diag[_in]_b*` (shaders/mem_rows.comp): outputs whose innermost
  dimension is contiguous, as rows of 16-byte chunks (uvec4 stores wherever all 16 bytes
  are output elements, STORE_FIELD only at row ends that share a word).

Each planner returns None where its preconditions fail; the caller then uses the
operator's portable variants (copy_b*, diag_*), which handle every layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..core.ints import cdiv
from ..core.layout import merge_dims
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract

LOCAL_SIZE = 256
# Chunks (16-byte vectors) per invocation: the VECS specialization constant. A module
# setting so that benchmarks/bench_memory.py can compare values on a device.
VECS = 4
# Outputs of at most this many bytes take one chunk per invocation instead: four times the
# work groups, for dispatches of a few groups, whose time is latency, not bandwidth. H100,
# `bench_memory.py --shrink 128` and `--shrink 32` (docs/diagonal.md, "Small outputs"): triu f32 64x64
# 6.9 -> 10.6 GB/s per execution, triu int8 512x512 114 -> 164, DIAGONAL_MATRIX f32 512x512
# 222 -> 310; at 4 MiB (`--shrink 8`) neither wins every row, and VECS does at 16 MiB.
SMALL_OUTPUT_BYTES = 1 << 20
# Diagonal rows shorter than this stay on diag_*, whose chunks span rows.
MIN_DIAG_ROW_BYTES = 64
# copy_tile's tiles are 32 A-positions by 32 output words: below half a tile in either
# direction most of its invocations would idle, and rows_copy's gather does better.
MIN_TILE_A = 16
MIN_TILE_B_BYTES = 64
# Beyond this a row's chunk arithmetic could wrap 32 bits in mem_rows.comp.
MAX_ROW_BYTES = 1 << 31
_NO_Y = 3  # ypos when no outer dimension is y


def div_magic(d: int) -> tuple[int, int]:
    """(magic, shift) of gpu_fast_div (shaders/gpu_common.glsl): n // d for every uint32 n
    (Granlund & Montgomery 1994, fig. 4.1)."""
    assert 1 <= d < 2**32
    ell = (d - 1).bit_length()
    return ((2**32 * (2**ell - d)) // d + 1) & 0xFFFFFFFF, (max(ell - 1, 0) << 1) | min(ell, 1)


def _groups(n: int, max_groups: int) -> tuple[int, int, int]:
    return grid_for(n, 1, max_groups)


def vecs_for(out_bytes: int) -> int:
    """Chunks per invocation for an output of `out_bytes` bytes."""
    return 1 if out_bytes <= SMALL_OUTPUT_BYTES else int(VECS)


def plan_copy_packed_gpu(nbytes: int, max_groups: int) -> list[DispatchPlan]:
    """A dense copy of `nbytes` bytes (both offsets 16-byte aligned)."""
    nvec = nbytes // 16
    vecs = vecs_for(nbytes)
    plans = []
    if nvec:
        vec = contract.COPY_VEC
        plans.append(DispatchPlan(
            variant=vec.name(), bindings=(0, 1), push=vec.pack(in_off=0, out_off=0, count=nvec),
            groups=_groups(cdiv(nvec, LOCAL_SIZE * vecs), max_groups), writes=(1,),
            offset_slots=vec.slots(in_off=(0, 16), out_off=(1, 16)), spec=(vecs,),
        ))
    if nbytes > nvec * 16:
        tail = contract.COPY_PACKED_TAIL
        plans.append(DispatchPlan(
            variant=tail.name(), bindings=(0, 1), push=tail.pack(in_off=0, out_off=0, count=nbytes, first_vec=nvec),
            groups=(1, 1, 1), writes=(1,), offset_slots=tail.slots(in_off=(0, 16), out_off=(1, 16)),
        ))
    return plans


def plan_rows(
    variant: str, width: int, cols: int, in_xs: int, outer: Sequence[tuple[int, int, int]], ypos: int,
    band: tuple[int, int, int, int, int], bindings: tuple[int, ...], offset_slots: tuple[tuple[int, int, int], ...],
    out_index: int, max_groups: int,
) -> DispatchPlan | None:
    """One mem_rows.comp dispatch. `outer`: (size, out stride, in stride) outermost first;
    `band`: (rows - 1, ub, ue, normal, value bits)."""
    if len(outer) > 3 or cols * width >= MAX_ROW_BYTES:
        return None
    if ypos != _NO_Y:
        ypos += 3 - len(outer)  # the unused dimensions are padded in front
    outer = [(1, 0, 0)] * (3 - len(outer)) + list(outer)
    # The spans cover the chunks of a row that starts on the 16-byte grid. A row starting
    # mid-chunk touches one more, a partial one, which lane 0 of its last span writes:
    # counting that chunk here would add a span with nothing to do to every row of whole
    # chunks (one work group in two for 16 KiB rows of 8-bit elements).
    chunks = cdiv(cols, 16 // width)
    nrows = math.prod(d[0] for d in outer)
    vecs = vecs_for(nrows * cols * width)
    tpr = min(LOCAL_SIZE, 1 << max(0, (cdiv(chunks, vecs) - 1).bit_length()))
    spans = cdiv(chunks, tpr * vecs)
    ngroups = cdiv(nrows, LOCAL_SIZE // tpr) * spans
    magics = [div_magic(spans)] + [div_magic(d[0]) for d in outer]
    packed = sum(sh << (6 * i) for i, (_, sh) in enumerate(magics)) | ypos << 24 | (tpr.bit_length() - 1) << 26
    rows_m1, ub, ue, normal, value = band
    lo, hi = splat_value(value, width)
    push = contract.ROWS_PUSH.pack(
        out_off=0, in_off=0, ngroups=ngroups, cols=cols, nrows=nrows, spans=spans, spans_magic=magics[0][0],
        packed=packed, in_xs=in_xs & 0xFFFFFFFF, rows_m1=rows_m1, ub=ub, ue=ue, normal=normal, val_lo=lo, val_hi=hi,
        size=[d[0] for d in outer], magic=[m for m, _ in magics[1:]], out_stride=[d[1] for d in outer],
        in_stride=[d[2] & 0xFFFFFFFF for d in outer],
    )
    return DispatchPlan(
        variant=variant, bindings=bindings, push=push, groups=_groups(ngroups, max_groups),
        writes=(out_index,), offset_slots=offset_slots, spec=(vecs,),
    )


def splat_value(value: int, width: int) -> tuple[int, int]:
    """Value's bit pattern as the words of a chunk: repeated over a word for 8/16 bits."""
    if width == 1:
        return (value & 0xFF) * 0x01010101, 0
    if width == 2:
        return (value & 0xFFFF) * 0x00010001, 0
    return value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF


def plan_copy_gpu(src: TensorDesc, dst: TensorDesc, max_groups: int) -> list[DispatchPlan] | None:
    """copy_vec, copy_tile or rows_copy for src (binding 0) -> dst (binding 1), else None."""
    width = dst.data_type.size
    sizes, (s_in, s_out) = merge_dims(dst.sizes, src.effective_strides, dst.effective_strides)
    if len(sizes) == 1 and (sizes[0] == 1 or (s_in[0] == 1 and s_out[0] == 1)):
        return plan_copy_packed_gpu(sizes[0] * width, max_groups)
    # Elementwise: any dimension order gives the same result; take the output's memory order.
    order = sorted(range(len(sizes)), key=lambda d: -s_out[d])
    sizes, (s_in, s_out) = merge_dims([sizes[d] for d in order], [s_in[d] for d in order], [s_out[d] for d in order])
    if s_out[-1] != 1:
        return None  # the output's rows are strided: copy_b*
    slots = contract.ROWS_COPY.slots(out_off=(1, width), in_off=(0, width))
    if s_in[-1] not in (0, 1) and 1 in s_in[:-1]:
        tile = _plan_tile(sizes, s_in, s_out, width, max_groups)
        if tile is not None:
            return [tile]
    outer = list(zip(sizes[:-1], s_out[:-1], s_in[:-1]))
    plan = plan_rows(
        contract.ROWS_COPY.name(bits=8 * width), width, sizes[-1], s_in[-1], outer, _NO_Y, (0, 0, 0, 0, 0), (0, 1), slots, 1,
        max_groups,
    )
    return None if plan is None else [plan]


def _plan_tile(
    sizes: Sequence[int], s_in: Sequence[int], s_out: Sequence[int], width: int, max_groups: int
) -> DispatchPlan | None:
    a = list(s_in[:-1]).index(1)
    if sizes[a] < MIN_TILE_A or sizes[-1] * width < MIN_TILE_B_BYTES:
        return None
    rest = [d for d in range(len(sizes) - 1) if d != a]
    bsizes, (bin_, bout) = merge_dims([sizes[d] for d in rest], [s_in[d] for d in rest], [s_out[d] for d in rest])
    if len(bsizes) > 2:
        return None
    per_word = max(1, 4 // width)
    if s_out[a] % per_word or any(s % per_word for s in bout):
        return None  # an output line would start inside a word
    bsizes = [1] * (2 - len(bsizes)) + bsizes
    bin_ = [0] * (2 - len(bin_)) + bin_
    bout = [0] * (2 - len(bout)) + bout
    size_a, size_b = sizes[a], sizes[-1]
    tb_elems = 16 if width == 8 else 32 * per_word
    tiles_a, tiles_b = cdiv(size_a, 32), cdiv(size_b, tb_elems)
    ngroups = tiles_a * tiles_b * bsizes[0] * bsizes[1]
    mb, ma, m1 = div_magic(tiles_b), div_magic(tiles_a), div_magic(bsizes[1])
    tile = contract.COPY_TILE
    push = tile.pack(
        out_off=0, in_off=0, ngroups=ngroups, size_a=size_a, size_b=size_b, in_stride_b=s_in[-1] & 0xFFFFFFFF,
        out_stride_a=s_out[a], tiles_a=tiles_a, tiles_b=tiles_b, magic_b=mb[0], magic_a=ma[0],
        shifts=mb[1] | ma[1] << 6 | m1[1] << 12, bsize=bsizes, bmagic1=m1[0], bin=[s & 0xFFFFFFFF for s in bin_],
        bout=bout, pad_=0,
    )
    return DispatchPlan(
        variant=tile.name(bits=8 * width), bindings=(0, 1), push=push,
        groups=_groups(ngroups, max_groups), writes=(1,), offset_slots=tile.slots(out_off=(1, width), in_off=(0, width)),
        spec=(int(VECS),),
    )


def plan_diagonal_gpu(
    out: TensorDesc, inp: TensorDesc | None, begin: int, end: int, value_bits: int, out_index: int, max_groups: int
) -> list[DispatchPlan] | None:
    """rows_diag[_in] for an output whose x dimension is contiguous (rows of at least
    MIN_DIAG_ROW_BYTES), else None. Begin/End are exact Python ints."""
    width = out.data_type.size
    sizes = list(out.sizes)
    ostr = list(out.effective_strides)
    istr = list(inp.effective_strides) if inp is not None else [0] * len(sizes)
    rows, cols = sizes[-2], sizes[-1]
    if cols * width < MIN_DIAG_ROW_BYTES or ostr[-1] != 1:
        return None
    outer: list[tuple[int, int, int]] = []
    if len(sizes) > 2:
        bs, (bo, bi) = merge_dims(sizes[:-2], ostr[:-2], istr[:-2])
        outer += [(s, o, i) for s, o, i in zip(bs, bo, bi) if s > 1]
    ypos = len(outer) if rows > 1 else _NO_Y
    if rows > 1:
        outer.append((rows, ostr[-2], istr[-2]))
    span = rows + cols - 1  # t = x + rows - 1 - y lies in [0, span - 1]
    ub = min(max(begin + rows - 1, 0), span)
    ue = min(max(end + rows - 1, 0), span)
    band = (rows - 1, ub, ue, int(end >= begin), value_bits)
    bindings: tuple[int, ...]
    slots: tuple[tuple[int, int, int], ...]
    if inp is None:
        fam, bindings, slots = contract.ROWS_DIAG, (out_index,), contract.ROWS_PUSH.slots(out_off=(out_index, width))
    else:
        fam, bindings = contract.ROWS_DIAG_IN, (0, out_index)
        slots = contract.ROWS_PUSH.slots(out_off=(out_index, width), in_off=(0, width))
    variant = fam.name(bits=8 * width)
    plan = plan_rows(
        variant, width, cols, istr[-1], outer, ypos, band, bindings, slots, out_index, max_groups
    )
    return None if plan is None else [plan]
