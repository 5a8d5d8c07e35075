# Session start, 2026-12-02 (d): issue 22's rows with the warm-up fix (c063084), issue 24's 8B
# LoRA pair, test-quant, the mamba-130m rows and the 8B Q4_K_M GGUF beside llama-bench.
# Sourced by `HN_CHECK=script HN_SCRIPT=<this> bash build-aux/device-check run` (step, $cli, $OUT).
T0=$SECONDS
left() { echo $(( ${1:-590} - (SECONDS - T0) )); }
bench() { step "benchmark $*" timeout 60 sh -c "\"$cli\" benchmark --json $* >>\"$OUT/bench.jsonl\""; }
bench --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
bench --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
bench --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
bench --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
bench --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 --profile
bench --synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3 --profile
step "test-quant" timeout 90 "$CARRY/bin/test-quant" --verbose
bench --synthetic mamba-130m --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
bench --synthetic mamba-130m --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 5
step "test-ops-ssm" timeout 40 "$CARRY/bin/test-ops-ssm" --verbose
# the 8B Q4_K_M mix of random blocks, here and in llama-bench on the same file
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
if [ -s "$W/8b.gguf" ]; then
  step "ours 8b q4_k_m decode" timeout 40 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 128 >>\"$OUT/bench.jsonl\""
  step "ours 8b q4_k_m prefill" timeout 40 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload prefill --seq-len 512 --iterations 3 >>\"$OUT/bench.jsonl\""
  step "llama-bench 8b q4_k_m" timeout 60 env LD_LIBRARY_PATH="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 128 -ngl 99 -fa 1 -r 2 -o json > "$OUT/llamabench-8b-q4km.json"
  rm -f "$W/8b.gguf"
fi
# issue 24's pair, the 16-bit one last with what is left (it writes and loads 16 GB)
step "8b lora nf4" timeout 150 sh -c "\"$cli\" benchmark --json --synthetic llama3-8b --dtype bf16 --workload lora --batch 4 --seq-len 512 --lora-r 16 --lora-target-modules all-linear --gradient-checkpointing --iterations 2 --quantization nf4 >>\"$OUT/bench.jsonl\""
t=$(left 588); [ "$t" -gt 30 ] && step "8b lora 16-bit (${t}s)" timeout "$t" sh -c "\"$cli\" benchmark --json --synthetic llama3-8b --dtype bf16 --workload lora --batch 4 --seq-len 512 --lora-r 16 --lora-target-modules all-linear --gradient-checkpointing --iterations 2 >>\"$OUT/bench.jsonl\""
cat "$OUT/bench.jsonl"
