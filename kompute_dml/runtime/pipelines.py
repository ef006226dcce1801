"""Programs and the descriptor sets that bind buffers to them.

A device has one pipeline per (SPIR-V, specialization constants, push-constant size, binding
count), shared by every kp algorithm that uses it, and known by a handle (kp patch level 9:
`Manager.kdml_prepare_program`), found once per (variant, spec, push size) in this process. A kp
algorithm is then only a descriptor set (the buffers it binds), made from the handle without
passing the SPIR-V again (`Manager.kdml_algorithm`, from the device's shared descriptor pools).
A descriptor set is written per encoded dispatch and lives as long as the recorded program that
holds it (a cached submission, runtime/replay.py, or a Recording), as ggml-vulkan writes its sets
per dispatch: nothing is keyed by buffer identity here, so a released buffer has no set to
forget (encode.EncodeCache, which shares encoded dispatches between submissions by the memories
they bind, drops an entry as soon as one of its memories is freed). The grid is given at each
dispatch (encode.py) and push constants carry everything else (binding offsets, shapes,
strides, parameters), so a new shape or new buffers never build a pipeline.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from ..core.errors import UnsupportedError
from . import program_record
from .memory import DeviceMemory
from .plans import DispatchPlan
from .shaders import check_capabilities, load_spirv, variant_digest

PIPELINE_THREADS_ENV = "KDML_PIPELINE_THREADS"
PIPELINE_THREADS_MAX = 16  # a cap on compile threads: each holds a driver compiler's memory


def pipeline_key(plan: DispatchPlan) -> tuple[Any, ...]:
    """What one shared pipeline serves: a plan's variant, specialization, push words and bindings."""
    return (plan.variant, plan.spec, len(plan.push), len(plan.bindings))


def pipeline_threads() -> int:
    """DevicePolicy.pipeline_threads: how many new pipelines the driver compiles at once (kp patch
    13, Programs.prepare_many): the host's cores up to PIPELINE_THREADS_MAX, or
    KDML_PIPELINE_THREADS. A first run's pipelines (about 160 ms each in the H100's driver) then
    cost about one compile's time instead of their sum."""
    env = os.environ.get(PIPELINE_THREADS_ENV)
    if env is None:
        return max(1, min(PIPELINE_THREADS_MAX, os.cpu_count() or 1))
    try:
        return max(1, int(env))
    except ValueError:
        raise ValueError(f"{PIPELINE_THREADS_ENV}={env!r}: must be an integer >= 1") from None


# Programs with pipelines being made in the background (prepare_later), stopped and waited for at
# exit before kp's own exit callback destroys their devices (atexit runs the later registration first)
_LATER: weakref.WeakSet[Programs] = weakref.WeakSet()
_AT_EXIT: list[bool] = []


def _stop_all() -> None:
    for programs in list(_LATER):
        programs.stop()


class Programs:
    """A device's program handles by (variant, spec, push words, bindings), and the descriptor
    sets made over them."""

    def __init__(self, manager: Any, capabilities: frozenset[str] = frozenset()) -> None:
        self.manager = manager
        self.capabilities = capabilities  # the device's enabled optional features
        # SPIR-V by variant, checked (capabilities, staleness) and read once per device: a new
        # program must not cost a file read and a hash of the shader sources
        self._spirv: dict[str, bytes] = {}
        self._programs: dict[tuple[Any, ...], int] = {}  # (variant, spec, push words, bindings) -> handle
        self.descriptor_sets = 0  # made so far
        # maxStorageBufferRange and minStorageBufferOffsetAlignment (the Device sets them): a buffer
        # larger than the range is bound as a window (encode.py); 0: every buffer bound whole
        self.window_range = 0
        self.window_align = 256
        self._later: threading.Thread | None = None  # prepare_later's thread
        self._stopping = False
        self.later_error: Exception | None = None  # what stopped a background batch (its pipelines are made when used)
        self.made: list[tuple[Any, ...]] = []  # the keys of the pipelines made, in order (program_record.py)
        self._warmed = False
        self._saved = 0  # how many of them the record holds

    def bind(self, plan: DispatchPlan, memories: Sequence[DeviceMemory],
             windows: Sequence[tuple[int, int]] | None = None) -> Any:
        """A new kp algorithm: a descriptor set binding `memories` to `plan`'s program (`windows`:
        per binding its (byte offset, range), range 0 for the whole buffer; kp patch level 14).
        kp frees it when the last recorded program holding it goes."""
        self.descriptor_sets += 1
        tensors = [m.tensor for m in memories]
        if windows is None:
            return self.manager.kdml_algorithm(tensors, self.program(plan))
        return self.manager.kdml_algorithm(tensors, self.program(plan), list(windows))

    def spirv(self, variant: str) -> bytes:
        data = self._spirv.get(variant)
        if data is None:
            # A variant needing a feature the device did not enable is refused, never handed to
            # the driver (operators check at compile time too; this holds for any caller).
            check_capabilities(variant, self.capabilities)
            data = self._spirv[variant] = load_spirv(variant)
        return data

    def has(self, plan: DispatchPlan) -> bool:
        """Whether this device made `plan`'s pipeline."""
        return pipeline_key(plan) in self._programs

    def program(self, plan: DispatchPlan) -> int:
        """The handle of `plan`'s shared pipeline (created through the device's pipeline cache
        the first time the device sees its variant, spec and push size)."""
        key = pipeline_key(plan)
        handle = self._programs.get(key)
        if handle is None:
            # (through kdml_prepare_programs: the GIL released while the driver compiles)
            handle = self._programs[key] = int(self.manager.kdml_prepare_programs(
                [(self.spirv(plan.variant), len(plan.bindings), [int(v) for v in plan.spec], len(plan.push))], 1)[0])
            self.made.append(key)
        return handle

    def made_until(self, work: Sequence[Any], start: int) -> int:
        """The index of the first of `work`'s items from `start` (Recording work: (plans, bound))
        with a dispatch plan whose pipeline this device has not made, else len(work)."""
        programs = self._programs
        for k in range(start, len(work)):
            for plan in work[k][0]:
                if isinstance(plan, DispatchPlan) and pipeline_key(plan) not in programs:
                    return k
        return len(work)

    def prepare_many(self, plans: Sequence[DispatchPlan], threads: int) -> int:
        """Create the pipelines of `plans` this device has not made yet, on up to `threads`
        threads at once (kp patch level 13: the driver compiles them in parallel, the GIL
        released, also for one: a sibling compiling in the background no longer holds up the
        runs meanwhile; a first run's pipelines cost one compile's time instead of their sum). A plan
        whose variant the device cannot run is left to `program`, which raises when it is used.
        Returns how many were made."""
        todo: dict[tuple[Any, ...], tuple[bytes, int, list[int], int]] = {}
        for plan in plans:
            key = pipeline_key(plan)
            if key in self._programs or key in todo:
                continue
            try:
                spirv = self.spirv(plan.variant)
            except UnsupportedError:  # a variant the device cannot run: refused again when used
                continue
            todo[key] = (spirv, len(plan.bindings), [int(v) for v in plan.spec], len(plan.push))
        if todo:  # (kdml_prepare_program, for one, compiles with the GIL held: every Python thread waited)
            handles = self.manager.kdml_prepare_programs(list(todo.values()), max(1, threads))
            self._programs.update(zip(todo, (int(h) for h in handles)))
        self.made += todo
        return len(todo)

    def prepare_later(self, plans: Sequence[DispatchPlan], threads: int) -> int:
        """prepare_many on a thread of its own, `threads` pipelines at a time, for pipelines a run
        may never need (the ONNX backend's siblings: other shapes' variants): the driver's compiles
        (hundreds of ms each when the disk cache is cold) then no longer hold up the first run
        that asked for them. kp compiles outside its program registry's lock with the GIL released,
        so runs go on meanwhile; a plan that needs one of these pipelines first waits (`wait`), and
        so does closing the device (`stop`: no further batch starts). Returns how many were queued."""
        self.wait()  # one background batch at a time
        plans = list(plans)
        if (not plans and len(self.made) == self._saved) or self._stopping:  # (else: a batch that only saves)
            return 0
        self._at_exit()
        self._later = threading.Thread(target=self._prepare_in_background, args=(plans, max(1, threads)),
                                       name="kdml-pipelines", daemon=True)
        self._later.start()
        return len(plans)

    def _at_exit(self) -> None:
        """stop() at exit, before kp's exit callback destroys the device (registered after it)."""
        if not _AT_EXIT:
            _AT_EXIT.append(True)
            atexit.register(_stop_all)
        _LATER.add(self)

    def _prepare_in_background(self, plans: list[DispatchPlan], threads: int) -> None:
        for start in range(0, len(plans), threads):
            if self._stopping:
                return
            try:
                self.prepare_many(plans[start:start + threads], threads)
            except Exception as e:  # a speculative pipeline: a plan that uses it makes it (or is refused) itself
                self.later_error = e
                return
        if not self._stopping:
            self._save()  # for the next process (program_record.py)

    def warm(self, threads: int) -> int:
        """Queue the pipelines this device made in earlier processes (program_record.py) on
        prepare_later's thread, once per device; returns how many."""
        if self._warmed:
            return 0
        self._warmed = True
        self._at_exit()
        return self.prepare_later(program_record.load(program_record.record_path(self.manager), variant_digest), threads)

    def wait(self) -> None:
        """Until prepare_later's pipelines are made."""
        thread = self._later
        if thread is not None:
            thread.join()
            self._later = None

    def stop(self) -> None:
        """No further background batch; wait for the one the driver is compiling; record the
        pipelines made (program_record.py: Device.close, and exit once a model was prepared)."""
        self._stopping = True
        self.wait()
        self._save()

    def _save(self) -> None:
        if len(self.made) != self._saved:
            self._saved = len(self.made)
            program_record.save(program_record.record_path(self.manager), list(self.made), variant_digest)
