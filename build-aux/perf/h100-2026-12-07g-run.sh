# Device call 2026-12-07g. New: attention_cm2_ones (the flash forward's row sums from ones columns
# of V: key blocks of HD + 16, no P·1 product, the rescale on O directly). This call:
# - test-ops-attention with it (on failure: with the ones written per element, HN_FA_ONES_PE=1,
#   then with it off); test-ops-matmul's f16-rounding and stacked
#   cases (not yet run on a GPU); test-train-fp16 (PyTorch GradScaler's losses);
# - issue 22's table with llama.cpp beside it;
# Also: the flash backward's dK/dV pass reads its per-query values (lse, r·Δ, f) as stride-0
# matrices, not through shared memory with two barriers per query block (HN_FA_BACK_KV_SHARED=1
# for the old way), and the prep pass stores r·Δ.
# - A/Bs on prefill 4 x 512 and gpt2 training: HN_ATTN_CM2_ONES=0, HN_FA_ONES_PE=1, other tiles,
#   HN_FA_BACK_KV_SHARED=1.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-ops-matmul test-ops-attention test-train-fp16" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh (saved as h100-2026-12-07g-run.sh) HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
A="$CARRY/bin/test-ops-attention"
# (a failure falls back: the ones written per element, then the ones off, then the shared kv pass)
f0=$failed
step "test-ops-attention" timeout 150 "$A"
if [ "$failed" != "$f0" ]; then
  export HN_FA_ONES_PE=1
  f0=$failed; step "test-ops-attention ones-pe" timeout 100 "$A" -p /ops/attention-flash -p /ops/attention-f16
  if [ "$failed" != "$f0" ]; then
    unset HN_FA_ONES_PE; export HN_ATTN_CM2_ONES=0
    f0=$failed; step "test-ops-attention ones-off" timeout 100 "$A" -p /ops/attention-flash -p /ops/attention-f16
    [ "$failed" != "$f0" ] && export HN_FA_BACK_KV_SHARED=1
  fi
fi
echo "attention env: HN_FA_ONES_PE=${HN_FA_ONES_PE-} HN_ATTN_CM2_ONES=${HN_ATTN_CM2_ONES-} HN_FA_BACK_KV_SHARED=${HN_FA_BACK_KV_SHARED-}" | tee -a "$OUT/summary.txt"
step "test-ops-matmul f16-rounding stacked" timeout 150 "$CARRY/bin/test-ops-matmul" -p /ops/matmul/f16-rounding -p /ops/matmul/stacked
step "test-train-fp16" timeout 60 "$CARRY/bin/test-train-fp16"
R=rows.jsonl
issue22_table $R
llamacpp_1b
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile"
HN_ATTN_CM2_ONES=0 row $R p4x512-ones-off $P4
HN_ATTN_CM2_TILE=128,80,256 row $R p4x512-ones-128 $P4
HN_ATTN_CM2_ONES=0 row $R train-fp16-ones-off $TR --profile
HN_FA_BACK_KV_SHARED=1 row $R train-fp16-kv-shared $TR --profile
HN_ATTN_CM2_TILE=64,80,256 row $R train-fp16-ones-nt256 $TR --profile
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
