#!/bin/bash
# GGUF kernels on the H200 (issue 23): the per-type kernel tests (matvec, the
# tensor-core matmul in both modes, embedding) and the model tests, then decode
# and prefill of Llama-shaped Q4_K_M-mix GGUFs of random blocks
# (make_random_q4km.py: 1b and 8b) here and in llama.cpp's llama-bench (8b) on
# the same file.
set -u
source .devcarry-common/env.sh
export HN_BUILD_DIR="$PWD/.devcarry-gguf"
C=.devcarry-gguf; O="$OUT/gguf"; mkdir -p "$O" /tmp/gb; B=/tmp/gb
tar -C $B -xJf $C/bin.tar.xz
T0=$SECONDS
say() { echo "[$((SECONDS - T0))s] $*" | tee -a "$O/log.txt"; }
late() { [ $((SECONDS - T0)) -gt ${1:-95} ]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$O/log.txt"
timeout 50 $B/test-quant -p /quant/gguf-matvec -p /quant/gguf-matmul -p /quant/gguf-embedding -p /quant/matmul-tensor-core-tiles --verbose > "$O/tests.txt" 2>&1
say "test-quant rc=$?: $(grep -c '^ok' "$O/tests.txt") ok, $(grep -c '^not ok' "$O/tests.txt") not ok; $(grep -c 'tensor cores).*checked' "$O/tests.txt") tensor-core cases checked"
grep -E "not ok|ERROR|error" "$O/tests.txt" | head -5
timeout 40 $B/test-gguf-model -p /gguf-model/kept-quantized -p /gguf-model/llamacpp-file --verbose >> "$O/tests.txt" 2>&1
say "test-gguf-model rc=$?"; grep -E "greedy tokens|^not ok|ERROR" "$O/tests.txt" | tail -4
LC=.devcarry-common/llamacpp; W=/tmp/gg; mkdir -p $W/bin
tar -C $W/bin -xJf $LC/bin.tar.xz
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
for s in 1b 8b; do
  GGUF_PY=$LC/gguf-py timeout 60 python3 $C/make_random_q4km.py --shape $s --out $W/$s.gguf >> "$O/make.txt" 2>&1
  say "make $s rc=$? $(du -h $W/$s.gguf | cut -f1)"
done
tail -2 "$O/make.txt"
j() { python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print(round(d['tokens_per_s'],1), 'tok/s', round(d.get('ms_per_token', 0) or 0, 3), 'ms/tok peak', d.get('peak_device_bytes'), 'weights', d.get('weight_bytes'))" 2>&1; }
bench() {  # label, file, args...
  local l=$1 f=$2; shift 2
  timeout 30 $B/hierarchos-native-cli benchmark --model-path $f "$@" --json >> "$O/bench.jsonl" 2>> "$O/log.txt"
  say "ours $l rc=$?: $(tail -1 "$O/bench.jsonl" | j)"
}
for s in 8b 1b; do
  f=$W/$s.gguf; [ -s $f ] || continue
  bench "decode $s" $f --workload decode --seq-len 128 --new-tokens 128
  bench "prefill $s" $f --workload prefill --seq-len 512 --iterations 3
  HN_GGUF_CM2_SHB=0 bench "prefill $s decode-fn" $f --workload prefill --seq-len 512 --iterations 3
done
if [ -s $W/8b.gguf ]; then
  LD_LIBRARY_PATH="$LCL" timeout 45 $W/bin/llama-bench -m $W/8b.gguf -p 512 -n 128 -ngl 99 -fa 1 -r 2 -o json > "$O/llamabench-8b.json" 2>> "$O/log.txt"
  say "llama-bench 8b rc=$?: $(python3 -c "import json,sys; [print(r['n_prompt'], r['n_gen'], round(r['avg_ts'],1)) for r in json.load(open(sys.argv[1]))]" "$O/llamabench-8b.json" 2>&1 | tr '\n' ';')"
  late 85 || timeout 30 $B/hierarchos-native-cli benchmark --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 16 --profile --json > "$O/profile-decode-8b.json" 2>> "$O/log.txt"
  say "profile decode 8b rc=$?"
  for t in "4,4" "4,1"; do
    late 95 && break
    HN_MATVEC_GGUF_TUNE=$t bench "decode 8b tune $t" $W/8b.gguf --workload decode --seq-len 128 --new-tokens 64
  done
fi
say "done"
