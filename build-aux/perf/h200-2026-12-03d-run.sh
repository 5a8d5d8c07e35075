# Call D, 2026-12-03: the recurrent ops added last (RG-LRU, RWKV-4's WKV) and the state-space
# decoders on the H200: test-ops-ssm, test-ssm-parity (mamba, falcon_mamba, mamba2, rwkv),
# test-hybrid, test-rwkv, test-transformer-parity (recurrent_gemma among them); mamba-130m decode
# and prefill.
# Prepare: HN_CARRY=.devcarry-d HN_CARRY_TESTS="test-hybrid test-rwkv" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03d-run.sh HN_CARRY=.devcarry-d bash build-aux/device-check run
for t in test-ops-ssm test-ssm-parity test-hybrid test-rwkv test-transformer-parity; do
  step "$t" timeout 90 "$CARRY/bin/$t"
done
step "mamba-130m decode" timeout 60 sh -c "\"$cli\" benchmark --json --synthetic mamba-130m --dtype bf16 --workload decode --seq-len 128 --new-tokens 128 >>\"$OUT/bench.jsonl\""
step "mamba-130m prefill" timeout 60 sh -c "\"$cli\" benchmark --json --synthetic mamba-130m --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 5 >>\"$OUT/bench.jsonl\""
cut -c1-300 "$OUT/bench.jsonl" | tee -a "$OUT/summary.txt"
