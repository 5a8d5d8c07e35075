# Call H, 2026-12-03: per-shape tile sweep under the real workloads. Each run profiles one gpt2-124m
# fp16 training step (and a llama-1b 4x512 prefill) with HN_PROFILE_SHAPES=1, so the profile gives
# every GEMM shape's time on the forced tile (HN_CM2_TILE=BM,BN,BK, HN_CM2_NT) and, independently,
# the flash-attention kernels' time on another tile (HN_ATTN_CM2_TILE, HN_FA_BACK_TILE).
# Prepare: HN_CARRY=.devcarry-e build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03h-run.sh HN_CARRY=.devcarry-e bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
export HN_PROFILE_SHAPES=1
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 1 --profile"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 2 --warmup 1 --profile"
row t.jsonl default $TR
HN_CM2_TILE=128,128,32 HN_ATTN_CM2_TILE=64,64,128 row t.jsonl t128x128x32-fa64x64n128 $TR
HN_CM2_TILE=128,128,64 HN_CM2_NT=128 HN_ATTN_CM2_TILE=64,64,64 row t.jsonl t128x128n128-fa64x64n64 $TR
HN_CM2_TILE=128,128,64 HN_CM2_NT=512 HN_ATTN_CM2_TILE=32,64,64 row t.jsonl t128x128n512-fa32x64n64 $TR
HN_CM2_TILE=64,128,64 HN_CM2_NT=128 HN_FA_BACK_TILE=64,64,32,64 row t.jsonl t64x128n128-fab64-64-32-64 $TR
HN_CM2_TILE=128,64,64 HN_CM2_NT=128 HN_FA_BACK_TILE=32,64,64,64 row t.jsonl t128x64n128-fab32-64-64-64 $TR
HN_CM2_TILE=64,256,64 HN_FA_BACK_TILE=64,64,64,32 row t.jsonl t64x256-fab64-64-64-32 $TR
HN_CM2_TILE=128,128,128 HN_FA_BACK_TILE=64,128,64,64 row t.jsonl t128x128x128-fab64-128-64-64 $TR
HN_CM2_TILE=128,128,64 HN_CM2_SWIZZLE=8 row t.jsonl t128x128sw8 $TR
HN_CM2_TILE=128,128,64 HN_CM2_UNROLL=2 row t.jsonl t128x128u2 $TR
HN_CM2_TILE=128,256,64 HN_CM2_UNROLL=4 row t.jsonl t128x256u4 $TR
HN_CM2_TILE=64,64,64 HN_CM2_NT=128 row t.jsonl t64x64n128 $TR
row p.jsonl default $P4
HN_CM2_TILE=128,128,64 row p.jsonl t128x128 $P4
HN_CM2_TILE=128,128,64 HN_CM2_NT=128 row p.jsonl t128x128n128 $P4
HN_CM2_TILE=64,128,64 HN_CM2_NT=128 row p.jsonl t64x128n128 $P4
HN_CM2_TILE=128,256,64 HN_CM2_UNROLL=4 row p.jsonl t128x256u4 $P4
HN_CM2_TILE=128,128,32 row p.jsonl t128x128x32 $P4
# per-shape table: for each label (op incl. shape) the time per dispatch on each tile
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys, collections
for f in ("t.jsonl", "p.jsonl"):
    runs = []
    for line in open(sys.argv[1] + "/" + f):
        try: d = json.loads(line)
        except Exception: continue
        runs.append((d["label"], d.get("tokens_per_s", 0), d.get("profiled_step_gpu_us", 0), d.get("profile", [])))
    print("==", f)
    for lab, tps, us, _ in runs: print("  %-36s %9.1f tok/s  step %8.0f us" % (lab, tps, us))
    ops = collections.OrderedDict()
    for lab, _, _, prof in runs:
        for o in prof:
            key = o["op"].split(" b1 ")[0].split(" b4 ")[0] if o["op"].startswith("matmul") else o["op"]
            ops.setdefault(key, {})[lab] = (o["dispatches"], o["us"])
    for k, v in ops.items():
        print("  " + k + ": " + ", ".join("%s %.0f/%d" % (lab, us, n) for lab, (n, us) in v.items()))
PY
