# Call A, 2026-12-03: issue 23's 8B Q4_K_M prefill on the new path (a ring of f16 weight forms, f16
# operands, gate+up as one GLU GEMM) with its whole profile, against the previous path
# (HN_NO_CM2_GLU=1), decode, llama-bench pp512/tg128 on the same file; issue 22's 4x512 prefill and
# gpt2 fp16 training profiles and a few tile overrides; fixtures of this session's recipes and
# transformers sources (in the background, on the CPU); then the GPU tests while time is left.
# Prepare: HN_LLAMACPP=1 HN_CARRY=.devcarry-a HN_CARRY_TESTS="test-hybrid test-ops-ssm" build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03a-run.sh HN_CARRY=.devcarry-a bash build-aux/device-check run
T0=$SECONDS
left() { echo $(( ${1:-560} - (SECONDS - T0) )); }
(
  cd tests/fixtures
  python3 make_fixtures.py --out /tmp/fx --budget-s 300 \
    --only qwen2_5_omni_text,qwen3_omni_moe_text,ernie4_5_vl_moe_text,cosmos3_edge_text,deepseek_ocr2_text \
    >/tmp/fx.log 2>&1; echo "fixtures rc=$?" >>/tmp/fx.log
  TF=$(python3 -c "import transformers,os;print(os.path.dirname(transformers.__file__))")
  for m in emu3 mllama voxtral_realtime minimax_m3_vl modernvbert step3p5 inkling glm_image gemma3n; do
    d=$TF/models/$m; [ -d "$d" ] || { echo "no $m" >>/tmp/fx.log; continue; }
    mkdir -p /tmp/src/$m; cp "$d"/modeling_*.py "$d"/modular_*.py "$d"/configuration_*.py /tmp/src/$m/ 2>/dev/null
  done
  tar czf "$OUT/src.tgz" -C /tmp src
  tar czf "$OUT/fx.tgz" -C /tmp/fx . && cp /tmp/fx.log "$OUT/"
) &
FXPID=$!
. build-aux/perf/bench-rows.sh
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf; mkdir -p "$W/bin"
tar -C "$W/bin" -xJf "$LC/bin.tar.xz"
LCL="$PWD/$LC/lib:${LD_LIBRARY_PATH:-}"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
if [ -s "$W/8b.gguf" ]; then
  G="--model-path $W/8b.gguf"
  row gguf.jsonl prefill-new $G --workload prefill --seq-len 512 --iterations 5
  HN_NO_CM2_GLU=1 row gguf.jsonl prefill-noglu $G --workload prefill --seq-len 512 --iterations 5
  row gguf.jsonl prefill-new-profile $G --workload prefill --seq-len 512 --iterations 2 --profile
  row gguf.jsonl decode $G --workload decode --seq-len 128 --new-tokens 128
  step "llama-bench 8b q4_k_m" timeout 90 env LD_LIBRARY_PATH="$LCL" "$W/bin/llama-bench" -m "$W/8b.gguf" -p 512 -n 128 -ngl 99 -fa 1 -r 5 -o json >"$OUT/llamabench-8b-q4km.json"
  row gguf.jsonl prefill-new-after $G --workload prefill --seq-len 512 --iterations 5
  rm -f "$W/8b.gguf"
  prof "$OUT/gguf.jsonl"
  grep -E '"avg_ts"|"samples_ts"' "$OUT/llamabench-8b-q4km.json" | tee -a "$OUT/summary.txt"
fi
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
row p22.jsonl p4x512 $P4 --profile
row p22.jsonl train-fp16 $TR --profile
for t in 128,256,64 128,128,64 256,128,64 64,256,64; do
  HN_CM2_TILE=$t row p22.jsonl "p4x512-tile-$t" $P4
done
HN_CM2_UNROLL=4 row p22.jsonl p4x512-unroll4 $P4
HN_CM2_SWIZZLE=0 row p22.jsonl p4x512-swz0 $P4
for t in 128,256,64 128,128,64 64,128,64; do
  HN_CM2_TILE=$t row p22.jsonl "train-tile-$t" $TR
done
prof "$OUT/p22.jsonl"
for t in test-quant test-gguf-model test-ops-ssm test-hybrid test-ops-matmul; do
  t_left=$(left); [ "$t_left" -gt 20 ] || { echo "skipped $t (time)" | tee -a "$OUT/summary.txt"; continue; }
  step "$t" timeout $(( t_left < 90 ? t_left : 90 )) "$CARRY/bin/$t"
done
wait $FXPID
tail -25 /tmp/fx.log | tee -a "$OUT/summary.txt"
