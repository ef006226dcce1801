"""When a new input signature's whole-graph plan starts on the device what it has recorded so far
(onnx_backend/device_graph.py, Recording.flush): the DevicePolicy fields plan_flush_ms,
plan_flush_allocating and plan_flush_compiling, and the environment settings that override them."""

# Every this many milliseconds of planning, a new input signature's whole-graph plan starts on
# the device what it has recorded so far (onnx_backend/device_graph.py, Recording.flush), so the
# device runs the first layers while the host plans the later ones (DevicePolicy.plan_flush_ms,
# KDML_PLAN_FLUSH_MS overrides; 0: never). GPUs only: lavapipe runs them on the planning cores.
PLAN_FLUSH_ENV = "KDML_PLAN_FLUSH_MS"
GPU_PLAN_FLUSH_MS = 2.0
# Whether such a flush also happens while one of the plan's buffers is still being made (Buffer
# `later`): off on every device, for the NVIDIA driver holds a submission up while an allocation is
# made (MiniLM 64 x 256 first runs' submissions on an H100 host: `first_runs.py --settings
# ";KDML_PLAN_FLUSH_ALLOCATING=1"`, benchmarks/RESULTS.md). KDML_PLAN_FLUSH_ALLOCATING=1 turns it on.
PLAN_FLUSH_ALLOCATING_ENV = "KDML_PLAN_FLUSH_ALLOCATING"
# Whether it also flushes before the pipelines of what it would start are made (Recording.pipelines_made):
# off on every device, for each flush would compile its few new pipelines there and then, one flush
# after another, where the plan's last encode compiles all that are left at once, in parallel (H100, a
# cold driver cache: `benchmarks.cold_start --settings ";KDML_PLAN_FLUSH_COMPILING=1"`, RESULTS.md).
# KDML_PLAN_FLUSH_COMPILING=1 turns it on.
PLAN_FLUSH_COMPILING_ENV = "KDML_PLAN_FLUSH_COMPILING"
