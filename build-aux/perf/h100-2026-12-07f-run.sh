# Device call 2026-12-07f (an H100). test-ops-matmul ran past its 120 s timeout in /ops/matmul/glu (11 cases ok before it; f16-rounding and stacked did not run).
# Call e (h100-2026-12-07e-*) measured matmul_cm2_rte and the batched q/k/v but its tests failed on
# one point: a conversion to f16 and back on an f32 result (and maybe on the bias) was folded away by
# the driver's compiler, so f32 results under autocast came out unrounded. Now an f32 C keeps the
# integer rounding and the bias comes as an f16 copy (to_f16.comp) that widens exactly. This call:
# - the GPU tests that failed (test-ops-matmul incl. /ops/matmul/f16-rounding and /ops/matmul/stacked,
#   test-back-ops), test-train-fp16 (PyTorch GradScaler's losses), the replay test;
# - issue 22's table with llama.cpp beside it;
# - the A/Bs: HN_CM2_RTE=0 (the old epilogue) on training and fp16 LoRA, HN_TRAIN_NO_QKV_STACK=1, and
#   the first-step losses against call a's (the same bits expected, unlike call e's).
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-matmul test-back-ops test-train-fp16 test-train-parity" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-ops-matmul" timeout 120 "$CARRY/bin/test-ops-matmul"
step "test-back-ops" timeout 60 "$CARRY/bin/test-back-ops"
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
step "test-train-parity replay" timeout 60 "$CARRY/bin/test-train-parity" -p /train-parity/replay
R=rows.jsonl
issue22_table $R
llamacpp_1b
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
HN_CM2_RTE=0 row $R train-fp16-old-epilogue $TR
HN_TRAIN_NO_QKV_STACK=1 row $R train-fp16-qkv-unstacked $TR
HN_CM2_RTE=0 row $R lora-fp16-old-epilogue $LO --precision fp16
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
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
