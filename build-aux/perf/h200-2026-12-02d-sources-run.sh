# The modeling sources of the refused families (issue 25) and the decode profiles (issues 22, 23).
# Sourced by `HN_CHECK=script HN_SCRIPT=<this> bash build-aux/device-check run`.
step "dump sources" timeout 60 python3 tests/fixtures/dump_model_sources.py "$OUT/model-sources.tar.xz" build-aux/perf/dump-types.txt
step "decode profile 1b" timeout 40 sh -c "\"$cli\" benchmark --json --synthetic llama-1b --dtype bf16 --workload decode --seq-len 128 --new-tokens 32 --profile >>\"$OUT/bench.jsonl\""
LC="$CARRY/llamacpp"; W=/tmp/hn-gguf; mkdir -p "$W"
step "make 8b q4_k_m" timeout 60 env GGUF_PY="$LC/gguf-py" python3 build-aux/perf/make_random_q4km.py --shape 8b --out "$W/8b.gguf"
step "decode profile 8b q4_k_m" timeout 40 sh -c "\"$cli\" benchmark --json --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 16 --profile >>\"$OUT/bench.jsonl\""
for t in 4,2,2 8,1,2 2,1,1; do
  step "decode 8b tune $t" timeout 30 sh -c "HN_MATVEC_GGUF_TUNE=$t \"$cli\" benchmark --json --model-path $W/8b.gguf --workload decode --seq-len 128 --new-tokens 64 | sed 's/^{/{\"tune\":\"$t\",/' >>\"$OUT/bench.jsonl\""
done
cat "$OUT/bench.jsonl"
