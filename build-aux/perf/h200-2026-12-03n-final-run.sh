# Final call, 2026-12-03 (n): the matmul and flash-forward epilogues that treat every element alike
# now loop over each invocation's own elements (EPI_LOOP) instead of coopMatPerElementNV; the GPU
# checks of that and of this session's other kernel changes first (test-back-ops, the cm2 matmul and
# flash-attention tests, test-train-fp16 against PyTorch's GradScaler run), then issue 22's table with
# llama.cpp's llama-bench beside it in the same call, then the callback epilogues as an A/B.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-n HN_CARRY_ONLY="test-back-ops test-ops-matmul test-ops-attention test-train-fp16" build-aux/device-check prepare
# (Its table rows and llama.cpp step moved into bench-rows.sh's issue22_table and llamacpp_1b after
# the call ran: the same commands.)
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
issue22_table $R
llamacpp_1b
# A/B: the callback epilogues as before this call
export HN_CM2_EPI=callback HN_ATTN_CM2_EPI=callback
row $R train-fp16-callback $TR
row $R p4x512-callback $P4
row $R lora-callback $LO
row $R lora-fp16-callback $LO --precision fp16
unset HN_CM2_EPI HN_ATTN_CM2_EPI
row $R train-fp16-loop-again $TR
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
