# Call a, 2026-12-07: the tensor cores' ceiling through workgroup-scope matrices (the kind matmul_cm2
# uses), per tile, operands constant and reloaded from shared memory each step, beside the
# subgroup-scope ceiling and the 8192³ GEMM.
# Prepare: HN_LLAMACPP=bench HN_CARRY=.devcarry-a HN_CARRY_ONLY="test-ops-matmul test-back-ops test-train-fp16 test-ops-attention" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-07a-run.sh HN_CARRY=.devcarry-a bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
T0=$SECONDS
R=rows.jsonl
row $R mma-peak --workload mma-peak --iterations 3
row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
python3 -c "
import json
for l in open('$OUT/$R'):
    d=json.loads(l); print(d['label'], round(d.get('tflops',0),1))
    for t in d.get('workgroup_scope', []): print('  ', t)
" | tee -a "$OUT/summary.txt"
echo "script seconds: $((SECONDS - T0))" | tee -a "$OUT/summary.txt"
