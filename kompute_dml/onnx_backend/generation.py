"""Greedy generation through a prepared decoder step model, its key/value cache on the device.

A step model maps `(input_ids, attention_mask[, position_ids], past...)` to `(logits, present...)`:
each present is its past with the step's new rows appended along axis 2 ([batch, kv heads, keys,
head size], as transformers' and optimum's exports write them); the three are found by name
wherever they stand, the pasts are the other inputs (but `fixed`'s), the presents the outputs after
the logits, in order.

Where the model takes `position_ids`, `greedy` keeps the cache at one capacity for the whole
generation (a static cache, as torch's StaticCache and onnxruntime-genai's shared past/present
buffers do): the pasts are left-padded to `capacity` rows of zeros that the attention mask hides, so
every step after the prompt feeds the same shapes and replays one plan (docs/onnx.md, "Plans"),
where a cache that grows by a row makes a new plan per step. Each step's presents are one row
longer; the next step's pasts are their views past the first row (a padding row while capacity
allows), fed as they are (`rep.run` copies a device input into its plan's input buffer). Attention
does not depend on the order of keys, only on the mask and, through position_ids, on the positions,
so the tokens are those of the growing cache. Without `position_ids` the model derives positions
from the past's length and the cache must grow: a plan per step (decoders' first generations are
several times slower). Prompts of several lengths share a batch left-padded (`prompt_mask`), as
transformers' generate pads them: the padding is masked, each row's positions count its tokens.
An encoder-decoder's step (Whisper's decoder) also reads inputs that no present follows, its
cross-attention keys and values: `fixed`, fed unchanged at every step. `stream` runs the same loop
and yields each step's tokens as they come; `eos` ends rows, and the generation once all have ended.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kompute_dml.core.errors import invalid

from .feeds import declared_shape

if TYPE_CHECKING:
    from .rep import BackendRep

# The static cache's capacity is the prompt plus the new tokens rounded up to this many rows, so
# generations of nearby lengths share the step's plan (the masked rows cost attention work only)
CAPACITY_ROWS = 64
ZERO_PASTS = 8  # the first pasts' zeros kept on the device, one per shape and type (_zeros)
_ZERO_LOCK = threading.Lock()  # generations of one model from several threads share its zeros


@dataclass(frozen=True)
class StepModel:
    """A decoder step model's inputs and outputs as `greedy` feeds and reads them."""

    pasts: tuple[str, ...]
    rows: tuple[tuple[int, int], ...]  # each past's (kv heads, head size)
    dtypes: tuple[np.dtype, ...]
    positions: bool  # takes position_ids: the cache may keep one capacity
    shared_scale: bool  # quantizes activations dynamically: a tensor's rows share one scale

    @classmethod
    def of(cls, rep: BackendRep, fixed: tuple[str, ...] = ()) -> StepModel:
        names = list(rep.feed_names)
        unknown = [n for n in fixed if n not in names]
        if unknown:
            raise invalid("fixed", f"{unknown} are not inputs of the model ({names})")
        lead = ("input_ids", "attention_mask", "position_ids")  # by name, wherever they stand
        missing = [n for n in lead[:2] if n not in names]
        if missing:
            raise invalid("model inputs", f"a decoder step takes input_ids, attention_mask (and position_ids) and "
                                          f"its pasts; {missing} missing from {names}")
        pasts = tuple(n for n in names if n not in lead and n not in fixed)
        if len(rep.output_names) != len(pasts) + 1:
            raise invalid("model outputs", f"a decoder step gives the logits and one present per past "
                                           f"({len(pasts)}); got {rep.output_names}")
        rows, dtypes = [], []
        for p in pasts:
            shape = declared_shape(rep.declared_types.get(p))
            if shape is None or len(shape) != 4 or shape[1] is None or shape[3] is None:
                raise invalid(f"input {p!r}", f"a past is [batch, kv heads, keys, head size] with the heads and "
                                              f"head size declared; got {shape}")
            rows.append((int(shape[1]), int(shape[3])))
            dtypes.append(np.dtype(rep._elem_dtype(p) or np.float32))
        dynamic = {"DynamicQuantizeLinear", "DynamicQuantizeMatMul"}
        return cls(pasts, tuple(rows), tuple(dtypes), "position_ids" in names,
                   any(n.op_type in dynamic for n in rep.graph.node))


@dataclass
class Generation:
    tokens: list[list[int]]  # per row, the new tokens
    seconds: list[float]  # per step, the first the prompt's
    capacity: int | None  # the static cache's rows (None: a growing cache)
    logits: list[np.ndarray] = field(default_factory=list)  # per step, the last position's [batch, vocab]


def _last_position(logits: Any) -> np.ndarray:
    """The last position's logits [batch, vocab] on the host: a Tensor of several positions (the
    prompt's) is sliced and packed on the device first, so only those bytes come back (a batch of
    8 x 128 positions over a vocabulary of 1,000 is 4 MB of float32; its last rows 32 KB)."""
    if not hasattr(logits, "numpy"):
        return np.asarray(logits)[:, -1]
    if logits.shape[1] == 1:
        return logits.numpy()[:, -1]
    return logits[:, -1].copy().numpy()


def left_pad(rows: Any) -> tuple[np.ndarray, np.ndarray]:
    """Prompts of several lengths (sequences of token ids) as one batch: the int64 ids left-padded
    with 0 and their `prompt_mask` (1 for a token), as `greedy(rep, ids, n, prompt_mask=mask)` takes them."""
    rows = [np.asarray(r).reshape(-1) for r in rows]
    if not rows or any(r.size == 0 or r.dtype.kind not in "iu" for r in rows):
        raise invalid("rows", "one or more non-empty sequences of integer token ids")
    width = max(r.size for r in rows)
    ids, mask = np.zeros((len(rows), width), np.int64), np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        ids[i, width - r.size:], mask[i, width - r.size:] = r, 1
    return ids, mask


def _prompt_mask(given: Any, shape: tuple[int, ...], positions: bool) -> np.ndarray:
    """The prompt's mask as int64: 1 for a token, 0 for left padding (every row zeros then ones,
    one token at least); only a model that takes position_ids can take padding."""
    if given is None:
        return np.ones(shape, np.int64)
    pm = np.asarray(given)
    if pm.shape != shape or not np.isin(pm, (0, 1)).all():
        raise invalid("prompt_mask", f"0 / 1 of the prompt's shape {shape}; got {pm.dtype} {pm.shape}")
    pm = pm.astype(np.int64)
    if (np.diff(pm, axis=1) < 0).any() or (pm[:, -1] == 0).any():
        raise invalid("prompt_mask", "each row is left-padded: zeros, then ones to the end, one at least")
    if not positions and (pm == 0).any():
        raise invalid("prompt_mask", "padding needs a model that takes position_ids (the model's own positions "
                                     "would count the padding)")
    return pm


_OPTIONS = """`prompt_mask`: prompts of several lengths in one batch, left-padded (0 for padding, 1 for a
    token; default all tokens); `static`: keep the cache at one capacity (the default where the
    model takes position_ids); `capacity`: its rows (default: prompt + new tokens rounded up to
    CAPACITY_ROWS); `fixed`: inputs fed as given at every step, no present beside them (an
    encoder-decoder's cross-attention keys and values, projected once: Tensors on the model's
    device, or host arrays, uploaded with every step's inputs); `bucket`: with a static cache the
    prompt is left-padded to a multiple of this many rows (masked), so prompts of nearby lengths
    share the prompt's plan and the step's (default CAPACITY_ROWS; 1, no padding, for a model that
    quantizes activations dynamically, whose padding rows would move the real rows' scale; a prompt
    whose padded run gives a non-finite logit, a model whose mask turns a wholly masked row into NaN,
    runs again unpadded); `eos`: a token id that ends a row (it repeats the id from then on) and,
    once every row has given it, the generation."""


def greedy(rep: BackendRep, prompt: np.ndarray, new_tokens: int, **options: Any) -> Generation:
    """`new_tokens` greedy tokens per row after `prompt` (batch x length token ids; fewer where
    every row has given `eos`), the cache on the device; only the last position's logits come
    back to the host. Options (`stream`'s too): """
    *_, (_tokens, gen) = _steps(_Setup.of(rep, prompt, new_tokens, **options))  # (at least one step)
    return gen


def stream(rep: BackendRep, prompt: np.ndarray, new_tokens: int, **options: Any) -> Iterator[np.ndarray]:
    """greedy's loop, each step's new tokens [batch] as they come (the arguments are checked
    here, before any run)."""
    setup = _Setup.of(rep, prompt, new_tokens, **options)
    return (tokens for tokens, _gen in _steps(setup))


greedy.__doc__ = (greedy.__doc__ or "") + _OPTIONS


@dataclass
class _Setup:
    """A generation's checked arguments and its first step's inputs."""

    rep: Any
    model: StepModel
    new_tokens: int
    static: bool
    capacity: int | None
    fixed: dict[str, Any]
    keep_logits: bool
    eos: int | None
    prompt: np.ndarray  # as fed: padded to its bucket
    pm: np.ndarray
    pad: int  # the first past's rows
    retry: dict[str, Any] | None  # the arguments of the same generation unpadded (a padded prompt)

    @classmethod
    def of(cls, rep: BackendRep, prompt: Any, new_tokens: int, *, prompt_mask: Any = None, static: bool | None = None,
           capacity: int | None = None, fixed: Mapping[str, Any] | None = None, bucket: int | None = None,
           eos: int | None = None, keep_logits: bool = False) -> _Setup:
        given = dict(prompt=prompt, new_tokens=new_tokens, prompt_mask=prompt_mask, static=static, capacity=capacity,
                     fixed=fixed, eos=eos, keep_logits=keep_logits)
        fixed = dict(fixed or {})
        m = StepModel.of(rep, tuple(fixed))
        prompt = np.asarray(prompt)
        if prompt.ndim != 2 or prompt.shape[1] < 1 or prompt.dtype.kind not in "iu":
            raise invalid("prompt", f"token ids [batch, length >= 1] of an integer type; got {prompt.dtype} {prompt.shape}")
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
            raise invalid("new_tokens", f"must be an integer >= 1; got {new_tokens!r}")
        if eos is not None and (isinstance(eos, bool) or not isinstance(eos, (int, np.integer))):
            raise invalid("eos", f"must be a token id (an integer) or None; got {eos!r}")
        static = m.positions if static is None else static
        if static and not m.positions:
            raise invalid("static", "a static cache needs a model that takes position_ids (its positions would "
                                    "follow the padded past's length otherwise)")
        pm = _prompt_mask(prompt_mask, prompt.shape, m.positions)
        bucket = (1 if m.shared_scale else CAPACITY_ROWS) if bucket is None else bucket
        if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1:
            raise invalid("bucket", f"must be an integer >= 1; got {bucket!r}")
        batch, length = prompt.shape
        need = length + new_tokens - 1  # the last step reads this many keys before its own
        retry = None
        if static:
            cap = capacity if capacity is not None else -(-need // CAPACITY_ROWS) * CAPACITY_ROWS
            if cap < need:
                raise invalid("capacity", f"must hold the prompt and the new tokens but the last ({need}); got {cap}")
            # the prompt's rows, its bucket's padding included (within a given capacity)
            rows = -(-length // bucket) * bucket if capacity is None else min(-(-length // bucket) * bucket, cap)
            if rows > length:
                left = np.zeros((batch, rows - length), np.int64)
                prompt, pm, length = np.concatenate([left, prompt], axis=1), np.concatenate([left, pm], axis=1), rows
                cap, retry = max(cap, -(-rows // CAPACITY_ROWS) * CAPACITY_ROWS), {**given, "bucket": 1}
            capacity = cap
        return cls(rep, m, int(new_tokens), static, capacity if static else None, fixed, keep_logits,
                   None if eos is None else int(eos), prompt, pm, capacity - length if static else 0, retry)


def _zeros(rep: BackendRep, shape: tuple[int, ...], dtype: Any) -> Any:
    """The first step's past (`shape`: its padding rows): zeros on the device, made once per shape and
    type and fed to every layer's past (the model only reads them), or an empty host array (no rows).
    Uploaded as host zeros, GPT-2 small's 8 pasts at batch 8 were 4.2 MB of every prompt's inputs."""
    if 0 in shape:
        return np.zeros(shape, dtype)
    cache, key = rep.state.zero_pasts, (shape, np.dtype(dtype).str)
    with _ZERO_LOCK:
        t = cache.get(key)
        if t is None:
            if len(cache) >= ZERO_PASTS:
                cache.pop(next(iter(cache)))
            t = cache[key] = rep.device.tensor(np.zeros(shape, dtype))
    return t


def _steps(s: _Setup) -> Iterator[tuple[np.ndarray, Generation]]:
    """The loop: each step's new tokens and the generation so far."""
    m, rep, batch = s.model, s.rep, s.prompt.shape[0]
    past: list[Any] = [_zeros(rep, (batch, h, s.pad, d), dt) for (h, d), dt in zip(m.rows, m.dtypes)]
    # the mask over the past and this step's rows; the padding is a left block of zeros per row
    ids, mask = s.prompt.astype(np.int64), np.concatenate([np.zeros((batch, s.pad), np.int64), s.pm], axis=1)
    positions, tokens = np.maximum(np.cumsum(s.pm, axis=1) - 1, 0), s.pm.sum(axis=1, keepdims=True)
    gen = Generation([[] for _ in range(batch)], [], s.capacity)
    done = np.zeros(batch, bool)
    for step in range(s.new_tokens):
        feeds = {"input_ids": ids, "attention_mask": mask}
        if m.positions:
            feeds["position_ids"] = positions
        t0 = time.perf_counter()
        with rep.state.cache_padding.suspended() if s.static else contextlib.nullcontext():
            out = rep.run({**feeds, **s.fixed, **dict(zip(m.pasts, past))}, device_outputs=True)
        last = _last_position(out[0])
        if step == 0 and s.retry is not None and not np.isfinite(last).all():
            yield from _steps(_Setup.of(rep, **s.retry))
            return
        nxt = last.argmax(-1)
        if s.eos is not None:
            nxt = np.where(done, s.eos, nxt)
            done |= nxt == s.eos
        gen.seconds.append(time.perf_counter() - t0)
        if s.keep_logits:
            gen.logits.append(last)
        for b in range(batch):
            gen.tokens[b].append(int(nxt[b]))
        yield nxt, gen
        if done.all():
            return
        presents = list(out[1:])  # the prompt's are [padding, prompt]: capacity rows already
        drop = s.static and step > 0  # later steps' are a row longer: the first (padding) goes
        past = [t[:, :, 1:] for t in presents] if drop else presents
        mask = np.concatenate([mask[:, 1:] if drop else mask, np.ones((batch, 1), np.int64)], axis=1)
        ids, positions = nxt.reshape(batch, 1).astype(np.int64), tokens + step
