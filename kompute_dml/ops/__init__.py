"""The operators, found rather than listed: every module of this package that ends with a
`SPECS` tuple (kompute_dml/ops/spec.py) is an operator module, and everything else here is what
those modules share (plans, the shader contract, the runtime-facing base classes).

Nothing is imported when this package is: the operator modules import the functional helpers'
machinery, which imports the Device, which imports this package for `compile_operator`. The
first use of a name below (or `kompute_dml`'s own import, which ends by calling `operators()`)
imports every module of the package once, in name order, and builds the tables; so a new
operator is a new module, and the compile table, `kdml.*` exports, `kompute-dml info`, the
README matrix, the ONNX placement and the spec-parametrized tests pick it up.

An operator module's helpers (`OperatorSpec.helpers`, exported as `kdml.<name>`) are defined
in the module itself or, where they need more room, in `kompute_dml/functional/<module>.py`.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..core.dtypes import FeatureLevel
from ..core.errors import invalid
from ..core.registry import support_matrix as _support_matrix
from .spec import OperatorSpec, check_plans, onnx_ops, onnx_placement

if TYPE_CHECKING:
    from ..device.device import Device


@dataclass(frozen=True)
class Operators:
    """What the operator modules declare, gathered once."""

    modules: tuple[ModuleType, ...]  # the operator modules, in name order
    specs: tuple[OperatorSpec, ...]
    by_desc: dict[type, OperatorSpec]
    by_name: dict[str, OperatorSpec]
    helpers: dict[str, Callable[..., Any]]  # kdml.<name> -> the helper
    exports: dict[str, Any]  # every public name: descriptor classes, their enums, helpers
    onnx_placement: dict[tuple[str, str], tuple[str, str, int]]


def _helper_module(module: ModuleType) -> ModuleType | None:
    name = module.__name__.rpartition(".")[2]
    try:
        return importlib.import_module(f"{__package__.rpartition('.')[0]}.functional.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.endswith(f"functional.{name}"):
            return None
        raise


@functools.cache
def operators() -> Operators:
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "SPECS"):
            modules.append(module)
    specs = tuple(s for m in modules for s in m.SPECS)
    helpers: dict[str, Callable[..., Any]] = {}
    exports: dict[str, Any] = {}
    homes_of = {module: [m for m in (module, _helper_module(module)) if m is not None] for module in modules}
    for module in modules:
        # its own module and functional twin first, then any operator's (ADD and ADD1 share kdml.add)
        homes = [*homes_of[module], *(m for other in modules if other is not module for m in homes_of[other])]
        for spec in module.SPECS:
            exports[spec.desc_type.__name__] = spec.desc_type
            for name in spec.helpers:
                fn = next((getattr(m, name) for m in homes if callable(getattr(m, name, None))), None)
                if fn is None:
                    raise TypeError(f"{spec.name}: helper {name!r} is defined neither in {module.__name__} nor in "
                                    f"kompute_dml/functional/{module.__name__.rpartition('.')[2]}.py, nor with "
                                    f"another operator")
                if helpers.get(name, fn) is not fn:
                    raise TypeError(f"two operators export different helpers named {name!r}")
                helpers[name] = fn
        exports.update(getattr(module, "EXPORTS", {}))  # other public names (enums of descriptor fields)
    exports.update(helpers)
    by_desc = {s.desc_type: s for s in specs}
    by_name = {s.name: s for s in specs}
    if len(by_desc) != len(specs) or len(by_name) != len(specs):
        raise ValueError("two operator specs share a descriptor class or a name")
    return Operators(tuple(modules), specs, by_desc, by_name, helpers, exports, onnx_placement(specs))


def compile_operator(device: Device, op_desc: Any, allow_half_precision: bool = False) -> Any:
    spec = operators().by_desc.get(type(op_desc))
    if spec is None:
        raise invalid("op_desc", f"{type(op_desc).__name__} is not an operator descriptor of kompute_dml")
    flags = {"allow_half_precision": True} if allow_half_precision and "allow_half_precision" in spec.flags else {}
    compiled = spec.compile(device, op_desc, **flags)
    check_plans(spec, compiled.plans, device.capabilities)
    return compiled


def support_matrix(level: FeatureLevel) -> list[dict[str, str]]:
    """Every operator's support rows in force at `level` (`kompute-dml info`)."""
    return _support_matrix(level, [s.support for s in operators().specs])


_TABLES: dict[str, Callable[[Operators], Any]] = {
    "SPECS": lambda o: o.specs,
    "BY_DESC": lambda o: o.by_desc,
    "BY_NAME": lambda o: o.by_name,
    "COMPILERS": lambda o: {d: s.compile for d, s in o.by_desc.items()},
    "ONNX_PLACEMENT": lambda o: o.onnx_placement,
    "ONNX_OPS": lambda o: onnx_ops(o.specs),
}


def __getattr__(name: str) -> Any:
    """The tables above and every descriptor class, by name, found on first use."""
    if name in _TABLES:
        return _TABLES[name](operators())
    if not name[:1].isupper():  # a submodule not imported yet: let the import system find it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = operators().exports.get(name)
    if found is None or not isinstance(found, type):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found


__all__ = ["OperatorSpec", "Operators", "compile_operator", "operators", "support_matrix"]
