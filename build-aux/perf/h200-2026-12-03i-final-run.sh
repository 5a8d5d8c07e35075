# Final call, 2026-12-03 (i): the GPU checks of this session's kernels first (the flash-attention
# backward's new tiles, Q8_K on the tensor cores), then issue 22's table with llama.cpp's llama-bench
# beside it in the same call, then A/B rows of the new defaults against the old ones.
# Prepare (now): HN_LLAMACPP=bench HN_CARRY=.devcarry-h HN_CARRY_ONLY="test-ops-attention test-quant
# test-gguf-model test-ops-matmul" build-aux/device-check prepare. It ran (2026-12-03) with
# HN_LLAMACPP=1 HN_CARRY=.devcarry-h build-aux/device-check prepare, then trimmed by hand under 64 MiB
# with the tracked tree (only the cli and the tests below in bin.tar.xz, gguf-py as a tarball, the
# llama.cpp bundle's duplicate libraries, its README and BUILD_INFO, and stories260K removed)
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03i-final-run.sh HN_CARRY=.devcarry-h bash build-aux/device-check run
# Sourced by device-check run (step, $cli, $CARRY, $OUT, $LOG set).
. build-aux/perf/bench-rows.sh
T0=$SECONDS
left() { echo $(( ${1:-400} - (SECONDS - T0) )); }
# every libglvnd package, even on a warm machine where an earlier call unpacked only some of them
# (the NVIDIA ICD then reports VK_ERROR_INCOMPATIBLE_DRIVER)
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
if ! step "test-ops-attention" timeout 60 "$CARRY/bin/test-ops-attention"; then
  export HN_FA_BACK_TILE=64,64,64,64 HN_ATTN_CM2_TILE=64,64,256
  echo "NOTE: test-ops-attention failed on the new flash tiles; the rows below use the old ones" | tee -a "$OUT/summary.txt"
  step "test-ops-attention (old tiles)" timeout 60 "$CARRY/bin/test-ops-attention"
fi
step "test-quant tensor-core tiles" timeout 60 "$CARRY/bin/test-quant" -p /quant/gguf-tensor-core-tiles
step "test-gguf-model q8_k" timeout 60 "$CARRY/bin/test-gguf-model" -p /gguf-model/kept-quantized-q8_k
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
row $R gemm-f32 --workload gemm --dtype f32 --size 8192 --iterations 5
row $R p1x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
row $R p4x512 $P4 --profile
row $R decode --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
row $R lora --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3
row $R train-fp16 $TR
HN_PROFILE_SHAPES=1 row $R train-fp16-profile $TR --profile
LC="$CARRY/llamacpp"
# the carry is trimmed to fit the 64 MiB limit: gguf-py travels as a tarball, and llama-bench loads
# the Vulkan loader and libGLdispatch from the engine's own lib folder
[ -f "$LC/gguf-py.tar.xz" ] && [ ! -d "$LC/gguf-py" ] && tar -C "$LC" -xJf "$LC/gguf-py.tar.xz"
export LD_LIBRARY_PATH="/tmp/hn-carry-unpacked/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=/tmp/hn-llamacpp MODELS="1b:bf16" PROBE=1b:bf16 REPS=3 TIME_BUDGET=90 bash "$LC/run_llamacpp.sh" >>"$LOG" 2>&1
echo "llama.cpp rc=$?" | tee -a "$OUT/summary.txt"
cp /tmp/hn-llamacpp/llamabench_1b_bf16.json "$OUT/llamacpp.json" 2>/dev/null
grep -E "^\|" /tmp/hn-llamacpp/llamabench_1b_bf16.stderr 2>/dev/null | tee -a "$OUT/summary.txt"
# A/B: the flash tiles and the LM head's swizzle as before this call's defaults
HN_FA_BACK_TILE=64,64,64,64 HN_ATTN_CM2_TILE=64,64,256 HN_CM2_SWIZZLE=0 row $R train-fp16-old-tiles $TR
row $R train-fp16-again $TR
HN_ATTN_CM2_TILE=64,64,128 row $R p4x512-fa-nt128 $P4
prof "$OUT/$R"
t_left=$(left); [ "$t_left" -gt 30 ] && step "test-quant" timeout $(( t_left < 100 ? t_left : 100 )) "$CARRY/bin/test-quant"
t_left=$(left); [ "$t_left" -gt 30 ] && step "test-ops-matmul" timeout $(( t_left < 100 ? t_left : 100 )) "$CARRY/bin/test-ops-matmul"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
