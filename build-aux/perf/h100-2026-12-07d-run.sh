# Device call 2026-12-07d (an H100): PyTorch and the project side by side on the two open rows. Output beside it.
# PyTorch beside the project on the card at hand for issue 22's two open rows (accelerator.md's
# PyTorch figures are the H200's; this session's calls got an H100): build-aux/perf/torch-reference.py.
# Prepare: HN_CARRY=.devcarry-x HN_CARRY_ONLY="test-train-parity" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h100-2026-12-07d-run.sh HN_CARRY=.devcarry-x bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
R=rows.jsonl
row $R p4x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2
row $R train-fp16 --synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3
rows_summary $R
step "pytorch" timeout 200 python3 build-aux/perf/torch-reference.py
grep -E "^(device|prefill|train)" "$LOG" | tee -a "$OUT/summary.txt"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
