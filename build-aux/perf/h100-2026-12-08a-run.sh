# Device call 2026-12-08a (ran on an H100, asked as nvidia-h200). Checked attention_cm2_ones (key blocks of HD + 32 = 96 on the H100, whose
# N granularity is 32) and A/Bs it on prefill 4 x 512 and gpt2 fp16 training, with tiles; one
# prefill profile timed dispatch by dispatch (HN_VK_SERIAL=1) and labelled by GEMM shape.
# Also norm_back_rows (the norm backward and its parameter sums in one pass; HN_NORM_BACK_TWO_PASS=1 the
# old two kernels): test-back-ops norm cases, gpt2 training A/B; act_f16 with 16-byte accesses
# (HN_ACT_F16_VEC=0 a word per invocation); the flash backward (dQ and dK/dV passes) with the next
# block's loads in flight (HN_FA_BACK_PREFETCH=1, opt-in): its test and training A/B; rmsnorm and
# layernorm a row per subgroup (HN_NORM_WG=1 a workgroup per row): test-ops-norm, A/Bs.
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-attention test-train-fp16 test-back-ops test-ops-norm" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
A="$CARRY/bin/test-ops-attention"
f0=$failed
HN_ATTN_CM2_ONES=1 step "test-ops-attention flash f16 (ones)" timeout 100 "$A" -p /ops/attention-flash -p /ops/attention-f16
ONES=1
[ "$failed" != "$f0" ] && ONES=0
echo "ones ok: $ONES" | tee -a "$OUT/summary.txt"
step "test-back-ops norms" timeout 60 "$CARRY/bin/test-back-ops" -p /back-ops/rmsnorm -p /back-ops/layernorm -p /back-ops/matmul-f16-act
step "test-ops-norm" timeout 60 "$CARRY/bin/test-ops-norm"
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
f0=$failed
HN_FA_BACK_PREFETCH=1 step "test-ops-attention flash (kv prefetch)" timeout 100 "$A" -p /ops/attention-flash
PF=1
[ "$failed" != "$f0" ] && PF=0
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile"
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile"
row $R p4x512-ones-off $P4
HN_NORM_WG=1 row $R p4x512-norm-wg $P4
if [ $ONES = 1 ]; then
  HN_ATTN_CM2_ONES=1 row $R p4x512-ones $P4
  HN_ATTN_CM2_ONES=1 HN_ATTN_CM2_TILE=128,64,256 row $R p4x512-ones-br128 $P4
  HN_ATTN_CM2_ONES=1 HN_ATTN_CM2_TILE=64,64,128 row $R p4x512-ones-nt128 $P4
  HN_ATTN_CM2_ONES=1 row $R p1x512-ones $P1
  HN_ATTN_CM2_ONES=1 step "test-train-fp16 (ones)" timeout 60 "$CARRY/bin/test-train-fp16"
  HN_ATTN_CM2_ONES=1 row $R train-fp16-ones $TR --profile
  HN_ATTN_CM2_ONES=1 HN_ATTN_CM2_TILE=64,64,256 row $R train-fp16-ones-nt256 $TR --profile
fi
row $R p1x512-ones-off $P1
row $R train-fp16-ones-off $TR --profile
HN_NORM_BACK_TWO_PASS=1 row $R train-fp16-norm-two-pass $TR --profile
HN_ACT_F16_VEC=0 row $R train-fp16-act-word $TR
HN_NORM_WG=1 row $R train-fp16-norm-wg $TR
[ $PF = 1 ] && HN_FA_BACK_PREFETCH=1 row $R train-fp16-kv-prefetch $TR --profile
HN_VK_SERIAL=1 HN_PROFILE_SHAPES=1 row $R p4x512-serial $P4
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
