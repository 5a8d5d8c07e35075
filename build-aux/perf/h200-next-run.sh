# The next device call (2026-12-07e; rename it to its date and card once it has run, output beside it).
# lora_rows reading f16 copies of the adapters under fp16 autocast (HN_LORA_W16=0: rounded on each load);
# then why fp16 LoRA's frozen GEMMs run slower than fp32 LoRA's (the LM head chunks 256 x 128256 x 2048
# 2.9 ms each in call 2026-12-07a, about 1 ms at fp32 in call 2026-12-03l): both profiled by GEMM shape,
# and fp16 with the callback epilogue and with A decoded in the kernel instead of copied first; and a
# bf16 B (the tied LM head stays bf16) decoded without integer rounding where none is needed
# (HN_CM2_BF16_FAST=1, off by default until this call: test-ops-matmul's autocast cases with it first).
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-back-ops test-ops-matmul" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-back-ops lora" timeout 60 "$CARRY/bin/test-back-ops" -p /back-ops/lora-rows-w16 -p /back-ops/lora-autocast -p /back-ops/lora-down
step "test-ops-matmul bf16-fast" env HN_CM2_BF16_FAST=1 timeout 90 "$CARRY/bin/test-ops-matmul"
R=rows.jsonl
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 --precision fp16"
row $R lora-fp16 $LO
HN_LORA_W16=0 row $R lora-fp16-round-on-load $LO
HN_PROFILE_SHAPES=1 row $R lora-fp16-profile $LO --profile
HN_PROFILE_SHAPES=1 row $R lora-fp32-profile ${LO% --precision fp16} --profile
HN_CM2_EPI=callback row $R lora-fp16-epi-callback $LO
HN_CM2_AMODE=1 row $R lora-fp16-amode1 $LO
HN_CM2_BF16_FAST=1 row $R lora-fp16-bf16-fast $LO
HN_CM2_BF16_FAST=1 HN_PROFILE_SHAPES=1 row $R lora-fp16-bf16-fast-profile $LO --profile
rows_summary $R
prof "$OUT/$R"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
