# Device call 2026-12-08b: issue 22's table with llama.cpp and PyTorch (torch-reference.py) beside it in
# the same call, after this session's changes (act_f16 with 16-byte accesses; attention_cm2_ones, the
# flash backward prefetch, norm_back_rows and the row-per-subgroup norms measured in call a and dropped).
# Also: the flash tests on the kept kernel, test-back-ops' f16 activation case, test-train-fp16, and two
# prefill 4 x 512 rows for information (every GEMM on 128x128 tiles; q/k/v not co-scheduled).
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-attention test-back-ops test-train-fp16" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-ops-attention flash f16" timeout 100 "$CARRY/bin/test-ops-attention" -p /ops/attention-flash -p /ops/attention-f16
step "test-back-ops f16 act" timeout 60 "$CARRY/bin/test-back-ops" -p /back-ops/matmul-f16-act
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
R=rows.jsonl
issue22_table $R
llamacpp_1b
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
HN_CM2_TILE=128,128,64 row $R p4x512-tile128 $P4
HN_CM2_NO_COSCHED=1 row $R p4x512-no-cosched $P4
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
step "pytorch" timeout 240 python3 build-aux/perf/torch-reference.py
grep -E "^(device|prefill|train)" "$LOG" | tee -a "$OUT/summary.txt"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
