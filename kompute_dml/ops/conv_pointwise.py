"""CONVOLUTION's pointwise case on GEMM's kernels (DevicePolicy.conv_pointwise_gemm): a FORWARD
convolution whose window is 1 in every dimension, with strides 1, no padding and one group, is per
image Output[o, p] = sum over c of Filter[o, c] Input[c, p] + Bias[o] over the pixels p, which is
DML_GEMM with A the filter (Cout x Cin), B the image (Cin x pixels), C the bias broadcast along the
pixels (Beta 1) and the convolution's FusedActivation as GEMM's. The tiled GEMM kernel has no
implicit-GEMM addressing (no table of the reduction's terms), so MobileNet's and EfficientNet's 1 x 1
layers run in 0.43-0.78x the convolution kernels' best time on the H100 (`python -m benchmarks.bench_conv
--pointwise`, docs/convolution.md). Each output is the GEMM's: its terms
summed in the GEMM kernel's order, the bias then the activation added as the convolution adds them,
within the convolution's error bound (tests/test_conv_pointwise.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.layout import merge_dims
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, TransferPlan
from .gemm import GemmDesc, compile_gemm

# GEMM's binding list (A, B, C, output) -> the convolution's (input, filter, bias, output)
_ENTRY = {0: 1, 1: 0, 2: 2, 3: 3}


def pointwise(desc: Any, v: dict[str, Any]) -> GemmDesc | None:
    """The GEMM that computes this convolution (`v`: convolution._validate's), or None where it is
    not pointwise or a tensor's pixels do not address as one dimension."""
    x, w, b, y = desc.input_tensor, desc.filter_tensor, desc.bias_tensor, desc.output_tensor
    if (v["backward"] or v["groups"] != 1 or any(s != 1 for s in w.sizes[2:]) or any(s != 1 for s in v["strides"])
            or any(v["start"]) or tuple(v["spatial"]) != tuple(x.sizes[2:]) or w.data_type != x.data_type):
        return None
    xs, ys = x.effective_strides, y.effective_strides
    sizes, (xp, yp) = merge_dims(x.sizes[2:], xs[2:], ys[2:])
    if len(sizes) != 1:
        return None
    n, cin, cout, npix = x.sizes[0], x.sizes[1], w.sizes[0], sizes[0]
    ws = w.effective_strides
    t = x.data_type
    a = TensorDesc(t, (n, 1, cout, cin), (0, 0, ws[0], ws[1]))  # one filter for every image (stride 0)
    bb = TensorDesc(t, (n, 1, cin, npix), (xs[0], 0, xs[1], xp[0]))
    c = None if b is None else TensorDesc(t, (n, 1, cout, npix), (0, 0, b.effective_strides[1], 0))
    o = TensorDesc(t, (n, 1, cout, npix), (ys[0], 0, ys[1], yp[0]))
    return GemmDesc(a, bb, c, o, alpha=1.0, beta=1.0, fused_activation=desc.fused_activation)


def gemm_plans(device: Any, gdesc: GemmDesc) -> tuple[list[DispatchPlan | TransferPlan], list[Any]]:
    """GEMM's plans and constants for `gdesc`, bound to the convolution's binding list."""
    op = compile_gemm(device, gdesc, square=True)  # (GEMM's 8 x 4 block is not measured on convolutions)
    plans: list[DispatchPlan | TransferPlan] = []
    for plan in op.plans:
        assert isinstance(plan, DispatchPlan), plan
        plans.append(dataclasses.replace(
            plan, bindings=tuple(_ENTRY.get(i, i) if i is not None else None for i in plan.bindings),
            writes=tuple(_ENTRY.get(i, i) for i in plan.writes),
            offset_slots=tuple((word, _ENTRY.get(i, i), unit) for word, i, unit in plan.offset_slots),
            windows=tuple((_ENTRY.get(i, i), delta, span) for i, delta, span in plan.windows)))
    return plans, [t for t in op.constants if t is not None]
