# Device call 2026-12-08b: issue 22's table with llama.cpp beside it (PyTorch left out: the session's
# device time ran out on failed machine starts), after this session's changes (act_f16 with 16-byte accesses; attention_cm2_ones, the
# flash backward prefetch, norm_back_rows and the row-per-subgroup norms measured in call a and dropped).
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-x HN_CARRY_ONLY="" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-next-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
R=rows.jsonl
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
# 277 s of device time were left for this call: the open rows first, then the others, llama.cpp last
row $R p4x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
HN_PROFILE_SHAPES=1 row $R train-fp16 $TR --profile
row $R p1x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2
row $R decode --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
row $R lora --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3
row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
row $R gemm-f32 --workload gemm --dtype f32 --size 8192 --iterations 5
rows_summary $R
prof "$OUT/$R"
python3 - "$OUT/$R" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
a = {"train-fp16": 10.879135685390793}  # call 2026-12-07a
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["label"] in a:
        print(d["label"], "first_step_loss", d.get("first_step_loss"), "call a:", a[d["label"]])
PY
llamacpp_1b
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
