# Prefill flash attention A/B (issue 22): attention_cm2_reg.comp as before
# (HN_ATTN_CM2_OLD=1: 64 x 64 tiles in grid order, f32 K/V decoded per
# element, loads waited on in turn) against the new default (longest query
# blocks first, K/V as f16 copies, the next tiles' loads in flight), with
# HN_ATTN_CM2_KV16=0 and a few HN_ATTN_CM2_TILE=BR,BC,NT (kernels alone in
# hn-bench-ops), in one H200 call of at most about 150 s. Sourced by `HN_CHECK=script HN_SCRIPT=build-aux/perf/attn-ab.sh
# HN_CARRY=.devcarry-attn bash build-aux/device-check run` (step, $cli, $CARRY,
# $OUT set); the carry from `HN_CARRY=.devcarry-attn build-aux/device-check prepare`.
# Everything lands in $OUT/bench-ops.jsonl (a case and variant a line),
# $OUT/bench.jsonl (a CLI run a line, "attn" added) and $OUT/summary.txt
# (the kernel times, tok/s and the attention_cm2* profile rows a run).
t_start=$(date +%s)
touch "$OUT/bench.jsonl" "$OUT/bench-ops.jsonl"
left() { echo $(( $1 - ($(date +%s) - t_start) )); }
# the op tests on the tensor-core paths (forward, flash forward + backward), old and new
step "test-ops-attention new" timeout 30 "$CARRY/bin/test-ops-attention" --verbose
step "test-ops-attention old" timeout 30 env HN_ATTN_CM2_OLD=1 "$CARRY/bin/test-ops-attention"
step "test-ops-attention 64,32,256" timeout 30 env HN_ATTN_CM2_TILE=64,32,256 "$CARRY/bin/test-ops-attention" \
  -p /ops/attention -p /ops/attention-f16 -p /ops/attention-flash
step "test-ops-attention 128,64,256" timeout 30 env HN_ATTN_CM2_TILE=128,64,256 "$CARRY/bin/test-ops-attention" \
  -p /ops/attention -p /ops/attention-flash
# the kernels alone (hn-bench-ops: prefill b1/b4 and the training forward/backward shapes of the
# LoRA and gpt2 rows) under every setting, GPU timestamps, the f16 K/V copies included
# one process a setting: a tile the driver refuses then costs only its own line
bops() {
  local f="$1" v="$2"
  timeout 12 "$CARRY/bin/hn-bench-ops" --filter "$f" --variants "$v" >>"$OUT/bench-ops.jsonl" 2>>"$LOG" ||
    echo "hn-bench-ops $f '$v' failed" | tee -a "$OUT/summary.txt"
}
for v in HN_ATTN_CM2_OLD=1 HN_ATTN_CM2_NEW=1 HN_ATTN_CM2_KV16=0; do bops attention-prefill-16bit "$v"; done
for tile in 64,32,256 32,64,128 64,64,128 128,64,256 64,128,256 32,32,128; do
  bops attention-prefill-16bit "HN_ATTN_CM2_TILE=$tile"
done
for v in HN_ATTN_CM2_OLD=1 HN_ATTN_CM2_NEW=1 HN_ATTN_CM2_TILE=64,32,256 HN_ATTN_CM2_TILE=128,64,256; do
  bops attention-train "$v"
done
cat "$OUT/bench-ops.jsonl" | tee -a "$OUT/summary.txt"
# the whole prefill, old and new (a run is ~15-20 s: synthetic weights, pipelines, warm-up)
ab() {
  local a="$1" env="$2"; shift 2
  [ "$(left 145)" -gt 15 ] || { echo "skipped (time): $a $*" | tee -a "$OUT/summary.txt"; return; }
  step "$a: $*" timeout "$(( $(left 145) < 30 ? $(left 145) : 30 ))" sh -c \
    "env $env \"$cli\" benchmark --json $* | sed 's/^{/{\"attn\": \"$a\", /' >>\"$OUT/bench.jsonl\""
}
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile"
ab new HN_ATTN_CM2_NEW=1 $P1
ab old HN_ATTN_CM2_OLD=1 $P1
ab new HN_ATTN_CM2_NEW=1 $P4
ab old HN_ATTN_CM2_OLD=1 $P4
# tokens/s and the attention_cm2* rows of each profile
python3 - "$OUT/bench.jsonl" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    att = [e for e in r.get("profile", []) if "attention" in json.dumps(e) or "kv_f16" in json.dumps(e)]
    print(r.get("attn"), r.get("model"), "batch", r.get("batch"), "seq", r.get("prompt_tokens"),
          "tok/s %.1f" % r.get("tokens_per_s", 0), "step_us", r.get("profiled_step_gpu_us"), json.dumps(att)[:400])
EOF
