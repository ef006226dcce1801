"""The host/shader contract, declared once: per shader family, its variant names, its
push-constant block and its work-group size.

A family is one variant-name template of one shader source (`copy_b{bits}` of copy.comp);
its push block is the list of uint32 members the GLSL `layout(push_constant)` block declares,
in order, as (name, words). Two sides are checked against this table:

- the shaders, by `tools/build_spirv.py` (`make spirv`): the set of `// @variant` names of
  every source must equal the names its families expand to, and every built variant's SPIR-V
  must declare exactly this block (member names, word offsets and sizes, read from its
  OpMemberName / OpMemberDecorate Offset / OpTypeArray instructions) and this work-group size
  (OpExecutionMode LocalSize). A mismatch fails the build, and the variant leaves the
  manifest, so a run refuses it instead of reading shifted push constants;
- the host, by `kompute_dml.ops.compile_operator`: every dispatch plan must name a variant of
  one of its operator's families (OperatorSpec.shaders) and carry exactly `words` push words.

This module is loaded by path from tools/build_spirv.py, which runs with the standard
library only (setup.py's build step), so it imports nothing from kompute_dml.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass

Push = tuple[tuple[str, int], ...]  # (member name, uint32 words), in declaration order


@dataclass(frozen=True)
class ShaderFamily:
    key: str
    source: str  # shaders/<source>
    template: str  # str.format template of the variant names
    params: tuple[tuple[str, tuple[str, ...]], ...]  # the template's fields and their values
    push: Push
    local_size: tuple[int, int, int] | None  # None: set by a specialization constant

    def __post_init__(self) -> None:
        fields = {f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None}
        if fields != {k for k, _ in self.params}:
            raise ValueError(f"shader family {self.key}: template {self.template!r} fields {sorted(fields)} "
                             f"differ from its parameters {[k for k, _ in self.params]}")

    @property
    def variants(self) -> tuple[str, ...]:
        keys = [k for k, _ in self.params]
        return tuple(self.template.format(**dict(zip(keys, combo)))
                     for combo in itertools.product(*(v for _, v in self.params)))

    def name(self, **values: object) -> str:
        """The variant for these parameter values; ValueError for a value the family lacks."""
        allowed = dict(self.params)
        if set(values) != set(allowed):
            raise ValueError(f"shader family {self.key} takes {sorted(allowed)}, got {sorted(values)}")
        for k, v in values.items():
            if str(v) not in allowed[k]:
                raise ValueError(f"shader family {self.key}: {k}={v!r} is not one of {allowed[k]}")
        return self.template.format(**{k: str(v) for k, v in values.items()})

    @property
    def words(self) -> int:
        return sum(n for _, n in self.push)

    def layout(self) -> list[tuple[str, int, int]]:
        """(member, first word, words) of every push-constant member."""
        out, word = [], 0
        for member, n in self.push:
            out.append((member, word, n))
            word += n
        return out

    def offset(self, member: str) -> int:
        """The push word where `member` starts."""
        for name, word, _ in self.layout():
            if name == member:
                return word
        raise KeyError(f"shader family {self.key} has no push-constant member {member!r}")


def family(key: str, source: str, template: str, push: Push, local_size: tuple[int, int, int] | None,
           **params: tuple[object, ...]) -> ShaderFamily:
    return ShaderFamily(key, source, template, tuple((k, tuple(str(v) for v in vs)) for k, vs in params.items()),
                        push, local_size)


BITS = (8, 16, 32, 64)
_L256 = (256, 1, 1)
# ---- push-constant blocks (the GLSL members, in order) -------------------------------------
COPY_PUSH: Push = (("in_off", 1), ("out_off", 1), ("count", 1), ("rank", 1), ("size", 8), ("in_stride", 8),
                   ("out_stride", 8))
PACKED_PUSH: Push = (("in_off", 1), ("out_off", 1), ("count", 1))
PACKED_TAIL_PUSH: Push = (*PACKED_PUSH, ("first_vec", 1))
TILE_PUSH: Push = (
    ("out_off", 1), ("in_off", 1), ("ngroups", 1), ("size_a", 1), ("size_b", 1), ("in_stride_b", 1),
    ("out_stride_a", 1), ("tiles_a", 1), ("tiles_b", 1), ("magic_b", 1), ("magic_a", 1), ("shifts", 1),
    ("bsize", 2), ("bmagic1", 1), ("bin", 2), ("bout", 2), ("pad_", 1),
)
DIAG_PUSH: Push = (
    ("out_off", 1), ("in_off", 1), ("total", 1), ("chunks", 1), ("run_len", 1), ("dims", 1), ("rows_m1", 1),
    ("ub", 1), ("ue", 1), ("normal", 1), ("val_lo", 1), ("val_hi", 1), ("div_shifts", 1), ("chunks_magic", 1),
    ("size", 4), ("out_stride", 4), ("in_stride", 4), ("size_magic", 4),
)
BAND_PUSH: Push = (
    ("out_off", 1), ("total", 1), ("band", 1), ("rows", 1), ("cols", 1), ("begin", 1), ("row_stride", 1),
    ("b1_size", 1), ("b1_stride", 1), ("b0_stride", 1), ("value_lo", 1), ("value_hi", 1),
)
ROWS_PUSH: Push = (
    ("out_off", 1), ("in_off", 1), ("ngroups", 1), ("cols", 1), ("nrows", 1), ("spans", 1), ("spans_magic", 1),
    ("packed", 1), ("in_xs", 1), ("rows_m1", 1), ("ub", 1), ("ue", 1), ("normal", 1), ("val_lo", 1),
    ("val_hi", 1), ("size", 3), ("magic", 3), ("out_stride", 3), ("in_stride", 3),
)
FLAT_PUSH: Push = (
    ("out_off", 1), ("in_off", 1), ("ngroups", 1), ("total", 1), ("cover", 1), ("cols", 1), ("rows", 1),
    ("cols_magic", 1), ("rows_magic", 1), ("shifts", 1), ("rows_m1", 1), ("ub", 1), ("ue", 1), ("normal", 1),
    ("val_lo", 1), ("val_hi", 1),
)
# matmul_int.comp and matmul_coop.comp index one array (P_* macros name the words; see their headers)
MATMUL_PUSH: Push = (("w", 32),)

# ---- families --------------------------------------------------------------------------------
COPY = family("copy", "copy.comp", "copy_b{bits}", COPY_PUSH, _L256, bits=BITS)
COPY_PACKED = family("copy_packed", "copy_packed.comp", "copy_packed", PACKED_PUSH, _L256)
COPY_PACKED_TAIL = family("copy_packed_tail", "copy_packed.comp", "copy_packed_tail", PACKED_TAIL_PUSH, (1, 1, 1))
COPY_VEC = family("copy_vec", "copy_vec.comp", "copy_vec", PACKED_PUSH, _L256)
COPY_TILE = family("copy_tile", "copy_tile.comp", "copy_tile_b{bits}", TILE_PUSH, _L256, bits=BITS)
ROWS_COPY = family("rows_copy", "mem_rows.comp", "rows_copy_b{bits}", ROWS_PUSH, _L256, bits=BITS)
DIAG = family("diag", "diagonal.comp", "diag_b{bits}", DIAG_PUSH, _L256, bits=BITS)
DIAG_IN = family("diag_in", "diagonal.comp", "diag_in_b{bits}", DIAG_PUSH, _L256, bits=BITS)
DIAG_BAND = family("diag_band", "diag_band.comp", "diag_band_b{bits}", BAND_PUSH, (64, 1, 1), bits=BITS)
ROWS_DIAG = family("rows_diag", "mem_rows.comp", "rows_diag_b{bits}", ROWS_PUSH, _L256, bits=BITS)
ROWS_DIAG_IN = family("rows_diag_in", "mem_rows.comp", "rows_diag_in_b{bits}", ROWS_PUSH, _L256, bits=BITS)
# packed outputs as one range of 16-byte chunks (ops/gpu_flat.py): rows off the 16-byte grid
FLAT_DIAG = family("flat_diag", "mem_flat.comp", "flat_diag_b{bits}", FLAT_PUSH, _L256, bits=BITS)
FLAT_DIAG_IN = family("flat_diag_in", "mem_flat.comp", "flat_diag_in_b{bits}", FLAT_PUSH, _L256, bits=BITS)
MMI_TEXEL = family("mmi_texel", "matmul_int.comp", "mmi_cpu_t{bits}{store}{bias}", MATMUL_PUSH, (8, 1, 1),
                   bits=(8,), store=("", "s", "h"), bias=("", "_nb", "_bn"))
MMI_PACKED = family("mmi_packed", "matmul_int.comp", "mmi_cpu_p{bits}{vec}{rows}", MATMUL_PUSH, (8, 1, 1),
                    bits=(8, 16, 32), vec=("", "v"), rows=("", "_r1"))
MMI_GENERIC = family("mmi_generic", "matmul_int.comp", "mmi_cpu_g{bits}", MATMUL_PUSH, (8, 1, 1), bits=(8, 16, 32))
MMI_GPU = family("mmi_gpu", "matmul_int.comp", "mmi_gpu_{bits}", MATMUL_PUSH, (16, 16, 1), bits=(8, 16, 32))
MMC = family("mmc", "matmul_coop.comp", "mmc8{emulated}_{a}{b}", MATMUL_PUSH, None,
             emulated=("", "x", "d"), a=("r", "c", "g"), b=("r", "n", "c", "g"))
# ablations of mmc8_rc (benchmarks/bench_coop.py --ablate): wrong results by design, never dispatched
MMC_ABLATION = family("mmc_ablation", "matmul_coop.comp", "mmc8a{part}_rc", MATMUL_PUSH, None,
                      part=(1, 2, 3, 4, 5, 6, 7, 8))
# exact 16/32-bit integer product on GPUs (ops/matmul_wide.py): TR x TC outputs per invocation
# ("l": the variants on 64-bit integer arithmetic, which need the shader_int64 capability)
MMW = family("mmw", "matmul_wide.comp", "mmw{bits}{ext}_r{tr}c{tc}", MATMUL_PUSH, (16, 16, 1), bits=(16, 32),
             ext=("", "l"), tr=(4, 8), tc=(4,))
# few rows of A (decoding, ops/matmul_gemv.py), B n- (r) or k-contiguous (c): integer code, or OpSDot (d)
MMG = family("mmg", "matmul_gemv.comp", "mmg8{dot}_{b}", MATMUL_PUSH, None, dot=("", "d"), b=("r", "c"))

FAMILIES: tuple[ShaderFamily, ...] = (
    COPY, COPY_PACKED, COPY_PACKED_TAIL, COPY_VEC, COPY_TILE, ROWS_COPY, DIAG, DIAG_IN, DIAG_BAND, ROWS_DIAG,
    ROWS_DIAG_IN, FLAT_DIAG, FLAT_DIAG_IN, MMI_TEXEL, MMI_PACKED, MMI_GENERIC, MMI_GPU, MMC, MMC_ABLATION, MMW, MMG,
)


def by_variant(families: tuple[ShaderFamily, ...] = FAMILIES) -> dict[str, ShaderFamily]:
    """variant name -> its family (ValueError where two families expand to one name)."""
    out: dict[str, ShaderFamily] = {}
    for fam in families:
        for v in fam.variants:
            if v in out:
                raise ValueError(f"variant {v} is named by shader families {out[v].key} and {fam.key}")
            out[v] = fam
    return out


# ---- SPIR-V reflection (SPIR-V specification, sections 2.3 and 3) -----------------------------
_OP_MEMBER_NAME, _OP_EXECUTION_MODE, _OP_TYPE_INT, _OP_TYPE_ARRAY = 6, 16, 21, 28
_OP_TYPE_STRUCT, _OP_TYPE_POINTER, _OP_CONSTANT, _OP_VARIABLE = 30, 32, 43, 59
_OP_DECORATE, _OP_MEMBER_DECORATE = 71, 72
_DEC_ARRAY_STRIDE, _DEC_OFFSET = 6, 35
_STORAGE_PUSH_CONSTANT = 9
_MODE_LOCAL_SIZE = 17


@dataclass(frozen=True)
class Reflection:
    push: tuple[tuple[str, int, int], ...]  # (member name, byte offset, uint32 words)
    problems: tuple[str, ...]  # members that are not 32-bit integers or arrays of them
    local_size: tuple[int, int, int] | None


def reflect(data: bytes) -> Reflection:
    """The push-constant block and work-group size a SPIR-V module declares."""
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
        elif op in (_OP_TYPE_INT, _OP_TYPE_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER):
            types[args[0]] = (op, args[1:])
        elif op == _OP_CONSTANT and len(args) == 3:
            constants[args[1]] = args[2]
        elif op == _OP_VARIABLE and args[2] == _STORAGE_PUSH_CONSTANT:
            push_pointers.append(args[0])
        elif op == _OP_EXECUTION_MODE and args[1] == _MODE_LOCAL_SIZE:
            local_size = (args[2], args[3], args[4])
        i += count
    members: list[tuple[str, int, int]] = []
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
            if op != _OP_TYPE_INT or args[0] != 32:
                problems.append(f"{name}: not a 32-bit integer (floats travel as uint bits)")
            members.append((name, offsets.get((struct_id, m), -1), n))
    return Reflection(tuple(members), tuple(problems), local_size)


def check_variant(fam: ShaderFamily, name: str, data: bytes) -> list[str]:
    """How variant `name`'s SPIR-V differs from its family's declaration (empty: it agrees)."""
    try:
        r = reflect(data)
    except ValueError as e:
        return [f"{name}: {e}"]
    errors = [f"{name} ({fam.source}): push-constant member {p}" for p in r.problems]
    got = [(member, off // 4 if off % 4 == 0 else off / 4, n) for member, off, n in r.push]
    if got != fam.layout():
        errors.append(
            f"{name} ({fam.source}): the push-constant block is {_text(got)}; kompute_dml/ops/contract.py "
            f"declares {_text(fam.layout())} for family {fam.key}"
        )
    if fam.local_size is not None and r.local_size != fam.local_size:
        errors.append(f"{name} ({fam.source}): work-group size {r.local_size}; family {fam.key} declares "
                      f"{fam.local_size}")
    return errors


def _text(layout: list[tuple[str, float, int]] | list[tuple[str, int, int]]) -> str:
    parts = [f"{m}@{w}" + (f"[{n}]" if n != 1 else "") for m, w, n in layout]
    return "{" + ", ".join(parts) + f"}} ({sum(n for *_, n in layout)} words)"


def check_build(
    declared: dict[str, str], built: dict[str, bytes], families: tuple[ShaderFamily, ...] = FAMILIES
) -> tuple[list[str], set[str]]:
    """(errors, variants whose SPIR-V breaks the contract) for the `// @variant` names of the
    shaders (`declared`: variant -> source file name) and the modules built from them."""
    errors: list[str] = []
    try:
        family_of = by_variant(families)
    except ValueError as e:
        return [str(e)], set()
    for source in sorted(set(declared.values()) | {f.source for f in families}):
        in_glsl = {v for v, s in declared.items() if s == source}
        in_table = {v for v, f in family_of.items() if f.source == source}
        if in_glsl - in_table:
            errors.append(f"shaders/{source} declares variant(s) {', '.join(sorted(in_glsl - in_table))} that no "
                          f"family of kompute_dml/ops/contract.py names")
        if in_table - in_glsl:
            errors.append(f"kompute_dml/ops/contract.py names variant(s) {', '.join(sorted(in_table - in_glsl))} "
                          f"that no `// @variant` line of shaders/{source} declares")
    bad = set()
    for name, data in sorted(built.items()):
        fam = family_of.get(name)
        if fam is None:
            continue  # reported above
        problems = check_variant(fam, name, data)
        if problems:
            errors += problems
            bad.add(name)
    return errors, bad
