"""The build's side of the contract: what a built variant's SPIR-V declares (its push-constant
block and work-group size, read from the module) against its family, and the whole build
against the family table (every family's source exists and uses the generated block, every
source belongs to a family, every variant was built and agrees). Standard library only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .core import PUSH_BLOCK_DEFINE, ShaderFamily, by_variant

# ---- SPIR-V reflection (SPIR-V specification, sections 2.3 and 3) -----------------------------
_OP_MEMBER_NAME, _OP_EXECUTION_MODE, _OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_ARRAY = 6, 16, 21, 22, 28
_OP_TYPE_STRUCT, _OP_TYPE_POINTER, _OP_CONSTANT, _OP_VARIABLE = 30, 32, 43, 59
_OP_DECORATE, _OP_MEMBER_DECORATE = 71, 72
_DEC_ARRAY_STRIDE, _DEC_BINDING, _DEC_OFFSET = 6, 33, 35
_STORAGE_PUSH_CONSTANT = 9
_MODE_LOCAL_SIZE = 17
_HAND_BLOCK_RE = re.compile(r"^\s*layout\s*\(\s*push_constant", re.M)
_USES_BLOCK_RE = re.compile(rf"^\s*{PUSH_BLOCK_DEFINE}\b", re.M)


@dataclass(frozen=True)
class Reflection:
    push: tuple[tuple[str, int, int, str], ...]  # (member name, byte offset, elements, kind: u32 / i32 / f32)
    problems: tuple[str, ...]  # members that are not 32-bit integers, float32 or arrays of them
    local_size: tuple[int, int, int] | None
    bindings: int = 0  # descriptor bindings: the largest Binding decoration + 1


def reflect(data: bytes) -> Reflection:
    """The push-constant block, work-group size and binding count a SPIR-V module declares."""
    if len(data) % 4 or len(data) < 20 or data[:4] != b"\x03\x02\x23\x07":
        raise ValueError("not a little-endian SPIR-V module")
    words = memoryview(data).cast("I")
    member_names: dict[tuple[int, int], str] = {}
    offsets: dict[tuple[int, int], int] = {}
    strides: dict[int, int] = {}
    types: dict[int, tuple[int, list[int]]] = {}
    constants: dict[int, int] = {}
    push_pointers: list[int] = []
    local_size = None
    bindings = 0
    i = 5  # after the header
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            raise ValueError(f"malformed SPIR-V: zero word count at word {i}")
        args = list(words[i + 1:i + count])
        if op == _OP_MEMBER_NAME:
            member_names[(args[0], args[1])] = bytes(words[i + 3:i + count]).split(b"\0", 1)[0].decode()
        elif op == _OP_MEMBER_DECORATE and args[2] == _DEC_OFFSET:
            offsets[(args[0], args[1])] = args[3]
        elif op == _OP_DECORATE and args[1] == _DEC_ARRAY_STRIDE:
            strides[args[0]] = args[2]
        elif op == _OP_DECORATE and args[1] == _DEC_BINDING:
            bindings = max(bindings, args[2] + 1)
        elif op in (_OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER):
            types[args[0]] = (op, args[1:])
        elif op == _OP_CONSTANT and len(args) == 3:
            constants[args[1]] = args[2]
        elif op == _OP_VARIABLE and args[2] == _STORAGE_PUSH_CONSTANT:
            push_pointers.append(args[0])
        elif op == _OP_EXECUTION_MODE and args[1] == _MODE_LOCAL_SIZE:
            local_size = (args[2], args[3], args[4])
        i += count
    members: list[tuple[str, int, int, str]] = []
    problems: list[str] = []
    for ptr in push_pointers:
        struct_id = types[ptr][1][1]
        for m, member_type in enumerate(types[struct_id][1]):
            name = member_names.get((struct_id, m), f"#{m}")
            op, args = types.get(member_type, (0, []))
            n = 1
            if op == _OP_TYPE_ARRAY:
                n = constants.get(args[1], 0)
                if strides.get(member_type) != 4:
                    problems.append(f"{name}: array stride {strides.get(member_type)} (want 4)")
                op, args = types.get(args[0], (0, []))
            if op == _OP_TYPE_INT and args[0] == 32:
                kind = "i32" if args[1] else "u32"
            elif op == _OP_TYPE_FLOAT and args[0] == 32:
                kind = "f32"
            else:
                kind = "?"
                problems.append(f"{name}: not a 32-bit integer or float")
            members.append((name, offsets.get((struct_id, m), -1), n, kind))
    return Reflection(tuple(members), tuple(problems), local_size, bindings)


def check_variant(fam: ShaderFamily, name: str, data: bytes) -> list[str]:
    """How variant `name`'s SPIR-V differs from its family's declaration (empty: it agrees)."""
    try:
        r = reflect(data)
    except ValueError as e:
        return [f"{name}: {e}"]
    errors = [f"{name} ({fam.source}): push-constant member {p}" for p in r.problems]
    got = [(member, off // 4 if off % 4 == 0 else off / 4, n, kind) for member, off, n, kind in r.push]
    want = [(m.name, w, m.words, m.kind) for m, (_, w, _) in zip(fam.push.members, fam.layout())]
    if got != want:
        errors.append(
            f"{name} ({fam.source}): the push-constant block is {_text(got)}; kompute_dml/ops/contract "
            f"declares {_text(want)} for family {fam.key}"
        )
    if fam.local_size is not None and r.local_size != fam.local_size:
        errors.append(f"{name} ({fam.source}): work-group size {r.local_size}; family {fam.key} declares "
                      f"{fam.local_size}")
    return errors


def _text(layout: list[tuple[str, float, int, str]] | list[tuple[str, int, int, str]]) -> str:
    parts = [f"{m}@{w}" + (f"[{n}]" if n != 1 else "") + ("" if k == "u32" else f":{k}") for m, w, n, k in layout]
    return "{" + ", ".join(parts) + f"}} ({sum(n for _, _, n, _ in layout)} words)"


def check_sources(sources: Mapping[str, str], families: tuple[ShaderFamily, ...]) -> list[str]:
    """The shader sources (file name -> text) against the families: each family's source exists,
    each source belongs to a family, and writes KDML_PUSH_BLOCK rather than its own block."""
    errors = []
    named = {f.source for f in families}
    for fam in families:
        if fam.source not in sources:
            errors.append(f"family {fam.key} of kompute_dml/ops/contract names shaders/{fam.source}, which does not exist")
    for source, text in sorted(sources.items()):
        if source not in named:
            errors.append(f"shaders/{source}: no family of kompute_dml/ops/contract builds it")
            continue
        if _HAND_BLOCK_RE.search(text):
            errors.append(f"shaders/{source} declares its own layout(push_constant) block; write {PUSH_BLOCK_DEFINE} "
                          f"(generated from its family's push block) instead")
        elif not _USES_BLOCK_RE.search(text):
            errors.append(f"shaders/{source} has no {PUSH_BLOCK_DEFINE} line (where the generated push block goes)")
    return errors


def check_build(
    built: Mapping[str, bytes], families: tuple[ShaderFamily, ...], skipped: frozenset[str] = frozenset()
) -> tuple[list[str], set[str]]:
    """(errors, variants whose SPIR-V breaks the contract) for the modules built from the family
    table: every variant of every family built (but `skipped`, those without a compiler here,
    which the build reports itself) and agreeing with its family."""
    try:
        family_of = by_variant(families)
    except ValueError as e:
        return [str(e)], set()
    errors: list[str] = []
    missing = sorted(set(family_of) - set(built) - set(skipped))
    if missing:
        errors.append(f"variant(s) {', '.join(missing)} of the family table were not built")
    bad = set()
    for name, data in sorted(built.items()):
        fam = family_of.get(name)
        if fam is None:
            errors.append(f"variant {name} was built but no family names it")
            bad.add(name)
            continue
        problems = check_variant(fam, name, data)
        if problems:
            errors += problems
            bad.add(name)
    return errors, bad
