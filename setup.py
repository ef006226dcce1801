"""Build hook: compile the GLSL shaders to SPIR-V whenever the package is built or
installed (also `pip install -e .`). Metadata lives in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The SPIR-V data package is generated (and git-ignored); it must exist before setuptools
# collects packages, which happens before build_py fills it.
(ROOT / "kompute_dml" / "spirv").mkdir(exist_ok=True)


class BuildPyWithSpirv(build_py):
    def run(self) -> None:
        subprocess.check_call([sys.executable, str(ROOT / "tools" / "build_spirv.py")])
        super().run()


setup(cmdclass={"build_py": BuildPyWithSpirv})
