#!/bin/bash
# decode helper (issue 22), final check: the decode kernel tests on the H200 (filtered), then the
# llama-1b bf16 decode benchmark (profiled) on the new kernels and on the previous ones.
# Everything lands in ONE file: $OUT/decode/decode.tar.xz. Carry: .devcarry-decode/ with bin.tar.xz
# (stripped hierarchos-native-cli, test-ops-matmul, test-ops-attention, test-ops-norm,
# test-transformer-parity from a _build-device release build) and this file as run.sh.
set -u
source .devcarry-common/env.sh
export HN_BUILD_DIR="$PWD/.devcarry-decode"
D=.devcarry-decode
W=/tmp/hnd-out
R="$OUT/decode"
mkdir -p "$R" "$W" /tmp/hnd
tar xJf "$D/bin.tar.xz" -C /tmp/hnd
B=/tmp/hnd/bin
LOG="$W/log.txt"
t() {
  local name="$1"; shift
  local t0=$(date +%s%N)
  echo "=== $name: $*" >>"$LOG"
  timeout "$TO" "$@" >>"$LOG" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( ($(date +%s%N) - t0) / 1000000 ))ms" | tee -a "$W/summary.txt"
}
bench() {
  local tag="$1"; shift
  local t0=$(date +%s%N)
  env "$@" timeout 15 "$B/hierarchos-native-cli" benchmark --json --synthetic llama-1b --dtype bf16 --workload decode \
    --seq-len 128 --new-tokens 128 --iterations 3 $PROF 2>>"$LOG" | sed "s/^{/{\"tag\":\"$tag\",/" >>"$W/bench.jsonl"
  echo "bench $tag rc=${PIPESTATUS[0]} $(( ($(date +%s%N) - t0) / 1000000 ))ms" | tee -a "$W/summary.txt"
  tar cJf "$R/decode.tar.xz" -C "$W" .
}
PROF=--profile bench new
PROF=--profile bench old HN_MATVEC_NARROW=1 HN_ATTN_DECODE_PER_HEAD=1 HN_ARGMAX_ONE_GROUP=1
TO=5 t matvec "$B/test-ops-matmul" -p /ops/matvec/fused
TO=7 t attention "$B/test-ops-attention" -p /ops/attention -p /ops/attention-new-kv -p /ops/rope-kv
TO=3 t argmax "$B/test-ops-norm" -p /ops/topk
TO=6 t parity "$B/test-transformer-parity"
tar cJf "$R/decode.tar.xz" -C "$W" .
python3 - "$W" <<'PY' | tee "$W/short.txt"
import json, sys
r = sys.argv[1]
for l in open(r + "/bench.jsonl"):
    try: j = json.loads(l)
    except Exception: continue
    prof = {e["op"]: round(e["us"]) for e in j.get("profile", [])}
    print(j.get("tag"), "tok/s %.1f" % j.get("tokens_per_s", 0), "ms %.3f" % j.get("ms_per_token", 0),
          "gpu_us %.0f" % j.get("profiled_step_gpu_us", 0), "tok", j.get("first_token"), j.get("last_token"), prof)
PY
grep -E "^(not ok|Bail)" "$LOG" | head -5
tar cJf "$R/decode.tar.xz" -C "$W" .
