"""PyTorch figures for issue 22's open rows on the device at hand (accelerator.md's were measured on an
H200): llama-1b-shape prefill 1 x 512 and 4 x 512 (bf16, sdpa, no cache) and gpt2-124m training 8 x 1024
with AdamW under bf16 autocast and under fp16 autocast + GradScaler (this project's --precision fp16).
Random weights, the benchmark's shapes. Prints one line per workload."""
import time, torch
from transformers import LlamaConfig, LlamaForCausalLM, GPT2Config, GPT2LMHeadModel

dev = "cuda"
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=2048,
                  attn_implementation="sdpa")
m = LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()
for b in (1, 4):
    ids = torch.randint(0, cfg.vocab_size, (b, 512), device=dev)
    with torch.no_grad():
        s = timed(lambda: m(ids, use_cache=False), 3, 10)
    print("prefill %dx512 %.1f tok/s (%.2f ms)" % (b, b * 512 / s, s * 1e3), flush=True)
del m
torch.cuda.empty_cache()

gcfg = GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50304, n_positions=1024, attn_implementation="sdpa")
for mode in ("bf16", "fp16"):
    torch.manual_seed(0)
    g = GPT2LMHeadModel(gcfg).to(dev).train()
    opt = torch.optim.AdamW(g.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=mode == "fp16")
    dt = torch.bfloat16 if mode == "bf16" else torch.float16
    ids = torch.randint(0, gcfg.vocab_size, (8, 1024), device=dev)

    def step():
        with torch.autocast("cuda", dtype=dt):
            loss = g(ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    s = timed(step, 3, 10)
    print("train gpt2 8x1024 %s autocast %.1f tok/s (%.2f ms), peak %.2f GB" %
          (mode, 8 * 1024 / s, s * 1e3, torch.cuda.max_memory_allocated() / 1e9), flush=True)
    del g, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
