"""A growing key/value cache run as a static one: a decoder step's pasts left-padded to a bucket.

A user's own decoding loop (an onnxruntime session's, optimum's, a transformers export's) feeds each
step the previous step's presents, so the pasts grow by a row, every step is a new input signature,
and every step makes a whole-graph plan: 15-30 ms of host work per token on the H200's host, where a
replayed plan takes about 1 ms (benchmarks/RESULTS.md, `kompute_dml.bench.decoder_speed`). Where the
model takes `attention_mask` and `position_ids` (or computes its positions from the mask, as ALiBi's
cumulative sum does), rows of zeros before the pasts, masked by zeros in the mask's first columns,
change no result: attention depends on the mask and on the positions, not on where the keys stand
(generation.py's static cache rests on the same rule). So a step whose
pasts have L > 0 rows is fed pasts of P = L rounded up to ROWS rows (zeros first) and a mask P - L
columns wider: the steps of a bucket share one signature and replay one plan. The presents come
back without the padding rows: host arrays as the caller expects them, device outputs as views of
tensors whose rows before the view are the padding's zeros. Fed back as the next pasts (the same
Tensor objects), those views are widened over the zeros instead of copied into padded ones.

Which inputs are the pasts: the rank-4 feeds whose axis 2 holds L = the mask's width less the step's
positions (its token ids where it takes no positions), batch first, their rows whole multiples of 16
bytes (a DirectML binding starts on that grid: a view past the padding must too). Which outputs are the
presents, and whether the rule holds for this model at all, the first padded step finds out: it also
runs unpadded, returns the unpadded results, and keeps padding only where each output of the padded run
equals the unpadded one (the presents past their padding rows, those of another length along axis 2
only) within a tolerance of its largest magnitude (TOLERANCE by the pasts' type: the sums of the padded
attention add zeros in another order). A model that fails the check (a mask added to the scores, a fused
attention that reads key lengths from the mask, positions taken from the past's length) is never padded
again. A prompt (no past rows, S >= 2 tokens, the mask all ones) is padded the same way (_pad_prompt):
its token inputs gain S rounded up to ROWS less S masked tokens in front (id 0, position 0), so prompts
of new lengths in a bucket seen replay its plan instead of planning their own; its outputs are cut after
those rows (logits along axis 1, presents along axis 2: their views are handed out over the padding
tokens' rows, which the mask hides at every later step). Its own check (the first padded prompt) also
wants those rows finite. Not where the caller padded the prompt (a masked query row attends to nothing,
and what it then gets depends on the keys there are) nor where activations are quantized dynamically
(the padding tokens' values would join a tensor's scale). `rep.state.cache_padding.enabled = False`, or
KDML_CACHE_PADDING=0 in the environment, turns both off. """

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import kompute_dml as kdml

from .cache_views import agrees, dtype_of, forget, key_rows, rank4, rows_from, shape_of
from .values import DeviceValue

if TYPE_CHECKING:
    from .rep import BackendRep

ROWS = 64  # generation.CAPACITY_ROWS: a bucket's rows; the padding costs attention work only
MASKS = ("attention_mask", "decoder_attention_mask")
POSITIONS = ("position_ids", "decoder_position_ids")
# a padded output's largest difference from the unpadded one, relative to the unpadded output's
# largest magnitude: float32 pasts' sums in another order; float16's round each partial result
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 1e-2}


IDS = ("input_ids", "decoder_input_ids")


def _mask_and_positions(feeds: dict[str, Any]) -> tuple[str | None, str | None]:
    """The names of the step's attention mask and position ids among its feeds (None: absent)."""
    return next((n for n in MASKS if n in feeds), None), next((n for n in POSITIONS if n in feeds), None)


def _step_tokens(feeds: dict[str, Any]) -> str | None:
    """The feed whose last axis counts the step's tokens, where the step has an attention mask and pasts to
    pad: its position ids, else (positions computed in the model, which the check then judges) its token ids."""
    mask, pos = _mask_and_positions(feeds)
    if mask is None or pos is not None:
        return pos
    ids = next((n for n in IDS if n in feeds), None)
    return ids if ids is not None and any(rank4(v) for v in feeds.values()) else None


def _enabled_by_env() -> bool:
    return os.environ.get("KDML_CACHE_PADDING", "1") != "0"


@dataclass(eq=False)
class Padded:
    """One step's padded feeds and where its results go back to their own shapes."""

    feeds: dict[str, Any]
    pad: int  # P - L: the rows of zeros before each past (a prompt: its padding tokens)
    dtype: np.dtype  # the pasts' element type (the check's tolerance)
    names: tuple[str, ...]  # the inputs padded
    prompt: bool = False  # a prompt's tokens padded (_pad_prompt), not a cache's rows


@dataclass(eq=False)
class CachePadding:
    """Per prepared model (rep.state.cache_padding): whether its steps are padded, and the views
    it handed out whose base holds zero rows before them (id -> (weak reference, rows))."""

    enabled: bool = field(default_factory=_enabled_by_env)
    verified: bool = False  # the first padded step agreed with the unpadded one
    presents: tuple[int, ...] = ()  # the outputs that are presents (found by the check)
    pasts: tuple[str, ...] = ()  # the inputs the check padded: the only ones padded after it
    checks: int = 0  # padded steps checked against unpadded ones (one per model, unless refused)
    padded_runs: int = 0
    widened_pasts: int = 0  # device pasts fed as views over the zeros before them
    copied_pasts: int = 0  # device pasts copied after zeros (not handed out by a padded step)
    refusal: str = ""  # why padding was turned off for this model's caches
    # a prompt (no past rows) of S tokens fed as ROWS-rounded, its padding tokens first (_pad_prompt)
    prompt_verified: bool = False
    prompt_cuts: dict[int, int] = field(default_factory=dict)  # output -> the axis its padding is cut from
    prompt_names: tuple[str, ...] = ()
    prompt_runs: int = 0
    prompt_refusal: str = ""
    busy: bool = False  # inside a padded run: its own run is not padded again
    _views: dict[int, tuple[Any, int]] = field(default_factory=dict)
    _padded: dict[str, list[Any]] = field(default_factory=dict)  # input -> [its padded tensor, rows of zeros first]
    _host_padded: dict[str, list[Any]] = field(default_factory=dict)  # the same for host pasts
    _held_out: dict[int, np.ndarray] = field(default_factory=dict)  # output -> the padded run's array for it
    _held: threading.local = field(default_factory=threading.local)

    def release(self) -> None:
        """Drop the padded pasts and outputs kept from step to step (BackendRep.release); what the checks
        found stays."""
        self._padded.clear()
        self._host_padded.clear()
        self._held_out.clear()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """This thread's runs fed as given meanwhile (generation.py's static cache pads its own pasts)."""
        self._held.depth = getattr(self._held, "depth", 0) + 1
        try:
            yield
        finally:
            self._held.depth -= 1

    # ---- deciding ---------------------------------------------------------------------------
    def layout(self, feeds: dict[str, Any]) -> tuple[str, np.ndarray, int, list[str]] | None:
        """(mask name, its host array, past rows L, past names) where this step can be padded, else None."""
        mask, pos = _mask_and_positions(feeds)[0], _step_tokens(feeds)
        if mask is None or pos is None:
            return None
        m, p = feeds[mask], feeds[pos]
        if len(shape_of(m)) != 2 or len(shape_of(p)) < 1:
            return None
        rows = shape_of(m)[1] - shape_of(p)[-1]
        pasts = [n for n, v in feeds.items() if n not in (mask, pos) and rank4(v)
                 and shape_of(v)[2] == rows and shape_of(v)[0] == shape_of(m)[0]]
        if self.verified:  # the pasts the check padded, those alone (a fixed input of L rows by chance is not one)
            if not set(self.pasts) <= set(pasts):
                return None
            pasts = list(self.pasts)
        if rows <= 0 or not pasts or -(-rows // ROWS) * ROWS == rows:
            return None
        dtypes = {np.dtype(dtype_of(feeds[n])) for n in pasts}
        if len(dtypes) != 1 or next(iter(dtypes)) not in TOLERANCE:
            return None
        if any(shape_of(feeds[n])[3] * next(iter(dtypes)).itemsize % 16 for n in pasts):
            return None  # a row not a multiple of 16 bytes: views past the padding would start off a binding's grid
        if isinstance(m, DeviceValue) and m.dtype != np.bool_:
            # (the device-memory execution provider's inputs are all on the device: its mask read back, a row a step)
            m = m.tensor.numpy().reshape(m.shape)
        if not isinstance(m, np.ndarray) or (m.dtype.kind == "f" and not np.isin(m, (0, 1)).all()):
            return None  # (an additive float mask: its zeros would keep the padding)
        return mask, m, rows, pasts

    def run(self, rep: BackendRep, feeds: dict[str, Any], device_outputs: bool, out: Any) -> Any:
        """The step's results through a padded run, or None where it runs as given."""
        if not self.enabled or self.busy or getattr(self._held, "depth", 0) or _step_tokens(feeds) is None:
            return None  # (every run of every model comes here: most take no position ids nor pasts)
        found = self.layout(feeds) if not self.refusal else None
        if found is not None:
            padded: Padded | None = self._pad(rep, feeds, *found)
            verified, cuts = self.verified, dict.fromkeys(self.presents, 2)
        else:
            # (not where activations are quantized dynamically: the padding tokens' values would join a scale)
            padded = self._pad_prompt(feeds) if not self.prompt_refusal and not rep.dynamic_quantized else None
            verified, cuts = self.prompt_verified, self.prompt_cuts
        if padded is None:
            return None
        self.busy = True
        try:
            if not verified:
                return self._check(rep, feeds, padded, device_outputs, out)
            results = list(rep._run(padded.feeds, device_outputs=device_outputs, out=self._out(out, cuts),
                                    normalized=True))
        finally:
            self.busy = False
        if padded.prompt:
            self.prompt_runs += 1
        else:
            self.padded_runs += 1
        return rep._outputs_type(*self._unpad(results, padded.pad, cuts, out))

    # ---- feeds ------------------------------------------------------------------------------
    def _pad(self, rep: BackendRep, feeds: dict[str, Any], mask: str, m: np.ndarray, rows: int, pasts: list[str]) -> Padded:
        total = -(-rows // ROWS) * ROWS
        pad = total - rows
        new = dict(feeds)
        new[mask] = np.concatenate([np.zeros((m.shape[0], pad), m.dtype), m], axis=1)
        copies = []
        for name in pasts:
            v = feeds[name]
            if isinstance(v, DeviceValue):
                widened = self._widened(v.tensor, pad)
                if widened is None:
                    copies.append(name)
                else:
                    self.widened_pasts += 1
                    new[name] = DeviceValue(widened, widened.shape, v.dtype)
            else:
                new[name] = self._host_after_zeros(name, np.asarray(v), pad)
        self.copied_pasts += len(copies)
        if copies:  # device pasts not handed out by a padded step (an execution provider's): copied after zeros
            with rep.device.capture() as rec:  # one submission of transfers, nothing compiled for the new length
                for name in copies:
                    new[name] = DeviceValue(self._after_zeros(rep, rec, name, feeds[name].tensor, pad),
                                            (*feeds[name].shape[:2], total, *feeds[name].shape[3:]), feeds[name].dtype)
            rec.submit(wait=False)
        return Padded(new, pad, np.dtype(dtype_of(feeds[pasts[0]])), tuple(pasts))

    def _pad_prompt(self, feeds: dict[str, Any]) -> Padded | None:
        """A prompt (S >= 2 tokens, no past rows, its mask all ones) as S rounded up to ROWS tokens, the
        padding first: every [batch, S(, ...)] input (ids, positions, mask) gains zeros in front (a masked
        token 0 at position 0), so prompts of a bucket share one plan, as generation.greedy's do; None
        where it runs as given."""
        mask, pos = _mask_and_positions(feeds)
        if mask is None or pos is None or len(shape_of(feeds[mask])) != 2:
            return None
        batch, steps = shape_of(feeds[mask])
        pasts = [v for v in feeds.values() if rank4(v)]
        total = -(-steps // ROWS) * ROWS
        if steps < 2 or total == steps or shape_of(feeds[pos])[-1] != steps or any(shape_of(v)[2] for v in pasts):
            return None
        names = tuple(n for n, v in feeds.items() if len(shape_of(v)) in (2, 3) and shape_of(v)[:2] == (batch, steps))
        if self.prompt_verified and set(names) != set(self.prompt_names):
            return None
        new = dict(feeds)
        for n in names:
            v = feeds[n]
            arr = v.tensor.numpy().reshape(v.shape) if isinstance(v, DeviceValue) else np.asarray(v)
            if arr.dtype == np.bool_ or (n == mask and not (arr == 1).all()):
                # a row padded by the caller attends to nothing, and what it gets then depends on the keys
                # there are (its outputs would differ); a float mask other than ones may be additive
                return None
            new[n] = np.concatenate([np.zeros((batch, total - steps, *arr.shape[2:]), arr.dtype), arr], axis=1)
        dtype = np.dtype(dtype_of(pasts[0])) if pasts else np.dtype(np.float32)
        return Padded(new, total - steps, dtype if dtype in TOLERANCE else np.dtype(np.float32), names, prompt=True)

    def _after_zeros(self, rep: BackendRep, rec: Any, name: str, t: kdml.Tensor, pad: int) -> kdml.Tensor:
        """Past `t` copied into rows pad.. of its input's padded tensor, kept per input from step to step
        (zeroed when made; the rows before `pad` it wrote at an earlier step zeroed again)."""
        shape = (*t.shape[:2], t.shape[2] + pad, *t.shape[3:])
        held = self._padded.get(name)
        if held is None or held[0].shape != shape or held[0].desc.data_type != t.desc.data_type:
            desc = kdml.TensorDesc(t.desc.data_type, shape)
            held = self._padded[name] = [kdml.Tensor(kdml.Buffer(rep.device, desc.byte_size), desc), shape[2]]
        z, zeros = held
        if pad > zeros:  # rows an earlier step wrote, now padding
            rec.zero_blocks(key_rows(z, zeros, pad))
        rec.copy_blocks(t, rows_from(z, pad))
        held[1] = pad
        return z

    def _host_after_zeros(self, name: str, arr: np.ndarray, pad: int) -> np.ndarray:
        """Host past `arr` copied into rows pad.. of its input's padded array, kept per input from step to
        step as _after_zeros keeps the device's (a new array a step would cost its pages' first touch)."""
        shape = (*arr.shape[:2], arr.shape[2] + pad, *arr.shape[3:])
        held = self._host_padded.get(name)
        if held is None or held[0].shape != shape or held[0].dtype != arr.dtype:
            held = self._host_padded[name] = [np.zeros(shape, arr.dtype), shape[2]]
        z, zeros = held
        if pad > zeros:
            z[:, :, zeros:pad] = 0
        z[:, :, pad:] = arr
        held[1] = pad
        return z

    def _widened(self, t: kdml.Tensor, pad: int) -> kdml.Tensor | None:
        """`t` as a view `pad` rows earlier over the rows before it (the padding's zeros, or a padded
        prompt's tokens: rows the mask hides), where this model handed it out with at least that many;
        else None."""
        entry = self._views.get(id(t))
        if entry is None or entry[0]() is not t or entry[1] < pad:
            return None
        return rows_from(t, -pad)

    # ---- results ----------------------------------------------------------------------------
    def _out(self, out: Any, cuts: dict[int, int]) -> Any:
        """The caller's output arrays (an execution provider's), those of the outputs the padding grew
        held back: the padded run writes those into arrays of its own, copied without the padding (_unpad)."""
        if out is None:
            return None
        return lambda k, shape, dtype: self._out_array(k, shape, dtype) if k in cuts else out(k, shape, dtype)

    def _out_array(self, k: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """The padded run's array for output k, kept from step to step (its pages touched once)."""
        arr = self._held_out.get(k)
        if arr is None or arr.shape != tuple(shape) or arr.dtype != dtype:
            arr = self._held_out[k] = np.empty(shape, dtype)
        return arr

    def _unpad(self, results: list[Any], pad: int, cuts: dict[int, int], out: Any) -> list[Any]:
        """Each grown output less its first `pad` rows along its axis: presents (axis 2) on the device as
        views over those rows (registered: the next step widens them), others sliced (views.py: a view or
        a copy), host arrays copied."""
        for k, axis in cuts.items():
            r = results[k]
            if isinstance(r, kdml.Tensor):
                if axis == 2:
                    view = rows_from(r, pad)
                    self._views[id(view)] = (weakref.ref(view, forget(self._views, id(view))), pad)
                else:
                    view = r[:, pad:]
                results[k] = view
                continue
            part = r[:, :, pad:] if axis == 2 else r[:, pad:]
            if out is not None:
                results[k] = out(k, part.shape, r.dtype)
                np.copyto(results[k], part)
            else:
                results[k] = np.ascontiguousarray(part)
        return results

    def _check(self, rep: BackendRep, feeds: dict[str, Any], padded: Padded, device_outputs: bool, out: Any) -> Any:
        """The first padded step of its kind: run unpadded (its results are returned) and padded; keep
        padding where every output agrees, an output the padding grew (by `pad` rows along axis 2, or
        along axis 1 for a prompt's) past its padding, whose cut rows are finite (a prompt's padding
        tokens' keys and values stay in the cache, hidden by the mask)."""
        results = rep._run(feeds, device_outputs=device_outputs, out=out, normalized=True)
        try:
            trial = list(rep._run(padded.feeds, normalized=True))
        except Exception as e:  # a model that cannot take the padded shapes: fed as it is
            trial, why = [], f"the padded step failed: {type(e).__name__}: {e}"
        else:
            why = ""
        cuts: dict[int, int] = {}
        for k, (r, p) in enumerate(zip(results, trial)):
            r = np.asarray(r.numpy() if isinstance(r, kdml.Tensor) else r)
            p = np.asarray(p)
            axis = next((a for a in ((1, 2) if padded.prompt else (2,)) if r.ndim > a and p.shape ==
                         (*r.shape[:a], r.shape[a] + padded.pad, *r.shape[a + 1:])), None)
            if r.shape != p.shape and axis is None:
                why = f"output {rep.output_names[k]!r}: {p.shape} padded, {r.shape} as given"
                break
            if axis is not None:
                cuts[k] = axis
                cut, p = (p[:, :, :padded.pad], p[:, :, padded.pad:]) if axis == 2 else (p[:, :padded.pad], p[:, padded.pad:])
                if p.dtype.kind == "f" and not np.isfinite(cut).all():
                    why = f"output {rep.output_names[k]!r}: its padding rows are not finite"
                    break
            if not agrees(r, p, TOLERANCE[padded.dtype]):
                why = f"output {rep.output_names[k]!r} differs padded"
                break
        presents = tuple(k for k, a in cuts.items() if a == 2)
        why = why or ("" if presents else "no present grew with the padding")
        if padded.prompt:
            if why:
                self.prompt_refusal = why
                rep._note(f"a prompt runs at its own length (a plan per length): {why}")
            else:
                self.prompt_verified, self.prompt_cuts, self.prompt_names = True, cuts, padded.names
        else:
            self.checks += 1
            if why:
                self.refusal = why
                rep._note(f"a growing cache is fed as it grows (a plan per step): {why}")
            else:
                self.verified, self.presents, self.pasts = True, presents, padded.names
        return results
