# The next device call (written 2026-12-08 as call b; not run: that session's device time went on
# failed machine starts). Issue 22's table with llama.cpp and PyTorch (torch-reference.py) beside it in
# one call, after that session's changes (act_f16 with 16-byte accesses kept; attention_cm2_ones, the
# flash backward prefetch, norm_back_rows and the row-per-subgroup norms measured in call
# h100-2026-12-08a and dropped); then test-train-fp16 and the flash tests. Then two opt-in kernels
# written after that call, tested on lavapipe only: the norms' row sums by subgroup reductions
# (HN_NORM_SG_REDUCE=1) and rope_kv by (token, pair) (HN_ROPE_KV_BY_PAIR=1): their tests, then A/Bs.
# If one wins, make it the default (engine/tensor/ops.c hn_op_norm_sg_reduce, ops-nn.c hn_op_rope_kv).
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-attention test-train-fp16 test-ops-norm test-back-ops" build-aux/device-check prepare
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
HN_NORM_SG_REDUCE=1 step "test-ops-norm (sg sums)" timeout 60 "$CARRY/bin/test-ops-norm"
step "test-back-ops norms" timeout 60 "$CARRY/bin/test-back-ops" -p /back-ops/rmsnorm -p /back-ops/layernorm
step "test-ops-attention rope-kv" timeout 60 "$CARRY/bin/test-ops-attention" -p /ops/rope-kv -p /ops/rope-kv-by-pair
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile"
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile"
R2=ab.jsonl
row $R2 p4x512 $P4
HN_NORM_SG_REDUCE=1 row $R2 p4x512-norm-sg $P4
HN_ROPE_KV_BY_PAIR=1 row $R2 p4x512-rope-pairs $P4
HN_NORM_SG_REDUCE=1 HN_ROPE_KV_BY_PAIR=1 row $R2 p1x512-both $P1
row $R2 train-fp16 $TR --profile
HN_NORM_SG_REDUCE=1 row $R2 train-fp16-norm-sg $TR --profile
rows_summary $R2
prof "$OUT/$R2"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
