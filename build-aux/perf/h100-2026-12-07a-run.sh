# Device call 2026-12-07a (ran on an H100: the session got no H200). Written 2026-12-07 when the
# session before had no device time; its output is beside it (h100-2026-12-07a-*). What it measured:
# - the training step, the zeroing and AdamW recorded once and replayed (train-graph.c run_step,
#   adamw.comp DYN), against HN_TRAIN_REPLAY=0 (recorded every step, as in call 2026-12-03n);
# - prefill submitting each layer once recorded (hn_cmd_flush), against HN_PREFILL_FLUSH=0;
# - gelu's gradient formed in the f16 rounding pass of c_fc's backward (bias_back_f16.comp ACT_BACK),
#   (HN_ACT_BACK_FUSED), the f16 logits (HN_LOGITS_F16; the peak about 0.8 GB lower), the gelu MLP's
#   up projection (HN_UP_F16) and the attention's and MLP's outputs (HN_BRANCH_F16) stored f16: all
#   four off together in one row; the norms' f16 outputs, the q/k/v biases from the rounding reads,
#   the flat residual adds and the batched prefill's rope_kv have no switch (the same bits);
# - LoRA at --precision fp16 profiled by GEMM shape, with overlapping dispatches and one at a time
#   (HN_VK_SERIAL=1): call 2026-12-03l had its forward GEMMs 1.5-3.3x slower than at fp32 on the same
#   tiles; whether that is the kernel or the to_f16 copies running beside it is what this tells;
# - the tensor cores' ceiling through workgroup-scope matrices per tile (mma-peak's
#   workgroup_scope rows), beside the subgroup-scope one;
# - issue 22's table with llama.cpp beside it.
# GPU checks first: test-vk-core (/vk/flush on the NVIDIA driver), test-back-ops (the grouped
# embedding gradient, AdamW), test-train-fp16 (replayed fp16 steps against PyTorch's GradScaler run),
# test-train-parity's replay cases (replayed against recorded each step, bit for bit).
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-vk-core test-back-ops test-train-fp16 test-train-parity test-ops-matmul" build-aux/device-check prepare
# About 8 minutes of the 10 a call may take (the table ~2.5, llama.cpp ~1.5, the rest ~4).
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h100-2026-12-07a-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-vk-core" timeout 60 "$CARRY/bin/test-vk-core"
step "test-back-ops" timeout 60 "$CARRY/bin/test-back-ops"
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
step "test-train-parity replay" timeout 90 "$CARRY/bin/test-train-parity" -p /train-parity/replay
step "test-ops-matmul f16-out" timeout 60 "$CARRY/bin/test-ops-matmul" -p /ops/matmul/f16-out
R=rows.jsonl
row $R mma-peak --workload mma-peak --iterations 3
issue22_table $R
llamacpp_1b
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
HN_TRAIN_REPLAY=0 row $R train-fp16-recorded $TR
HN_TRAIN_REPLAY=0 row $R lora-recorded $LO
# this session's 16-bit storage and fusions all off at once (each has its own switch)
HN_ACT_BACK_FUSED=0 HN_LOGITS_F16=0 HN_UP_F16=0 HN_BRANCH_F16=0 row $R train-fp16-f32-storage $TR
HN_PROFILE_SHAPES=1 row $R lora-fp16-profile $LO --precision fp16 --profile
HN_PROFILE_SHAPES=1 HN_VK_SERIAL=1 row $R lora-fp16-serial-profile $LO --precision fp16 --profile
HN_PROFILE_SHAPES=1 HN_VK_SERIAL=1 row $R train-fp16-serial-profile $TR --profile
HN_PREFILL_FLUSH=0 row $R p1x512-one-submit --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2
HN_PREFILL_FLUSH=0 row $R p4x512-one-submit --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2
rows_summary $R
# fp16 LoRA now shares one f16 copy of x among q/k/v and gate/up (hn_op_matmul_n under autocast, cm2
# only, unchecked on lavapipe), and fp16 training's norms write their f16 copies: the first steps'
# losses (from the initial weights) must stay call n's
python3 -c "
import json
for l in open('$OUT/$R'):
    d = json.loads(l)
    if d['label'] == 'lora-fp16': print('lora-fp16 first_step_loss', d.get('first_step_loss'), 'call n: 11.912982948124409')
    if d['label'] == 'train-fp16': print('train-fp16 first_step_loss', d.get('first_step_loss'), 'call n: 10.879135685390793')
" | tee -a "$OUT/summary.txt"
python3 -c "
import json
for l in open('$OUT/$R'):
    d = json.loads(l)
    for t in d.get('workgroup_scope', []): print('  workgroup scope', t)
" | tee -a "$OUT/summary.txt"
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
