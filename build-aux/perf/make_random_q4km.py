#!/usr/bin/env python3
"""A Llama-shaped GGUF in llama.cpp's Q4_K_M tensor mix, of random blocks.

For benchmarking only (this project's `benchmark` and llama-bench on the same
file): making an f16 file of the 8B shape and running llama-quantize on it
takes minutes of device time, so the blocks here are written directly:
random bytes with every block's f16 scales set to small finite values (d and
dmin 1e-4 in Q4_K, d 2e-5 in Q6_K: weights of about ±0.1). The mix is
llama-quantize's for Q4_K_M: Q6_K for output.weight and for attn_v and
ffn_down of the layers its use_more_bits() picks (the first and last eighth,
every third between), Q4_K for every other matrix (token_embd included),
norms F32. Shapes, metadata and vocabulary come from the bundle's
make_gguf.py (imported from MAKE_GGUF_DIR, default: next to gguf-py).

  GGUF_PY=.../gguf-py python3 make_random_q4km.py --shape 8b --out /tmp/8b-q4km.gguf
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8b")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.time()
    mk_dir = Path(os.environ.get("MAKE_GGUF_DIR", Path(os.environ.get("GGUF_PY", ".")).resolve().parent))
    sys.path.insert(0, str(mk_dir))
    import make_gguf  # the bundle's: SHAPES, make_vocab, its gguf-py import
    gguf = make_gguf._import_gguf()
    Q = gguf.GGMLQuantizationType
    cfg = make_gguf.SHAPES[args.shape]
    H, L, NH, NKV, HD, FF, V = (cfg[k] for k in ("hidden", "layers", "heads", "kv", "head_dim", "ffn", "vocab"))

    def more_bits(i, n):
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    shapes = [("token_embd.weight", (V, H), Q.Q4_K)]
    for i in range(L):
        shapes += [
            (f"blk.{i}.attn_norm.weight", (H,), Q.F32),
            (f"blk.{i}.attn_q.weight", (NH * HD, H), Q.Q4_K),
            (f"blk.{i}.attn_k.weight", (NKV * HD, H), Q.Q4_K),
            (f"blk.{i}.attn_v.weight", (NKV * HD, H), Q.Q6_K if more_bits(i, L) else Q.Q4_K),
            (f"blk.{i}.attn_output.weight", (H, NH * HD), Q.Q4_K),
            (f"blk.{i}.ffn_norm.weight", (H,), Q.F32),
            (f"blk.{i}.ffn_gate.weight", (FF, H), Q.Q4_K),
            (f"blk.{i}.ffn_up.weight", (FF, H), Q.Q4_K),
            (f"blk.{i}.ffn_down.weight", (H, FF), Q.Q6_K if more_bits(i, L) else Q.Q4_K),
        ]
    shapes.append(("output_norm.weight", (H,), Q.F32))
    if not cfg["tied"]:
        shapes.append(("output.weight", (V, H), Q.Q6_K))

    # one pool of random blocks per type, every tensor a run of whole blocks in it
    rng = np.random.default_rng(args.seed)
    layout = {Q.Q4_K: (144, [(0, 1e-4), (2, 1e-4)]), Q.Q6_K: (210, [(208, 2e-5)])}
    pools = {}
    for qt, (size, scales) in layout.items():
        nb = max((int(np.prod(s)) // 256 for _, s, t in shapes if t == qt), default=0)
        if nb == 0:
            continue
        nb += 4096
        pool = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
        for off, v in scales:
            pool[:, off:off + 2] = np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)
        pools[qt] = pool

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_type("model")
    w.add_name(f"random-llama-{args.shape}-q4_k_m")
    w.add_context_length(cfg["ctx"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_rope_freq_base(cfg["theta"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(V)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    tokens, toktypes, merges = make_gguf.make_vocab(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_merges(merges)
    w.add_bos_token_id(V - 256)
    w.add_eos_token_id(V - 256 + 9)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    ones = np.ones(H, dtype=np.float32)
    off = 0
    for name, shp, qt in shapes:
        if qt == Q.F32:
            w.add_tensor(name, ones[:shp[0]].copy())
            continue
        rows, cols = shp
        nb = rows * cols // 256
        pool = pools[qt]
        o = off % (pool.shape[0] - nb + 1)
        off += 7919
        arr = pool[o:o + nb].reshape(rows, (cols // 256) * pool.shape[1])
        w.add_tensor(name, arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{args.out}: {os.path.getsize(args.out) / 2**30:.2f} GiB in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
