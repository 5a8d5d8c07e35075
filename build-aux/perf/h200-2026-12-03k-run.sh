# Call K, 2026-12-03: split-K by waves of the multiprocessors (VK_NV_shader_sm_builtins) for the
# long-K weight gradients of gpt2-124m fp16 training (opt-in, HN_CM2_WAVES=1), against the default,
# and the bias gradient from the dY rounding pass (bias_back_f16, default) against apart (HN_BIAS_BACK_F16=0);
# the loss of each row shows the splits change no result beyond rounding. Then LoRA r8 q,k,v,o of
# llama-1b 4 x 512 at --precision fp32 (the table's row so far) and fp16 (autocast, as PyTorch's
# bf16 peft run computes), each profiled by GEMM shape, and prefill 4 x 512 profiled by GEMM shape.
# Prepare: HN_CARRY=.devcarry-k HN_CARRY_ONLY="" build-aux/device-check prepare   (the CLI alone)
# Run:     HN_CHECK=script HN_SCRIPT=build-aux/perf/h200-2026-12-03k-run.sh HN_CARRY=.devcarry-k bash build-aux/device-check run
. build-aux/perf/bench-rows.sh
TR="--synthetic gpt2-124m --dtype f32 --workload train --precision fp16 --batch 8 --seq-len 1024 --iterations 3"
row rows.jsonl train-fp16-warmup $TR
HN_CM2_WAVES=1 row rows.jsonl train-fp16-waves $TR
row rows.jsonl train-fp16-default $TR
HN_CM2_WAVES=1 row rows.jsonl train-fp16-waves-again $TR
row rows.jsonl train-fp16-default-again $TR
HN_BIAS_BACK_F16=0 row rows.jsonl train-fp16-bias-apart $TR
HN_BIAS_BACK_F16=0 row rows.jsonl train-fp16-bias-apart-again $TR
HN_CM2_WAVES=1 HN_PROFILE_SHAPES=1 row rows.jsonl train-fp16-profile $TR --profile
LO="--synthetic llama-1b --dtype bf16 --workload lora --batch 4 --seq-len 512 --iterations 3"
row rows.jsonl lora-fp32 $LO
row rows.jsonl lora-fp16 $LO --precision fp16
row rows.jsonl lora-fp32-again $LO
row rows.jsonl lora-fp16-again $LO --precision fp16
HN_PROFILE_SHAPES=1 row rows.jsonl lora-fp32-profile $LO --profile
HN_PROFILE_SHAPES=1 row rows.jsonl lora-fp16-profile $LO --precision fp16 --profile
HN_PROFILE_SHAPES=1 row rows.jsonl p4x512-profile --synthetic llama-1b --dtype bf16 --workload prefill --batch 4 --seq-len 512 --iterations 5 --warmup 2 --profile
grep -o '"multiprocessors": [0-9]*' "$OUT/doctor.json" | tee -a "$OUT/summary.txt"
python3 -c "
import json
for l in open('$OUT/rows.jsonl'):
    d = json.loads(l); print(d['label'], round(d['tokens_per_s'], 1), 'tok/s first-step loss', d.get('first_step_loss'))
" | tee -a "$OUT/summary.txt"
prof "$OUT/rows.jsonl"
