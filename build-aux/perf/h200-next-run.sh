# The next device call (written 2026-12-07 as call h; not run: no machine started in time). Call g (h100-2026-12-07g-*) found
# attention_cm2_ones wrong with key blocks of 80: NVIDIA's N granularity for workgroup-scope
# matrices is 32, so blocks are now HD + 32 = 96. Its stride-0 dK/dV pass was slower (6.91 against
# 4.17 ms) and is gone. This call: test-ops-attention (flash and f16 cases), prefill 4 x 512 and
# gpt2 fp16 training with it (HN_ATTN_CM2_ONES=1) and without (=0), profiled.
# Prepare: HN_LLAMACPP=0 HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-attention" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
A="$CARRY/bin/test-ops-attention"
f0=$failed
HN_ATTN_CM2_ONES=1 step "test-ops-attention flash f16" timeout 100 "$A" -p /ops/attention-flash -p /ops/attention-f16
export HN_ATTN_CM2_ONES=1
[ "$failed" != "$f0" ] && export HN_ATTN_CM2_ONES=0
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile"
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile"
row $R p4x512 $P4
HN_ATTN_CM2_ONES=0 row $R p4x512-ones-off $P4
row $R train-fp16 $TR --profile
HN_ATTN_CM2_ONES=0 row $R train-fp16-ones-off $TR --profile
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
