"""The declarations the contract is made of: push-constant blocks (`PushBlock`, which generates
the GLSL block and packs the host's words by member name) and shader families (`ShaderFamily`:
one variant-name template of one source, its parameters, the `#define`s of each variant, its
push block, work-group size and target environment). Standard library only (see __init__)."""

from __future__ import annotations

import functools
import itertools
import operator
import re
import string
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MAX_PUSH_BYTES = 128  # Vulkan's guaranteed maxPushConstantsSize
# member kinds: GLSL type, and how a host value becomes its uint32 word
KINDS = {"u32": "uint", "i32": "int", "f32": "float"}
PUSH_BLOCK_DEFINE = "KDML_PUSH_BLOCK"  # the macro a shader writes where its push block goes
TARGET_KEY = "TARGET"  # the compile-inputs key of a variant's target environment (not a define)
_MEMBER_RE = re.compile(r"^(\w+)(?:\[(\d+)\])?(?::(\w+))?$")


class PushError(ValueError):
    """A push-constant block packed with unknown, missing or unrepresentable member values."""


@dataclass(frozen=True)
class Member:
    name: str
    words: int  # 1: a scalar; n > 1: an array of n
    kind: str = "u32"

    def glsl(self) -> str:
        return f"{KINDS[self.kind]} {self.name}" + (f"[{self.words}]" if self.words > 1 else "")

    def word(self, value: object) -> int:
        """One element's uint32 word: u32 in [0, 2^32), i32 in [-2^31, 2^31) as two's complement,
        f32 as its float32 bit pattern. PushError for anything else."""
        if isinstance(value, bool):
            raise PushError(f"push-constant member {self.name}: a bool is not a {self.kind} value")
        if self.kind == "f32":
            try:
                return int(struct.unpack("<I", struct.pack("<f", float(value)))[0])  # type: ignore[arg-type]
            except (TypeError, ValueError, OverflowError) as e:
                raise PushError(f"push-constant member {self.name}: {value!r} is not a float32 value ({e})") from None
        try:
            v = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise PushError(f"push-constant member {self.name}: {value!r} is not an integer") from None
        lo, hi = (0, 1 << 32) if self.kind == "u32" else (-(1 << 31), 1 << 31)
        if not lo <= v < hi:
            raise PushError(f"push-constant member {self.name} ({self.kind}): {v} is outside [{lo}, {hi})")
        return v & 0xFFFFFFFF


def _plain_u32(items: list[object]) -> bool:
    """Every item a plain int (not a bool, not a numpy integer) within u32."""
    for x in items:  # noqa: SIM110  (a loop: all() over a generator costs 4x as much)
        if type(x) is not int or not 0 <= x < 4294967296:
            return False
    return True


def member(text: str) -> Member:
    """`name`, `name[n]` or either with `:kind` (u32 when absent): one member as GLSL spells it."""
    m = _MEMBER_RE.match(text)
    if m is None or (m.group(3) or "u32") not in KINDS or (m.group(2) is not None and int(m.group(2)) < 2):
        raise ValueError(f"push-constant member {text!r}: want name, name[n] (n >= 2) or either with :{'/:'.join(KINDS)}")
    return Member(m.group(1), int(m.group(2) or 1), m.group(3) or "u32")


@dataclass(frozen=True)
class PushBlock:
    """A `layout(push_constant)` block of 32-bit members, in declaration order."""

    members: tuple[Member, ...]

    def __post_init__(self) -> None:
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError(f"push-constant block declares a member twice: {names}")
        if 4 * self.words > MAX_PUSH_BYTES:
            raise ValueError(f"push-constant block of {4 * self.words} bytes (at most {MAX_PUSH_BYTES}): {names}")

    @functools.cached_property
    def words(self) -> int:  # (every compile's check_plans asks)
        return sum(m.words for m in self.members)

    @functools.cached_property
    def _table(self) -> dict[str, tuple[int, Member]]:
        """name -> (first word, member), made once: every operator compile packs a block."""
        return {name: (word, m) for (name, word, _), m in zip(self.layout(), self.members)}

    def layout(self) -> list[tuple[str, int, int]]:
        """(member, first word, words) of every member."""
        out, word = [], 0
        for m in self.members:
            out.append((m.name, word, m.words))
            word += m.words
        return out

    def offset(self, name: str) -> int:
        """The push word where member `name` starts."""
        hit = self._table.get(name)
        if hit is None:
            raise KeyError(f"push-constant block has no member {name!r}")
        return hit[0]

    def glsl(self) -> str:
        """The GLSL declaration, one line (the build passes it as the KDML_PUSH_BLOCK define)."""
        return "layout(push_constant) uniform PC { " + " ".join(f"{m.glsl()};" for m in self.members) + " } pc;"

    def pack(self, **values: object) -> tuple[int, ...]:
        """The uint32 words for these member values: every member exactly once (an array as a
        sequence of its length). PushError for an unknown or missing member or a value its kind
        cannot hold."""
        table = self._table
        if len(values) != len(table) or not table.keys() >= values.keys():
            unknown = sorted(set(values) - set(table))
            missing = [m.name for m in self.members if m.name not in values]
            raise PushError(f"push-constant block {{{', '.join(m.name for m in self.members)}}}: "
                            + "; ".join(p for p in (unknown and f"unknown member(s) {', '.join(unknown)}",
                                                    missing and f"missing member(s) {', '.join(missing)}") if p))
        words: list[int] = []
        for m in self.members:
            v = values[m.name]
            if m.words == 1:
                # the common case without a call: a plain int within u32 (bool is not int's type)
                words.append(v if type(v) is int and m.kind == "u32" and 0 <= v < 4294967296 else m.word(v))
                continue
            try:
                items = list(v)  # type: ignore[call-overload]
            except TypeError:
                raise PushError(f"push-constant member {m.name}[{m.words}]: want a sequence, got {v!r}") from None
            if len(items) != m.words:
                raise PushError(f"push-constant member {m.name}[{m.words}]: got {len(items)} values")
            if m.kind == "u32" and _plain_u32(items):  # the common case (sizes, strides) without a call each
                words += items
            else:
                words += [m.word(x) for x in items]
        return tuple(words)

    def slots(self, **members: tuple[int, int]) -> tuple[tuple[int, int, int], ...]:
        """DispatchPlan.offset_slots: member=(binding-list entry, unit in bytes) -> (push word,
        entry, unit); the runtime adds the bound tensor's byte offset / unit to that u32 member."""
        table = self._table
        out = []
        for name, (entry, unit) in members.items():
            hit = table.get(name)
            if hit is None:
                raise KeyError(f"push-constant block has no member {name!r}")
            if (hit[1].kind, hit[1].words) != ("u32", 1):
                raise ValueError(f"offset slot {name} is not a u32 scalar")
            out.append((hit[0], entry, unit))
        return tuple(out)


def block(*members: str) -> PushBlock:
    return PushBlock(tuple(member(m) for m in members))


Defines = Mapping[str, object] | Callable[..., Mapping[str, object]]


@dataclass(frozen=True)
class ShaderFamily:
    key: str
    source: str  # shaders/<source>
    template: str  # str.format template of the variant names
    params: tuple[tuple[str, tuple[str, ...]], ...]  # the template's fields and their values
    push: PushBlock
    local_size: tuple[int, int, int] | None  # None: set by a specialization constant
    # the #defines of a variant: a mapping (every variant), or a callable taking the parameter
    # values (strings, by field name) and returning the mapping
    defines: Defines = ()  # type: ignore[assignment]
    # a newer target environment (vulkan1.2: cooperative matrices), compiled and validated with the
    # cmeel wheels' tools (tools/build_spirv.py); or a callable of the parameter values giving it
    target: str | Callable[..., str | None] | None = None
    # the parameters another input shape may choose differently (softmax lanes, a GEMM tile), in
    # families whose pipelines take no specialization constants: a sibling's pipeline is the
    # same plan with another variant (ONNX backend, siblings.prepare_siblings). Parameters
    # chosen by data type, weight layout or device features are never siblings: their
    # specialization constants may not fit each other (a matmul_gemv configuration for B
    # row-major gives a zero-length array in the column-major variant)
    shape_params: tuple[str, ...] = ()
    # the specialization constants another input shape may give the same variant (the memory
    # kernels' chunks per invocation: 1 for small outputs, gpu_memory.VECS beyond), created
    # ahead of time like the siblings
    shape_specs: tuple[tuple[int, ...], ...] = ()
    # which combinations of the parameters' values are variants (a callable of the values, by field name;
    # None: every combination): a block only one data type takes, say
    where: Callable[..., bool] | None = None

    def __post_init__(self) -> None:
        fields = {f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None}
        if fields != {k for k, _ in self.params}:
            raise ValueError(f"shader family {self.key}: template {self.template!r} fields {sorted(fields)} "
                             f"differ from its parameters {[k for k, _ in self.params]}")
        if not set(self.shape_params) <= fields or (self.shape_params and self.local_size is None):
            raise ValueError(f"shader family {self.key}: shape parameters {self.shape_params} must be template "
                             f"fields of a family with a fixed local size")

    def _combos(self) -> list[dict[str, str]]:
        keys = [k for k, _ in self.params]
        combos = (dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.params)))
        return [c for c in combos if self.where is None or self.where(**c)]

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.template.format(**c) for c in self._combos())

    def siblings(self, variant: str) -> tuple[str, ...]:
        """The variants that differ from `variant` only in `shape_params`: what another shape of
        the same operator may dispatch (the ONNX backend creates their pipelines ahead of time)."""
        combos = self._combos()
        mine = next((c for c in combos if self.template.format(**c) == variant), None)
        if mine is None or not self.shape_params:
            return ()
        return tuple(self.template.format(**c) for c in combos
                     if all(c[k] == mine[k] for k in mine if k not in self.shape_params) and c != mine)

    def name(self, **values: object) -> str:
        """The variant for these parameter values; ValueError for a value the family lacks."""
        allowed = dict(self.params)
        if set(values) != set(allowed):
            raise ValueError(f"shader family {self.key} takes {sorted(allowed)}, got {sorted(values)}")
        for k, v in values.items():
            if str(v) not in allowed[k]:
                raise ValueError(f"shader family {self.key}: {k}={v!r} is not one of {allowed[k]}")
        combo = {k: str(v) for k, v in values.items()}
        if self.where is not None and not self.where(**combo):
            raise ValueError(f"shader family {self.key}: {combo} is not one of its variants")
        return self.template.format(**combo)

    def builds(self) -> dict[str, dict[str, str]]:
        """variant -> its compile inputs: its #defines, the KDML_PUSH_BLOCK define (the GLSL
        block) and, where the family has one, its target environment (TARGET_KEY)."""
        out, block = {}, self.push.glsl()
        for combo in self._combos():
            defs = self.defines(**combo) if callable(self.defines) else self.defines
            entry = {str(k): str(v) for k, v in dict(defs).items()}
            if PUSH_BLOCK_DEFINE in entry or TARGET_KEY in entry:
                raise ValueError(f"shader family {self.key}: {PUSH_BLOCK_DEFINE} and {TARGET_KEY} are the build's")
            entry[PUSH_BLOCK_DEFINE] = block
            target = self.target(**combo) if callable(self.target) else self.target
            if target is not None:
                entry[TARGET_KEY] = target
            out[self.template.format(**combo)] = entry
        return out

    @property
    def words(self) -> int:
        return self.push.words

    def layout(self) -> list[tuple[str, int, int]]:
        return self.push.layout()

    def offset(self, member: str) -> int:
        """The push word where `member` starts."""
        try:
            return self.push.offset(member)
        except KeyError:
            raise KeyError(f"shader family {self.key} has no push-constant member {member!r}") from None

    def pack(self, **values: object) -> tuple[int, ...]:
        """The family's push words by member name (PushBlock.pack)."""
        try:
            return self.push.pack(**values)
        except PushError as e:
            raise PushError(f"shader family {self.key}: {e}") from None

    def slots(self, **members: tuple[int, int]) -> tuple[tuple[int, int, int], ...]:
        """DispatchPlan.offset_slots by member name (PushBlock.slots)."""
        try:
            return self.push.slots(**members)
        except (KeyError, ValueError) as e:
            raise type(e)(f"shader family {self.key}: {e.args[0]}") from None


def family(key: str, source: str, template: str, push: PushBlock, local_size: tuple[int, int, int] | None, *,
           defines: Defines = (), target: str | Callable[..., str | None] | None = None,  # type: ignore[assignment]
           shape: tuple[str, ...] = (), specs: tuple[tuple[int, ...], ...] = (),
           where: Callable[..., bool] | None = None, **params: tuple[object, ...]) -> ShaderFamily:
    return ShaderFamily(key, source, template, tuple((k, tuple(str(v) for v in vs)) for k, vs in params.items()),
                        push, local_size, defines, target, shape, specs, where)


def by_variant(families: tuple[ShaderFamily, ...]) -> dict[str, ShaderFamily]:
    """variant name -> its family (ValueError where two families expand to one name)."""
    out: dict[str, ShaderFamily] = {}
    for fam in families:
        for v in fam.variants:
            if v in out:
                raise ValueError(f"variant {v} is named by shader families {out[v].key} and {fam.key}")
            out[v] = fam
    return out

