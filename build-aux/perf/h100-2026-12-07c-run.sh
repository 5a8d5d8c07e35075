# Device call 2026-12-07c (an H100): sweeps with no code change; no setting beat the defaults. Output beside it.
# Sweeps with no code change: matmul_cm2 tiles on gpt2's K = 768 shapes (gemm-shape rows and whole
# fp16 training steps), and lora_rows' rows per subgroup under fp16 LoRA (its W is rounded on every
# load: 9.4 ms of the step in call 2026-12-07a; more rows per subgroup round it fewer times).
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-train-parity" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h100-2026-12-07c-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-train-parity replay" timeout 90 "$CARRY/bin/test-train-parity" -p /train-parity/replay
R=rows.jsonl
G="--workload gemm --dtype bf16 --iterations 20 --warmup 3"
for s in 8192,768,768 8192,3072,768; do
  row $R gemm-$s $G --gemm-shape $s
  for t in 128,128,32 64,128,64 128,64,64 64,64,64 256,128,64 128,256,64; do
    HN_CM2_TILE=$t row $R gemm-$s-$t $G --gemm-shape $s
  done
done
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
row $R train-fp16 $TR
for t in 128,128,32 64,128,64 128,64,64 256,128,64; do
  HN_CM2_TILE=$t row $R train-fp16-$t $TR
done
HN_CM2_UNROLL=12 row $R train-fp16-unroll12 $TR
HN_CM2_UNROLL=2 row $R train-fp16-unroll2 $TR
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 --precision fp16"
row $R lora-fp16 $LO
for rb in 1 3 4; do HN_LORA_ROWS_RB=$rb row $R lora-fp16-rb$rb $LO; done
HN_LORA_ROWS_RB=4 row $R lora-fp16-rb4-profile $LO --profile
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
