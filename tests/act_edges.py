"""Values where the fast forms of HardSwish and Swish (shaders/act_math.glsl *_fast: GEMM's FLOAT32
epilogue, gemm_act.glsl) hand over to the exact ones, the activations' edges in FLOAT32 and FLOAT16, and
the activations to run on them (test_gemm_fused.py, test_conv_fused.py: every epilogue gives the unfused
chain's bits on them)."""

from __future__ import annotations

import numpy as np

import kompute_dml as kdml

# FLOAT32 values where HardSwish's and Swish's fast forms (shaders/act_math.glsl *_fast) hand over to
# the exact ones: zeros, subnormals, the smallest normals, products Alpha x that are subnormal (2e-38 /
# 6), sums Alpha x + Beta near zero (x near -3), exp(-|x|) subnormal or zero (x below -87.3), huge
# values, infinities and NaN; and ordinary ones. Alpha and Beta stay normal: a device may flush a
# subnormal one in one kernel and not in another (Vulkan leaves denormals to the implementation), and
# the H100 did, for Beta = -1e-38 (x = -0: the standalone HardSwish +0, the fused -0; device call 233)
EDGES32 = [0.0, -0.0, 1e-40, -1e-40, 1.4e-45, -1.4e-45, 1.1754944e-38, -1.1754944e-38, 2e-38, -2e-38, -3.0,
           -3.0000002, -2.9999998, 3.0, -87.0, -87.5, -88.0, -100.0, -103.9, -104.0, -150.0, 88.0, 100.0, 3e38,
           -3e38, 3.4028235e38, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 0.5, -0.5, 2.5, -2.5, 7.0, -7.0]
EDGE_ACTS = {"hard_swish": (kdml.ActivationHardSwishDesc(None, None), kdml.hard_swish, {}),
             "hard_swish_odd": (kdml.ActivationHardSwishDesc(None, None, alpha=3e37, beta=-2e-38), kdml.hard_swish,
                                {"alpha": 3e37, "beta": -2e-38}),
             "swish": (kdml.ActivationSwishDesc(None, None), kdml.swish, {}),
             "swish_scaled": (kdml.ActivationSwishDesc(None, None, sigmoid_input_scale=1e-30), kdml.swish,
                              {"sigmoid_input_scale": 1e-30})}

# FLOAT16 values at the activations' edges: zeros, float16 subnormals, the smallest normals, x near
# -3 (HardSwish's sum near zero), exp(-|x|) subnormal or zero in float32 (x below -87.3), the largest
# halves, infinities and NaN; the tests' scales keep a product in float16's range or overflow it
EDGES16 = [0.0, -0.0, 6e-8, -6e-8, 3e-5, -3e-5, 6.1035e-05, -6.1035e-05, -3.0, -3.002, -2.998, 3.0, -87.0, -87.5,
           -88.0, -100.0, -104.0, -150.0, 88.0, 100.0, 65504.0, -65504.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 2.5,
           -2.5, 7.0, -7.0, -11.0, -17.0]
