"""MULTIHEAD_ATTENTION's tensors read as one problem (ops/attention.py validates the descriptor
with it): the sizes (batch, query rows, new and past key rows, heads, head sizes) and, per logical
tensor (query, key, value, past and present key / value, output, relative position bias, mask),
where element (batch, head, row, dimension) lies: `View`s, the shader's geometry constant; and the
tiled kernel's choices for it (its tile, keys split over work groups, the variants other shapes
take: OperatorSpec.ahead).

A query given as [batch, sequence, heads x head size] has the head stride head size x the hidden
stride; a stacked tensor [batch, sequence, heads, 2 or 3, head size] gives query, key and value as
views of one binding whose bases differ by the stacking stride. Every rule broken raises
InvalidArgumentError naming the field (the message starts with it).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.errors import UnsupportedError, invalid
from ..core.ints import cdiv
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, attention_policy
from .contract import attention as C
from .gemm_coop import BLOCK_SUBGROUPS, require_capabilities, subgroup_size

if TYPE_CHECKING:
    from ..device.device import Device
    from .base import CompiledOperator


@dataclass(frozen=True)
class View:
    """Element (b, h, s, d) of a binding at base + b sb + h sh + s ss + d sd (elements)."""

    base: int = 0
    sb: int = 0
    sh: int = 0
    ss: int = 0
    sd: int = 0

    def words(self) -> list[int]:
        return [self.base, self.sb, self.sh, self.ss, self.sd]


# the shader's geometry constant: these views in this order (attention.comp's G_*), then the bias
# bases and stride, then the past sequence lengths' base and batch stride
GEOMETRY = ("q", "k", "v", "pk", "pv", "o", "prk", "prv", "rb", "mask")
STACKED = {"stacked_query_key_tensor": ("q", "k"), "stacked_key_value_tensor": ("k", "v"),
           "stacked_query_key_value_tensor": ("q", "k", "v")}


@dataclass
class Problem:
    batch: int = 0
    seq: int = 0
    kv_seq: int = 0  # new key / value rows (0: the keys and values are the past alone)
    past: int = 0
    heads: int = 0
    kv_heads: int = 0
    dqk: int = 0
    dv: int = 0
    present: int = 0  # rows of the present outputs
    views: dict[str, View] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)  # q / k / v -> the descriptor field holding it
    bias: tuple[int, int, int, int] = (0, 0, 0, 0)
    psl: tuple[int, int] = (0, 0)

    def geometry(self) -> list[int]:
        words: list[int] = []
        for name in GEOMETRY:
            words += self.views.get(name, View()).words()
        return words + list(self.bias) + [0] + list(self.psl) + [0, 0, 0]


def core(t: TensorDesc, n: int, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The last n sizes and strides of t, whose leading sizes must be 1 (the page: "as long as the
    leading dimensions are 1's")."""
    k = t.dimension_count - n
    if k < 0:
        raise invalid(f"{name}.sizes", f"must have at least {n} dimensions, got {t.sizes}")
    if any(s != 1 for s in t.sizes[:k]):
        raise invalid(f"{name}.sizes", f"dimensions before the last {n} must be 1, got {t.sizes}")
    return t.sizes[k:], t.effective_strides[k:]


def expect(name: str, got: tuple[int, ...], want: tuple[int, ...], meaning: str) -> None:
    if tuple(got) != tuple(want):
        raise invalid(f"{name}.sizes", f"must be {meaning} = {list(want)}, got {list(got)}")


def _split(size: int, heads: int, name: str, what: str) -> int:
    if size % heads:
        raise invalid(f"{name}.sizes", f"the hidden size {size} must be a multiple of {what} ({heads})")
    return size // heads


def _hidden_view(t: TensorDesc, name: str, heads: int, split: bool, what: str) -> tuple[tuple[int, ...], int, View]:
    """[batch, sequence, heads x head size] (split: [batch, sequence, heads, head size]) -> its
    (batch, sequence), head size and view."""
    if split:
        if t.dimension_count != 4:
            raise invalid(f"{name}.sizes", f"must be [batch, sequence, heads, head size] with split_heads, got "
                                           f"{t.sizes}")
        (b, s, h, d), (sb, ss, sh, sd) = t.sizes, t.effective_strides
        if h != heads:
            raise invalid(f"{name}.sizes", f"dimension 2 must be {what} ({heads}), got {t.sizes}")
        return (b, s), d, View(0, sb, sh, ss, sd)
    (b, s, hidden), (sb, ss, sx) = core(t, 3, name)
    d = _split(hidden, heads, name, what)
    return (b, s), d, View(0, sb, d * sx, ss, sx)


def _stacked(t: TensorDesc, name: str, heads: int) -> tuple[tuple[int, int], int, dict[str, View]]:
    parts = STACKED[name]
    (b, s, h, n, d), (sb, ss, sh, sn, sd) = core(t, 5, name)
    expect(name, (h, n), (heads, len(parts)), "[.., heads, stacked count] (dimensions 2, 3)")
    return (b, s), d, {p: View(i * sn, sb, sh, ss, sd) for i, p in enumerate(parts)}


def resolve(desc: object, heads: int, kv_heads: int, split: bool) -> Problem:
    """The problem `desc`'s tensors describe (validated: every size agrees with the others)."""
    p = Problem(heads=heads, kv_heads=kv_heads)
    get = lambda f: getattr(desc, f, None)  # noqa: E731
    forms: dict[str, Any] = {f: get(f) for f in ("query_tensor", "key_tensor", "value_tensor", *STACKED)}
    present = [f for f, t in forms.items() if t is not None]
    if split and any(f in STACKED for f in present):
        raise invalid(next(f for f in present if f in STACKED), "stacked tensors are refused with split_heads")
    for part, names in (("q", ("query_tensor", "stacked_query_key_tensor", "stacked_query_key_value_tensor")),
                        ("k", ("key_tensor", "stacked_query_key_tensor", "stacked_key_value_tensor",
                               "stacked_query_key_value_tensor")),
                        ("v", ("value_tensor", "stacked_key_value_tensor", "stacked_query_key_value_tensor"))):
        given = [f for f in names if f in present]
        if len(given) > 1:
            raise invalid(given[1], f"excludes {given[0]} (one tensor supplies the {part}: the page's "
                                    "mutually exclusive tensors)")
        if given:
            p.source[part] = given[0]
    if "q" not in p.source:
        raise invalid("query_tensor", "is required (or stacked_query_key_tensor / stacked_query_key_value_tensor)")
    if ("k" in p.source) != ("v" in p.source):
        missing = "value_tensor" if "k" in p.source else "key_tensor"
        raise invalid(missing, "is required with " + p.source.get("k", p.source.get("v", "")))
    if "k" not in p.source and (get("past_key_tensor") is None or get("past_value_tensor") is None):
        raise invalid("key_tensor", "is required (or a stacked form) unless past_key_tensor and past_value_tensor "
                                    "hold the keys and values")
    if any(f in STACKED for f in p.source.values()) and kv_heads != heads:
        raise invalid(next(f for f in p.source.values() if f in STACKED),
                      f"stacked tensors take one head count: key_value_head_count ({kv_heads}) must equal "
                      f"query_head_count ({heads})")
    # query, key, value
    qf = p.source["q"]
    if qf in STACKED:
        (p.batch, p.seq), p.dqk, views = _stacked(forms[qf], qf, heads)
        p.views.update(views)
    else:
        (p.batch, p.seq), p.dqk, p.views["q"] = _hidden_view(forms[qf], qf, heads, split, "the head count")
    kf = p.source.get("k")
    if kf == "stacked_key_value_tensor":
        bt, d, views = _stacked(forms[kf], kf, heads)
        expect(kf, (bt[0], d), (p.batch, p.dqk), "[batch, .., head size] (dimensions 0, 4)")
        p.kv_seq = bt[1]
        p.views.update(views)
    elif kf == "key_tensor":
        (b, p.kv_seq), d, p.views["k"] = _hidden_view(forms[kf], kf, kv_heads, split, "the key / value head count")
        expect(kf, (b, d), (p.batch, p.dqk), "[batch, .., head size] as the query's")
    elif kf is not None:
        p.kv_seq = p.seq
    vf = p.source.get("v")
    if vf == "value_tensor":
        (b, t), p.dv, p.views["v"] = _hidden_view(forms[vf], vf, kv_heads, split, "the key / value head count")
        expect(vf, (b, t), (p.batch, p.kv_seq), "[batch, key sequence] as the key's")
    else:
        p.dv = p.dqk
    _past_present(desc, p)
    _bias_mask(desc, p)
    of = "output_tensor"
    (b, s), dv, p.views["o"] = _hidden_view(desc.output_tensor, of, heads, split, "the head count")  # type: ignore[attr-defined]
    expect(of, (b, s, dv), (p.batch, p.seq, p.dv), "[batch, sequence, value head size] from the inputs")
    return p


def _past_present(desc: object, p: Problem) -> None:
    pk: Any = getattr(desc, "past_key_tensor", None)
    pv: Any = getattr(desc, "past_value_tensor", None)
    if (pk is None) != (pv is None):
        raise invalid("past_value_tensor" if pv is None else "past_key_tensor", "is required with the other past tensor")
    if pk is not None:
        for name, t, d in (("past_key_tensor", pk, p.dqk), ("past_value_tensor", pv, p.dv)):
            sizes, (sb, sh, ss, sd) = core(t, 4, name)
            if name == "past_key_tensor":
                p.past = sizes[2]
            expect(name, sizes, (p.batch, p.kv_heads, p.past, d), "[batch, key / value heads, past sequence, head size]")
            p.views["p" + name[5]] = View(0, sb, sh, ss, sd)
    psl = getattr(desc, "past_sequence_lengths_tensor", None)
    if psl is not None:
        if pk is None:
            raise invalid("past_sequence_lengths_tensor", "needs past_key_tensor and past_value_tensor")
        (b,), (sb,) = core(psl, 1, "past_sequence_lengths_tensor")
        expect("past_sequence_lengths_tensor", (b,), (p.batch,), "[batch]")
        p.psl = (0, sb)
    p.present = p.past + p.kv_seq
    presents = [(n, getattr(desc, n)) for n in ("output_present_key_tensor", "output_present_value_tensor")]
    if psl is not None:  # MULTIHEAD_ATTENTION1's per-batch lengths: the present outputs may have any rows
        p.present = next((core(t, 4, n)[0][2] for n, t in presents if t is not None), p.present)
    rows = "the present outputs' rows" if psl is not None else "past + key sequence"
    for (name, t), d, key in zip(presents, (p.dqk, p.dv), ("prk", "prv")):
        if t is not None:
            sizes, (sb, sh, ss, sd) = core(t, 4, name)
            expect(name, sizes, (p.batch, p.kv_heads, p.present, d), f"[batch, key / value heads, {rows}, head size]")
            p.views[key] = View(0, sb, sh, ss, sd)


def _bias_mask(desc: object, p: Problem) -> None:
    bias = getattr(desc, "bias_tensor", None)
    if bias is not None:
        (n,), (sx,) = core(bias, 1, "bias_tensor")
        q, k = p.heads * p.dqk, p.kv_heads * p.dqk
        expect("bias_tensor", (n,), (q + k + p.kv_heads * p.dv,), "[hidden + key hidden + value hidden]")
        p.bias = (0, q * sx, (q + k) * sx, sx)
    total = p.past + p.kv_seq
    rb = getattr(desc, "relative_position_bias_tensor", None)
    if rb is not None:
        sizes, (sb, sh, ss, sd) = core(rb, 4, "relative_position_bias_tensor")
        expect("relative_position_bias_tensor", sizes, (p.batch, p.heads, p.seq, total),
               "[batch, heads, sequence, past + key sequence]")
        p.views["rb"] = View(0, sb, sh, ss, sd)
    mask, kind = getattr(desc, "mask_tensor", None), int(getattr(desc, "mask_type", 0))
    if mask is None:
        return
    name = "mask_tensor"
    if kind == 4:  # BOOLEAN
        sizes, (sb, sh, ss, sd) = core(mask, 4, name)
        expect(name, sizes, (p.batch, p.heads, p.seq, total), "[batch, heads, sequence, past + key sequence]")
        p.views["mask"] = View(0, sb, sh, ss, sd)
    elif kind in (1, 2):  # KEY_SEQUENCE_LENGTH [1, batch], KEY_SEQUENCE_END_START [2, batch]
        sizes, (sr, sb) = core(mask, 2, name)
        expect(name, sizes, (kind, p.batch), f"[{kind}, batch]")
        p.views["mask"] = View(0, sb, 0, sr, 0)
    else:  # KEY_QUERY_SEQUENCE_LENGTH_START_END [3 batch + 2]: the key lengths first
        (n,), (sx,) = core(mask, 1, name)
        expect(name, (n,), (3 * p.batch + 2,), "[3 batch + 2]")
        p.views["mask"] = View(0, sx, 0, 0, 0)


# The rows kernel's invocation walks every key with its dot product and value loops, about dqk + min(dv, 64)
# + 8 iterations a key (llvmpipe's limit reached there at head sizes 8 to 128: runtime/llvmpipe.py), so past
# ROWS_MAX_ITERATIONS of them the problem takes the tiled kernel instead.
ROWS_MAX_ITERATIONS = 50_000


def rows_fit(p: Problem) -> bool:
    """Whether the rows kernel's invocations stay within ROWS_MAX_ITERATIONS loop iterations."""
    return (p.past + p.kv_seq) * (p.dqk + min(p.dv, 64) + 8) <= ROWS_MAX_ITERATIONS


def tile_for(p: Problem) -> str | None:
    """The tiled kernel's variant: the smallest bound on both head sizes, of blocks of 4 rows where
    the query has at most MHA_FEW_ROWS (None: past the largest bound, the rows kernel)."""
    width = max(p.dqk, p.dv)
    few = p.seq <= C.MHA_FEW_ROWS
    return next((name for name, (bq, _bk, dmax) in C.MHA_TILES.items()
                 if width <= dmax and (bq == C.MHA_FEW_ROWS) == few), None) or \
        next((name for name, (_bq, _bk, dmax) in C.MHA_TILES.items() if width <= dmax), None)


# Keys split over work groups (GPUs): where the tiled kernel's grid has fewer work groups than
# SPLIT_TARGET_GROUPS and the keys are at least SPLIT_MIN_KEYS, the keys are cut into chunks of at
# least SPLIT_CHUNK_KEYS (at most SPLIT_MAX chunks, until the grid has SPLIT_FILL_GROUPS), each
# chunk's partials combined by a second dispatch. KDML_ATTENTION_SPLIT forces a count (1: none;
# tests). H100, `python -m benchmarks.bench_attention --rows decode` with the count forced to 1 .. 32
# (us; the rule before, chunks of 256 keys up to 128 groups, -> this one): 1 x 12 heads, 2048 keys,
# d64 FLOAT32 76 -> 33 (32 chunks); 1 x 32 GQA heads, 1024 keys, d128 FLOAT16 182 -> 124 (16); 8 x 12
# heads, 513 keys, d64 FLOAT16 98 -> 53 (8). Grids of 256 or more work groups stay whole: 8 x 32 GQA
# heads over 1024 keys, d128, took 655 us whole and 1000-1100 in 2 to 32 chunks (32 x 12 heads over
# 2048 keys, d64: 1131 whole, 876-899 in 4 to 32).
SPLIT_TARGET_GROUPS, SPLIT_FILL_GROUPS, SPLIT_MIN_KEYS, SPLIT_CHUNK_KEYS, SPLIT_MAX = 128, 1024, 512, 64, 32
SPLIT_ENV = "KDML_ATTENTION_SPLIT"


def key_splits(device: Device, groups: int, keys: int) -> int:
    """How many chunks of keys the tiled kernel's work groups take (1: all keys in one)."""
    forced = os.environ.get(SPLIT_ENV, "")
    if forced:
        if not forced.isdigit() or int(forced) < 1:
            raise UnsupportedError(f"{SPLIT_ENV}={forced!r}: a count of chunks >= 1")
        return max(1, min(int(forced), keys))
    if device.policy.name == "cpu" or groups >= SPLIT_TARGET_GROUPS or keys < SPLIT_MIN_KEYS:
        return 1
    return max(1, min(SPLIT_MAX, cdiv(SPLIT_FILL_GROUPS, groups), keys // SPLIT_CHUNK_KEYS))


def plans_ahead(device: Device, op: CompiledOperator, done: set[Any]) -> list[DispatchPlan]:
    """OperatorSpec.ahead: the tiled kernel's other variants of the same head sizes (a decoding step's
    blocks of 4 rows, the split chunks and their combine) whose pipelines another sequence or key
    length may take (after the blocked kernel too: fewer rows take them), and after the blocked
    kernel its other rows per work group (another batch or length changes the grid); once per type
    and head-size bound (`done`)."""
    plans = [p for p in op.plans if isinstance(p, DispatchPlan) and p.variant.startswith("mha_")]
    first = plans[0] if plans else None
    if first is None or first.variant.endswith("_rows"):
        return []
    t, tile = first.variant.split("_")[1:3]
    wide = C.MHA_TILES[tile][2] if tile in C.MHA_TILES else C.MHA_BLOCK_D  # (the blocked kernel: its bound's tiles)
    key = ("mha-ahead", t, wide)
    if key in done:
        return []
    done.add(key)
    tiles = [name for name, (_bq, _bk, dmax) in C.MHA_TILES.items() if dmax == wide]
    bindings = (*first.bindings[:13], None)
    out = [dataclasses.replace(first, variant=v, bindings=bindings)
           for v in (*(C.MHA_SPLIT.name(t=t, tile=x) for x in tiles), C.MHA_COMBINE.name(t=t))]
    if tile.startswith("blocked"):  # the blocked kernel's other rows per work group (blocked_for: by the grid)
        out += [dataclasses.replace(first, variant=C.MHA_BLOCKED[bq].name(t=t)) for bq in blocked_rows(device)
                if C.MHA_BLOCKED[bq].name(t=t) != first.variant]
    return out + [dataclasses.replace(first, variant=C.MHA_TILED.name(t=t, tile=x), bindings=first.bindings[:13])
                  for x in tiles if x != tile]


COOP_ROWS = 16 * C.MHA_COOP_SUBGROUPS  # the tensor-core kernel's query rows per work group
_COOP_WIDTH = max(dmax for _bk, dmax, _os in C.MHA_COOP_TILES.values())


def coop_takes(kernel: str, halves: bool, width: int, seq: int, bias: bool) -> bool:
    """Whether the tensor-core kernel takes a problem: the policy's kernel "coopmat" / "coopmat-emulated",
    in float16 (`halves`: FLOAT16, or FLOAT32 under allow_half_precision), no bias (the sums of bias
    would not be float16), head sizes (`width`, the larger) up to its tiles' bound, more query rows
    than a decoding step's (those take the tiled kernel's blocks of 4 rows and key splits).
    onnx_backend/fusion_attention.py asks it too (the fusion's size limit)."""
    return kernel in ("coopmat", "coopmat-emulated") and halves and not bias and width <= _COOP_WIDTH and \
        seq > C.MHA_FEW_ROWS


def blocked_takes(kernel: str, width: int, seq: int, min_rows: int) -> bool:
    """Whether the blocked kernel takes a problem the tensor-core kernel does not: the policy's kernel
    "blocked" or a "coopmat" one, head sizes (`width`, the larger) up to its bound, at least `min_rows`
    query rows (DevicePolicy.attention_blocked_min_rows). onnx_backend/fusion_attention.py asks it too
    (the fusion's size limit)."""
    return kernel in ("blocked", "coopmat", "coopmat-emulated") and seq >= min_rows and width <= C.MHA_BLOCK_D


def blocked_rows(device: Device) -> list[int]:
    """The blocked kernel's query rows per work group (C.MHA_BLOCK_ROWS, most first) whose shared
    memory and invocations the device has."""
    smem = int(device.limits.get("max_compute_shared_memory_size", 16384))
    invocations = int(device.limits.get("max_compute_work_group_invocations", 128))
    return [bq for bq in C.MHA_BLOCK_ROWS if C.mha_blocked_smem(bq) <= smem and C.MHA_BLOCKED[bq].local_size[0] <= invocations]


def blocked_for(device: Device, p: Problem, kernel: str) -> int | None:
    """The blocked kernel's query rows per work group (C.MHA_BLOCKED's key: the most whose shared
    memory and invocations the device has, fewer where the grid would be small:
    DevicePolicy.attention_blocked32_max_groups) where it takes the problem, else None."""
    if not blocked_takes(kernel, max(p.dqk, p.dv), p.seq, device.policy.attention_blocked_min_rows):
        return None
    fits = blocked_rows(device)
    if len(fits) > 1 and p.batch * p.heads * cdiv(p.seq, fits[0]) <= device.policy.attention_blocked32_max_groups:
        return fits[-1]
    return fits[0] if fits else None


def coop_choice(device: Device, desc: Any, p: Problem, kernel: str, size: int,
                half: bool = False) -> tuple[str, tuple[int, int]] | None:
    """The tensor-core kernel's variant and specialization constants (work-group and subgroup sizes)
    where it takes the problem (coop_takes): the largest key tile whose shared memory the device has;
    `half` (allow_half_precision): its variant with one float16 per weight. None: the tiled kernel."""
    width = max(p.dqk, p.dv)
    if not coop_takes(kernel, size == 2 or half, width, p.seq, desc.bias_tensor is not None):
        return None
    require_capabilities(device, kernel, "MULTIHEAD_ATTENTION")
    sg = subgroup_size(device)
    wg = C.MHA_COOP_SUBGROUPS * sg
    if sg not in BLOCK_SUBGROUPS or wg > int(device.limits.get("max_compute_work_group_invocations", 128)):
        return None
    smem = int(device.limits.get("max_compute_shared_memory_size", 16384))
    tiles = [name for name in (C.MHA_COOP_TILES if half else C.MHA_COOP_EXACT_TILES)
             if width <= C.MHA_COOP_TILES[name][1] and C.mha_coop_smem(name, half) <= smem]
    if not tiles:
        return None
    groups = p.batch * p.heads * cdiv(p.seq, COOP_ROWS)
    if half and groups < attention_policy.ATTENTION_COOP_HALF_K16_MIN_GROUPS and len(tiles) > 1 \
            and C.MHA_COOP_TILES[tiles[1]][1] == C.MHA_COOP_TILES[tiles[0]][1]:
        tiles = tiles[1:]  # key tiles of 32 for few work groups (runtime/attention_policy.py)
    emulated = "" if kernel == "coopmat" else "x"
    fam = C.MHA_COOP32 if size == 4 else C.MHA_COOP_HALF if half else C.MHA_COOP  # (FLOAT32: under the flag alone)
    return fam.name(emulated=emulated, tile=tiles[0]), (wg, sg)
