# Call E, 2026-12-03 (second session): issue 22's GEMM ceiling. The tensor cores' peak through KHR
# cooperative matrix from registers (benchmark --workload mma-peak), the GEMM at the prefill's linear
# shapes on matmul_cm2 against the shared-memory-staged KHR kernel (HN_GEMM_KHR16=1, a few tiles) and
# against PyTorch's torch.mm in f16 on the same shapes; test-ops-matmul on the KHR kernel; the 4x512
# prefill both ways.
# Prepare: HN_CARRY=.devcarry-e build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03e-run.sh HN_CARRY=.devcarry-e bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
row peak.jsonl mma-peak --workload mma-peak
row peak.jsonl mma-peak-x2 --workload mma-peak --size 2112
SHAPES="8192,8192,8192 2048,3072,2048 2048,2048,2048 2048,2048,8192 2048,8192,2048 8192,768,768 8192,3072,768 8192,768,3072"
for s in $SHAPES; do
  G="--workload gemm --dtype f16 --gemm-shape $s --iterations 20"
  row gemm.jsonl "cm2-$s" $G
  HN_GEMM_KHR16=1 row gemm.jsonl "khr16-$s" $G
  for t in 128,128,32,64,32 128,64,32,64,32 64,128,32,32,64 128,128,16,64,64; do
    HN_GEMM_KHR16=1 HN_KHR16_TILE=$t row gemm.jsonl "khr16-$t-$s" $G
  done
done
python3 - "$SHAPES" <<'PY' 2>&1 | tee -a "$OUT/summary.txt" "$OUT/torch.txt"
import sys, time, torch
for s in sys.argv[1].split():
    M, N, K = map(int, s.split(","))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    for _ in range(20): torch.nn.functional.linear(a, w)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(50): torch.nn.functional.linear(a, w)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 50
    print("torch", s, round(2 * M * N * K / dt / 1e12, 1), "TFLOP/s")
PY
python3 - "$OUT/gemm.jsonl" "$OUT/peak.jsonl" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        try: d = json.loads(line)
        except Exception: continue
        print(d.get("label"), round(d.get("tflops", 0), 1), "TFLOP/s", d.get("ms_per_gemm", d.get("ms_per_run")))
PY
step "test-ops-matmul khr16" timeout 120 env HN_GEMM_KHR16=1 "$CARRY/bin/test-ops-matmul"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
row p4.jsonl p4x512 $P4
HN_GEMM_KHR16=1 row p4.jsonl p4x512-khr16 $P4
HN_GEMM_KHR16=1 row p4.jsonl p4x512-khr16-prof $P4 --profile
prof "$OUT/p4.jsonl"
