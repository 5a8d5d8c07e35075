# Device call 2026-12-07e (an H100; it ran past the 600 s limit during its last rows: lora fp32 and the summaries did not run).
# What it measures:
# - matmul_cm2_rte (HN_CM2_RTE=0: the old kernel): fp16 autocast's rounding and the bias through
#   conversion instructions under the RoundingModeRTE / DenormPreserve execution modes, the epilogue
#   without loops over the accumulator's elements; `devices --json` says whether the card allows it
#   (f16_rte), test-ops-matmul's /ops/matmul/f16-rounding checks ties, the range's edge and the
#   subnormal grid bit for bit each way. Then fp16 GEMMs of gpt2's shapes (f16 x, w and y, with and
#   without a bias) each way, and whole fp16 training and LoRA steps each way.
# - gpt2's q, k and v projections as one batched matmul (hn_op_matmul_stacked: their outputs row
#   blocks of one tensor, the biases copied into one; HN_TRAIN_NO_QKV_STACK=1: three matmuls side
#   by side as before), test-ops-matmul /ops/matmul/stacked against the three one at a time.
# - lora_rows reading f16 copies of the adapters under fp16 autocast (HN_LORA_W16=0: rounded on each
#   load), unmeasured since 2026-12-07 (second session); HN_CM2_BF16_FAST=1 on the old kernel.
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-matmul test-back-ops test-train-fp16" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
"$cli" devices --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); d=d if isinstance(d,list) else d.get('devices',[d]); print('f16_rte', [x.get('f16_rte') for x in d])" 2>&1 | tee -a "$OUT/summary.txt"
step "test-ops-matmul" timeout 150 "$CARRY/bin/test-ops-matmul"
step "test-ops-matmul old kernel" env HN_CM2_RTE=0 timeout 150 "$CARRY/bin/test-ops-matmul"
step "test-ops-matmul bf16-fast" env HN_CM2_RTE=0 HN_CM2_BF16_FAST=1 timeout 150 "$CARRY/bin/test-ops-matmul"
step "test-back-ops" timeout 90 "$CARRY/bin/test-back-ops"
step "test-train-fp16" timeout 90 "$CARRY/bin/test-train-fp16"
R=rows.jsonl
for shape in 8192,768,768 8192,3072,768 8192,768,3072 8192,2304,768 2048,2048,2048 8192,8192,8192; do
  for rte in 1 0; do
    HN_CM2_RTE=$rte row $R "gemm16 $shape rte$rte" --workload gemm --dtype f16 --gemm-shape $shape --precision fp16 --iterations 30 --warmup 3
    HN_CM2_RTE=$rte row $R "gemm16 $shape bias rte$rte" --workload gemm --dtype f16 --gemm-shape $shape --precision fp16 --gemm-bias --iterations 30 --warmup 3
  done
done
row $R "gemm-bf16 8192" --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
row $R train-fp16 $TR
HN_CM2_RTE=0 row $R train-fp16-old $TR
row $R train-fp16-again $TR
HN_CM2_RTE=0 row $R train-fp16-old-again $TR
HN_TRAIN_NO_QKV_STACK=1 row $R train-fp16-qkv-unstacked $TR
HN_TRAIN_NO_QKV_STACK=1 HN_CM2_RTE=0 row $R train-fp16-old-qkv-unstacked $TR
HN_PROFILE_SHAPES=1 row $R train-fp16-profile $TR --profile
row $R lora-fp16 $LO --precision fp16
HN_CM2_RTE=0 row $R lora-fp16-old $LO --precision fp16
HN_CM2_RTE=0 HN_LORA_W16=0 row $R lora-fp16-old-round-on-load $LO --precision fp16
HN_CM2_RTE=0 HN_CM2_BF16_FAST=1 row $R lora-fp16-old-bf16-fast $LO --precision fp16
HN_PROFILE_SHAPES=1 row $R lora-fp16-profile $LO --precision fp16 --profile
row $R lora $LO
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
