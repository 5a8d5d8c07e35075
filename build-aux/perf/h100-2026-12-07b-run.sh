# Device call 2026-12-07b (an H100; the staged kernel measured, then removed: slower). Output beside it.
# matmul_cm2 with its operands staged by the kernel through shared memory (HN_CM2_STAGES=1|2,
# matmul_cm2.comp STAGES): call 2026-12-07a measured workgroup-scope products from shared memory at
# 636-650 TFLOP/s where the driver-staged kernel reaches 270 at 8192³. Checks first (every matmul
# test through the staged kernel, one and two buffers), then GEMMs and the two open rows against the
# unstaged kernel in the same call.
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-back-ops test-train-fp16 test-train-parity test-ops-matmul" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h100-2026-12-07b-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-ops-matmul staged 2" env HN_CM2_STAGES=2 timeout 90 "$CARRY/bin/test-ops-matmul"
step "test-ops-matmul staged 1" env HN_CM2_STAGES=1 timeout 90 "$CARRY/bin/test-ops-matmul"
step "test-back-ops staged 2" env HN_CM2_STAGES=2 timeout 60 "$CARRY/bin/test-back-ops"
step "test-train-fp16 staged 2" env HN_CM2_STAGES=2 timeout 60 "$CARRY/bin/test-train-fp16"
step "test-train-parity replay" timeout 90 "$CARRY/bin/test-train-parity" -p /train-parity/replay
R=rows.jsonl
G="--workload gemm --dtype bf16 --iterations 20 --warmup 3"
row $R gemm-8192 $G --size 8192
HN_CM2_STAGES=2 row $R gemm-8192-st2 $G --size 8192
HN_CM2_STAGES=1 row $R gemm-8192-st1 $G --size 8192
HN_CM2_STAGES=2 HN_CM2_STAGED_BK=16 row $R gemm-8192-st2-bk16 $G --size 8192
HN_CM2_STAGES=1 HN_CM2_STAGED_BK=64 row $R gemm-8192-st1-bk64 $G --size 8192
HN_CM2_STAGES=2 HN_CM2_TILE=128,256,16 row $R gemm-8192-st2-128x256-bk16 $G --size 8192
HN_CM2_STAGES=1 HN_CM2_TILE=128,256,32 row $R gemm-8192-st1-128x256 $G --size 8192
for s in 8192,768,768 8192,3072,768 8192,768,3072 2048,8192,2048 2048,2048,2048; do
  row $R gemm-$s $G --gemm-shape $s
  HN_CM2_STAGES=2 row $R gemm-$s-st2 $G --gemm-shape $s
  HN_CM2_STAGES=1 row $R gemm-$s-st1 $G --gemm-shape $s
done
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
row $R p4x512 $P4
HN_CM2_STAGES=2 HN_PROFILE_SHAPES=1 row $R p4x512-st2 $P4 --profile
HN_CM2_STAGES=1 row $R p4x512-st1 $P4
row $R p1x512 $P1
HN_CM2_STAGES=2 row $R p1x512-st2 $P1
row $R train-fp16 $TR
HN_CM2_STAGES=2 row $R train-fp16-st2 $TR
HN_CM2_STAGES=1 row $R train-fp16-st1 $TR
HN_CM2_STAGES=2 HN_PROFILE_SHAPES=1 row $R train-fp16-st2-profile $TR --profile
row $R lora $LO
HN_CM2_STAGES=2 row $R lora-st2 $LO
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
