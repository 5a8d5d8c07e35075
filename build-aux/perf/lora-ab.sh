# Issue 22's LoRA row (llama-1b bf16, r 8 on q,k,v,o, 4 x 512) with each of the wt-lora
# toggles on and off: the tests of their kernels first, then one benchmark per setting,
# each a JSON line in $OUT/lora-ab.jsonl tagged "ab".
#   HN_CE_FUSED=0    the head chunks' loss and gradient from two kernels (cross_entropy + _back)
#   HN_CE_F16=0      that gradient in f32, rounded by to_f16 before the head's matmul
#   HN_LORA_FUSE=0   the q, k, v adapters' down-projections, dA and dx one call each
#   HN_LORA_ROWS_RB  rows per subgroup of lora_rows (default 2 at 2048 rows; 1 is the old kernel)
#   HN_LORA_F16_ACTS=0  ln2's output, the MLP activation and the gate/up gradients in f32, then to_f16
#                    before their matmuls
#   HN_TO_F16_VEC=0  to_f16.comp two elements per invocation (the remaining copies; default four)
# Every toggle but HN_CE_FUSED keeps the same bits: the same loss as "default" is the check
# (the tensor-core path of HN_LORA_F16_ACTS has no other test).
# Prepared with HN_CARRY=.devcarry-lora HN_CARRY_TESTS="test-back-ops test-train-parity"
# build-aux/device-check prepare; sourced by
# `HN_CHECK=script HN_SCRIPT=build-aux/perf/lora-ab.sh HN_CARRY=.devcarry-lora bash build-aux/device-check run`
# (step, $cli, $CARRY, $OUT set). About 130 s on the H200.
B="$CARRY/bin"
T0=$SECONDS
step "back-ops lora + cross-entropy" timeout 40 "$B/test-back-ops" -p /back-ops/lora-expand -p /back-ops/lora-down \
  -p /back-ops/cross-entropy -p /back-ops/cross-entropy-grad --verbose
step "train-parity lora" timeout 40 "$B/test-train-parity" -p /train-parity/llama_lora -p /train-parity/gpt2_lora \
  -p /train-parity/checkpointing/llama_lora --verbose
step "qlora head chunks" timeout 40 "$B/test-qlora" -p /qlora/train-head-chunks -p /qlora/train-tensor-cores --verbose
# each setting bounded, and none started past 110 s of this script (the call is to take at most 150 s)
ab() {
  local tag="$1"; shift
  [ $((SECONDS - T0)) -lt 110 ] || { echo "lora $tag: skipped (time)" | tee -a "$OUT/summary.txt"; return; }
  step "lora $tag" timeout 40 env "$@" bash -o pipefail -c "\"$cli\" benchmark --json --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 ${PROFILE:-} | sed 's/^{/{\"ab\": \"$tag\", /' >>\"$OUT/lora-ab.jsonl\""
}
PROFILE=--profile ab "default, profiled" HN_AB=1
ab "default" HN_AB=1
ab "all off" HN_CE_FUSED=0 HN_LORA_FUSE=0 HN_LORA_ROWS_RB=1 HN_LORA_F16_ACTS=0 HN_TO_F16_VEC=0
ab "CE_FUSED=0" HN_CE_FUSED=0
ab "LORA_FUSE=0" HN_LORA_FUSE=0
ab "F16_ACTS=0" HN_LORA_F16_ACTS=0
ab "TO_F16_VEC=0" HN_TO_F16_VEC=0
ab "CE_F16=0" HN_CE_F16=0
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
    print("%-20s %7.2f ms/step %8.0f tok/s  peak %.2f GB  loss %.9f  gpu %s" % (d.get("ab"), d.get("ms_per_step", 0),
          d.get("tokens_per_s", 0), d.get("peak_device_bytes", 0) / 1e9, d.get("loss", 0), d.get("profiled_step_gpu_us", "-")))
    for op in d.get("profile") or []:
        print("    %-28s %4d dispatches %9.1f us" % (op.get("op"), op.get("dispatches", 0), op.get("us", 0)))
PY
