#!/usr/bin/env python3
"""Run on the accelerator machine (transformers + peft there): checks that a
model trained by `transformer-train` loads in transformers and an adapter
saved by `transformer-finetune` loads in peft, and that both give finite
logits. Usage: check-hf-load.py BASE_MODEL_DIR TRAINED_DIR ADAPTER_DIR"""
import sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel

base_dir, trained_dir, adapter_dir = sys.argv[1:4]
ids = torch.tensor([[1, 403, 407, 261, 378]])
m = AutoModelForCausalLM.from_pretrained(trained_dir)
print("transformers loads the trained model:", type(m).__name__, "finite logits:", bool(torch.isfinite(m(ids).logits).all()))
base = AutoModelForCausalLM.from_pretrained(base_dir)
p = PeftModel.from_pretrained(base, adapter_dir)
print("peft loads the adapter:", type(p).__name__, "finite logits:", bool(torch.isfinite(p(ids).logits).all()))
