# Final call, 2026-12-03 (m): the GPU checks of this session's kernel changes first (test-back-ops:
# the LoRA rank kernels under fp16 autocast and the split-K partials left unrounded, on the NVIDIA
# compiler), then issue 22's table with llama.cpp's llama-bench beside it in the same call, LoRA at
# --precision fp16 beside the table's fp32 row, and test-ops-matmul when time is left.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-m HN_CARRY_ONLY="test-back-ops test-ops-matmul" build-aux/device-check prepare
# (Its table rows and llama.cpp step moved into bench-rows.sh's issue22_table and llamacpp_1b after
# the call ran: the same commands.)
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03m-final-run.sh HN_CARRY=.devcarry-m bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
left() { echo $(( ${1:-380} - (SECONDS - T0) )); }
for f in "$CARRY"/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
step "test-back-ops" timeout 60 "$CARRY/bin/test-back-ops"
R=rows.jsonl
issue22_table $R
llamacpp_1b
rows_summary $R
prof "$OUT/$R"
t_left=$(left); [ "$t_left" -gt 30 ] && step "test-ops-matmul" timeout $(( t_left < 100 ? t_left : 100 )) "$CARRY/bin/test-ops-matmul"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
