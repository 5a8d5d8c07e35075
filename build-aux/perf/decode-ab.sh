# Decode attention A/B (issues 22, 23): attention_decode_tile.comp (the default) against
# attention_decode.comp (HN_DECODE_ATTN=old), in one H200 call of about 130 s.
# Sourced by `HN_CHECK=script HN_SCRIPT=build-aux/perf/decode-ab.sh HN_CARRY=.devcarry-decode
# bash build-aux/device-check run` (step, $cli, $CARRY, $OUT set); the carry from
# `HN_LLAMACPP=1 HN_CARRY=.devcarry-decode build-aux/device-check prepare` (gguf-py for the 8B file).
# Everything lands in $OUT/bench.jsonl (one object a run, "attn" added: tile or old),
# $OUT/bench-ops.jsonl and the summary.
step "test-ops-attention (decode)" timeout 30 "$CARRY/bin/test-ops-attention" --verbose -p /ops/attention-decode \
  -p /ops/attention-new-kv -p /ops/attention
# the kernel alone (separate merge), both kernels
for a in tile old; do
  HN_DECODE_ATTN=$a timeout 15 "$CARRY/bin/hn-bench-ops" --filter attention-decode 2>>"$LOG" |
    sed "s/^{/{\"attn\": \"$a\", /" >>"$OUT/bench-ops.jsonl"
done
# the LM head's matvec (128256 x 2048 bf16) under a few matvec_wide shapes (invocations, rows, unroll)
for tune in default 256,8,1 256,8,2 128,8,2 512,8,1; do
  if [ "$tune" = default ]; then unset HN_MATVEC_WIDE; else export HN_MATVEC_WIDE=$tune; fi
  timeout 10 "$CARRY/bin/hn-bench-ops" --filter matvec-bf16-lmhead 2>>"$LOG" |
    sed "s/^{/{\"wide\": \"$tune\", /" >>"$OUT/bench-ops.jsonl"
done
unset HN_MATVEC_WIDE
cat "$OUT/bench-ops.jsonl"
# llama-1b bf16 decode, each with one profiled step after the timed runs
ab() {
  local a="$1"; shift
  step "$a: $*" timeout "${T:-35}" sh -c "HN_DECODE_ATTN=$a \"$cli\" benchmark --json $* | sed 's/^{/{\"attn\": \"$a\", /' >>\"$OUT/bench.jsonl\""
}
ab tile --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128 --profile
ab old --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128 --profile
# the 8B Q4_K_M mix of random blocks (as h200-2026-12-02d-start-run.sh makes it)
W=/tmp/hn-gguf
mkdir -p "$W"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$CARRY/llamacpp/gguf-py" python3 build-aux/perf/make_random_q4km.py \
  --shape 8b --out "$W/8b.gguf"
if [ -s "$W/8b.gguf" ]; then
  ab tile --model-path "$W/8b.gguf" --workload decode --seq-len 128 --new-tokens 128 --profile
  ab old --model-path "$W/8b.gguf" --workload decode --seq-len 128 --new-tokens 128 --profile
  rm -f "$W/8b.gguf"
fi
# a longer context (1024 keys in a 1153-row cache: 18 splits of 64 keys against 8 of 192)
T=25 ab tile --synthetic llama-1b --dtype bf16 --workload decode --seq-len 1024 --new-tokens 128
T=25 ab old --synthetic llama-1b --dtype bf16 --workload decode --seq-len 1024 --new-tokens 128
# tokens/s and the attention rows of each profile
python3 - "$OUT/bench.jsonl" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    att = [e for e in r.get("profile", []) if "attention" in json.dumps(e)]
    print(r.get("attn"), r.get("model"), "seq", r.get("prompt_tokens"), "tok/s %.1f" % r.get("tokens_per_s", 0),
          "step_us", r.get("profiled_step_gpu_us"), json.dumps(att)[:300])
EOF
