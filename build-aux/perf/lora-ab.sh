# Issue 22's LoRA row (llama-1b bf16, r 8 on q,k,v,o, 4 x 512) with each of the wt-lora
# toggles on and off: the tests of their kernels first, then one benchmark per setting,
# each a JSON line in $OUT/lora-ab.jsonl tagged "ab".
#   HN_CE_FUSED=0    the head chunks' loss and gradient from two kernels (cross_entropy + _back)
#   HN_CE_F16=0      that gradient in f32, rounded by to_f16 before the head's matmul
#   HN_LORA_FUSE=0   the q, k, v adapters' down-projections, dA and dx one call each
#   HN_LORA_ROWS_RB  rows per subgroup of lora_rows (default 2 at 2048 rows; 1 is the old kernel)
# Prepared with HN_CARRY=.devcarry-lora HN_CARRY_TESTS="test-back-ops test-train-parity"
# build-aux/device-check prepare; sourced by
# `HN_CHECK=script HN_SCRIPT=build-aux/perf/lora-ab.sh HN_CARRY=.devcarry-lora bash build-aux/device-check run`
# (step, $cli, $CARRY, $OUT set). About 120 s on the H200.
B="$CARRY/bin"
step "back-ops lora + cross-entropy" timeout 40 "$B/test-back-ops" -p /back-ops/lora-expand -p /back-ops/lora-down \
  -p /back-ops/cross-entropy -p /back-ops/cross-entropy-grad --verbose
step "train-parity lora" timeout 40 "$B/test-train-parity" -p /train-parity/llama_lora -p /train-parity/gpt2_lora \
  -p /train-parity/checkpointing/llama_lora --verbose
step "qlora head chunks" timeout 40 "$B/test-qlora" -p /qlora/train-head-chunks -p /qlora/train-tensor-cores --verbose
ab() {
  local tag="$1"; shift
  step "lora $tag" timeout 40 env "$@" sh -c "\"$cli\" benchmark --json --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 ${PROFILE:-} | sed 's/^{/{\"ab\": \"$tag\", /' >>\"$OUT/lora-ab.jsonl\""
}
PROFILE=--profile ab "default, profiled" HN_AB=1
ab "default" HN_AB=1
ab "all off" HN_CE_FUSED=0 HN_LORA_FUSE=0 HN_LORA_ROWS_RB=1
ab "CE_FUSED=0" HN_CE_FUSED=0
ab "CE_F16=0" HN_CE_F16=0
ab "LORA_FUSE=0" HN_LORA_FUSE=0
ab "ROWS_RB=1" HN_LORA_ROWS_RB=1
ab "ROWS_RB=4" HN_LORA_ROWS_RB=4
# one line per setting: ms/step, tokens/s, peak
python3 - "$OUT/lora-ab.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    print("%-20s %7.2f ms/step %8.0f tok/s  peak %.2f GB  gpu %s" % (d.get("ab"), d.get("ms_per_step", 0), d.get("tokens_per_s", 0),
          d.get("peak_device_bytes", 0) / 1e9, d.get("profiled_step_gpu_us", "-")))
PY
