#!/usr/bin/python3
"""Golden logits for the engine's reference test (test/unit/engine/reference_test.cc).

An independent LLaMA-family forward pass in PyTorch (float64, written from the Hugging Face
modeling code's definitions, not from ours) computes logits for:
  1. the bundled model `models/exa-tiny-arith/` (Llama, untied, F32 weights);
  2. a small random model it writes to `test/data/engine/random-qwen2/`: Qwen2 with q/k/v bias,
     GQA (8 heads over 2 KV heads), rope_theta 500000 with llama3 rope scaling, tied embeddings,
     BF16 weights;
  3. a small random model it writes to `test/data/engine/random-qwen3/`: Qwen3, whose q and k
     are RMS-normalised per head before the rotary embedding, with heads wider than the hidden
     size allows (8 x 16 over a hidden size of 64, as Qwen3-0.6B's 16 x 128 over 1024), GQA,
     tied embeddings, BF16 weights;
  4. a small random model it writes to `test/data/engine/random-gemma3/`: Gemma 3 (norms
     multiplying by 1 + w, a scaled embedding, per-head q/k norms, sliding-window layers with their
     own rope base beside global ones with linear rope scaling, each block's output normalised
     before its residual add, a GELU-tanh gate, query_pre_attn_scalar), GQA, tied embeddings,
     BF16 weights;
  5. a small random model it writes to `test/data/engine/random-gemma2/`: Gemma 2 (as Gemma 3
     without q/k norms or a local rope base, the even layers sliding, and attention scores and
     logits soft-capped), GQA, tied embeddings, BF16 weights;
  6. a small random model it writes to `test/data/engine/random-phi3/`: Phi-3, whose q/k/v and
     gate/up projections are each one fused tensor, with a sliding window on every layer
     (Mistral's and Phi-3's `sliding_window`), GQA, untied, BF16 weights.
Goldens are safetensors files (so the C++ test reads them with the loader under test):
`prompt_<i>` (token ids as F32) and `logits_<i>` ([tokens, vocab], F32) for every position.

Usage: /usr/bin/python3 scripts/reference-logits.py [--tiny models/exa-tiny-arith]
                                                    [--out test/data/engine]
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch

from checkpoint_shapes import checkpoint_shapes

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]])
        if e["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(arr.astype(np.float64).reshape(e["shape"]))
    return out


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if dtype == "BF16":
            bits = a.view(np.uint32).astype(np.uint64)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
            raw = bits.astype("<u2").tobytes()
        else:
            raw = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def inv_freq(c):
    """transformers' default and llama3 rope parameters, in fp32 as there."""
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    base = c.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < hi_wl) * ~(wl > lo_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def phi3_unfused(c, w):
    """Phi3Attention and Phi3MLP's split of the fused projections: qkv rows [q | k | v],
    gate_up rows [gate | up] (`chunk(2, dim=-1)` of the product)."""
    hd = c["hidden_size"] // c["num_attention_heads"]
    qn, kvn = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = dict(w)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        qkv = w[p + "self_attn.qkv_proj.weight"]
        out[p + "self_attn.q_proj.weight"] = qkv[:qn]
        out[p + "self_attn.k_proj.weight"] = qkv[qn:qn + kvn]
        out[p + "self_attn.v_proj.weight"] = qkv[qn + kvn:]
        gate, up = w[p + "mlp.gate_up_proj.weight"].chunk(2, dim=0)
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
    return out


def forward(c, w, ids):
    """Logits [T, vocab] in float64 for one sequence of token ids."""
    h, nh = c["hidden_size"], c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", nh)
    hd = c.get("head_dim") or h // nh
    eps = c["rms_norm_eps"]
    t = len(ids)
    pos = torch.arange(t, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq(c))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().double(), emb.sin().double()

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rot(x):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def lin(x, name, bias=False):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    arch = c["architectures"][0]
    bias = arch == "Qwen2ForCausalLM" or c.get("attention_bias", False)
    qk_norm = arch == "Qwen3ForCausalLM"
    if arch == "Phi3ForCausalLM":
        w = phi3_unfused(c, w)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    if arch in ("MistralForCausalLM", "Phi3ForCausalLM") and c.get("sliding_window"):
        idx = torch.arange(t)  # transformers' sliding_window_overlay: kv > q - window
        mask &= idx[None, :] > idx[:, None] - c["sliding_window"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        y = norm(x, w[p + "input_layernorm.weight"])
        q = lin(y, p + "self_attn.q_proj", bias).view(t, nh, hd).transpose(0, 1)
        k = lin(y, p + "self_attn.k_proj", bias).view(t, nkv, hd).transpose(0, 1)
        v = lin(y, p + "self_attn.v_proj", bias).view(t, nkv, hd).transpose(0, 1)
        if qk_norm:  # Qwen3Attention: q_norm / k_norm over each head's head_dim
            q, k = norm(q, w[p + "self_attn.q_norm.weight"]), norm(k, w[p + "self_attn.k_norm.weight"])
        q, k = rot(q), rot(k)
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + lin(a.transpose(0, 1).reshape(t, nh * hd), p + "self_attn.o_proj")
        y = norm(x, w[p + "post_attention_layernorm.weight"])
        g = lin(y, p + "mlp.gate_proj")
        x = x + lin(torch.nn.functional.silu(g) * lin(y, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else w["lm_head.weight"]
    return norm(x, w["model.norm.weight"]) @ head.T


def forward_gemma(c, w, ids):
    """Gemma2ForCausalLM's or Gemma3ForCausalLM's logits [T, vocab] in float64 (transformers'
    modeling_gemma2 / modeling_gemma3 run in float32 semantics: the embedding scale is
    sqrt(hidden) unrounded)."""
    gemma3 = c["architectures"][0] == "Gemma3ForCausalLM"
    h, nh, nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, eps, t = c["head_dim"], c["rms_norm_eps"], len(ids)
    pos = torch.arange(t, dtype=torch.float32)

    def rope_tables(base, scaling):
        inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        if scaling and scaling.get("rope_type", scaling.get("type")) == "linear":
            inv = inv / scaling["factor"]
        emb = torch.outer(pos, inv)
        emb = torch.cat((emb, emb), dim=-1)
        return emb.cos().double(), emb.sin().double()

    rope_global = rope_tables(c["rope_theta"], c.get("rope_scaling"))
    rope_local = rope_tables(c["rope_local_base_freq"], None) if gemma3 else rope_global

    def softcap(x, cap):  # Gemma 2: cap * tanh(x / cap)
        return torch.tanh(x / cap) * cap if cap else x

    def norm(x, weight):  # Gemma3RMSNorm: x / rms(x) * (1 + w)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight)

    def rot(x, cs):
        cos, sin = cs
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def lin(x, name):
        return x @ w[name + ".weight"].T

    pattern = c.get("sliding_window_pattern")
    idx = torch.arange(t)
    causal = idx[None, :] <= idx[:, None]
    window = causal & (idx[None, :] > idx[:, None] - c["sliding_window"])
    x = w["model.embed_tokens.weight"][torch.tensor(ids)] * math.sqrt(h)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sliding = bool((i + 1) % pattern) if gemma3 else not bool(i % 2)
        y = norm(x, w[p + "input_layernorm.weight"])
        q = lin(y, p + "self_attn.q_proj").view(t, nh, hd).transpose(0, 1)
        k = lin(y, p + "self_attn.k_proj").view(t, nkv, hd).transpose(0, 1)
        v = lin(y, p + "self_attn.v_proj").view(t, nkv, hd).transpose(0, 1)
        if gemma3:
            q = norm(q, w[p + "self_attn.q_norm.weight"])
            k = norm(k, w[p + "self_attn.k_norm.weight"])
        cs = rope_local if sliding else rope_global
        q, k = rot(q, cs), rot(k, cs)
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        s = softcap((q @ k.transpose(-1, -2)) * c["query_pre_attn_scalar"] ** -0.5,
                    c.get("attn_logit_softcapping"))
        a = s.masked_fill(~(window if sliding else causal), float("-inf")).softmax(-1) @ v
        o = lin(a.transpose(0, 1).reshape(t, nh * hd), p + "self_attn.o_proj")
        x = x + norm(o, w[p + "post_attention_layernorm.weight"])
        y = norm(x, w[p + "pre_feedforward_layernorm.weight"])
        g = torch.nn.functional.gelu(lin(y, p + "mlp.gate_proj"), approximate="tanh")
        m = lin(g * lin(y, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = x + norm(m, w[p + "post_feedforward_layernorm.weight"])
    logits = norm(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T
    return softcap(logits, c.get("final_logit_softcapping"))


def write_golden(path, c, w, prompts):
    tensors = {}
    run = forward_gemma if c["architectures"][0].startswith("Gemma") else forward
    for i, ids in enumerate(prompts):
        tensors[f"prompt_{i}"] = np.array(ids, dtype=np.float32)
        tensors[f"logits_{i}"] = run(c, w, ids).numpy().astype(np.float32)
    write_safetensors(path, tensors)
    print(f"wrote {path}: {len(prompts)} prompts, {os.path.getsize(path)} bytes")


def tiny_prompts(tiny_dir):
    vocab = json.load(open(os.path.join(tiny_dir, "tokenizer.json")))["model"]["vocab"]
    # Byte-level: printable ASCII maps to itself, space to "Ġ", newline to "Ċ".
    enc = lambda s: [0] + [vocab[{" ": "Ġ", "\n": "Ċ"}.get(ch, ch)] for ch in s]
    return [enc("1+1="), enc("12+34=46"),
            enc("The gateway routes each request to the replica with the fewest tokens.")]


def write_random(out_dir, c, shapes, g, norm_offset=1.0):
    """Random weights for `shapes` (norms near `norm_offset`: 1, or 0 where the model adds the 1),
    the config and the BF16 checkpoint."""
    tensors = {}
    for name, shape in shapes.items():
        t = torch.randn(shape, generator=g, dtype=torch.float32)
        tensors[name] = (norm_offset + 0.1 * t if name.endswith("norm.weight") else 0.3 * t).numpy()
    os.makedirs(out_dir, exist_ok=True)
    json.dump(c, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, "BF16")


def random_model(out_dir, c, seed, lengths):
    """Writes a random checkpoint of config `c` and returns prompts of `lengths` tokens."""
    g = torch.Generator().manual_seed(seed)
    gemma = c["architectures"][0] in ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
    write_random(out_dir, c, checkpoint_shapes(c), g, norm_offset=0.0 if gemma else 1.0)
    return [torch.randint(0, c["vocab_size"], (n,), generator=g).tolist() for n in lengths]


QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 160,
    "hidden_size": 64, "intermediate_size": 112, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "rope_theta": 500000.0, "max_position_embeddings": 512,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
    "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
}

QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 160,
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu", "attention_bias": False,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": None,
    "max_position_embeddings": 512, "use_sliding_window": False, "sliding_window": None,
    "max_window_layers": 2, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}

GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 160,
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 40, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 6,
    "max_position_embeddings": 512, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0,
    "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": [1, 107],
    "torch_dtype": "bfloat16",
}

PHI3 = {
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 160,
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "rope_scaling": None, "partial_rotary_factor": 1.0, "sliding_window": 9,
    "max_position_embeddings": 512, "original_max_position_embeddings": 512,
    "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": [2, 7],
    "torch_dtype": "bfloat16",
}

GEMMA3 = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 160,
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 24, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 4.0},
    "sliding_window": 5, "sliding_window_pattern": 2, "max_position_embeddings": 512,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "tie_word_embeddings": True,
    "bos_token_id": 2, "eos_token_id": [1, 106], "torch_dtype": "bfloat16",
}

# The random models: config, seed, prompt lengths.
RANDOM_MODELS = {
    "qwen2": (QWEN2, 4321, (5, 41)),
    "qwen3": (QWEN3, 8642, (6, 37)),
    "gemma2": (GEMMA2, 13579, (5, 33)),
    "phi3": (PHI3, 24680, (3, 29)),
    "gemma3": (GEMMA3, 97531, (4, 37)),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", default="models/exa-tiny-arith")
    ap.add_argument("--out", default="test/data/engine")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    c = json.load(open(os.path.join(args.tiny, "config.json")))
    w = read_safetensors(os.path.join(args.tiny, "model.safetensors"))
    write_golden(os.path.join(args.out, "tiny-arith-golden.safetensors"), c, w,
                 tiny_prompts(args.tiny))

    # Each random model (its own seeded generator: regenerating gives the committed files), then
    # its goldens from the BF16-rounded weights it wrote.
    for name, (c, seed, lengths) in RANDOM_MODELS.items():
        rdir = os.path.join(args.out, f"random-{name}")
        prompts = random_model(rdir, c, seed, lengths)
        w = read_safetensors(os.path.join(rdir, "model.safetensors"))
        write_golden(os.path.join(args.out, f"random-{name}-golden.safetensors"), c, w, prompts)

if __name__ == "__main__":
    main()
