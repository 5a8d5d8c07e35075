# Call J, 2026-12-03: the unchunked LM head's loss and f16 gradient from cross_entropy_grad in the
# backward (ce_in_back) against the three passes of before (HN_CE_IN_BACK=0), gpt2-124m fp16 training.
# Prepare: the release CLI alone in .devcarry-j/bin.tar.xz (with .devcarry-h's gl/ and lib.tar.xz)
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03j-run.sh HN_CARRY=.devcarry-j bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
row rows.jsonl train-fp16 $TR
HN_CE_IN_BACK=0 row rows.jsonl train-fp16-ce-three-passes $TR
row rows.jsonl train-fp16-again $TR
row rows.jsonl train-fp16-profile $TR --profile
HN_CE_IN_BACK=0 row rows.jsonl train-fp16-ce-three-passes-again $TR
prof "$OUT/rows.jsonl"
