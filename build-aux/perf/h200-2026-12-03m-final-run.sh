# Final call, 2026-12-03 (m): the GPU checks of this session's kernel changes first (test-back-ops:
# the LoRA rank kernels under fp16 autocast and the split-K partials left unrounded, on the NVIDIA
# compiler), then issue 22's table with llama.cpp's llama-bench beside it in the same call, LoRA at
# --precision fp16 beside the table's fp32 row, and test-ops-matmul when time is left.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-m HN_CARRY_ONLY="test-back-ops test-ops-matmul" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03m-final-run.sh HN_CARRY=.devcarry-m bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
left() { echo $(( ${1:-380} - (SECONDS - T0) )); }
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-back-ops" timeout 60 "$CARRY/bin/test-back-ops"
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
row $R gemm-f32 --workload gemm --dtype f32 --size 8192 --iterations 5
row $R p1x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
row $R p4x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
row $R decode --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
row $R lora $LO
row $R lora-fp16 $LO --precision fp16
row $R train-fp16 $TR
row $R train-fp16-again $TR
HN_PROFILE_SHAPES=1 row $R train-fp16-profile $TR --profile
LC="$CARRY/llamacpp"
[ -f "$LC/gguf-py.tar.xz" ] && [ ! -d "$LC/gguf-py" ] && tar -C "$LC" -xJf "$LC/gguf-py.tar.xz"
export LD_LIBRARY_PATH="/tmp/hn-carry-unpacked/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=/tmp/hn-llamacpp MODELS="1b:bf16" PROBE=1b:bf16 REPS=3 TIME_BUDGET=90 bash "$LC/run_llamacpp.sh" >>"$LOG" 2>&1
echo "llama.cpp rc=$?" | tee -a "$OUT/summary.txt"
cp /tmp/hn-llamacpp/llamabench_1b_bf16.json "$OUT/llamacpp.json" 2>/dev/null
grep -E "^\|" /tmp/hn-llamacpp/llamabench_1b_bf16.stderr 2>/dev/null | tee -a "$OUT/summary.txt"
python3 -c "
import json
for l in open('$OUT/$R'):
    d = json.loads(l); print(d['label'], round(d.get('tokens_per_s', 0), 1), 'tok/s', round(d.get('tflops', 0), 1), 'TFLOP/s', 'loss', d.get('first_step_loss', ''), d.get('loss', ''), 'peak', d.get('peak_device_bytes'), {k: round(v, 2) for k, v in d.items() if k.startswith('ms_')})
" | tee -a "$OUT/summary.txt"
prof "$OUT/$R"
t_left=$(left); [ "$t_left" -gt 30 ] && step "test-ops-matmul" timeout $(( t_left < 100 ? t_left : 100 )) "$CARRY/bin/test-ops-matmul"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
