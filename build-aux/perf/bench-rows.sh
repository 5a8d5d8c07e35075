# Sourced by the dated run scripts here (after device-check set step, $cli, $OUT):
# row FILE LABEL ARGS... runs `benchmark --json ARGS` and appends its result, labelled, to $OUT/FILE;
# prof FILE prints each row of $OUT/FILE with its whole per-op profile (into summary.txt too).
prof() {
  python3 - "$1" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    try: d = json.loads(line)
    except Exception: continue
    print(d.get("label", d.get("workload")), round(d.get("tokens_per_s", 0), 1), "tok/s", "peak", d.get("peak_device_bytes"))
    if "profile" in d:
        print("  profile", round(d.get("profiled_step_gpu_us", 0)), "us:",
              ", ".join("%s %d x %.0f us" % (o["op"], o["dispatches"], o["us"]) for o in d["profile"]))
PY
}
# (ROW_SKIP="label ...": rows left out, for a call short of device time)
row() {
  local f=$1 l=$2; shift 2
  case " ${ROW_SKIP-} " in *" $l "*) return 0 ;; esac
  step "$l" timeout 60 sh -c "\"$cli\" benchmark --json $* >/tmp/row.json"
  python3 -c "import json,sys; d=json.loads(open('/tmp/row.json').read().strip().splitlines()[-1]); d['label']=sys.argv[1]; print(json.dumps(d))" "$l" >>"$OUT/$f" 2>/dev/null
}
# issue22_table FILE: issue 22's table rows (GEMMs, prefill 1 x 512 and 4 x 512 profiled, decode, LoRA at
# fp32 and fp16, gpt2 fp16 training twice and profiled by GEMM shape), appended to $OUT/FILE.
issue22_table() {
  local R=$1
  local TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
  local LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
  row $R gemm-bf16 --workload gemm --dtype bf16 --size 8192 --iterations 20 --warmup 3
  row $R gemm-f32 --workload gemm --dtype f32 --size 8192 --iterations 5
  row $R p1x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 10 --warmup 2 --profile
  row $R p4x512 --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
  row $R decode --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 128
  row $R lora $LO
  row $R lora-fp16 $LO --precision fp16
  row $R train-fp16 $TR
  row $R train-fp16-again $TR
  HN_PROFILE_SHAPES=1 row $R train-fp16-profile $TR --profile
}
# llamacpp_1b: llama.cpp's llama-bench on the llama-1b bf16 shape from the carry (HN_LLAMACPP=bench),
# its JSON in $OUT/llamacpp.json and its table in summary.txt.
llamacpp_1b() {
  local LC="$CARRY/llamacpp"
  [ -f "$LC/gguf-py.tar.xz" ] && [ ! -d "$LC/gguf-py" ] && tar -C "$LC" -xJf "$LC/gguf-py.tar.xz"
  # llama-bench loads the Vulkan loader and libGLdispatch from the engine's own lib folder
  LD_LIBRARY_PATH="/tmp/hn-carry-unpacked/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    OUT=/tmp/hn-llamacpp MODELS="1b:bf16" PROBE=1b:bf16 REPS=3 TIME_BUDGET=90 bash "$LC/run_llamacpp.sh" >>"$LOG" 2>&1
  echo "llama.cpp rc=$?" | tee -a "$OUT/summary.txt"
  cp /tmp/hn-llamacpp/llamabench_1b_bf16.json "$OUT/llamacpp.json" 2>/dev/null
  grep -E "^\|" /tmp/hn-llamacpp/llamabench_1b_bf16.stderr 2>/dev/null | tee -a "$OUT/summary.txt"
}
# rows_summary FILE: one line per row of $OUT/FILE (tok/s, TFLOP/s, losses, peak, the ms_* phases).
rows_summary() {
  python3 - "$OUT/$1" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d['label'], round(d.get('tokens_per_s', 0), 1), 'tok/s', round(d.get('tflops', 0), 1), 'TFLOP/s', 'loss',
          d.get('first_step_loss', ''), d.get('loss', ''), 'peak', d.get('peak_device_bytes'),
          {k: round(v, 2) for k, v in d.items() if k.startswith('ms_')})
PY
}
