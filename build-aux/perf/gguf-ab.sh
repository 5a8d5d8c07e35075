# Issue 23 on the H200: the GGUF matrix-vector kernels' new layout (chunk_dot_ql
# of shaders/matvec_gguf.comp, Q4_K and Q6_K) against the older one
# (HN_MATVEC_GGUF_QL=0) on the 8B Q4_K_M mix of random blocks
# (make_random_q4km.py), with llama.cpp's llama-bench on the same file.
# Kernel and model tests first. About 120 s.
# Prepare: HN_LLAMACPP=1 HN_CARRY=.devcarry-gguf bash build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/gguf-ab.sh HN_CARRY=.devcarry-gguf bash build-aux/device-check run
# Sourced by device-check run (step, $cli, $CARRY, $OUT set).
T0=$SECONDS
left() { echo $(( ${1:-150} - (SECONDS - T0) )); }
step "test-quant gguf-matvec" timeout 45 "$CARRY/bin/test-quant" -p /quant/gguf-matvec --verbose
step "test-gguf-model" timeout 30 "$CARRY/bin/test-gguf-model" --verbose
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf-ab; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
step "make 8b q4_k_m" timeout 30 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
# label, timeout, then benchmark arguments; one JSON file a row
dec() {
  local l=$1 t=$2; shift 2
  step "decode 8b $l" timeout "$t" sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload decode $* >\"$OUT/decode-$l.json\""
}
if [ -s "$W/8b.gguf" ]; then
  dec ql1 25 --seq-len 128 --new-tokens 128
  HN_MATVEC_GGUF_QL=0 dec ql0 25 --seq-len 128 --new-tokens 128
  dec ql1-profile 25 --seq-len 128 --new-tokens 16 --profile
  step "llama-bench 8b q4_k_m" timeout 40 env LD_LIBRARY_PATH="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 0 -n 128 -ngl 99 -fa 1 -r 2 -o json >"$OUT/llamabench-8b-q4km.json"
  # rows a subgroup and chunks a lane on the new layout, while time is left
  for t in 4,4 4,2,2; do
    [ "$(left)" -gt 25 ] || break
    HN_MATVEC_GGUF_TUNE=$t dec "ql1-tune-$t" 20 --seq-len 128 --new-tokens 64
  done
  rm -f "$W/8b.gguf"
fi
for f in "$OUT"/decode-*.json; do
  [ -s "$f" ] && python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(sys.argv[1].rsplit('/',1)[1], round(d['tokens_per_s'],1), 'tok/s', d.get('ms_per_token'), 'ms/tok')" "$f" 2>&1 | tail -n 3 | tee -a "$OUT/summary.txt"
done
python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print('profile', d['profiled_step_gpu_us'], 'us:', ', '.join('%s %d x %.0f us' % (o['op'], o['dispatches'], o['us']) for o in d['profile'][:6]))" "$OUT/decode-ql1-profile.json" 2>&1 | tail -n 3 | tee -a "$OUT/summary.txt"
python3 -c "import json,sys; [print('llama-bench', r['n_prompt'], r['n_gen'], round(r['avg_ts'],1), 'tok/s') for r in json.load(open(sys.argv[1]))]" "$OUT/llamabench-8b-q4km.json" 2>&1 | tail -n 3 | tee -a "$OUT/summary.txt"
