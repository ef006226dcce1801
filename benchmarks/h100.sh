#!/usr/bin/env bash
# Every H100 table of benchmarks/RESULTS.md, each command's stdout + stderr in OUTDIR/<name>.txt
# (its exit status and seconds on the last line); a failing command does not stop the others.
#
#   bash benchmarks/h100.sh OUTDIR [1|2|3|4|5|6|7]   # from the repository's root; no part: all
#
# A part fits one 10-minute device call: each command runs under `timeout` (seconds below),
# the limits of a part sum to at most 600 s (its device setup comes on top). MiniLM is left out (its weights are not offline).
set -u
out=${1:?usage: bash benchmarks/h100.sh OUTDIR [1|2|3]}
part=${2:-all}
mkdir -p "$out"
py=${PYTHON:-python}
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ]; then py=.venv/bin/python; fi

run() {  # run NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "\$ $*" >"$out/$name.txt"
    timeout "$limit" "$@" >>"$out/$name.txt" 2>&1
    local rc=$?
    echo "[exit $rc, $((SECONDS - t0)) s]" >>"$out/$name.txt"
    echo "$name: exit $rc, $((SECONDS - t0)) s"
}

if [ "$part" = 1 ] || [ "$part" = all ]; then
    run bench 240 "$py" -m kompute_dml.cli bench --gpu on --rounds 7 --json "$out/bench.json" --markdown "$out/bench.md"
    run bench_memory 240 "$py" -m benchmarks.bench_memory
    run latency 40 "$py" -m benchmarks.latency --ops --after-recording --repeats 2000
    run vk_floor 40 bash benchmarks/vk_floor/run.sh
    run cache_gain 40 "$py" -m benchmarks.cache_gain --rounds 9
fi
if [ "$part" = 2 ] || [ "$part" = all ]; then
    run encoder_speed 120 "$py" -m kompute_dml.bench.encoder_speed --models bert256 --shapes 1x16,8x128,64x256 --repeat 20
    run first_runs 150 "$py" -m benchmarks.first_runs --models bert256 --processes 5 --steady 3
    run bench_coop 120 "$py" -m benchmarks.bench_coop --rounds 3 --no-compare
    run coop_peak 60 "$py" -m benchmarks.coop_peak --quick
    run coop_ksplit 150 "$py" -m benchmarks.coop_ksplit --rows 1,4,8,16,32 --sizes 4096x4096,4096x11008 --rounds 3
fi
if [ "$part" = 3 ] || [ "$part" = all ]; then
    run model_families 400 "$py" -m benchmarks.model_families --size small --shapes 1x128,8x128 --repeat 15
    run decoders 160 "$py" -m kompute_dml.bench.decoder_speed --size small --prompt 128 --new 32
    run decode_plans 150 "$py" -m benchmarks.decode_plans --size small --prompt 16 --new 24
    run bench_conv 90 "$py" -m benchmarks.bench_conv --rounds 5 --n 20
    for f in distilbert-int8 bert-fp32-fused llama resnet18; do
        run "cold_start_$f" 200 "$py" -m benchmarks.cold_start --family "$f" --processes 3 --settings ";SIBLINGS_IN_FIRST_RUN=1"
    done
fi
if [ "$part" = 4 ] || [ "$part" = all ]; then
    # the onnxruntime plugin EP (built in place first: the GPU machine has no venv, nor the network that
    # scripts/ort-headers.sh needs: carry .cache/ort-headers, which `make setup` fills here)
    run ort_ep_build 120 "$py" setup.py -q build_ext --inplace
    run ort_ep 300 "$py" -m benchmarks.ort_ep --models minilm-shape,bert256 --rounds 21
    run cold_start_ep_resnet50 200 "$py" -m benchmarks.cold_start --family resnet50 --processes 3 --ep
    run batcher 120 "$py" -m kompute_dml.bench.batcher --seq 128,32 --max-delay-ms 0,2 --seconds 3
fi
if [ "$part" = 5 ] || [ "$part" = all ]; then
    # MULTIHEAD_ATTENTION against torch's scaled_dot_product_attention and kompute_dml's unfused chain
    run bench_attention 300 "$py" -m benchmarks.bench_attention --unfused --rounds 3 --json "$out/bench_attention.json"
    run bench_attention_half 120 "$py" -m benchmarks.bench_attention --rows f16 --rounds 3 --n 10 --allow-half-precision
    run bench_attention_half32 120 "$py" -m benchmarks.bench_attention --rows f32 --rounds 3 --n 10 --allow-half-precision
    run attention_ablation 90 "$py" -m benchmarks.attention_ablation --rounds 3 --n 10  # (its overlay built here and carried)
    run attention_ablation_blocked 90 "$py" -m benchmarks.attention_ablation --kernel blocked --rounds 3 --n 10
    run attention_crossover 60 "$py" -m benchmarks.attention_crossover
    run attention_block_rows 60 "$py" -m benchmarks.attention_block_rows
    run model_families_fp16 240 "$py" -m benchmarks.model_families --size small --shapes 1x128,8x128 --repeat 10 \
        --families whisper-encoder,whisper-encoder-fp16,bert-fp16,vit-fp16,gpt2-fp16,llama-fp16
fi
if [ "$part" = 6 ] || [ "$part" = all ]; then
    # the row kernels and the float32 GEMM's register blocks against torch, its K steps and load forms; the latency-bound CNN layers
    run bench_activation 120 "$py" -m benchmarks.bench_activation --rounds 5
    run bench_gemm_blocks 150 "$py" -m benchmarks.bench_gemm --blocks --rounds 3
    run gemm_steps 120 "$py" -m benchmarks.gemm_steps --rounds 3
    run prompt_profile 50 "$py" -m benchmarks.prompt_profile --decoder gpt2 --batch 8
    run prompt_profile_host_pasts 50 "$py" -m benchmarks.prompt_profile --decoder gpt2 --batch 8 --host-pasts
    run bench_small_layers 90 "$py" -m benchmarks.bench_small_layers --rounds 5 --n 20
fi
if [ "$part" = 7 ] || [ "$part" = all ]; then
    # the squeeze-and-excitation gate at MobileNetV3's and EfficientNet's blocks, its lanes per mean forced
    run bench_se 200 "$py" -m benchmarks.bench_se --rounds 5 --mean-lanes 2,3,4,5
    # the float16 gate, the depthwise layers by outputs and by rows, the host copies' parts
    run bench_se_f16 100 "$py" -m benchmarks.bench_se --dtype float16 --rounds 5
    run bench_conv_depthwise 240 "$py" -m benchmarks.bench_conv --depthwise --rounds 5 --n 20
    run copy_threads 150 "$py" -m benchmarks.copy_threads --families mobilenet-v3-small,efficientnet-b0 --rounds 15
    run model_families_cnn 200 "$py" -m benchmarks.model_families \
        --families efficientnet-b0-fp16,mobilenet-v3-small-fp16,efficientnet-b0,mobilenet-v3-small,resnet50 --shapes 1x128,8x128 --repeat 15
fi
