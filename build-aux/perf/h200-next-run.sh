# The next device call (written 2026-12-08 as call b; not run: that session's device time went on
# failed machine starts). Issue 22's table with llama.cpp and PyTorch (torch-reference.py) beside it in
# one call, after that session's changes (act_f16 with 16-byte accesses kept; attention_cm2_ones, the
# flash backward prefetch, norm_back_rows and the row-per-subgroup norms measured in call
# h100-2026-12-08a and dropped); then test-train-fp16 and the flash tests.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-attention test-train-fp16" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
R=rows.jsonl
issue22_table $R
rows_summary $R
prof "$OUT/$R"
python3 - "$OUT/$R" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
a = {"lora-fp16": 11.912982948124409, "train-fp16": 10.879135685390793}  # call 2026-12-07a
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["label"] in a:
        print(d["label"], "first_step_loss", d.get("first_step_loss"), "call a:", a[d["label"]])
PY
llamacpp_1b
step "pytorch" timeout 240 python3 build-aux/perf/torch-reference.py
grep -E "^(device|prefill|train)" "$LOG" | tee -a "$OUT/summary.txt"
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
step "test-ops-attention flash f16" timeout 100 "$CARRY/bin/test-ops-attention" -p /ops/attention-flash -p /ops/attention-f16
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
