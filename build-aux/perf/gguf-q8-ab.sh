# Issue 23 on the H200: the integer-dot decode kernel (matvec_gguf_q8.comp,
# dotPacked4x8EXT) against the float kernel (HN_MATVEC_GGUF_Q8=0) and the
# workgroup shapes (HN_MATVEC_GGUF_TUNE), on the 8B Q4_K_M mix of random
# blocks (make_random_q4km.py), with llama.cpp's llama-bench on the same file
# (decode and prefill 512); prefill through W's f16 form (the default) and
# through matmul_gguf_cm2.comp's in-tile decode (HN_QUANT_F16=0). Kernel and model tests first. About 200 s. Results: one
# JSON line a row in $OUT/rows.jsonl ({"label": ..., the benchmark's JSON}).
# Prepare: HN_LLAMACPP=1 HN_CARRY=.devcarry-q8 bash build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/gguf-q8-ab.sh HN_CARRY=.devcarry-q8 bash build-aux/device-check run
# Sourced by device-check run (step, $cli, $CARRY, $OUT set).
T0=$SECONDS
left() { echo $(( ${1:-400} - (SECONDS - T0) )); }
step "test-quant" timeout 90 "$CARRY/bin/test-quant" --verbose
step "test-gguf-model" timeout 40 "$CARRY/bin/test-gguf-model" --verbose
# the merged tree's GPU paths: chunked attention's fallback from the flash kernels (llama4_text),
# the parity fixtures (new text models), the hybrids' state layers (lfm2's short convolutions)
step "test-ops-attention" timeout 90 "$CARRY/bin/test-ops-attention"
step "test-transformer-parity" timeout 120 "$CARRY/bin/test-transformer-parity"
step "test-hybrid" timeout 60 "$CARRY/bin/test-hybrid"
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf-q8; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
# a LoRA fine-tune of the demo model exported merged (f16): llama-simple's greedy text from that file
# (tests/fixtures/gguf/llama-simple-lora-output.txt; test-gguf-model compares ours with it)
step "export lora merged f16" timeout 30 "$cli" export-gguf --model-path data/demo/stories260K \
  --lora-adapter-path tests/fixtures/gguf/stories260K-lora --outtype f16 --out "$W/lora-f16.gguf"
for ngl in 0 99; do
  { echo "== lora-f16.gguf ngl=$ngl"; env LD_LIBRARY_PATH="$LCL" timeout 30 "$W/bin/llama-simple" -m "$W/lora-f16.gguf" -n 40 -ngl $ngl "Once upon a time" 2>/dev/null; echo " [rc=$?]"; } >>"$OUT/llama-simple-lora.txt"
done
cat "$OUT/llama-simple-lora.txt" | tee -a "$OUT/summary.txt"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
row() {
  local l=$1 t=$2; shift 2
  step "8b $l" timeout "$t" sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf $* >\"$W/$l.json\""
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); d['label']=sys.argv[2]; print(json.dumps(d))" "$W/$l.json" "$l" >>"$OUT/rows.jsonl" 2>/dev/null
}
dec() { local l=$1 t=$2; shift 2; row "decode-$l" "$t" --workload decode "$@"; }
if [ -s "$W/8b.gguf" ]; then
  dec q8 40 --seq-len 128 --new-tokens 128
  HN_MATVEC_GGUF_Q8=0 dec float 40 --seq-len 128 --new-tokens 128
  dec q8-profile 40 --seq-len 128 --new-tokens 16 --profile
  step "llama-bench 8b q4_k_m" timeout 90 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 128 -ngl 99 -fa 1 -r 3 -o json >"$OUT/llamabench-8b-q4km.json"
  row prefill 60 --workload prefill --seq-len 512 --iterations 5
  row prefill-profile 60 --workload prefill --seq-len 512 --iterations 2 --profile
  HN_QUANT_F16=0 row prefill-blocks 60 --workload prefill --seq-len 512 --iterations 5
  # subgroups a workgroup, rows a subgroup, while time is left
  for t in 32,2 16,4 32,1; do
    [ "$(left)" -gt 40 ] || break
    HN_MATVEC_GGUF_TUNE=$t dec "q8-tune-${t/,/-}" 30 --seq-len 128 --new-tokens 64
  done
  rm -f "$W/8b.gguf"
fi
python3 - "$OUT/rows.jsonl" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d["label"], round(d["tokens_per_s"], 1), "tok/s", "peak", d.get("peak_device_bytes"))
    if "profile" in d:
        print("  profile", round(d.get("profiled_step_gpu_us", 0)), "us:",
              ", ".join("%s %d x %.0f us" % (o["op"], o["dispatches"], o["us"]) for o in d["profile"][:7]))
PY
grep -E '"n_prompt"|"n_gen"|"avg_ts"|"samples_ts"' "$LOG" | tail -n 8 | tee -a "$OUT/summary.txt"
