# Call G, 2026-12-03 (second session): issue 22 after the tile-table change (no 128x256 under fp16
# autocast, unroll 4 for K of 12 steps): the gpt2-124m fp16 training row with its per-shape profile,
# the LM head's backward in larger chunks (HN_TRAIN_LM_ROWS), the 4x512 prefill and 1x512 rows, and
# test-ops-matmul (the cm2 paths); flash-attention tile sweeps (HN_ATTN_CM2_TILE, HN_FA_BACK_TILE).
# Prepare: HN_CARRY=.devcarry-e build-aux/device-check prepare
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03g-run.sh HN_CARRY=.devcarry-e bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
P4="--synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2"
P1="--synthetic llama-1b --dtype bf16 --workload prefill --batch 1 --seq-len 512 --iterations 5 --warmup 2"
row rows.jsonl train-fp16 $TR
HN_PROFILE_SHAPES=1 row rows.jsonl train-fp16-profile $TR --profile
HN_TRAIN_LM_ROWS=4096 row rows.jsonl train-fp16-lm4096 $TR
HN_TRAIN_LM_ROWS=8192 row rows.jsonl train-fp16-lm8192 $TR
HN_ATTN_CM2_TILE=128,64,256 row rows.jsonl train-fp16-fa128x64 $TR
HN_ATTN_CM2_TILE=64,128,128 row rows.jsonl train-fp16-fa64x128 $TR
HN_FA_BACK_TILE=128,64,64,128 row rows.jsonl train-fp16-fab-128-64-64-128 $TR
HN_FA_BACK_TILE=64,32,32,64 row rows.jsonl train-fp16-fab-64-32-32-64 $TR
HN_FA_BACK_TILE=128,128,128,128 row rows.jsonl train-fp16-fab-128x4 $TR
row rows.jsonl p4x512 $P4
HN_ATTN_CM2_TILE=128,64,256 row rows.jsonl p4x512-fa128x64 $P4
row rows.jsonl p1x512 $P1
HN_CM2_SPLITK_F16=1 row rows.jsonl train-fp16-splitk $TR
row rows.jsonl train-fp16-again $TR
prof "$OUT/rows.jsonl"
step "test-ops-matmul" timeout 150 "$CARRY/bin/test-ops-matmul"
step "test-ops-matmul-splitk-f16" env HN_CM2_SPLITK_F16=1 HN_CM2_SPLITK=3 timeout 150 "$CARRY/bin/test-ops-matmul"
