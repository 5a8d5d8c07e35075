# Issue 23 on the H200: 8B Q4_K_M prefill 512 with W's f16 form through gguf_to_f16_wide.comp
# (default) and through the older gguf_to_f16.comp (HN_GGUF_TO_F16_OLD=1), each with a profiled
# step (the gguf_to_f16_wide / gguf_to_f16 rows are the dequant's time), then the wide kernel's
# workgroup shapes (HN_GGUF_TO_F16_TUNE="wg,items"; default 256,4). About 90 s.
# Run: HN_CHECK=script HN_SCRIPT=build-aux/perf/gguf-to-f16-ab.sh HN_CARRY=.devcarry-q8 bash build-aux/device-check run
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf-f16; mkdir -p "$W"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
row() {
  local l=$1; shift
  step "8b $l" timeout 60 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload prefill --seq-len 512 --iterations 5 $* >\"$W/$l.json\""
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); d['label']=sys.argv[2]; print(json.dumps(d))" "$W/$l.json" "$l" >>"$OUT/rows.jsonl" 2>/dev/null
}
if [ -s "$W/8b.gguf" ]; then
  row wide
  HN_GGUF_TO_F16_OLD=1 row old
  row wide-profile --iterations 2 --profile
  HN_GGUF_TO_F16_OLD=1 row old-profile --iterations 2 --profile
  for t in 256,1 256,2 256,8 128,4 512,2 1024,1; do
    HN_GGUF_TO_F16_TUNE=$t row "wide-$t-profile" --iterations 2 --profile
  done
  rm -f "$W/8b.gguf"
fi
python3 - "$OUT/rows.jsonl" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d["label"], round(d["tokens_per_s"], 1), "tok/s")
    for o in d.get("profile", []):
        if o["op"].startswith("gguf_to_f16"):
            print("  %s %d x, %.0f us" % (o["op"], o["dispatches"], o["us"]))
PY
