"""Build hooks: compile the GLSL shaders to SPIR-V whenever the package is built or installed
(also `pip install -e .`), and the onnxruntime plugin EP (native/ort_ep) where onnxruntime's C
API headers can be had (scripts/ort-headers.sh; KDML_ORT_INCLUDE names a directory of them
instead). Metadata lives in pyproject.toml."""

import os
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The SPIR-V data package is generated (and git-ignored); it must exist before setuptools
# collects packages, which happens before build_py fills it.
(ROOT / "kompute_dml" / "spirv").mkdir(exist_ok=True)


class BuildPyWithSpirv(build_py):
    def run(self) -> None:
        subprocess.check_call([sys.executable, str(ROOT / "tools" / "build_spirv.py")])
        super().run()


def ort_include() -> str | None:
    if os.environ.get("KDML_ORT_INCLUDE"):
        return os.environ["KDML_ORT_INCLUDE"]
    try:
        out = subprocess.run(["bash", str(ROOT / "scripts" / "ort-headers.sh")], capture_output=True, text=True,
                             check=True)
        return out.stdout.strip().splitlines()[-1]
    except (OSError, subprocess.CalledProcessError) as e:
        warnings.warn(f"building without the onnxruntime plugin EP: {getattr(e, 'stderr', e)}", stacklevel=1)
        return None


def ep_extensions() -> list[Extension]:
    include = ort_include()
    if include is None:
        return []
    libpython = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
    src = "native/ort_ep"
    return [
        Extension("kompute_dml.ort._ep", sources=[f"{src}/{f}.cc" for f in ("ep_main", "ep_graph", "ep_kernel", "ep_memory")],
                  include_dirs=[include],
                  extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"], language="c++"),
        # the library onnxruntime loads: no libpython linked (loader.c says why)
        Extension("kompute_dml.ort.libkompute_dml_ep", sources=[f"{src}/loader.c"], include_dirs=[include],
                  define_macros=[("KDML_LIBPYTHON", f'"{libpython}"'), ("KDML_BUILD_PYTHON", f'"{sys.executable}"')],
                  libraries=["dl"], extra_compile_args=["-O2", "-fvisibility=hidden"]),
    ]


setup(cmdclass={"build_py": BuildPyWithSpirv}, ext_modules=ep_extensions())
