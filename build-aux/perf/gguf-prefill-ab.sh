# Issue 23 on the H200: 8B Q4_K_M prefill 512 through each GGUF path, beside llama-bench's pp512
# (5 repetitions: its first ones run while the clocks ramp). W's f16 form (default), the in-tile
# decode into shared f16 (HN_QUANT_F16=0), the driver's per-element decode functions
# (HN_GGUF_CM2_SHB=0) and their tiles (HN_GGUF_CM2_TILE). About 120 s.
# Run: HN_CHECK=script HN_SCRIPT=build-aux/perf/gguf-prefill-ab.sh HN_CARRY=.devcarry-q8 bash build-aux/device-check run
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf-pf; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
row() {
  local l=$1; shift
  step "8b $l" timeout 60 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload prefill --seq-len 512 --iterations 5 $* >\"$W/$l.json\""
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); d['label']=sys.argv[2]; print(json.dumps(d))" "$W/$l.json" "$l" >>"$OUT/rows.jsonl" 2>/dev/null
}
if [ -s "$W/8b.gguf" ]; then
  row f16-form
  HN_QUANT_F16=0 HN_GGUF_CM2_SHB=0 row decode-fn
  HN_QUANT_F16=0 HN_GGUF_CM2_SHB=0 HN_GGUF_CM2_TILE=128,128,64 row decode-fn-128x128
  HN_QUANT_F16=0 HN_GGUF_CM2_SHB=0 HN_GGUF_CM2_TILE=128,256,32 row decode-fn-128x256k32
  HN_QUANT_F16=0 HN_GGUF_CM2_SHB=0 row decode-fn-profile --iterations 2 --profile
  step "llama-bench pp512" timeout 90 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 0 -ngl 99 -fa 1 -r 5 -o json >"$OUT/llamabench.json"
  row f16-form-after
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
grep -E '"avg_ts"|"samples_ts"' "$LOG" | tail -n 2 | tee -a "$OUT/summary.txt"
