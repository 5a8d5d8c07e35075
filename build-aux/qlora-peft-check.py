#!/usr/bin/env python3
"""A QLoRA adapter of this project in peft (issue 24's "done when"), run on the device:

  python3 build-aux/qlora-peft-check.py CLI WORK_DIR OUT.json

1. hierarchos-native-cli transformer-finetune QLoRA-trains data/demo/stories260K
   (--load-in-4bit: NF4, blocks of 64; all-linear, r 8) for 30 steps; the PEFT adapter
   lands in WORK_DIR/adapter.
2. The same NF4 rule in numpy (tests/fixtures/make_qlora_fixture.py's nf4_dequantized, which
   tests/engine/test-qlora.c checks against this project's packing bit for bit) makes the
   dequantized f32 base WORK_DIR/dequantized.
3. transformers + peft load that base and apply the adapter (PeftModel.from_pretrained), and
   generate 24 greedy tokens after a fixed prompt, and the logits of the whole sequence.
4. This project on the same base with the same adapter: transformer-generate
   --lora-adapter-path (unmerged) must give the same 24 tokens, transformer-logits --adapter
   (merged) logits within 1e-3 of peft's, the same argmax in every row.
Writes OUT.json with the figures and "ok"; exits 1 when a check fails.
"""
import json
import os
import shutil
import subprocess
import sys
import time

SRC = os.environ.get("HN_SOURCE_DIR", os.getcwd())
sys.path.insert(0, os.path.join(SRC, "tests", "fixtures"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qlora_fixture import LINEARS, nf4_dequantized, read_safetensors, write_safetensors  # noqa: E402

PROMPT = [1, 403, 407, 261, 378, 11]
NEW = 24


def run(cmd):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit("failed: %s" % " ".join(cmd))
    return time.time() - t


def main():
    cli, work, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    base = os.path.join(SRC, "data", "demo", "stories260K")
    data = os.path.join(SRC, "data", "demo", "tinyshakespeare-small.txt")
    adapter = os.path.join(work, "adapter")
    res = {"base": "data/demo/stories260K", "prompt": PROMPT}
    res["train_s"] = run([cli, "transformer-finetune", "--model-path", base, "--train", data, "--out-dir", adapter,
                          "--batch-size", "4", "--seq-len", "64", "--max-steps", "30", "--lr", "3e-3",
                          "--lora-target-modules", "all-linear", "--lora-r", "8", "--lora-alpha", "16",
                          "--load-in-4bit", "--seed", "7"])
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        res["adapter_config"] = json.load(f)

    weights = read_safetensors(os.path.join(base, "model.safetensors"))
    n_q = 0
    for name in sorted(weights):
        if name.endswith(".weight") and name.startswith("model.layers.") and any(("." + l + ".") in name for l in LINEARS):
            weights[name], _ = nf4_dequantized(weights[name])
            n_q += 1
    deq = os.path.join(work, "dequantized")
    os.makedirs(deq, exist_ok=True)
    write_safetensors(os.path.join(deq, "model.safetensors"), weights)
    for fn in os.listdir(base):
        if fn != "model.safetensors":
            shutil.copy(os.path.join(base, fn), os.path.join(deq, fn))
    res["nf4_weights"] = n_q

    import numpy as np
    import peft
    import torch
    import transformers
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    res["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    model = AutoModelForCausalLM.from_pretrained(deq, dtype=torch.float32, attn_implementation="eager")
    pm = PeftModel.from_pretrained(model, adapter)
    pm.eval()
    with torch.no_grad():
        g = pm.generate(input_ids=torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                        max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, num_beams=1)
        new = [int(t) for t in g[0, len(PROMPT):]]
        full = PROMPT + new[:-1]
        lp = pm(input_ids=torch.tensor([full])).logits[0].float().numpy()
        with pm.disable_adapter():
            lb = pm(input_ids=torch.tensor([full])).logits[0].float().numpy()
    res["peft_tokens"] = new
    res["adapter_moves_logits_by"] = float(np.abs(lp - lb).max())

    gen_json = os.path.join(work, "generate.json")
    run([cli, "transformer-generate", "--model-path", deq, "--lora-adapter-path", adapter, "--input-ids",
         ",".join(map(str, PROMPT)), "--max-new-tokens", str(NEW), "--min-new-tokens", str(NEW), "--output-json",
         gen_json])
    with open(gen_json) as f:
        seq = [int(t) for t in json.load(f)["sequences"][0]]
    ours_new = seq[-NEW:]
    res["ours_tokens"] = ours_new
    logits_json = os.path.join(work, "logits.json")
    run([cli, "transformer-logits", "--model-path", deq, "--adapter", adapter, "--input-ids", ",".join(map(str, full)),
         "--output", logits_json])
    with open(logits_json) as f:
        lo = json.load(f)
    ours = np.array(lo["logits"], dtype=np.float32).reshape(lo["shape"])
    res["max_abs_logit_diff"] = float(np.abs(ours - lp).max())
    res["argmax_rows_equal"] = int((ours.argmax(-1) == lp.argmax(-1)).sum())
    res["rows"] = int(lp.shape[0])
    res["ok"] = bool(ours_new == new and res["max_abs_logit_diff"] < 1e-3 and res["argmax_rows_equal"] == res["rows"]
                     and res["adapter_moves_logits_by"] > 1e-2)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print("peft check: ok=%s tokens equal=%s max|dlogit|=%.3g argmax rows %d/%d adapter moves logits %.3g" % (
        res["ok"], ours_new == new, res["max_abs_logit_diff"], res["argmax_rows_equal"], res["rows"],
        res["adapter_moves_logits_by"]))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
