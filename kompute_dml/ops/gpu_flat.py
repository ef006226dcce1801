"""The "flat" plan of DIAGONAL_MATRIX[1] for GPUs (shaders/mem_flat.comp: flat_diag[_in]_b*).

mem_rows.comp (rows_diag_*) cuts every row on the buffer's 16-byte grid. On a packed output
whose rows are not a multiple of 16 bytes long (e.g. int8 16383 x 16383) each row then
starts at another phase of the grid and ends in up to two partial chunks, written word by
word with atomics for the words it shares with its neighbours. A packed output is one
contiguous byte range, so here it is cut as a whole: every 16-byte chunk is written once by
one invocation with one uvec4 store, chunks spanning row boundaries included, and only the
range's first and last chunk can be partial. Rows on the grid keep rows_diag_*, which writes
only whole chunks there.
"""

from __future__ import annotations

import math

from ..core.ints import cdiv
from ..core.layout import merge_dims
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract, gpu_memory

# Element indices and chunk positions stay below 2^31, word indices below 2^32, in the
# shader's 32-bit arithmetic.
MAX_FLAT_ELEMENTS = 1 << 31
MAX_FLAT_BYTES = 1 << 32
# A module setting so that benchmarks/bench_memory.py (variant gpu:rows) can time rows_diag
# on the same outputs.
ENABLED = True


def is_packed(desc: TensorDesc) -> bool:
    """The elements form one contiguous range in logical order (strides packed once size-1
    dimensions are dropped)."""
    sizes, (strides,) = merge_dims(desc.sizes, desc.effective_strides)
    return len(sizes) == 1 and (sizes[0] == 1 or strides[0] == 1)


def plan_diagonal_flat(
    out: TensorDesc, inp: TensorDesc | None, begin: int, end: int, value_bits: int, out_index: int, max_groups: int
) -> list[DispatchPlan] | None:
    """flat_diag[_in] where the output is packed with rows off the 16-byte grid and the
    input (if any) is packed too (the same sizes, so input element i is at flat position i);
    else None. Begin/End are exact Python ints."""
    width = out.data_type.size
    rows, cols = out.sizes[-2], out.sizes[-1]
    total = math.prod(out.sizes)
    if not ENABLED or (cols * width) % 16 == 0 or not is_packed(out):
        return None
    if total >= MAX_FLAT_ELEMENTS or total * width >= MAX_FLAT_BYTES:
        return None
    if inp is not None and not is_packed(inp):
        return None  # broadcast or strided input: rows_diag_in gathers it
    vecs = gpu_memory.vecs_for(total * width)
    cover = cdiv(total, 16 // width)
    ngroups = cdiv(cover, gpu_memory.LOCAL_SIZE * vecs)
    span = rows + cols - 1  # t = x + rows - 1 - y lies in [0, span - 1]
    ub = min(max(begin + rows - 1, 0), span)
    ue = min(max(end + rows - 1, 0), span)
    (cm, cs), (rm, rs) = gpu_memory.div_magic(cols), gpu_memory.div_magic(rows)
    lo, hi = gpu_memory.splat_value(value_bits, width)
    family = contract.FLAT_DIAG if inp is None else contract.FLAT_DIAG_IN
    push = family.pack(out_off=0, in_off=0, ngroups=ngroups, total=total, cover=cover, cols=cols, rows=rows, cols_magic=cm,
                       rows_magic=rm, shifts=cs | rs << 6, rows_m1=rows - 1, ub=ub, ue=ue, normal=int(end >= begin),
                       val_lo=lo, val_hi=hi)
    bindings: tuple[int, ...] = (out_index,) if inp is None else (0, out_index)
    slots = family.slots(out_off=(out_index, width)) + (() if inp is None else family.slots(in_off=(0, width)))
    return [DispatchPlan(
        variant=family.name(bits=8 * width), bindings=bindings, push=push,
        groups=grid_for(ngroups, 1, max_groups), writes=(out_index,), offset_slots=slots, spec=(vecs,),
    )]
