"""kompute_dml as an onnxruntime plugin execution provider (kompute_dml/ort, native/ort_ep):
registration and devices, what it claims (the backend's placement) and how ORT partitions the
rest, outputs against onnxruntime's CPU provider and bit for bit against Backend.run where the
graph is the same (graph optimizations off), provider options and their errors, several
sessions and threads, a C++ host, and the transformer families end to end."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kompute_dml.ort as kort  # noqa: E402
from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

try:
    kort.get_library_path()
except FileNotFoundError as e:  # built without onnxruntime's headers (no network at set-up)
    pytest.skip(str(e), allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((8, 8)).astype(np.float32)
W2 = RNG.standard_normal((8, 4)).astype(np.float32)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    domains = [helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)]  # (Scaler: a CPU node)
    return helper.make_model(g, opset_imports=domains, ir_version=9).SerializeToString()


def _float(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


# MatMul -> ai.onnx.ml Scaler (no kompute_dml operator; offset 0, scale 1: y as it is) -> Add -> MatMul:
# two device groups around a CPU node
SPLIT = _model([helper.make_node("MatMul", ["x", "W1"], ["y"], name="mm1"),
                helper.make_node("Scaler", ["y"], ["h"], name="scaler", domain="ai.onnx.ml", offset=[0.0], scale=[1.0]),
                helper.make_node("Add", ["h", "y"], ["s"], name="add"),
                helper.make_node("MatMul", ["s", "W2"], ["out"], name="mm2")],
               [_float("x", ["N", 8])], [_float("out", ["N", 4])],
               [numpy_helper.from_array(W1, "W1"), numpy_helper.from_array(W2, "W2")])
# two outputs (listed in the other order than made), one of them the relu
CHAIN = _model([helper.make_node("MatMul", ["x", "W1"], ["y"]), helper.make_node("Relu", ["y"], ["r"]),
                helper.make_node("Sigmoid", ["r"], ["s"]), helper.make_node("MatMul", ["s", "W2"], ["out"])],
               [_float("x", ["N", 8])], [_float("out", ["N", 4]), _float("r", ["N", 8])],
               [numpy_helper.from_array(W1, "W1"), numpy_helper.from_array(W2, "W2")])


def _session(model, optimize=True, enable_fallback=0, device_memory=False, **provider_options):
    opts = kort.session_options(device_memory=device_memory, **provider_options)
    opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, sess_options=opts, enable_fallback=enable_fallback)


def _assigned(sess) -> dict[str, list[list[str]]]:
    out = collections.defaultdict(list)
    for sub in sess.get_provider_graph_assignment_info():
        out[sub.ep_name].append([n.name for n in sub.get_nodes()])
    return out


def _cpu(model, feeds):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_registration_offers_one_device_per_vulkan_device():
    ours = kort.ep_devices()
    kort.register()  # a second call is a no-op, not onnxruntime's "already registered"
    assert len(kort.ep_devices()) == len(ours)
    import kompute_dml

    assert sorted(d.ep_metadata[kort.plugin.METADATA_DEVICE] for d in ours) == [
        str(d["index"]) for d in kompute_dml.list_devices()]
    assert all(d.ep_name == kort.get_ep_name() == "KomputeDmlExecutionProvider" for d in ours)
    assert Path(kort.get_library_path()).is_file()


def test_unsupported_node_is_left_to_the_cpu_and_the_rest_is_claimed_in_two_groups():
    sess = _session(SPLIT, optimize=False)
    assert sess.get_providers()[0] == kort.get_ep_name()
    groups = _assigned(sess)
    assert sorted(map(sorted, groups[kort.get_ep_name()])) == [["add", "mm2"], ["mm1"]]
    assert groups["CPUExecutionProvider"] == [["scaler"]]
    for n in (1, 5):
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        (got,), (want,) = sess.run(None, {"x": x}), _cpu(SPLIT, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimize", [False, True])
def test_outputs_equal_backend_run_bit_for_bit(optimize):
    sess = _session(CHAIN, optimize=optimize)
    assert [len(g) for g in _assigned(sess)[kort.get_ep_name()]] == [4]  # one sub-graph, all of it
    rep = Backend.prepare(CHAIN)
    for n in (1, 3, 17):  # a new batch size is a new shape for the same compiled sub-graph
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        got, want = sess.run(None, {"x": x}), rep.run({"x": x})
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        for g, w in zip(got, _cpu(CHAIN, {"x": x})):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _if_model() -> bytes:
    """If(c): then MatMul(x, W) -> Relu, else MatMul(x, W) -> Sigmoid; the branches read x (an outer
    input) and W (an outer initializer), none of their own inputs."""
    def branch(name, op):
        nodes = [helper.make_node("MatMul", ["x", "W1"], [f"{name}_y"], name=f"{name}_mm"),
                 helper.make_node(op, [f"{name}_y"], [f"{name}_out"], name=f"{name}_act")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)])

    node = helper.make_node("If", ["c"], ["out"], then_branch=branch("then", "Relu"), else_branch=branch("else", "Sigmoid"),
                            name="if")
    return _model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, []), _float("x", ["N", 8])],
                  [_float("out", ["N", 8])], [numpy_helper.from_array(W1, "W1")])


def test_if_branches_reading_outer_values_are_claimed(capfd):
    """onnxruntime offers each branch of an If to the provider: the outer values the branch reads (an input
    of the main graph, its initializer) join the branch's description, so its nodes run on the device
    (before, the capability call failed, logged an error and left them to the CPU)."""
    model = _if_model()
    sess = _session(model)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    for c in (True, False):
        got = sess.run(None, {"c": np.array(c), "x": x})[0]
        np.testing.assert_allclose(got, _cpu(model, {"c": np.array(c), "x": x})[0], rtol=1e-5, atol=1e-6)
    groups = _assigned(sess)
    assert sorted(map(sorted, groups[kort.get_ep_name()])) == [["else_act", "else_mm"], ["then_act", "then_mm"]]
    assert "GetCapability" not in capfd.readouterr().err


def test_integer_and_boolean_values_cross_the_boundary():
    # Cast to int32 and a comparison on the device; the bool output and the int output come back
    model = _model([helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Greater", ["x", "t"], ["b"]),
                    helper.make_node("Add", ["i", "i"], ["i2"])],
                   [_float("x", [4, 3]), _float("t", [3])],
                   [helper.make_tensor_value_info("i2", TensorProto.INT32, [4, 3]),
                    helper.make_tensor_value_info("b", TensorProto.BOOL, [4, 3])])
    sess = _session(model, optimize=False)
    feeds = {"x": (RNG.standard_normal((4, 3)) * 50).astype(np.float32), "t": np.zeros(3, np.float32)}
    for g, w in zip(sess.run(None, feeds), _cpu(model, feeds)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_a_rank_0_value_crosses_the_boundary_as_rank_0():
    """A scalar the EP computes on the host (a Gather of a Shape) and a CPU node reads: rank 0 on
    both sides (it came back as shape (1,), and the Unsqueeze / Concat after it failed: Swin)."""
    i0 = numpy_helper.from_array(np.array(1, np.int64), "i0")
    ax = numpy_helper.from_array(np.array([0], np.int64), "ax")
    model = _model([helper.make_node("Shape", ["x"], ["shp"]), helper.make_node("Gather", ["shp", "i0"], ["n"], axis=0),
                    helper.make_node("Scaler", ["x"], ["h"], domain="ai.onnx.ml", offset=[0.0], scale=[1.0]),  # CPU: a split
                    helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]), helper.make_node("Concat", ["n1", "ax"], ["c"], axis=0)],
                   [_float("x", ["N", 3])], [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                                             helper.make_tensor_value_info("c", TensorProto.INT64, [2]), _float("h", ["N", 3])],
                   [i0, ax])
    feeds = {"x": np.ones((5, 3), np.float32)}
    got = _session(model, optimize=False).run(None, feeds)
    for g, w in zip(got, _cpu(model, feeds)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert got[0].shape == ()


@pytest.mark.parametrize("options, field", [
    ({"bogus": "1"}, "'bogus'"),
    ({"device_index": "99"}, "device_index"),
    ({"device_index": "one"}, "device_index"),
    ({"allow_half_precision": "maybe"}, "allow_half_precision"),
    ({"feature_level": "FL_9_9"}, "feature_level"),
])
def test_bad_provider_option_is_an_onnxruntime_error_naming_it(options, field):
    with pytest.raises(Exception, match=field) as info:
        _session(CHAIN, **options)
    assert "INVALID_ARGUMENT" in str(info.value)
    # nothing is left broken: a good session still runs
    x = np.ones((2, 8), np.float32)
    np.testing.assert_array_equal(_session(CHAIN).run(None, {"x": x})[0], Backend.prepare(CHAIN).run({"x": x})[0])


def test_provider_options_reach_the_backend():
    sess = _session(CHAIN, optimize=False, exclude_ops="Sigmoid")
    groups = _assigned(sess)
    assert groups["CPUExecutionProvider"] == [[n.name for n in onnx.load_from_string(CHAIN).graph.node
                                               if n.op_type == "Sigmoid"]]
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    for g, w in zip(sess.run(None, {"x": x}), _cpu(CHAIN, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # allow_half_precision=1: the products in float16 (tests/test_half_precision.py), as Backend.prepare's flag
    half = _session(CHAIN, optimize=False, exclude_ops="Sigmoid", allow_half_precision=1).run(None, {"x": x})
    want = Backend.prepare(CHAIN, allow_half_precision=True, exclude_ops=["Sigmoid"]).run({"x": x})
    for h, w, f in zip(half, want, sess.run(None, {"x": x})):
        np.testing.assert_array_equal(h, w)
        assert not np.array_equal(h, f)
        np.testing.assert_allclose(h, f, rtol=1e-2, atol=1e-2)


def test_a_run_skips_the_input_checks_onnxruntime_made_and_alloc_ends_with_its_call(monkeypatch):
    """Kernel.run hands onnxruntime's typed inputs to BackendRep.run_normalized (the backend's own
    input checks skipped: issue 54), and an `alloc` kept past its call raises instead of
    reaching a finished call's outputs."""
    from kompute_dml.onnx_backend.rep import BackendRep

    kept, normalized = [], []
    run, run_normalized = kort.plugin.Kernel.run, BackendRep.run_normalized
    monkeypatch.setattr(kort.plugin.Kernel, "run", lambda self, inputs, alloc: kept.append(alloc) or run(self, inputs, alloc))
    monkeypatch.setattr(BackendRep, "run_normalized",
                        lambda self, feeds, out=None: normalized.append(sorted(feeds)) or run_normalized(self, feeds, out))
    sess = _session(CHAIN)  # after the patch: the compiled kernel looks its run up once
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    for g, w in zip(sess.run(None, {"x": x}), Backend.prepare(CHAIN).run({"x": x})):
        np.testing.assert_array_equal(g, w)
    assert normalized == [["x"]]
    with pytest.raises(RuntimeError, match="after its run"):
        kept[0](0, (3, 4))


def test_sessions_and_threads_at_once_and_teardown():
    sessions = [_session(CHAIN), _session(SPLIT)]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            rng = np.random.default_rng(k)
            for _ in range(5):
                model, sess = (CHAIN, sessions[0]) if k % 2 else (SPLIT, sessions[1])
                x = rng.standard_normal((k + 1, 8)).astype(np.float32)
                for g, w in zip(sess.run(None, {"x": x}), _cpu(model, {"x": x})):
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    del sessions[0]  # one session gone, the other still runs
    x = np.ones((1, 8), np.float32)
    np.testing.assert_allclose(sessions[0].run(None, {"x": x})[0], _cpu(SPLIT, {"x": x})[0], rtol=1e-5, atol=1e-5)


def cpp_driver(tmp_path: Path) -> Path:
    """tests/native/ort_ep_driver.cc built against the wheel's libonnxruntime (skip without headers)."""
    include = ROOT / ".cache" / "ort-headers" / "include"
    libs = sorted((Path(ort.__file__).parent / "capi").glob("libonnxruntime.so*"))
    if not include.is_dir() or not libs:
        pytest.skip("needs onnxruntime's headers (.cache/ort-headers) and its shared library")
    exe = tmp_path / "driver"
    (tmp_path / "libonnxruntime.so.1").symlink_to(libs[0])  # the wheel ships only the versioned file
    subprocess.run(["g++", "-std=c++17", "-O1", "-I", str(include), str(ROOT / "tests/native/ort_ep_driver.cc"),
                    str(tmp_path / "libonnxruntime.so.1"), f"-Wl,-rpath,{tmp_path}", "-o", str(exe)], check=True)
    return exe


def run_cpp_driver(exe: Path, library: str, tmp_path: Path, env: dict[str, str] | None = None) -> None:
    """The driver runs CHAIN through the EP library from C++ (in environment `env`, default this
    process's); its output equals Backend.run's."""
    (tmp_path / "m.onnx").write_bytes(CHAIN)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    x.tofile(tmp_path / "x.raw")
    run = subprocess.run([str(exe), library, str(tmp_path / "m.onnx"), "x", str(tmp_path / "x.raw"),
                          "3", "8", "--", str(tmp_path / "out.raw")], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "device KomputeDmlExecutionProvider" in run.stdout and "output 3 4" in run.stdout
    got = np.fromfile(tmp_path / "out.raw", np.float32).reshape(3, 4)
    np.testing.assert_array_equal(got, Backend.prepare(CHAIN).run({"x": x})[0])


def test_cpp_host_starts_its_own_interpreter(tmp_path):
    """A C++ program with no Python in it registers the library and runs a model through it."""
    run_cpp_driver(cpp_driver(tmp_path), kort.get_library_path(), tmp_path)


FAMILY_PARAMS = [pytest.param("distilbert-int8"), pytest.param("vit"), pytest.param("bert-qdq"),
                 *(pytest.param(n, marks=pytest.mark.slow) for n in
                   ("roberta-int8", "bert-fp32-fused", "gpt2", "llama", "whisper-encoder", "resnet18"))]


@pytest.mark.parametrize("device_memory", [False, True])
@pytest.mark.parametrize("name", FAMILY_PARAMS)
def test_family_through_the_ep_matches_backend_run_and_claims_its_device_nodes(name, device_memory):
    pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the models")
    pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the models")
    from kompute_dml.bench import families

    pytest.importorskip(families.FAMILIES[name].requires, reason="it defines the architecture")
    path = str(families.build(name, "tiny"))
    model = Path(path).read_bytes()
    rep = Backend.prepare(path)
    sess = _session(model, optimize=False, device_memory=device_memory)
    on_cpu = {n for names in _assigned(sess).get("CPUExecutionProvider", []) for n in names}
    want_cpu = {p.name for p in rep.placement if p.target == CPU}
    assert on_cpu == want_cpu, (on_cpu, rep.summary())
    for batch, seq in ((1, 9), (3, 17)):
        feeds = families.feeds(name, batch, seq, np.random.default_rng(batch))
        (got,), (want,) = sess.run(None, feeds), rep.run(feeds)
        assert got.shape == want.shape and got.dtype == want.dtype
        if not want_cpu:  # the same graph on the same operators: the same bits
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_providers_list_selects_the_ep_with_its_options():
    """onnxruntime 1.31 takes a registered plugin EP by name in `providers=`, options included."""
    kort.register()
    sess = ort.InferenceSession(CHAIN, providers=[(kort.get_ep_name(), {"exclude_ops": "Relu"}), "CPUExecutionProvider"],
                                enable_fallback=0)
    assert sess.get_providers()[0] == kort.get_ep_name()
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    for g, w in zip(sess.run(None, {"x": x}), _cpu(CHAIN, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_profiler_times_the_eps_sub_graphs(tmp_path):
    import json

    opts = kort.session_options()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(SPLIT, sess_options=opts, enable_fallback=0)
    sess.run(None, {"x": np.ones((2, 8), np.float32)})
    events = [e for e in json.loads(Path(sess.end_profiling()).read_text()) if e.get("cat") == "Node"]
    ours = [e for e in events if e.get("args", {}).get("provider") == kort.get_ep_name()]
    assert len({e["name"] for e in ours}) == 2 and all(e["dur"] >= 0 for e in ours)  # both sub-graphs, timed


# ---- the device-memory variant: inputs and outputs in device memory, onnxruntime's IO binding ----

@pytest.mark.parametrize("model", ["CHAIN", "SPLIT"])
def test_device_memory_variant_runs_numpy_feeds_through_its_copies(model):
    """Plain sess.run with numpy feeds: onnxruntime copies them into the EP's device memory and
    the outputs back (SPLIT: around the CPU node too), through the EP's data transfer."""
    proto = globals()[model]
    sess = _session(proto, optimize=False, device_memory=True)
    assert sess.get_providers()[0] == kort.get_ep_name(device_memory=True)
    rep = Backend.prepare(proto)
    for n in (1, 6):
        x = RNG.standard_normal((n, 8)).astype(np.float32)
        for g, w in zip(sess.run(None, {"x": x}), rep.run({"x": x})):
            np.testing.assert_array_equal(g, w)


def test_io_binding_keeps_outputs_on_the_device_and_chains_sessions():
    sess = _session(CHAIN, device_memory=True)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    rep = Backend.prepare(CHAIN)
    want = rep.run({"x": x})
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    io.bind_output("out", "gpu", 0)
    io.bind_output("r", "gpu", 0)
    sess.run_with_iobinding(io)
    outs = io.get_outputs()
    assert [o.device_name() for o in outs] != ["cpu", "cpu"] and [o.shape() for o in outs] == [[3, 4], [3, 8]]
    for got, w in zip(io.copy_outputs_to_cpu(), want):
        np.testing.assert_array_equal(got, w)
    # the relu output, still on the device, feeds a second session without a host round trip
    second = _session(CHAIN, device_memory=True)
    io2 = second.io_binding()
    io2.bind_ortvalue_input("x", outs[1])
    io2.bind_output("out", "gpu", 0)
    second.run_with_iobinding(io2)
    np.testing.assert_array_equal(io2.copy_outputs_to_cpu()[0], rep.run({"x": want[1]})[0])


def test_unregister_and_register_again_with_a_session_alive():
    """The library unregistered while a session lives: that session still runs (onnxruntime keeps
    the library until its sessions end); registered again, new sessions run. In a process of its
    own, so the registration of this one is left alone."""
    script = """
import gc, sys, numpy as np, onnxruntime as ort, kompute_dml.ort as kort
sys.path.insert(0, sys.argv[1])
import test_ort_ep as t
x = {"x": np.ones((2, 8), np.float32)}
kort.register()
s = t._session(t.CHAIN)
want = s.run(None, x)[0]
ort.unregister_execution_provider_library(kort.get_ep_name())
assert kort.get_ep_name() not in [d.ep_name for d in ort.get_ep_devices()]
assert np.array_equal(s.run(None, x)[0], want)
del s; gc.collect()
kort.register()
assert np.array_equal(t._session(t.CHAIN).run(None, x)[0], want)
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", script, str(ROOT / "tests")], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr[-3000:]


def test_matmul_nbits_and_its_reader_are_one_ep_group():
    """A 4-bit MatMulNBits (expanded by the backend at prepare: onnx_backend/nbits.py) and the Relu
    after it: claimed by the EP as one group, the outputs as onnxruntime's CPU kernel computes them."""
    from test_onnx_matmul_nbits import _quantize

    rng = np.random.default_rng(5)
    k, n = 128, 32
    b, s, z = _quantize((rng.standard_normal((k, n)) * 0.2).astype(np.float32), 4, 32, "packed", np.float32)
    model = _model([helper.make_node("MatMulNBits", ["A", "B", "s", "z"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                                     block_size=32, name="nbits"), helper.make_node("Relu", ["Y"], ["R"], name="relu")],
                   [_float("A", ["N", k])], [_float("R", ["N", n])],
                   [numpy_helper.from_array(v, name) for name, v in (("B", b), ("s", s), ("z", z))])
    model = onnx.load_from_string(model)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    model = model.SerializeToString()
    sess = _session(model)
    feeds = {"A": rng.standard_normal((3, k)).astype(np.float32)}
    got = sess.run(None, feeds)[0]
    assert _assigned(sess) == {kort.get_ep_name(): [["nbits", "relu"]]}
    np.testing.assert_allclose(got, _cpu(model, feeds)[0], rtol=0, atol=2e-5 * float(np.abs(got).max()))


def test_qoperator_chain_is_one_ep_group():
    """quantize_static's QOperator nodes (onnx_backend/handlers_qlinear.py, fusion_qconv.py):
    QLinearConv -> com.microsoft QLinearAdd -> QLinearGlobalAveragePool -> QGemm, claimed as one
    group, bit for bit Backend.run (graph optimizations off: the same graph) and within a
    quantization step of onnxruntime's CPU kernels."""
    rng = np.random.default_rng(11)
    u8 = TensorProto.UINT8
    # weights within +-60: onnxruntime's u8 x s8 pairs of products (255 * 60 * 2) stay inside int16 on
    # CPUs without VNNI, where larger ones saturate (tests/ort_exactness.py)
    c = {"xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8), "w": rng.integers(-60, 60, (4, 3, 3, 3)).astype(np.int8),
         "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8), "cs": np.array(0.05, np.float32),
         "cz": np.array(100, np.uint8), "ys": np.array(0.06, np.float32), "yz": np.array(90, np.uint8),
         "ps": np.array(0.04, np.float32), "pz": np.array(80, np.uint8),
         "g": rng.integers(-100, 100, (5, 4)).astype(np.int8), "gs": np.array(0.02, np.float32), "gz": np.array(0, np.int8),
         "os": np.array(0.03, np.float32), "oz": np.array(120, np.uint8)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "cs", "cz"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("QLinearAdd", ["c", "cs", "cz", "c", "cs", "cz", "ys", "yz"], ["a"], domain="com.microsoft",
                              name="add"),
             helper.make_node("QLinearGlobalAveragePool", ["a", "ys", "yz", "ps", "pz"], ["p"], domain="com.microsoft",
                              name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("QGemm", ["f", "ps", "pz", "g", "gs", "gz", "", "os", "oz"], ["y"], domain="com.microsoft",
                              transB=1, name="gemm")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", u8, ["N", 3, 6, 6])],
                          [helper.make_tensor_value_info("y", u8, ["N", 5])],
                          [numpy_helper.from_array(v, k) for k, v in c.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9).SerializeToString()
    feeds = {"x": rng.integers(0, 256, (2, 3, 6, 6)).astype(np.uint8)}
    sess = _session(model, optimize=False)
    got = sess.run(None, feeds)[0]
    assert _assigned(sess) == {kort.get_ep_name(): [["conv", "add", "pool", "flatten", "gemm"]]}, _assigned(sess)
    np.testing.assert_array_equal(got, Backend.prepare(onnx.load_from_string(model), "CPU").run(feeds)[0])
    assert np.abs(got.astype(int) - _cpu(model, feeds)[0].astype(int)).max() <= 1


def test_compiled_graphs_read_their_weights_without_protobufs_copy(monkeypatch):
    """A compiled sub-graph's initializers are views of the bytes its graph was built from
    (onnx_backend/file_weights.py), not a copy made at the first run, and the results stand."""
    reps = []
    init = kort.plugin.Kernel.__init__
    monkeypatch.setattr(kort.plugin.Kernel, "__init__", lambda self, name, rep, *a, **k: reps.append(rep) or init(
        self, name, rep, *a, **k))
    sess = _session(CHAIN, optimize=False)
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    for g, w in zip(sess.run(None, {"x": x}), _cpu(CHAIN, {"x": x})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    (rep,) = reps
    w1 = rep.constant_host("W1")
    assert rep.file_weights is not None and not w1.flags.owndata and not w1.flags.writeable
    np.testing.assert_array_equal(w1, W1)
