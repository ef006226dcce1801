source .gpu/setup-offline.sh > $OUT/setup.txt 2>&1
export PYTHONPATH=$PWD:/tmp/kdml-site KDML_MINILM_DIR=$PWD/.gpu/minilm
git log --oneline -1 2>/dev/null || true
python3 -c "import timeit; print('probe', min(timeit.repeat('sum(range(100))', number=300000, repeat=3)))"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_first_run_overlap.py tests/test_plan_reuse.py tests/test_bert_random.py tests/test_onnx_graph.py tests/test_recording_flush.py tests/test_engine.py tests/test_gpu_memory_kernels.py tests/test_dynamic_quantize.py tests/test_shader_contract.py tests/test_specs.py 2>&1 | tail -4
python3 benchmarks/first_run_trace.py --model minilm --shapes 1x16,8x128,64x256 > /dev/null 2>&1
python3 benchmarks/first_run_trace.py --model minilm --shapes 1x16,8x128,64x256 2>&1 | grep -A6 "first run\|pipelines created\|allocations\|garbage"
python3 benchmarks/first_runs.py --models minilm,bert256 --processes 5 --steady 3 2>&1 | tail -16
