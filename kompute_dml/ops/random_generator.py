"""DirectML's RANDOM_GENERATOR (DML_RANDOM_GENERATOR_OPERATOR_DESC, feature level 3_0): the output
filled with pseudo-random UINT32 bits by Philox 4x32-10 (Salmon et al., SC'11: Random123's
philox4x32 with 10 rounds) from InputStateTensor {1,1,1,6} UINT32 (words 0-3 a 128-bit counter,
words 4-5 the 64-bit key); optionally OutputStateTensor, the state for the next execution: the
counter plus ceil(element count / 4), the key unchanged.

Where the page is silent, kompute_dml takes Random123's conventions: word 0 is the counter's least
significant word (and key word 4 Random123's k0); the output's elements in row-major logical order
take the Philox blocks of counter + 0, + 1, ... four at a time (element i: word i mod 4 of the
block of counter + floor(i / 4)), so that consecutive executions chained through the output state
continue one stream. The page's worked example of the counter's advance is inconsistent with
itself: 0x...74746c65 + 324,855 is 0x...7479615c, not the 0x...746f776e it gives (a joke on
"HelloFromSeattle" / "...town"); its rule (+ ceil(count / 4) with carries through the 128 bits)
is what kompute_dml does.

shaders/random_generator.comp: a Philox block per invocation (umulExtended for the 32 x 32 -> 64
products: 32-bit words only); invocation 0 writes the output state. Tests
(tests/test_random_generator.py): bit for bit against an independent numpy Philox 4x32-10 (checked
against Random123's known-answer vectors).

Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field), `type`
a DML_RANDOM_GENERATOR_TYPE value, the states' sizes {1,1,1,6}, a non-overlapping output and output
state, 32-bit addressing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import FL, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_U32 = frozenset({DataType.UINT32})
RANDOM_GENERATOR = OperatorSupport("RANDOM_GENERATOR", 132, (
    row(FL.FL_3_0, ("input_state_tensor", "input", (4, 4), _U32), ("output_tensor", "output", (4, 4), _U32),
        ("output_state_tensor", "optional output", (4, 4), _U32)),))
STATE_SIZES = (1, 1, 1, 6)


class RandomGeneratorType(enum.IntEnum):
    """DML_RANDOM_GENERATOR_TYPE (exported as kdml.RandomGeneratorType)."""

    PHILOX_4X32_10 = 0


@dataclass(frozen=True)
class RandomGeneratorDesc:
    """DML_RANDOM_GENERATOR_OPERATOR_DESC { InputStateTensor, OutputTensor, OutputStateTensor, Type }."""

    input_state_tensor: TensorDesc
    output_tensor: TensorDesc
    output_state_tensor: TensorDesc | None = None
    type: RandomGeneratorType = RandomGeneratorType.PHILOX_4X32_10


def compile_random_generator(device: Device, desc: RandomGeneratorDesc) -> CompiledOperator:
    support = RANDOM_GENERATOR
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    kind = as_int(desc.type, "type")
    if kind not in tuple(RandomGeneratorType):
        raise invalid("type", f"{kind} is not a DML_RANDOM_GENERATOR_TYPE value (0 PHILOX_4X32_10)")
    s, y, o = desc.input_state_tensor, desc.output_tensor, desc.output_state_tensor
    for f, t in (("input_state_tensor", s), ("output_state_tensor", o)):
        if t is not None and t.sizes != STATE_SIZES:
            raise invalid(f"{f}.sizes", f"must be {STATE_SIZES} for PHILOX_4X32_10, got {t.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    if o is not None:
        check_no_overlap(o.sizes, o.effective_strides, "output_state_tensor")
    check_addressable(support.fields, (s, y) + ((o,) if o is not None else ()))
    fam = contract.sequence.RNG
    total = y.element_count
    push = fam.pack(s_off=0, y_off=0, o_off=0, total=total, state_out=int(o is not None),
                    s_str=s.effective_strides[3], o_str=o.effective_strides[3] if o is not None else 0,
                    size=list(y.sizes), ys=list(y.effective_strides))
    writes = (1, 2) if o is not None else (1,)
    plan = DispatchPlan(variant=fam.name(), bindings=(0, 1, 2 if o is not None else None), push=push, writes=writes,
                        offset_slots=fam.slots(s_off=(0, 4), y_off=(1, 4), o_off=(2, 4)),
                        groups=grid_for(cdiv(total, 4), 256, device.limits["max_compute_work_group_count"][0]))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def random_bits(state: Any, shape: Any, *, out: Any = None, out_state: bool = True, device: Any = None) -> Any:
    """DML_RANDOM_GENERATOR (Philox 4x32-10): UINT32 bits of `shape` (4 dimensions, fewer padded
    with leading 1s) from `state` (6 UINT32 words: counter words 0-3, least significant first, key
    words 4-5). Returns (bits, next state) where `out_state`, else bits alone."""
    from ..functional import _packed, check_out, compile_cached, pooled_empty
    from ..functional.elementwise import _operands

    dims = tuple(as_int(v, "shape") for v in np.atleast_1d(np.asarray(shape)))
    if not 1 <= len(dims) <= 4:
        raise invalid("shape", f"must have 1 to 4 dimensions, got {dims}")
    dims = (1,) * (4 - len(dims)) + dims
    if not isinstance(state, (list, tuple, np.ndarray)) and not hasattr(state, "desc"):
        raise invalid("state", f"must be 6 UINT32 words, got {state!r}")
    if not hasattr(state, "desc"):
        arr = np.asarray(state)
        if arr.size != 6 or (arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF)):
            raise invalid("state", "must be 6 UINT32 words")
        state = arr.astype(np.uint32).reshape(STATE_SIZES)
    dev, (ts,) = _operands((state,), ("state",), device)
    u32 = DataType.UINT32
    if out is not None:
        check_out(out, dev, dims, u32)
    else:
        out = pooled_empty(dev, _packed(u32, dims))
    sd = _packed(u32, STATE_SIZES)
    op = compile_cached(dev, RandomGeneratorDesc(ts.desc, out.desc, sd if out_state else None))
    nxt = pooled_empty(dev, sd) if out_state else None
    op.execute([ts], [out, nxt])
    return (out, nxt) if out_state else out


EXPORTS = {"RandomGeneratorType": RandomGeneratorType}


def _example() -> RandomGeneratorDesc:
    u32 = DataType.UINT32
    return RandomGeneratorDesc(TensorDesc(u32, STATE_SIZES), TensorDesc(u32, (1, 2, 3, 4)), TensorDesc(u32, STATE_SIZES))


SPECS = (OperatorSpec(RandomGeneratorDesc, RANDOM_GENERATOR, compile_random_generator, (contract.sequence.RNG,),
                      helpers=("random_bits",), example=_example),)
