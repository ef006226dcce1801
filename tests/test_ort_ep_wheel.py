"""The package as a wheel (`pip wheel .`): it carries the plugin EP library and the SPIR-V, and,
installed into a fresh virtual environment, the README's onnxruntime snippet runs a model through
the EP on this machine's Vulkan device, from Python and from a C++ program, with nothing of the
source tree in use. (The fresh environment reads numpy, onnx, onnxruntime and kp from this one's
site-packages through a .pth line, so no network is needed.)"""

from __future__ import annotations

import importlib
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
import test_ort_ep as t

import kompute_dml.ort as kort

try:
    kort.get_library_path()
except FileNotFoundError as e:
    pytest.skip(str(e), allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent

SNIPPET = r'''
import sys, numpy as np, onnxruntime as ort, kompute_dml, kompute_dml.ort as kort
assert kompute_dml.__file__.startswith(sys.prefix), kompute_dml.__file__
ort.register_execution_provider_library(kort.get_ep_name(), kort.get_library_path())
opts = ort.SessionOptions()
opts.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == kort.get_ep_name()], {})
sess = ort.InferenceSession(sys.argv[1], sess_options=opts, enable_fallback=0)
x = np.load(sys.argv[2])
np.save(sys.argv[3], sess.run(None, {"x": x})[0])
print("providers", sess.get_providers(), "library", kort.get_library_path())
'''


def _import_root(name: str) -> str:
    """The sys.path entry module `name` is imported from."""
    file = Path(importlib.import_module(name).__file__).resolve()
    return str(file.parent.parent if file.name == "__init__.py" else file.parent)


# the fresh environment's processes see nothing of this one's PYTHONPATH (the source tree may be on it)
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp / "dist"), str(ROOT)], check=True, timeout=600)
    (wheel,) = (tmp / "dist").glob("kompute_dml-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("kompute_dml/ort/libkompute_dml_ep") for n in names), names
    assert any(n.startswith("kompute_dml/ort/_ep") for n in names)
    assert "kompute_dml/spirv/manifest.json" in names
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    py = env / "bin" / "python"
    target = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    # this environment's packages, after the fresh one's own (kompute_dml comes from the wheel), and wherever
    # else the dependencies were found (a machine with kp installed on PYTHONPATH), never the source tree
    roots = [*site.getsitepackages(), *(_import_root(m) for m in ("numpy", "onnx", "onnxruntime", "kp"))]
    roots = [r for r in dict.fromkeys(roots) if Path(r).resolve() != ROOT]
    Path(target, "deps.pth").write_text("\n".join(roots) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, str(wheel)],
                   check=True, timeout=300)
    return py, tmp


def test_wheel_runs_the_readme_snippet_in_a_fresh_venv(venv):
    py, tmp = venv
    (tmp / "m.onnx").write_bytes(t.CHAIN)
    x = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
    np.save(tmp / "x.npy", x)
    run = subprocess.run([str(py), "-c", SNIPPET, str(tmp / "m.onnx"), str(tmp / "x.npy"), str(tmp / "y.npy")],
                         capture_output=True, text=True, timeout=300, cwd=tmp, env=CLEAN_ENV)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"library {tmp}" in run.stdout and "KomputeDmlExecutionProvider" in run.stdout
    from kompute_dml.onnx_backend import Backend

    np.testing.assert_array_equal(np.load(tmp / "y.npy"), Backend.prepare(t.CHAIN).run({"x": x})[0])


def test_wheel_library_in_a_cpp_host_starts_the_fresh_venvs_python(venv, tmp_path):
    """The installed library, loaded by a C++ program, finds the environment it is installed in
    (its pyvenv.cfg) and runs from there."""
    _py, tmp = venv
    (library,) = (tmp / "venv").rglob("libkompute_dml_ep*.so")
    t.run_cpp_driver(t.cpp_driver(tmp_path), str(library), tmp_path, env=CLEAN_ENV)
