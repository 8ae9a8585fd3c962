#!/usr/bin/python3
"""Trains the bundled model `models/exa-tiny-arith/`: a tiny LLaMA-architecture transformer that
adds numbers (`a+b=c`, operands up to 3 digits) and knows a little text.

It is the embedded default of exaserved and the target of the model-level health probe
(docs/architecture.md#health-checks: "1+1" must give "2"), so it must be small (a few MB, committed), reproducible
(seeded) and trainable on a laptop CPU in minutes (Debian python3-torch only: the safetensors and
tokenizers Python packages are not in Debian, so both file formats are written here by hand).

Held-out evaluation: 1000 ordered 2-digit pairs (a, b with 10 <= a, b <= 99) are drawn with a fixed
seed and written to `heldout-2digit.txt`; neither (a, b) nor (b, a) is ever trained on.

Training stops at --steps (2500) or as soon as held-out exact match reaches --target (0.995),
checked every 250 steps; the committed model stopped at step 1750 with 1000/1000. Each step is
about 0.4-0.5 s on 2 cores (torch.set_num_threads(2); install libopenblas0-pthread: Debian's
reference BLAS is 10x slower), so ~13 minutes; on a busy shared machine it took 16.

Usage: /usr/bin/python3 scripts/train-tiny-model.py [--out models/exa-tiny-arith] [--steps 2500]
"""
import argparse
import json
import math
import os
import random
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
BOS, EOS, PAD = "<s>", "</s>", "<pad>"

# A little English so the model has seen words; the probe and bench only need arithmetic.
TEXT = """ExaServe serves large language models on a cluster of many nodes.
Every node runs one binary. Nodes find each other with gossip and take on roles.
The gateway routes each request to the replica with the fewest pending tokens.
A replica is a resident inference instance with its weights and its own cache.
Health checks run at three levels: process, model and performance.
The model probe asks one plus one and expects the answer two.
Numbers are added digit by digit, carrying one when a column passes nine.
The quick brown fox jumps over the lazy dog.
Hello, world! This is a tiny model that can add numbers.
Small models are fast to load and easy to test.
One, two, three, four, five, six, seven, eight, nine, ten.
The weights are stored in safetensors files next to a config and a tokenizer.
"""


# ---------------------------------------------------------------- tokenizer (byte-level BPE)

def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def pretokenize(text):
    """Approximates GPT-2's split for merge learning: words with their leading space."""
    words, cur = [], ""
    for ch in text:
        if ch.isalpha() and (cur == "" or cur[-1].isalpha() or cur == " "):
            cur += ch
        else:
            if cur:
                words.append(cur)
            cur = ch
    if cur:
        words.append(cur)
    return words


def learn_merges(text, byte_map, num_merges):
    """Plain BPE over letters only, so digits and operators stay one byte = one token."""
    counts = {}
    for w in pretokenize(text):
        if not any(c.isalpha() for c in w):
            continue
        key = tuple(byte_map[b] for b in w.encode("utf-8"))
        counts[key] = counts.get(key, 0) + 1
    merges = []
    for _ in range(num_merges):
        pairs = {}
        for word, c in counts.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        if pairs[best] < 2:
            break
        merges.append(best)
        merged = {}
        for word, c in counts.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        counts = merged
    return merges


class Tokenizer:
    def __init__(self, merges, byte_map):
        self.byte_map = byte_map
        self.vocab = {BOS: 0, EOS: 1, PAD: 2}
        for b in range(256):
            self.vocab[byte_map[b]] = len(self.vocab)
        self.merges = merges
        for a, b in merges:
            self.vocab.setdefault(a + b, len(self.vocab))
        self.ranks = {m: i for i, m in enumerate(merges)}

    def encode_word(self, w):
        parts = [self.byte_map[b] for b in w.encode("utf-8")]
        while len(parts) > 1:
            best = min(((self.ranks.get((a, b), 1 << 30), i) for i, (a, b) in
                        enumerate(zip(parts, parts[1:]))))
            if best[0] == 1 << 30:
                break
            i = best[1]
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
        return [self.vocab[p] for p in parts]

    def encode(self, text):
        ids = []
        for w in pretokenize(text):
            ids += self.encode_word(w)
        return ids

    def to_json(self):
        added = [{"id": self.vocab[t], "content": t, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True} for t in (BOS, EOS, PAD)]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {BOS: {"id": BOS, "ids": [self.vocab[BOS]], "tokens": [BOS]}},
            },
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": self.vocab, "merges": [f"{a} {b}" for a, b in self.merges]},
        }


# ---------------------------------------------------------------- model (LLaMA architecture)

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
    "torch_dtype": "float32",
    "transformers_version": "4.44.0",
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    # HF's rotate_half convention: pairs are (i, i + head_dim / 2).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.q_proj = nn.Linear(h, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, h, bias=False)
        self.gate_proj = nn.Linear(h, c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(h, c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.nh // self.nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        a = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        pos = torch.arange(c["max_position_embeddings"], dtype=torch.float32)
        freqs = torch.outer(pos, inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))

    def hf_state(self):
        out = {"model.embed_tokens.weight": self.embed_tokens.weight}
        for i, l in enumerate(self.layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = l.input_layernorm.weight
            out[p + "post_attention_layernorm.weight"] = l.post_attention_layernorm.weight
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{n}.weight"] = getattr(l, n).weight
            for n in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{n}.weight"] = getattr(l, n).weight
        out["model.norm.weight"] = self.norm.weight
        out["lm_head.weight"] = self.lm_head.weight
        return {k: v.detach().float().contiguous() for k, v in out.items()}


def write_safetensors(path, tensors):
    """The format: u64 little-endian header length, JSON header, then raw little-endian data."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        data = tensors[name].numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # keeps tensor data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


# ---------------------------------------------------------------- data

def heldout_pairs():
    rng = random.Random(SEED)
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    rng.shuffle(pairs)
    return pairs[:1000]


def make_sampler(tok, rng, banned):
    text_ids = tok.encode(TEXT)

    def operand(digits):
        return rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10 ** digits)

    def arith():
        r = rng.random()
        while True:
            if r < 0.6:
                a, b = operand(2), operand(2)
            elif r < 0.7:
                a, b = operand(1), operand(1)
            elif r < 0.85:
                a, b = operand(rng.choice((1, 2, 3))), operand(rng.choice((1, 2, 3)))
            else:
                a, b = operand(3), operand(3)
            if (a, b) not in banned:
                break
        prompt = [0] + tok.encode(f"{a}+{b}=")
        answer = tok.encode(str(a + b)) + [1]
        return prompt + answer, len(prompt)

    def text():
        n = rng.randrange(8, 33)
        s = rng.randrange(0, len(text_ids) - n)
        return [0] + text_ids[s:s + n], 1

    def sample():
        return text() if rng.random() < 0.08 else arith()

    return sample


def batch(sample, n):
    seqs = [sample() for _ in range(n)]
    t = max(len(s) for s, _ in seqs)
    ids = torch.full((n, t), 2, dtype=torch.long)
    mask = torch.zeros((n, t), dtype=torch.bool)
    for i, (s, start) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, start:len(s)] = True  # loss on the answer (and text), not the random operands
    return ids, mask


@torch.no_grad()
def accuracy(model, tok, pairs):
    """Greedy exact-match, batched: all prompts of one length decode together."""
    model.eval()
    correct = 0
    by_len = {}
    for a, b in pairs:
        by_len.setdefault(len(f"{a}+{b}="), []).append((a, b))
    for group in by_len.values():
        ids = torch.tensor([[0] + tok.encode(f"{a}+{b}=") for a, b in group])
        outs = [[] for _ in group]
        for _ in range(5):
            nxt = model(ids)[:, -1].argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            for o, n in zip(outs, nxt.tolist()):
                o.append(n)
        inv = {v: k for k, v in tok.vocab.items()}
        for (a, b), o in zip(group, outs):
            text = "".join(inv[i] for i in o[:o.index(1)] if i in inv) if 1 in o else None
            correct += text == str(a + b)
    model.train()
    return correct / len(pairs)


def save(out, model, tok, config, heldout, acc):
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), model.hf_state())
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok.to_json(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS,
                   "eos_token": EOS, "pad_token": PAD, "add_bos_token": True,
                   "model_max_length": config["max_position_embeddings"]}, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
                   "do_sample": False, "max_new_tokens": 8}, f, indent=2)
    with open(os.path.join(out, "heldout-2digit.txt"), "w") as f:
        f.write("".join(f"{a}+{b}={a + b}\n" for a, b in heldout))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(f"# exa-tiny-arith\n\nA {sum(p.numel() for p in model.parameters())}-parameter "
                "LLaMA-architecture model trained by `scripts/train-tiny-model.py` (seed "
                f"{SEED}) to add numbers. Prompt `<s>a+b=`, greedy decoding, stop at `</s>`.\n"
                f"Exact match on the 1000 held-out 2-digit sums in `heldout-2digit.txt` "
                f"(PyTorch, at save time): {acc:.3f}.\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/exa-tiny-arith")
    ap.add_argument("--minutes", type=float, default=45.0)  # safety cap only: steps decide
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.995)
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = random.Random(SEED + 1)

    byte_map = bytes_to_unicode()
    tok = Tokenizer(learn_merges(TEXT, byte_map, 150), byte_map)
    config = dict(CONFIG, vocab_size=int(math.ceil(len(tok.vocab) / 64) * 64))
    heldout = heldout_pairs()
    banned = set(heldout) | {(b, a) for a, b in heldout}
    sample = make_sampler(tok, rng, banned)

    model = Model(config)
    steps_total = args.steps
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * max(0.1, 0.5 * (1 + math.cos(
            math.pi * min(s, steps_total) / steps_total))))
    start, acc, step = time.time(), 0.0, 0
    while time.time() - start < args.minutes * 60 and step < steps_total:
        ids, mask = batch(sample, args.batch)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits[mask[:, 1:]], ids[:, 1:][mask[:, 1:]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 250 == 0:
            acc = accuracy(model, tok, heldout)
            print(f"step {step} loss {loss.item():.4f} heldout {acc:.3f} "
                  f"t {time.time() - start:.0f}s", flush=True)
            if acc >= args.target:
                break
    acc = accuracy(model, tok, heldout)
    print(f"final step {step} heldout exact {acc:.3f}", flush=True)
    save(args.out, model, tok, config, heldout, acc)


if __name__ == "__main__":
    main()
