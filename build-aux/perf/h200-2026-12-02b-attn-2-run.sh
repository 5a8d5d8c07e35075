#!/bin/bash
# attn 2: GPU op tests (lora_expand/rows/cols, glu_back vec4), flash attention test,
# flash fwd/back timings (per-head vs grouped GQA kv pass), LoRA llama-1b 4x512 fp32 + fp16.
# Everything ends up in ONE file: $OUT/attn/attn.tar.xz (re-made after each step).
source .devcarry-common/env.sh
export HN_BUILD_DIR="$PWD/.devcarry-attn"
O=/tmp/attn-out; rm -rf $O; mkdir -p $O "$OUT/attn"
B=/tmp/attn-bin; rm -rf $B; mkdir -p $B; tar xJf .devcarry-attn/bin.tar.xz -C $B --strip-components=1
L="$O/log.txt"; : >"$L"
pack() { tar cJf "$OUT/attn/attn.tar.xz" -C $O . ; }
s() { local n="$1"; shift; local t0=$(date +%s%N); "$@" >>"$L" 2>&1; local rc=$?; echo "$n rc=$rc $(( ($(date +%s%N)-t0)/1000000 ))ms" | tee -a "$O/summary.txt"; pack; }
s op-tests timeout 20 $B/test-back-ops -p /back-ops/lora-expand -p /back-ops/lora-down -p /back-ops/activations --verbose
s flash-test timeout 40 $B/test-ops-attention -p /ops/attention-flash --verbose
grep -E "not ok|ERROR|Bail|assert" "$L" | head -5
timeout 15 $B/hn-bench-ops --filter attention-train >"$O/bench-ops.jsonl" 2>>"$L"; pack
cut -c1-160 "$O/bench-ops.jsonl"
bench() { s "lora $1" timeout 40 sh -c "$B/hierarchos-native-cli benchmark --json --synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3 --profile $2 >>$O/bench.jsonl"; }
sumup() { python3 - "$O/bench.jsonl" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l); print({k:d.get(k) for k in ("precision","tokens_per_s","ms_per_step","loss","peak_device_bytes","profiled_step_gpu_us")})
    print("  " + " ".join("%s:%d/%.0f" % (e["op"], e["dispatches"], e["us"]) for e in d.get("profile",[]) if e["us"] > 150))
PY
}
bench fp32 ""
sumup
bench fp16 "--precision fp16"
sumup | tail -2
