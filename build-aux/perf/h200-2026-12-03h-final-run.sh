# Final call, 2026-12-03 (h): issue 22's table on the merged tree with llama.cpp beside it (same call),
# the fp16 training row with its per-shape profile and the LM-head chunk / split-K variants, the 8B
# Q4_K_M GGUF beside llama-bench (issue 23), then the Q8_K kernel tests and the GPU tests.
# Prepare: HN_LLAMACPP=1 HN_CARRY=.devcarry-h HN_CARRY_TESTS="test-gguf" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03h-final-run.sh HN_CARRY=.devcarry-h bash build-aux/device-check run
# Sourced by device-check run (step, $cli, $CARRY, $OUT, $LOG set).
. build-aux/perf/bench-rows.sh
T0=$SECONDS
left() { echo $(( ${1:-560} - (SECONDS - T0) )); }
# the quantized kernels first (issue 23's H200 check of every type, Q8_K included)
step "test-quant tensor-core tiles" timeout 60 "$CARRY/bin/test-quant" -p /quant/gguf-tensor-core-tiles
step "test-quant" timeout 90 "$CARRY/bin/test-quant"
step "test-gguf" timeout 40 "$CARRY/bin/test-gguf"
step "test-gguf-model q8_k" timeout 60 "$CARRY/bin/test-gguf-model" -p /gguf-model/kept-quantized-q8_k
R=rows.jsonl
row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
row $R gemm-f32 --workload gemm --dtype f32 --size 8192 --iterations 5
row $R p1x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
row $R p4x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
row $R decode --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
row $R lora --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
row $R train-fp16 $TR
HN_PROFILE_SHAPES=1 row $R train-fp16-profile $TR --profile
HN_TRAIN_LM_ROWS=8192 row $R train-fp16-lm8192 $TR
HN_CM2_SPLITK_F16=1 row $R train-fp16-splitk $TR
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
# llama.cpp on the llama-1b bf16 shape (its own loader and libraries)
OUT=/tmp/hn-llamacpp MODELS="1b:bf16" PROBE=1b:bf16 REPS=3 TIME_BUDGET=90 bash "$LC/run_llamacpp.sh" >>"$LOG" 2>&1
echo "llama.cpp rc=$?" | tee -a "$OUT/summary.txt"
cp /tmp/hn-llamacpp/llamabench_1b_bf16.json "$OUT/llamacpp.json" 2>/dev/null
grep -E "^\|" /tmp/hn-llamacpp/llamabench_1b_bf16.stderr 2>/dev/null | tee -a "$OUT/summary.txt"
# the 8B Q4_K_M mix of random blocks, here and in llama-bench on the same file
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
if [ -s "$W/8b.gguf" ]; then
  row $R 8b-q4km-decode --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 128
  row $R 8b-q4km-prefill --model-path $W/8b.gguf --workload prefill --seq-len 512 --iterations 3
  step "llama-bench 8b q4_k_m" timeout 60 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 128 -ngl 99 -fa 1 -r 2 -o json > "$OUT/llamabench-8b-q4km.json"
  rm -f "$W/8b.gguf"
fi
prof "$OUT/$R"
# the GPU tests with what is left
for t in test-ops-matmul test-ops-attention test-transformer-parity test-gguf-model test-qlora; do
  t_left=$(left); [ "$t_left" -gt 20 ] || { echo "skipped $t (time)" | tee -a "$OUT/summary.txt"; continue; }
  step "$t" timeout $(( t_left < 90 ? t_left : 90 )) "$CARRY/bin/$t"
done
t_left=$(left); [ "$t_left" -gt 30 ] && step "test-ops-matmul splitk-f16" env HN_CM2_SPLITK_F16=1 HN_CM2_SPLITK=3 timeout $(( t_left < 90 ? t_left : 90 )) "$CARRY/bin/test-ops-matmul"
