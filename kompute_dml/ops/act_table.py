"""FLOAT16 fused activations as tables: GEMM's and CONVOLUTION's FLOAT16 kernels apply a fused
activation (other than ReLU) to an output's float16 bits by one lookup, `act_table[h >> 1]`'s half
h & 1, instead of the activation's exact float32 code inlined per output (shaders/gemm_act.glsl
gemm_act16, conv_common.glsl conv_finish_with).

A float16 input has 65,536 values, so the table is the activation of each: made once per device and
activation by the standalone operator itself on a tensor of every bit pattern, so a fused output is
the unfused chain's bits (GEMM, then the activation) by construction. H200, `python -m
benchmarks.bench_conv --pointwise --half` (device call 257, us, the tensor cores' 8 x 16 -> 96 x 112 x 112
with SiLU): 133.8 with the exact code in every output, 73.0 with the table (62.0 without activation).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan
from .conv_fused import ACT_NONE, ACT_RELU, fused_words

TABLE_ENTRY = 4  # an operator's first constant's entry (after its four tensors): GEMM's table (at shader binding 5)


def uses_table(dt: DataType, act: tuple[int, ...]) -> bool:
    """Whether a FLOAT16 product's fused activation is applied by its table (gemm_act.glsl): kinds past ReLU."""
    return dt == DataType.FLOAT16 and act[0] not in (ACT_NONE, ACT_RELU)


def gemm_bindings(dt: DataType, act: tuple[int, ...]) -> tuple[int | None, ...]:
    """A, B, C, the output; the FLOAT16 ACT variants declare the table at binding 5 (ReLU: none bound; ops/gemm.py)."""
    if dt != DataType.FLOAT16 or act[0] == ACT_NONE:
        return (0, 1, 2, 3)
    return (0, 1, 2, 3, None, TABLE_ENTRY if uses_table(dt, act) else None)


def act_table(device: Any, act: Any, words: tuple[int, ...]) -> Any:
    """A FLOAT16 tensor of 65,536 elements: element h is `act` (a FusedActivation descriptor) of the
    float16 value of bits h, as the standalone operator computes it; made once per device and words."""
    tables = device.caches.setdefault("act_tables", {})  # per the activation's words (conv_fused.fused_words)
    table = tables.get(words)
    if table is None:
        every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
        td = TensorDesc(DataType.FLOAT16, (1 << 16,))
        op = device.compile(dataclasses.replace(act, input_tensor=td, output_tensor=td))
        table = device.tensor(np.zeros(1 << 16, np.float16))
        with device.uncaptured():  # computed now, also while the caller captures a program
            op.execute([device.tensor(every)], [table])
        tables[words] = table
    return table


CONV_TABLE_BINDING = 6  # the convolution kernels' FLOAT16 variants (conv_common.glsl)


def conv_act(device: Any, desc: Any, plans: list[Any], constants: list[Any]) -> tuple[list[Any], list[Any]]:
    """CONVOLUTION's plans and constants with its fused activation compiled in: the kind appended to the
    specialization constants of the convolution's own kernels (conv_common.glsl CONV_ACT_ID: the next
    constant after theirs), so each pipeline holds that activation's code alone, and their FLOAT16
    variants' table at binding 6 (kinds past ReLU: the table, a constant after the operator's others;
    else none bound). GEMM's plans (the pointwise case) carry their own."""
    words = tuple(fused_words(device, desc.fused_activation))
    own = [p for p in plans if isinstance(p, DispatchPlan) and p.variant.startswith("conv")]
    entry = None
    if uses_table(DataType.FLOAT16, words) and any(p.variant.endswith("_f16") for p in own):
        entry, constants = TABLE_ENTRY + len(constants), [*constants, act_table(device, desc.fused_activation, words)]

    def compiled_in(p: DispatchPlan) -> DispatchPlan:
        return table_slot(dataclasses.replace(p, spec=(*p.spec, words[0])), entry)

    return [compiled_in(p) if any(p is o for o in own) else p for p in plans], constants


def table_slot(plan: Any, entry: int | None = None) -> Any:
    """A convolution kernel's FLOAT16 plan with its binding 6 (the table's entry, or None); others as they are
    (also for the plans made ahead for other shapes: ops/convolution.plans_ahead)."""
    if not plan.variant.endswith("_f16") or len(plan.bindings) > CONV_TABLE_BINDING:
        return plan
    pad = (None,) * (CONV_TABLE_BINDING - len(plan.bindings))
    return dataclasses.replace(plan, bindings=(*plan.bindings, *pad, entry))
