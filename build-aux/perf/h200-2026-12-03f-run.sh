# Call F, 2026-12-03 (second session): issue 22's gpt2-124m fp16 training step and the 4x512 prefill
# per GEMM shape (HN_PROFILE_SHAPES=1 labels each matmul_cm2 dispatch with M x N x K, layout, tile),
# under the default tile table and each HN_CM2_TILE override, to choose tiles shape by shape.
# Prepare: HN_CARRY=.devcarry-e build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03f-run.sh HN_CARRY=.devcarry-e bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
export HN_PROFILE_SHAPES=1
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 2 --profile"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 2 --warmup 2 --profile"
row train.jsonl default $TR
row p4.jsonl default $P4
for t in 128,256,64 128,128,64 256,128,64 64,256,64 128,64,64 64,128,64; do
  HN_CM2_TILE=$t row train.jsonl "tile-$t" $TR
  HN_CM2_TILE=$t row p4.jsonl "tile-$t" $P4
done
for t in 64,128,64 64,64,64 128,64,64; do
  HN_CM2_NT=128 HN_CM2_TILE=$t row train.jsonl "tile-$t-nt128" $TR
  HN_CM2_NT=128 HN_CM2_TILE=$t row p4.jsonl "tile-$t-nt128" $P4
done
HN_CM2_UNROLL=2 row train.jsonl unroll2 $TR
HN_CM2_UNROLL=4 row train.jsonl unroll4 $TR
python3 - "$OUT/train.jsonl" "$OUT/p4.jsonl" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys, re
for f in sys.argv[1:]:
    print("==", f)
    best = {}
    for line in open(f):
        try: d = json.loads(line)
        except Exception: continue
        print(d["label"], round(d.get("tokens_per_s", 0)), "tok/s", round(d.get("profiled_step_gpu_us", 0)), "us")
        for o in d.get("profile", []):
            if not o["op"].startswith("matmul_cm2"): continue
            key = re.sub(r" \d+x\d+/\d+ s\d+$", "", o["op"])
            per = o["us"] / max(o["dispatches"], 1)
            best.setdefault(key, []).append((round(per, 1), o["dispatches"], d["label"], o["op"].rsplit(" ", 2)[-2:]))
    for k, v in sorted(best.items(), key=lambda kv: -min(x[0] * x[1] for x in kv[1])):
        v.sort()
        print(k, "|", "; ".join("%s %s %s" % (x[0], x[2], "/".join(x[3])) for x in v[:4]), "| default", [x[0] for x in v if x[2] == "default"])
PY
