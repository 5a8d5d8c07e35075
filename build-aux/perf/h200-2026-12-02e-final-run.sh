# Final call, 2026-12-02 (e): issue 22's table on the merged tree with llama.cpp beside it, the new
# prefill attention against the old (HN_ATTN_CM2_OLD=1), the 8B Q4_K_M GGUF beside llama-bench
# (issue 23), mamba-130m (issue 25), then the GPU tests while time is left.
# Prepare: HN_LLAMACPP=1 HN_CARRY_TESTS="test-back-ops test-train-parity test-hybrid" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-02e-final-run.sh bash build-aux/device-check run
# Sourced by device-check run (step, $cli, $CARRY, $OUT, $LOG set).
T0=$SECONDS
left() { echo $(( ${1:-560} - (SECONDS - T0) )); }
# the new tensor-core attention is checked first; if it fails, the rest runs the old one and says so
if ! step "test-ops-attention" timeout 40 "$CARRY/bin/test-ops-attention"; then
  export HN_ATTN_CM2_OLD=1
  echo "NOTE: new cm2 attention failed its test; benchmarks below use HN_ATTN_CM2_OLD=1" | tee -a "$OUT/summary.txt"
fi
bench() { step "benchmark $*" timeout 60 sh -c "\"$cli\" benchmark --json $* >>\"$OUT/bench.jsonl\""; }
benchab() { local tag=$1; shift; step "benchmark [$tag] $*" timeout 60 sh -c "\"$cli\" benchmark --json $* | sed 's/^{/{\"ab\": \"$tag\", /' >>\"$OUT/bench.jsonl\""; }
bench --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
bench --workload gemm --dtype f32 --size 8192 --iterations 5
bench --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
bench --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
HN_ATTN_CM2_OLD=1 benchab attn-old --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2
HN_ATTN_CM2_OLD=1 benchab attn-old --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2
bench --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
bench --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3
bench --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 2 --profile
bench --synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3 --profile
bench --synthetic mamba-130m --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
bench --synthetic mamba-130m --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 5
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
  step "ours 8b q4_k_m decode" timeout 40 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 128 >>\"$OUT/bench.jsonl\""
  step "ours 8b q4_k_m decode profile" timeout 40 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 16 --profile >>\"$OUT/bench.jsonl\""
  step "ours 8b q4_k_m prefill" timeout 40 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload prefill --seq-len 512 --iterations 3 >>\"$OUT/bench.jsonl\""
  step "llama-bench 8b q4_k_m" timeout 60 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 128 -ngl 99 -fa 1 -r 2 -o json > "$OUT/llamabench-8b-q4km.json"
  rm -f "$W/8b.gguf"
fi
cat "$OUT/bench.jsonl" | cut -c1-400
# the GPU tests with what is left
for t in test-back-ops test-transformer-parity test-hybrid test-ssm-parity test-quant test-train-parity test-ops-matmul; do
  t_left=$(left); [ "$t_left" -gt 20 ] || { echo "skipped $t (time)" | tee -a "$OUT/summary.txt"; continue; }
  step "$t" timeout $(( t_left < 90 ? t_left : 90 )) "$CARRY/bin/$t"
done
