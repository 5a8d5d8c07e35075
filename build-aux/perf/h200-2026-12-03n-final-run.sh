# Final call, 2026-12-03 (n): the matmul and flash-forward epilogues that treat every element alike
# now loop over each invocation's own elements (EPI_LOOP) instead of coopMatPerElementNV; the GPU
# checks of that and of this session's other kernel changes first (test-back-ops, the cm2 matmul and
# flash-attention tests, test-train-fp16 against PyTorch's GradScaler run), then issue 22's table with
# llama.cpp's llama-bench beside it in the same call, then the callback epilogues as an A/B.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-n HN_CARRY_ONLY="test-back-ops test-ops-matmul test-ops-attention test-train-fp16" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03n-final-run.sh HN_CARRY=.devcarry-n bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-back-ops" timeout 60 "$CARRY/bin/test-back-ops"
step "test-ops-matmul cm2" timeout 90 "$CARRY/bin/test-ops-matmul" -p /ops/matmul/autocast -p /ops/matmul/cm2-variants -p /ops/matmul/glu -p /ops/matmul/f16-x
step "test-ops-attention flash" timeout 60 "$CARRY/bin/test-ops-attention" -p /ops/attention-flash -p /ops/attention-f16
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
row $R gemm-f32 --workload gemm --dtype f32 --size 8192 --iterations 5
row $R p1x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
row $R p4x512 $P4 --profile
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
# A/B: the callback epilogues as before this call
export HN_CM2_EPI=callback HN_ATTN_CM2_EPI=callback
row $R train-fp16-callback $TR
row $R p4x512-callback $P4
row $R lora-callback $LO
row $R lora-fp16-callback $LO --precision fp16
unset HN_CM2_EPI HN_ATTN_CM2_EPI
row $R train-fp16-loop-again $TR
python3 -c "
import json
for l in open('$OUT/$R'):
    d = json.loads(l); print(d['label'], round(d.get('tokens_per_s', 0), 1), 'tok/s', round(d.get('tflops', 0), 1), 'TFLOP/s', 'loss', d.get('first_step_loss', ''), d.get('loss', ''), 'peak', d.get('peak_device_bytes'), {k: round(v, 2) for k, v in d.items() if k.startswith('ms_')})
" | tee -a "$OUT/summary.txt"
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
