# The next device call (2026-12-07e; rename it to its date and card once it has run, output beside it).
# lora_rows reading f16 copies of the adapters under fp16 autocast (HN_LORA_W16=0: rounded on each load).
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-back-ops" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-back-ops lora" timeout 60 "$CARRY/bin/test-back-ops" -p /back-ops/lora-rows-w16 -p /back-ops/lora-autocast -p /back-ops/lora-down
R=rows.jsonl
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 --precision fp16"
row $R lora-fp16 $LO
HN_LORA_W16=0 row $R lora-fp16-round-on-load $LO
rows_summary $R
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
