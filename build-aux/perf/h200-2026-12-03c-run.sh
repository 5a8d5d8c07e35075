# Call C, 2026-12-03: llama.cpp-made quantized files of random weights (make_gguf.py tiny, f16, then
# llama-quantize Q4_K_M and Q8_0: real Q4_K / Q6_K / Q8_0 blocks at width 256) generate here what
# llama-simple generates from them; the GPU tests on the final tree (test-quant with time enough for
# its CPU references); fixtures of the last recipes (HN_FX_ONLY) in the background.
# Prepare: HN_LLAMACPP=1 HN_CARRY=.devcarry-c HN_CARRY_TESTS="test-hybrid" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03c-run.sh HN_CARRY=.devcarry-c bash build-aux/device-check run
T0=$SECONDS
left() { echo $(( ${1:-560} - (SECONDS - T0) )); }
if [ -n "${HN_FX_ONLY:-}" ]; then
  (
    cd tests/fixtures
    python3 make_fixtures.py --out /tmp/fx --budget-s 240 --only "$HN_FX_ONLY" >/tmp/fx.log 2>&1; echo "fixtures rc=$?" >>/tmp/fx.log
    tar czf "$OUT/fx.tgz" -C /tmp/fx . && cp /tmp/fx.log "$OUT/"
  ) &
  FXPID=$!
fi
LC="$CARRY/llamacpp"; W=/tmp/hn-lcq; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
step "make tiny f16" timeout 120 env GGUF_PY="$LC/gguf-py" python3 "$LC/make_gguf.py" --shape tiny --dtype f16 --out "$W/tiny-f16.gguf"
for q in Q4_K_M Q8_0; do
  f="$W/tiny-$q.gguf"
  step "llama-quantize $q" timeout 60 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-quantize" "$W/tiny-f16.gguf" "$f" $q
  [ -s "$f" ] || continue
  for ngl in 0 99; do
    env LD_LIBRARY_PATH="$LCL" timeout 60 "$W/bin/llama-simple" -m "$f" -n 24 -ngl $ngl "Once upon a time" \
      >"$W/lc-$q-$ngl.txt" 2>"$W/lc-$q-$ngl.err"
    echo "== llama-simple $q ngl=$ngl rc=$?: $(tr '\n' ' ' <"$W/lc-$q-$ngl.txt")" | tee -a "$OUT/lcq.txt"
  done
  timeout 60 "$cli" generate --model-path "$f" --prompt "Once upon a time" --max-new-tokens 24 >"$W/ours-$q.txt" 2>"$W/ours-$q.err"
  echo "== ours $q rc=$?: $(tr '\n' ' ' <"$W/ours-$q.txt")" | tee -a "$OUT/lcq.txt"
  tail -3 "$W/ours-$q.err" >>"$OUT/lcq.txt"
done
for t in test-quant test-gguf-model test-transformer-parity test-ops-ssm test-hybrid; do
  t_left=$(left); [ "$t_left" -gt 20 ] || { echo "skipped $t (time)" | tee -a "$OUT/summary.txt"; continue; }
  step "$t" timeout $(( t_left < 200 ? t_left : 200 )) "$CARRY/bin/$t"
done
if [ -n "${FXPID:-}" ]; then
  wait $FXPID
  grep -E "^===|^ok|rc=" /tmp/fx.log | tail -20 | tee -a "$OUT/summary.txt"
fi
