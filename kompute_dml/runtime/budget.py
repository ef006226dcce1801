"""The allocation rules: every buffer request is checked here before kp is asked.

kp 0.9 ignores the VkResult of vkAllocateMemory and binds the null handle it leaves,
which crashes the process (seen on lavapipe under RLIMIT_AS). So allocation failure is
never left to the driver: a request is refused with OutOfMemoryError when it would pass
the Device's memory budget (default: the size of its memory heaps), the allocation-count
limit or, on a CPU device (whose "device memory" is the process's RAM), the host's
available memory.
"""

from __future__ import annotations

from ..core.errors import OutOfMemoryError

HOST_HEADROOM = 512 << 20  # bytes of host RAM a CPU device always leaves free


def host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryBudget:
    """Bytes and vkAllocateMemory calls held by one device's live buffers, against its limits."""

    def __init__(self, budget: int, max_allocations: int, host_memory: bool) -> None:
        self.budget = budget
        self.max_allocations = max_allocations
        self.host_memory = host_memory  # the device's memory is this host's RAM (a CPU device)
        self.allocated = 0  # bytes of Vulkan device memory
        self.allocations = 0

    @staticmethod
    def cost(nbytes: int) -> int:
        """A buffer is device memory only (transfers go through the engine's staging)."""
        return nbytes

    def fits(self, nbytes: int) -> bool:
        return self.allocated + self.cost(nbytes) <= self.budget

    def check(self, nbytes: int) -> None:
        """OutOfMemoryError unless a buffer of `nbytes` may be allocated now."""
        if not self.fits(nbytes):
            raise OutOfMemoryError(
                f"could not allocate {nbytes} bytes: this Device holds {self.allocated} bytes of its "
                f"{self.budget}-byte memory budget; free buffers or raise Device(memory_budget=...)"
            )
        if self.allocations + 1 > self.max_allocations:
            raise OutOfMemoryError(
                f"could not allocate a buffer: {self.allocations} Vulkan allocations are live, "
                f"maxMemoryAllocationCount is {self.max_allocations}"
            )
        if self.host_memory:
            avail = host_available_bytes()
            # the device copy, plus headroom
            if avail is not None and nbytes + HOST_HEADROOM > avail:
                raise OutOfMemoryError(
                    f"could not allocate {nbytes} bytes: the host (whose RAM is this CPU device's "
                    f"memory) has only {avail} bytes available"
                )

    def take(self, nbytes: int) -> None:
        self.allocated += self.cost(nbytes)
        self.allocations += 1

    def give_back(self, nbytes: int) -> None:
        self.allocated -= self.cost(nbytes)
        self.allocations -= 1
