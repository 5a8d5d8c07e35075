#!/usr/bin/env python3
"""Write a random-weight Mamba (v1) GGUF of the mamba-130m shape with llama.cpp's gguf-py, for
llama-bench beside this project's `benchmark --synthetic mamba-130m` (issue 25).

The layout is what llama.cpp's convert_hf_to_gguf.py writes for MambaForCausalLM: ssm_in, ssm_conv1d
[d_inner, d_conv] (+ bias), ssm_x, ssm_dt (+ bias), ssm_a = -exp(A_log) [d_inner, d_state], ssm_d,
ssm_out; 1-D tensors, the conv and A stay F32; the embedding is tied. The vocab is make_gguf.py's
dummy byte-level BPE (it only has to load). Usage (next to the llama.cpp bundle's make_gguf.py):

  GGUF_PY=.../gguf-py python3 make_mamba_gguf.py --bundle DIR --dtype f16 --out /tmp/mamba-130m-f16.gguf
"""
import argparse
import importlib.util
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True, help="the llama.cpp bundle folder (make_gguf.py, gguf-py)")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--state", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50280)
    a = ap.parse_args()
    t0 = time.time()
    spec = importlib.util.spec_from_file_location("make_gguf", os.path.join(a.bundle, "make_gguf.py"))
    mg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mg)
    gguf = mg._import_gguf()
    import numpy as np

    H, L, N, V, K = a.hidden, a.layers, a.state, a.vocab, 4
    I = 2 * H
    R = (H + 15) // 16
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(V * H + 4096, dtype=np.float32) * np.float32(0.02))

    def mat(shape, off):
        n = int(np.prod(shape))
        o = (off * 7654321) % (pool.size - n + 1)
        arr = pool[o:o + n].reshape(shape)
        if a.dtype == "f16":
            return arr.astype(np.float16), None
        if a.dtype == "bf16":
            u = arr.view(np.uint32)
            b = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
            return b, gguf.GGMLQuantizationType.BF16
        return arr.copy(), None

    ftype = {"f16": gguf.LlamaFileType.MOSTLY_F16, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
             "f32": gguf.LlamaFileType.ALL_F32}[a.dtype]
    w = gguf.GGUFWriter(a.out, "mamba")
    w.add_type("model")
    w.add_name("random-mamba-130m-%s" % a.dtype)
    w.add_context_length(1048576)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_head_count_kv(0)
    w.add_ssm_conv_kernel(K)
    w.add_ssm_inner_size(I)
    w.add_ssm_state_size(N)
    w.add_ssm_time_step_rank(R)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_file_type(int(ftype))
    tokens, toktypes, merges = mg.make_vocab(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_merges(merges)
    w.add_bos_token_id(V - 256)
    w.add_eos_token_id(V - 256 + 9)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    def add(name, arr_dt):
        arr, raw = arr_dt
        if raw is not None:
            w.add_tensor(name, arr, raw_shape=arr.shape, raw_dtype=raw)
        else:
            w.add_tensor(name, arr)

    f32 = lambda x: (np.ascontiguousarray(x, dtype=np.float32), None)  # noqa: E731
    add("token_embd.weight", mat((V, H), 0))
    A = -np.tile(np.arange(1, N + 1, dtype=np.float32), (I, 1))
    for i in range(L):
        add("blk.%d.attn_norm.weight" % i, f32(np.ones(H)))
        add("blk.%d.ssm_in.weight" % i, mat((2 * I, H), 10 * i + 1))
        add("blk.%d.ssm_conv1d.weight" % i, f32(pool[:I * K].reshape(I, K)))
        add("blk.%d.ssm_conv1d.bias" % i, f32(pool[:I]))
        add("blk.%d.ssm_x.weight" % i, mat((R + 2 * N, I), 10 * i + 2))
        add("blk.%d.ssm_dt.weight" % i, mat((I, R), 10 * i + 3))
        add("blk.%d.ssm_dt.bias" % i, f32(np.full(I, -4.0)))
        add("blk.%d.ssm_a" % i, f32(A))
        add("blk.%d.ssm_d" % i, f32(np.ones(I)))
        add("blk.%d.ssm_out.weight" % i, mat((H, I), 10 * i + 4))
    add("output_norm.weight", f32(np.ones(H)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print("wrote %s (%.1f MiB, %.1fs)" % (a.out, os.path.getsize(a.out) / 2**20, time.time() - t0), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
