"""What the device-memory provider's buffers hold but have not been written with yet.

Two kinds of contents wait here, by buffer and offset, until something could read the buffer itself:

- Small host writes. Before each run of a decoder step onnxruntime copies the step's host inputs (token
  ids, attention mask, position ids: tens of bytes) into the provider's device memory (Factory.copy),
  and the run would read them straight back (the plan's shape arithmetic and the cache padding want
  their values on the host): a submission and a wait each way. A write of at most SMALL bytes is kept
  instead, and the run takes it as the host array it was.
- Our outputs, by reference. A run's device outputs (new Tensors that later runs leave alone) are not
  copied into the buffers onnxruntime allocates for them: the buffer stands for the Tensor, and a later
  run fed that buffer is fed the Tensor itself. A decoder's presents, views past a padded cache
  (onnx_backend/cache_padding.py), come back as those views and are widened, not copied, at every step.

Either is written into its buffer (`flush`) before anything else reads or writes the buffer: a copy out
of it or into it (Factory.copy), the buffer fed at another offset, type or shape, another output written
into it. Every other reader of this memory goes through those paths: onnxruntime reads device memory only
through the provider's data transfer. Buffers are held weakly: onnxruntime's free drops the last
reference and the pool takes the buffer back (Factory.alloc then forgets what was kept for it).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

import kompute_dml
from kompute_dml.device.recording import contiguous_blocks
from kompute_dml.onnx_backend.handlers_values import is_packed
from kompute_dml.onnx_backend.transfers import copy_into

SMALL = 4096  # bytes of a host write kept (a decoder batch's step inputs; 8 x 4096 int64 mask columns are not)

# buffer -> {offset: host bytes (uint8) or a Tensor of ours}, the ranges apart; one lock for all (onnxruntime
# may copy into one block from several threads: a write kept by one must not be lost to another's)
_kept: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def _keep(buffer: Any, offset: int, value: Any) -> None:
    with _lock:
        _keep_locked(buffer, offset, value)


def _keep_locked(buffer: Any, offset: int, value: Any) -> None:
    kept = _kept.get(buffer)
    end = offset + value.nbytes
    if kept and any(o != offset and o < end and offset < o + v.nbytes for o, v in kept.items()):
        _flush_locked(buffer)  # a partial overlap: the older contents first, in order
        kept = None
    if kept is None:
        kept = _kept[buffer] = {}
    kept[offset] = value


def write_host(buffer: Any, offset: int, data: np.ndarray) -> None:
    """onnxruntime's copy of host bytes `data` (uint8) into `buffer` at `offset`."""
    if data.nbytes > SMALL:
        with _lock:  # (the kept contents, then this write, in order)
            _flush_locked(buffer)
            buffer.write(data, offset)
    else:
        _keep(buffer, offset, data.copy())


def keep_output(buffer: Any, offset: int, value: Any) -> None:
    """Device output `value` (a Tensor that later runs leave alone) as the contents of `buffer` from `offset`,
    packed; written there when something else reads it."""
    _keep(buffer, offset, value)


def at(buffer: Any, offset: int, nbytes: int) -> Any:
    """What is kept for exactly this range of `buffer`: host bytes (uint8, not to be written), a Tensor, or None."""
    with _lock:
        kept = _kept.get(buffer)
        v = kept.get(offset) if kept else None
    return v if v is not None and v.nbytes == nbytes else None


def flush(buffer: Any) -> None:
    """Write what is kept for `buffer` into it: before anything else reads or writes it."""
    with _lock:
        _flush_locked(buffer)


def _flush_locked(buffer: Any) -> None:
    kept = _kept.pop(buffer, None)
    if not kept:
        return
    tensors = [(o, v) for o, v in kept.items() if isinstance(v, kompute_dml.Tensor)]
    for offset, v in kept.items():
        if not isinstance(v, kompute_dml.Tensor):
            buffer.write(v, offset)
    if tensors:
        with buffer.device.capture() as rec:
            for offset, v in tensors:
                copy_to(rec, v, buffer, offset)
        rec.submit()


def forget(buffer: Any) -> None:
    """`buffer` handed out anew: whatever was kept for its last use is void."""
    with _lock:
        _kept.pop(buffer, None)


def copy_to(rec: Any, value: Any, dst: Any, dst_offset: int) -> None:
    """Output Tensor `value` into Buffer `dst` from dst_offset, packed, recorded into `rec` (a capture): a
    transfer for a packed value, a region per block for a view whose last two dimensions are contiguous (a
    growing cache's present past its padding: cache_padding.py), else a COPY."""
    packed = kompute_dml.TensorDesc(value.desc.data_type, value.shape)
    try:
        out = kompute_dml.Tensor(dst, packed, dst_offset)
    except kompute_dml.InvalidArgumentError:
        out = None
    if out is None:  # an offset off the binding grid: the bytes of a packed copy
        device_copy(kompute_dml.copy(value).buffer, 0, dst, dst_offset, value.nbytes)
    elif not is_packed(value) and contiguous_blocks(value):
        rec.copy_blocks(value, out)
    else:
        copy_into(rec, value, out)


def device_copy(src: Any, src_offset: int, dst: Any, dst_offset: int, nbytes: int) -> None:
    """nbytes from Buffer src at src_offset to Buffer dst at dst_offset, on the device."""
    word = 4 if nbytes % 4 == 0 and src_offset % 4 == 0 and dst_offset % 4 == 0 else 1
    dt = kompute_dml.DataType.UINT32 if word == 4 else kompute_dml.DataType.UINT8
    desc = kompute_dml.TensorDesc(dt, (nbytes // word,))
    kompute_dml.copy(kompute_dml.Tensor(src, desc, src_offset), out=kompute_dml.Tensor(dst, desc, dst_offset))
