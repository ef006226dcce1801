"""The direct CONVOLUTION kernel's window variants (shaders/convolution.comp DIRECT, contract.CONV_DIRECT):
any window through the k table, a 2-D 3 x 3, 5 x 5 or 7 x 7 window with its taps unrolled, and the 3 x 3 and
5 x 5 windows' row variants (DIRECT_ROW neighbouring outputs of a row per invocation), which the device policy takes
by size (coop_policy.direct_rows)."""

from __future__ import annotations

from typing import Any

from ..core.ints import cdiv
from ..runtime.coop_policy import direct_rows
from . import contract
from .contract.conv import DIRECT_ROW, DIRECT_ROW_STRIDES, DIRECT_ROW_WINDOWS
from .spatial import three


def direct_window(v: dict[str, Any], window: tuple[int, ...], npix: int, cout: int, float16: bool) -> tuple[str, int]:
    """The variant's `win` and its invocations for a validated convolution `v` of `window` (3 sizes),
    `npix` output pixels (batch included), `cout` output channels and FLOAT16 tensors or not."""
    if not (window[0] == 1 and window[1] == window[2] in contract.DIRECT_WINDOWS):
        return "", npix * cout
    ow, sw = three(v["spatial"], 1)[2], three(v["strides"], 1)[2]
    if (three(v["dilations"], 1)[2] == 1 and window[1] in DIRECT_ROW_WINDOWS and sw in DIRECT_ROW_STRIDES
            and direct_rows(npix * cout, float16, window[1], sw)):
        return f"{window[1]}s{sw}", npix // ow * cdiv(ow, DIRECT_ROW) * cout
    return str(window[1]), npix * cout
