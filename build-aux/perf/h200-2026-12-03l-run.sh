# Call L, 2026-12-03 (ran at commit bb5e8a4 plus the uncommitted attention_cm2_sg build of
# attention_cm2_reg.comp, which ran at half the speed and was not kept: docs/performance.md):
# the flash-attention forward with subgroup-scope matrices (attention_cm2_sg,
# HN_ATTN_CM2_SG=1; tiles BR,BC,NT where BR becomes 16 rows per subgroup) against the default
# (workgroup scope), checked by test-ops-attention first; the LoRA rank kernels under fp16 autocast
# (test-back-ops on the NVIDIA compiler) and LoRA at --precision fp16 / fp32 after the fp16 tile
# policy and the waves split-K became defaults.
# Prepare: HN_CARRY=.devcarry-l HN_CARRY_ONLY="test-ops-attention test-back-ops" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03l-run.sh HN_CARRY=.devcarry-l bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-back-ops" timeout 60 "$CARRY/bin/test-back-ops"
step "test-ops-attention" timeout 60 "$CARRY/bin/test-ops-attention"
HN_ATTN_CM2_SG=1 step "test-ops-attention sg" timeout 60 "$CARRY/bin/test-ops-attention"
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
row $R p4x512 $P4
HN_ATTN_CM2_SG=1 row $R p4x512-sg $P4
HN_ATTN_CM2_SG=1 HN_ATTN_CM2_TILE=64,64,128 row $R p4x512-sg-64-128 $P4
HN_ATTN_CM2_SG=1 HN_ATTN_CM2_TILE=64,32,128 row $R p4x512-sg-32-128 $P4
HN_ATTN_CM2_SG=1 HN_ATTN_CM2_TILE=64,32,256 row $R p4x512-sg-32-256 $P4
row $R p4x512-again $P4
HN_ATTN_CM2_SG=1 row $R p4x512-sg-profile $P4 --profile
row $R p1x512 $P1
HN_ATTN_CM2_SG=1 row $R p1x512-sg $P1
row $R train-fp16 $TR
HN_ATTN_CM2_SG=1 row $R train-fp16-sg $TR
HN_ATTN_CM2_SG=1 HN_ATTN_CM2_TILE=64,32,128 row $R train-fp16-sg-32 $TR
row $R train-fp16-again $TR
HN_ATTN_CM2_SG=1 row $R train-fp16-sg-again $TR
HN_ATTN_CM2_SG=1 HN_PROFILE_SHAPES=1 row $R train-fp16-sg-profile $TR --profile
row $R lora-fp16 $LO --precision fp16
row $R lora-fp32 $LO
row $R lora-fp16-again $LO --precision fp16
HN_PROFILE_SHAPES=1 row $R lora-fp16-profile $LO --precision fp16 --profile
python3 -c "
import json
for l in open('$OUT/rows.jsonl'):
    d = json.loads(l); print(d['label'], round(d['tokens_per_s'], 1), 'tok/s', 'loss', d.get('first_step_loss', ''), d.get('loss', ''), 'ms', {k: round(v, 2) for k, v in d.items() if k.startswith('ms_')})
" | tee -a "$OUT/summary.txt"
prof "$OUT/$R"
