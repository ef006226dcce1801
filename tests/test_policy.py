"""Device capabilities (optional Vulkan features the runtime enabled) and the per-device
policy that picks execution paths and kernel families from them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.runtime.policy import (
    CAPABILITIES,
    DOT_MAX_M,
    GEMV_COOP_MAX_M,
    GEMV_MAX_M,
    GEMV_TINY_MAX_M,
    MATMUL_KERNEL_ENV,
    MATMUL_KERNELS,
    policy_for,
    requested_capabilities,
)

LIMITS = {"max_storage_buffer_range": 1 << 27}


def test_policy_rules():
    cpu = policy_for("cpu", frozenset({"shader_int8"}), LIMITS, transfer_commands=None)
    assert (cpu.name, cpu.transfer_commands, cpu.matmul_family) == ("cpu", True, "cpu")
    gpu = policy_for("discrete-gpu", frozenset(), LIMITS, transfer_commands=None)
    assert (gpu.transfer_commands, gpu.matmul_family) == (False, "gpu")
    coop = policy_for("discrete-gpu", frozenset({"cooperative_matrix"}), LIMITS, transfer_commands=None)
    assert coop.matmul_family == "coopmat" and coop.has("cooperative_matrix")
    dot = policy_for("discrete-gpu", frozenset({"integer_dot_product"}), LIMITS, transfer_commands=None)
    assert dot.matmul_family == "dot"
    assert (dot.matmul_family_for(DOT_MAX_M), dot.matmul_family_for(DOT_MAX_M + 1)) == ("dot", "gpu")
    assert coop.matmul_family_for(1 << 20) == "coopmat" and gpu.matmul_family_for(1) == "gpu"
    both = policy_for("discrete-gpu", frozenset({"integer_dot_product", "cooperative_matrix"}), LIMITS)
    assert both.matmul_family == "coopmat"
    # the tensor-core kernel's zero-point sums: OpSDot where the device has it (COOP_SUMS)
    assert (both.coop_sums, coop.coop_sums, both.describe()["coop_sums"]) == ("dot", "bytes", "dot")
    assert policy_for("cpu", frozenset({"integer_dot_product"}), LIMITS).matmul_family == "cpu"
    assert policy_for("cpu", frozenset(), LIMITS, transfer_commands=False).transfer_commands is False


def test_transfer_environment_override(monkeypatch):
    monkeypatch.setenv("KDML_TRANSFER", "0")
    assert policy_for("cpu", frozenset(), LIMITS).transfer_commands is False
    monkeypatch.setenv("KDML_TRANSFER", "1")
    assert policy_for("discrete-gpu", frozenset(), LIMITS).transfer_commands is True


def test_weight_layout_follows_the_family_and_the_environment(monkeypatch):
    """Tensor-core GPUs store integer-product weights k-contiguous for every product (gemv takes no
    k-contiguous B there); other devices keep ONNX's layout, and with weights "columns" (KDML_WEIGHTS)
    products of more than gemv_max_m rows; KDML_WEIGHTS overrides, and a value that is neither
    layout is refused, naming the variable."""
    from kompute_dml.runtime.policy import GEMV_COOP_MAX_M, WEIGHTS_ENV

    monkeypatch.delenv(WEIGHTS_ENV, raising=False)
    coop = policy_for("discrete-gpu", frozenset({"cooperative_matrix"}), LIMITS)
    assert coop.weights == "columns" and coop.describe()["weights"] == "columns"
    assert coop.weight_layout(GEMV_COOP_MAX_M + 1) == "columns" and coop.weight_layout(1) == "columns"
    for other in (policy_for("discrete-gpu", frozenset({"integer_dot_product"}), LIMITS), policy_for("cpu", frozenset(), LIMITS)):
        assert other.weights == "rows" and other.weight_layout(4096) == "rows"
        columns = dataclasses.replace(other, weights="columns")
        assert columns.weight_layout(other.gemv_max_m + 1) == "columns" and columns.weight_layout(other.gemv_max_m) == "rows"
    monkeypatch.setenv(WEIGHTS_ENV, "rows")
    assert policy_for("discrete-gpu", frozenset({"cooperative_matrix"}), LIMITS).weight_layout(4096) == "rows"
    monkeypatch.setenv(WEIGHTS_ENV, "Columns")
    assert policy_for("cpu", frozenset(), LIMITS).weight_layout(4096) == "columns"
    monkeypatch.setenv(WEIGHTS_ENV, "transposed")
    with pytest.raises(kdml.InvalidArgumentError, match=WEIGHTS_ENV):
        policy_for("cpu", frozenset(), LIMITS)


def test_dql_geometry_per_device_and_environment(monkeypatch):
    """DYNAMIC_QUANTIZE_LINEAR's geometry: the table's per device kind, KDML_DQL_GEOMETRY's where set,
    and a value that is not ELEMENTS,LOADS (ELEMENTS >= 256, LOADS 4, 2 or 1) refused, naming it."""
    from kompute_dml.runtime.policy import DQL_GEOMETRY, DQL_GEOMETRY_ENV

    monkeypatch.delenv(DQL_GEOMETRY_ENV, raising=False)
    assert policy_for("cpu", frozenset(), LIMITS).dql_geometry == DQL_GEOMETRY["cpu"]
    assert policy_for("discrete-gpu", frozenset(), LIMITS).describe()["dql_geometry"] == DQL_GEOMETRY["gpu"]
    monkeypatch.setenv(DQL_GEOMETRY_ENV, "512,1")
    assert policy_for("cpu", frozenset(), LIMITS).dql_geometry == (512, 1)
    for bad in ("512", "512,3", "100,4", "a,b"):
        monkeypatch.setenv(DQL_GEOMETRY_ENV, bad)
        with pytest.raises(kdml.InvalidArgumentError, match=DQL_GEOMETRY_ENV):
            policy_for("discrete-gpu", frozenset(), LIMITS)


def test_requested_capabilities(monkeypatch):
    monkeypatch.delenv("KDML_FEATURES", raising=False)
    assert requested_capabilities(None) is None
    assert requested_capabilities("none") == frozenset()
    assert requested_capabilities("all") is None
    assert requested_capabilities("shader_int8, storage_buffer_8bit") == {"shader_int8", "storage_buffer_8bit"}
    assert requested_capabilities(["integer_dot_product"]) == {"integer_dot_product"}
    monkeypatch.setenv("KDML_FEATURES", "none")
    assert requested_capabilities(None) == frozenset()
    with pytest.raises(kdml.InvalidArgumentError, match=r"^features: unknown capability warp_drive"):
        requested_capabilities("warp_drive")
    with pytest.raises(kdml.InvalidArgumentError, match="^features"):
        kdml.Device(features=["shader_int8", "warp_drive"])


def test_device_capabilities_are_known_names(dev):
    assert dev.capabilities <= set(CAPABILITIES)
    assert dev.policy.capabilities == dev.capabilities
    if "cooperative_matrix" in dev.capabilities:
        assert dev.cooperative_matrix_shapes, "cooperative matrices enabled but no shape reported"
    # workgroup scope (VK_NV_cooperative_matrix2) only on top of the KHR matrices, with its shapes
    # and limits reported exactly when it is enabled
    if "cooperative_matrix_workgroup" in dev.capabilities:
        assert "cooperative_matrix" in dev.capabilities
        assert dev.cooperative_matrix_flexible_shapes and len(dev.cooperative_matrix2_limits) == 3
        assert all(len(s) == 10 for s in dev.cooperative_matrix_flexible_shapes)
    else:
        assert dev.cooperative_matrix_flexible_shapes == () and dev.cooperative_matrix2_limits == ()


def test_features_none_enables_nothing():
    d = kdml.Device(features="none")
    try:
        assert d.capabilities == frozenset()
        assert d.policy.matmul_family != "coopmat"
        y = kdml.identity(d.tensor(np.full(5, 3.5, np.float32)))
        assert (y.numpy() == 3.5).all()
    finally:
        d.close()


def test_features_restrict_to_a_subset(dev):
    """Asking for a subset of what the device enabled gives exactly that subset."""
    if not dev.capabilities:
        pytest.skip(f"{dev.name} enabled no optional capability (KDML_FEATURES=none, or the device has none)")
    subset = sorted(dev.capabilities)[: max(1, len(dev.capabilities) // 2)]
    d = kdml.Device(features=subset)
    try:
        assert d.capabilities == frozenset(subset)
    finally:
        d.close()


def test_features_environment(monkeypatch):
    monkeypatch.setenv("KDML_FEATURES", "none")
    d = kdml.Device()
    try:
        assert d.capabilities == frozenset()
    finally:
        d.close()


@pytest.mark.parametrize("close", [False, True])
def test_process_exit_without_close_is_clean(close):
    """Devices, buffers, pipelines and recorded sequences left for the interpreter's exit:
    kp's exit callback destroys every live Manager, waiting for its device first (regression:
    NVIDIA's driver aborted with 'free(): invalid pointer' when the garbage collector tore kp
    objects down after it); kompute_dml has no exit handler of its own."""
    code = textwrap.dedent(f"""
        import numpy as np, kompute_dml as kdml
        d = kdml.Device()
        x = d.tensor(np.arange(64, dtype=np.float32))
        y = kdml.identity(x)
        with d.record() as rec:
            op = d.compile(kdml.ActivationIdentityDesc(x.desc, x.desc))
            rec.execute(op, [x], [d.empty(x.desc)])
        assert (y.numpy() == np.arange(64)).all()
        if {close}:
            d.close()
        print("done")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip().endswith("done"), (p.returncode, p.stdout, p.stderr[-2000:])
    assert "free()" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_raw_kp_process_exit_is_clean():
    """kp objects left alive at exit without kompute_dml: the patched kp destroys every live
    Manager from an atexit callback. Run without the validation layer: on the H100 machine
    (NVIDIA 580 with Debian 13's layer 1.4.309) a bare process aborts at exit with the layer
    loaded even when it only creates a kp.Manager, or leaves through os._exit, and runs clean
    without it or with kompute_dml imported first (scripts/exit_probe.sh): that abort is the
    layer's, not kp's teardown, and kompute_dml's own exit is tested above with the layer on."""
    from pathlib import Path

    spv = Path(__file__).resolve().parent.parent / "kompute_dml" / "spirv" / "copy_packed.spv"
    code = textwrap.dedent(f"""
        import kp, numpy as np
        m = kp.Manager()
        a = m.tensor_t(np.arange(16, dtype=np.uint32), kp.TensorTypes.device)
        b = m.tensor_t(np.zeros(16, np.uint32), kp.TensorTypes.device)
        algo = m.algorithm([a, b], open({str(spv)!r}, 'rb').read(), [1, 1, 1], np.zeros(0, np.uint32),
                           np.zeros(3, np.uint32))
        seq = m.sequence()
        seq.record(kp.OpAlgoDispatch(algo, np.zeros(3, np.uint32))).eval()
        print("done")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("VK_INSTANCE_LAYERS", "VK_LAYER_SETTINGS_PATH")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("done"), (p.returncode, p.stdout, p.stderr[-2000:])
    assert "free()" not in p.stderr, p.stderr[-2000:]



def test_pipeline_refuses_a_variant_needing_a_disabled_capability():
    """Below the operators' own compile-time checks, the runtime refuses to build a pipeline
    from a variant that needs a feature the device did not enable (the driver never sees it)."""
    from kompute_dml.runtime import DispatchPlan
    from kompute_dml.runtime.shaders import required_capabilities

    d = kdml.Device(features="none")
    try:
        needy = [v for v in ("mmc8_rr", "mmc8d_rr") if required_capabilities(v)]
        if not needy:
            pytest.skip("no SPIR-V variant that needs an optional capability was built")
        plan = DispatchPlan(variant=needy[0], bindings=(None,), push=(0,), groups=(1, 1, 1), writes=())
        with pytest.raises(kdml.UnsupportedError, match=f"{needy[0]}.*did not enable"):
            d.engine.programs.bind(plan, [d.engine.dummy])
    finally:
        d.close()


# ---- the matrix-product table ----------------------------------------------------------------
def _rows(m: int, b_strides=(4096, 1)):  # what the table's predicates read of a descriptor (B: 4096 x 4096)
    from types import SimpleNamespace

    b = SimpleNamespace(sizes=(4096, 4096), effective_strides=b_strides)
    return SimpleNamespace(a_tensor=SimpleNamespace(sizes=(2, m, 4096)), b_tensor=b)


def _tried(policy, m: int, kernel=None, b_strides=(4096, 1)) -> list[str]:
    return [c.family for c in policy.matmul_table(kernel) if c.applies(None, _rows(m, b_strides))]


@pytest.mark.parametrize("device_type, caps, few, many", [
    ("cpu", {"cooperative_matrix", "integer_dot_product"}, ["cpu", "gpu"], ["cpu", "gpu"]),
    ("discrete-gpu", set(), ["gemv", "wide", "gpu"], ["wide", "gpu"]),
    ("discrete-gpu", {"cooperative_matrix"}, ["gemv", "coopmat", "wide", "gpu"], ["coopmat", "wide", "gpu"]),
    ("integrated-gpu", {"integer_dot_product"}, ["gemv", "dot", "wide", "gpu"], ["wide", "gpu"]),
])
def test_matmul_table_order(monkeypatch, device_type, caps, few, many):
    """The automatic order per device kind: lavapipe (CPU) its own family (the gpu tiles past its loop limit: below); GPUs gemv for at
    most gemv_max_m rows (GEMV_COOP_MAX_M on tensor-core GPUs), their family (dot up to DOT_MAX_M rows), wide (16/32-bit), gpu last."""
    monkeypatch.delenv(MATMUL_KERNEL_ENV, raising=False)
    policy = policy_for(device_type, frozenset(caps), LIMITS)
    assert policy.matmul_kernel == "auto"
    assert _tried(policy, policy.gemv_max_m) == few
    assert _tried(policy, max(DOT_MAX_M, GEMV_TINY_MAX_M) + 1) == many
    # tensor-core GPUs hand products of more rows to their family (GEMV_COOP_MAX_M), and every
    # product of a k-contiguous B; others keep gemv
    assert policy.gemv_max_m == (GEMV_COOP_MAX_M if "coopmat" in few else GEMV_MAX_M)
    k_contiguous = _tried(policy, 1, b_strides=(1, 64))
    assert k_contiguous == (few[1:] if "coopmat" in few else few)
    if "dot" in few:
        assert _tried(policy, DOT_MAX_M) == ["dot", "wide", "gpu"]
    assert policy.describe()["matmul_table"][0].startswith(few[0])


def test_cpu_family_within_llvmpipes_loop_limit(monkeypatch):
    """On CPU devices the CPU family takes K up to CPU_MATMUL_MAX_K (llvmpipe stops an invocation's
    loops after 65,535 iterations: runtime/llvmpipe.py), the gpu family's tiles beyond."""
    from types import SimpleNamespace

    from kompute_dml.runtime.llvmpipe import CPU_MATMUL_MAX_K

    monkeypatch.delenv(MATMUL_KERNEL_ENV, raising=False)
    policy = policy_for("cpu", frozenset(), LIMITS)
    for k, first in ((CPU_MATMUL_MAX_K, "cpu"), (CPU_MATMUL_MAX_K + 1, "gpu")):
        desc = SimpleNamespace(a_tensor=SimpleNamespace(sizes=(3, k)))
        assert next(c.family for c in policy.matmul_table() if c.applies(None, desc)) == first, k


def test_matmul_table_forced():
    """A forced family first; where its planner declines, what it falls back to."""
    gpu = policy_for("discrete-gpu", frozenset(), LIMITS)
    cpu = policy_for("cpu", frozenset(), LIMITS)
    assert _tried(gpu, 1, "gemv") == ["gemv", "wide", "gpu"] and _tried(cpu, 1, "gemv") == ["gemv", "cpu", "gpu"]
    assert _tried(cpu, 1, "coopmat") == ["coopmat", "wide", "gpu"]
    assert _tried(cpu, 1, "Wide") == ["wide", "gpu"] and _tried(gpu, 1, "gpu") == ["gpu"]
    assert _tried(gpu, 1, "cpu-ssbo") == ["cpu-ssbo"] and _tried(gpu, 1, "auto") == _tried(gpu, 1)
    assert {c.family for k in MATMUL_KERNELS for c in gpu.matmul_table(k)} <= set(MATMUL_KERNELS)
    with pytest.raises(kdml.InvalidArgumentError, match="^kernel: must be one of"):
        gpu.matmul_table("tpu")


def test_matmul_kernel_read_when_the_policy_is_made(monkeypatch):
    monkeypatch.setenv(MATMUL_KERNEL_ENV, "gpu")
    forced = policy_for("cpu", frozenset(), LIMITS)
    monkeypatch.setenv(MATMUL_KERNEL_ENV, "cpu-ssbo")
    assert (forced.matmul_kernel, _tried(forced, 8)) == ("gpu", ["gpu"])
    monkeypatch.setenv(MATMUL_KERNEL_ENV, "tpu")  # refused where a product compiles, not when the device is made
    bad = policy_for("cpu", frozenset(), LIMITS)
    assert bad.describe()["matmul_table"][0].startswith("invalid: kernel")
    with pytest.raises(kdml.InvalidArgumentError, match="KDML_MATMUL_KERNEL"):
        bad.matmul_table()


def _texel_desc():
    """8-bit, K and N multiples of 16: lavapipe's policy takes the texel variant."""
    DT = kdml.DataType
    f = kdml.TensorDesc
    return kdml.MatrixMultiplyIntegerToFloatDesc(f(DT.UINT8, (32, 64)), f(DT.FLOAT32, (1, 1)), None, f(DT.INT8, (64, 32)),
                                                f(DT.FLOAT32, (1, 1)), None, None, f(DT.FLOAT32, (32, 32)))


def test_matmul_kernel_environment_is_read_once(dev, monkeypatch):
    """KDML_MATMUL_KERNEL set after the device exists changes nothing; set before a device is
    made, it forces that device's family."""
    auto = dev.compile(_texel_desc()).variants
    monkeypatch.setenv(MATMUL_KERNEL_ENV, "gpu")
    assert dev.compile(_texel_desc()).variants == auto
    assert dev.policy.matmul_kernel != "gpu"
    d = kdml.Device()
    try:
        monkeypatch.setenv(MATMUL_KERNEL_ENV, "cpu")  # after: ignored by d too
        assert d.policy.matmul_kernel == "gpu"
        assert d.compile(_texel_desc()).variants == ["mmi_gpu_8"] != auto
    finally:
        d.close()


def test_small_copies_go_to_transfer_commands_only_with_few_regions():
    gpu = policy_for("discrete-gpu", frozenset(), LIMITS, transfer_commands=None)
    assert gpu.copies_by_transfer(4096) and gpu.copies_by_transfer(4096, regions=4)
    assert not gpu.copies_by_transfer(4096, regions=192)  # a head merge's many short rows: a shader
    assert not gpu.copies_by_transfer(16 << 20)
    cpu = policy_for("cpu", frozenset(), LIMITS, transfer_commands=True)
    assert cpu.copies_by_transfer(4096, regions=192)


def test_a_many_row_copy_runs_as_a_shader_on_a_gpu_policy():
    from kompute_dml.ops.identity import plan_copy
    from kompute_dml.runtime import TransferPlan

    src = kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 16, 12, 32), (6144, 32, 512, 1))  # a transposed view
    dst = kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 16, 12, 32))
    gpu = policy_for("discrete-gpu", frozenset(), LIMITS, transfer_commands=None)
    plans = plan_copy(src, dst, 65535, lambda regions: gpu.copies_by_transfer(dst.byte_size, regions), "gpu")
    assert not any(isinstance(p, TransferPlan) for p in plans)
    packed = kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 16, 12, 32))
    plans = plan_copy(packed, dst, 65535, lambda regions: gpu.copies_by_transfer(dst.byte_size, regions), "gpu")
    assert isinstance(plans[0], TransferPlan)


def test_attention_kernel_and_fused_limits():
    """The "coopmat" attention kernel where the device has float16 cooperative matrices (GEMM's family),
    else "blocked" on GPUs; the exported attention runs fused at every size there for FLOAT16 with head
    sizes <= 128 in at least ATTENTION_COOP_MIN_GROUPS work groups, up to the blocked kernel's limit where
    that takes it (head sizes <= 64, at least ATTENTION_BLOCKED_MIN_ROWS rows), else up to the tiled one's."""
    import functools

    from kompute_dml.ops.attention_layout import blocked_takes, coop_takes
    from kompute_dml.runtime import attention_policy as P

    caps = frozenset({"cooperative_matrix", "shader_float16", "vulkan_memory_model"})
    coop = policy_for("discrete-gpu", caps, LIMITS, transfer_commands=None)
    plain = policy_for("discrete-gpu", frozenset(), LIMITS, transfer_commands=None)
    assert (coop.attention_kernel, plain.attention_kernel) == ("coopmat", "blocked")
    rows = coop.attention_blocked_min_rows
    for kernel in (coop.attention_kernel, plain.attention_kernel):
        assert blocked_takes(kernel, 64, rows, rows) and not blocked_takes(kernel, 64, rows - 1, rows)
        assert not blocked_takes(kernel, 65, rows, rows)
    assert not blocked_takes("tiled", 64, rows, rows) and not blocked_takes("rows", 64, rows, rows)
    assert P.fused_max_flops(coop, False, 1, blocked=True) == P.ATTENTION_BLOCKED_MAX_FLOPS
    assert policy_for("cpu", caps, LIMITS).attention_kernel == "rows"
    many, tiled = P.ATTENTION_COOP_MIN_GROUPS, coop.attention_fused_max_flops
    assert P.fused_max_flops(coop, True, many, False) == P.ATTENTION_COOP_MAX_FLOPS > tiled
    assert P.fused_max_flops(coop, True, many - 1, False) == tiled  # few work groups of long rows: unfused
    assert P.fused_max_flops(coop, False, many, False) == tiled  # a problem the tensor-core kernel does not take
    takes = functools.partial(coop_takes, seq=5, bias=False)
    assert takes(coop.attention_kernel, True, 128) and takes("coopmat-emulated", True, 64)
    assert not takes(coop.attention_kernel, False, 64)  # FLOAT32: the tiled kernel
    assert not takes(coop.attention_kernel, True, 129)  # past the tiles' head sizes
    assert not takes(plain.attention_kernel, True, 64)
    assert not coop_takes("coopmat", True, 64, seq=4, bias=False) and not coop_takes("coopmat", True, 64, 5, bias=True)
