# Call B, 2026-12-03: issue 23's 8B Q4_K_M rows on the final tree (16-bit flash attention with GGUF
# weights, the coalesced dequantization against the previous one: HN_GGUF_TO_F16_OLD=1) beside
# llama-bench pp512/tg128 on the same file; the fixtures of this session's last recipes (in the
# background, on the CPU); then the GPU tests while time is left.
# Prepare: HN_LLAMACPP=1 HN_CARRY=.devcarry-b HN_CARRY_TESTS="test-hybrid" build-aux/device-check prepare
#          (then llamacpp/{lib,gguf-py} packed into llamacpp-extra.tar.xz, llama-bench alone in bin.tar.xz)
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03b-run.sh HN_CARRY=.devcarry-b bash build-aux/device-check run
T0=$SECONDS
left() { echo $(( ${1:-560} - (SECONDS - T0) )); }
(
  cd tests/fixtures
  python3 make_fixtures.py --out /tmp/fx --budget-s 300 --only "${HN_FX_ONLY:-emu3_text_model,mllama_text_model}" \
    >/tmp/fx.log 2>&1; echo "fixtures rc=$?" >>/tmp/fx.log
  tar czf "$OUT/fx.tgz" -C /tmp/fx . && cp /tmp/fx.log "$OUT/"
) &
FXPID=$!
. build-aux/perf/bench-rows.sh
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
if [ -s "$W/8b.gguf" ]; then
  G="--model-path $W/8b.gguf"
  row gguf.jsonl prefill $G --workload prefill --seq-len 512 --iterations 5
  HN_GGUF_TO_F16_OLD=1 row gguf.jsonl prefill-old-dequant $G --workload prefill --seq-len 512 --iterations 5
  row gguf.jsonl prefill-profile $G --workload prefill --seq-len 512 --iterations 2 --profile
  HN_GGUF_TO_F16_OLD=1 row gguf.jsonl prefill-old-dequant-profile $G --workload prefill --seq-len 512 --iterations 2 --profile
  for t in 256,8 512,2 128,4; do
    HN_GGUF_TO_F16_TUNE=$t row gguf.jsonl "prefill-dequant-$t-profile" $G --workload prefill --seq-len 512 --iterations 2 --profile
  done
  row gguf.jsonl decode $G --workload decode --seq-len 128 --new-tokens 128
  step "llama-bench 8b q4_k_m" timeout 90 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 128 -ngl 99 -fa 1 -r 5 -o json
  row gguf.jsonl prefill-after $G --workload prefill --seq-len 512 --iterations 5
  row gguf.jsonl decode-after $G --workload decode --seq-len 128 --new-tokens 128
  rm -f "$W/8b.gguf"
  prof "$OUT/gguf.jsonl"
  grep -E '"n_prompt"|"n_gen"|"avg_ts"|"samples_ts"' "$LOG" | tee -a "$OUT/summary.txt"
fi
for t in test-quant test-gguf-model test-qlora test-ops-attention test-hybrid test-ops-ssm test-transformer-parity; do
  t_left=$(left); [ "$t_left" -gt 20 ] || { echo "skipped $t (time)" | tee -a "$OUT/summary.txt"; continue; }
  step "$t" timeout $(( t_left < 90 ? t_left : 90 )) "$CARRY/bin/$t"
done
wait $FXPID
grep -E "^===|^ok|rc=" /tmp/fx.log | tail -20 | tee -a "$OUT/summary.txt"
