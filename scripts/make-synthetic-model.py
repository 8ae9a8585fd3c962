#!/usr/bin/python3
"""Writes a random LLaMA-architecture model (or, with --family gemma3, a Gemma 3 text model) in
the Hugging Face layout, BF16, for bandwidth-bound engine benchmarks (`exaserve-bench engine
--model DIR`). Not committed: ~1 GB.

The default shape: hidden 1024, 24 layers, 16 heads over 4 KV heads, intermediate 5632, vocab
32000, untied: ~0.54 B parameters, ~1.08 GB in BF16. Weights are small random values (std 0.02)
so activations stay finite; the output is meaningless. No tokenizer.json is written: benchmarks
feed token ids.

Usage: /usr/bin/python3 scripts/make-synthetic-model.py OUT_DIR [--layers 24] [--hidden 1024]
       [--intermediate 5632] [--heads 16] [--kv-heads 4] [--vocab 32000] [--fast]
       [--family llama|gemma3] [--head-dim N]

gemma-3-1b-it's shape (26 layers, hidden 1152, 4 heads of 256 over 1 KV head, intermediate 6912,
262 144 tokens, tied; ~1.0 B parameters, 2.0 GB):
  /usr/bin/python3 scripts/make-synthetic-model.py /tmp/gemma3-1b --family gemma3 --layers 26 \
      --hidden 1152 --intermediate 6912 --heads 4 --kv-heads 1 --head-dim 256 --vocab 262144 \
      --max-positions 32768
"""
import argparse
import json
import os
import struct

import numpy as np

from checkpoint_shapes import checkpoint_shapes


def bf16_bytes(a):
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--family", choices=["llama", "gemma3"], default="llama")
    ap.add_argument("--head-dim", type=int, default=0, help="default: hidden / heads")
    ap.add_argument("--fast", action="store_true",
                    help="draw one 1024-row random slab per tensor width and repeat it: the same "
                         "bytes on disk and the same bandwidth cost, written several times faster "
                         "(scripts/gpu-check.sh, which has minutes)")
    args = ap.parse_args()
    h, inter, v = args.hidden, args.intermediate, args.vocab
    gemma = args.family == "gemma3"
    hd = args.head_dim or h // args.heads
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": v,
              "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": args.layers,
              "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
              "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "max_position_embeddings": args.max_positions, "tie_word_embeddings": False,
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
    if args.head_dim:
        config["head_dim"] = hd
    if gemma:  # gemma-3-1b-it's config.json fields
        config.update({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                       "head_dim": hd, "hidden_activation": "gelu_pytorch_tanh",
                       "query_pre_attn_scalar": hd, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                       "rope_local_base_freq": 10000.0, "rope_scaling": None,
                       "sliding_window": 512, "sliding_window_pattern": 6,
                       "attn_logit_softcapping": None, "final_logit_softcapping": None,
                       "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": [1, 106]})
        del config["hidden_act"]
    shapes = checkpoint_shapes(config)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(shapes):
        n = int(np.prod(shapes[name])) * 2
        header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    params = 0
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in sorted(shapes):
            shape = shapes[name]
            params += int(np.prod(shape))
            if name.endswith("norm.weight"):  # Gemma's norms multiply by 1 + w
                f.write(bf16_bytes(np.full(shape, 0.0 if gemma else 1.0, np.float32)))
                continue
            slab = None
            for row in range(0, shape[0], 1024):  # in slices, to keep memory small
                rows = min(1024, shape[0] - row)
                if args.fast:
                    if slab is None or slab[1] != shape[1:]:
                        full = rng.standard_normal((1024,) + shape[1:], np.float32) * 0.02
                        slab = (bf16_bytes(full), shape[1:], int(np.prod(shape[1:])) * 2)
                    f.write(slab[0][:rows * slab[2]])
                    continue
                f.write(bf16_bytes(rng.standard_normal((rows,) + shape[1:], np.float32) * 0.02))
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    print(f"wrote {args.out}: {params / 1e9:.3f} B parameters, {off / 1e9:.2f} GB BF16")


if __name__ == "__main__":
    main()
