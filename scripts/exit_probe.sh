#!/usr/bin/env bash
# Which part of a bare kp script aborts at exit on a given driver: each variant runs in its own
# process and prints its exit status (0 = clean). Run from the repository root (PYTHONPATH set).
spv=kompute_dml/spirv/copy_packed.spv
base="import sys, kp, numpy as np
m = kp.Manager()
a = m.tensor_t(np.arange(16, dtype=np.uint32), kp.TensorTypes.device)
b = m.tensor_t(np.zeros(16, np.uint32), kp.TensorTypes.device)
algo = m.algorithm([a, b], open('$spv', 'rb').read(), [1, 1, 1], np.zeros(0, np.uint32), np.zeros(3, np.uint32))
seq = m.sequence()"
run() { "${PYTHON:-python3}" -c "$1" >/dev/null 2>/tmp/exit_probe.err; echo "$2: exit $? $(head -c 120 /tmp/exit_probe.err | tr '\n' ' ')"; }
run "import kp; m = kp.Manager(); print('x', flush=True)" "manager only"
run "$base" "objects, no eval"
run "$base
seq.record(kp.OpAlgoDispatch(algo, np.zeros(3, np.uint32))).eval()" "one eval"
run "$base
seq.record(kp.OpAlgoDispatch(algo, np.zeros(3, np.uint32))).eval()
m.destroy()" "one eval, destroy()"
run "$base
seq.record(kp.OpAlgoDispatch(algo, np.zeros(3, np.uint32))).eval()
import os; os._exit(0)" "one eval, os._exit"
run "import kompute_dml
$base
seq.record(kp.OpAlgoDispatch(algo, np.zeros(3, np.uint32))).eval()" "one eval, kompute_dml imported first"
VK_INSTANCE_LAYERS= run "$base
seq.record(kp.OpAlgoDispatch(algo, np.zeros(3, np.uint32))).eval()" "one eval, no validation layer"
