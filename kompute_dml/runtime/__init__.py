"""The runtime: the only package of kompute_dml that imports kp.

- `plans`: DispatchPlan, TransferPlan, grid_for, binding_window: what a compiled operator hands over (no kp)
- `manager`: the kp build this code needs (its patch level) and kp Manager creation
- `engine`: Engine, one per Device: the kp Manager, the lock, submission with one replay
  path for eager executions and recordings, the caches and the buffer pool
- `memory`: DeviceMemory, the kp side of a Buffer (device memory only); `staging`: the
  transfers by byte range through reusable host-visible slots, and Device.host_array memory
- `disk_cache`: the device's pipeline cache, kept on disk between processes
- `budget`: the allocation rules (memory budget, allocation count, host memory)
- `inflight`: submissions made without waiting (Submission); `profile`: device time per
  dispatch (Device.profile)
- `pipelines`, `encode`, `pool`: program handles and the descriptor sets written per encoded dispatch; plans -> kp operations and barriers;
  the functional helpers' buffer pool
- `replay`: a cached submission (Replay), the shared sequence its first run goes through, and
  the sequences that run recordings' heads (Heads: Recording.flush)

Operators (kompute_dml/ops) import the plans from here; memory.py and device.py build on
the Engine; nothing here imports them back.
"""

from __future__ import annotations

from .engine import Engine, Work
from .inflight import Submission, finished
from .manager import KP_PATCH_LEVEL
from .memory import DeviceMemory
from .plans import DispatchPlan, Plan, TransferPlan, binding_window, grid_for
from .profile import Profile, ProfileRow

__all__ = [
    "KP_PATCH_LEVEL", "DeviceMemory", "DispatchPlan", "Engine", "Plan", "Profile", "ProfileRow", "Submission",
    "TransferPlan", "Work", "binding_window", "finished", "grid_for",
]
