#!/usr/bin/python3
"""Helpers for scripts/llama-side-by-side.sh (not run by CI).

  synthetic-gguf.py retype SRC_DIR DST_DIR {f16,f32}
      Copies a BF16 synthetic checkpoint (scripts/make-synthetic-model.py) to DST_DIR in F16 or
      F32: the same values (BF16 widens exactly to both), so the engines compare dtypes on one
      set of weights.
  synthetic-gguf.py gguf MODEL_DIR OUT.gguf LLAMA_CPP_DIR
      Writes the checkpoint as a GGUF with llama.cpp's own gguf-py (LLAMA_CPP_DIR/gguf-py), in the
      checkpoint's dtype. convert_hf_to_gguf.py needs a tokenizer, which the synthetic model does
      not have, so this writes the same tensors itself: llama.cpp's tensor names, q/k rows
      permuted from Hugging Face's rotate-half order to GGUF's interleaved order (as
      convert_hf_to_gguf.py does), and a placeholder 'llama' vocabulary of vocab_size tokens.
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    header.pop("__metadata__", None)
    return header, data


def tensor(header, data, name):
    """(array, dtype name): BF16 as uint16 bits, F16 as float16, F32 as float32."""
    h = header[name]
    a, b = h["data_offsets"]
    np_type = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[h["dtype"]]
    return data[a:b].view(np_type).reshape(h["shape"]), h["dtype"]


def retype(src, dst, out_type):
    header, data = read_safetensors(os.path.join(src, "model.safetensors"))
    np_type = {"f16": np.float16, "f32": np.float32}[out_type]
    names = sorted(header)
    out_header, off = {"__metadata__": {"format": "pt"}}, 0
    for name in names:
        n = int(np.prod(header[name]["shape"])) * np.dtype(np_type).itemsize
        out_header[name] = {"dtype": out_type.upper(), "shape": header[name]["shape"],
                            "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            bits, _ = tensor(header, data, name)
            wide = (bits.astype(np.uint32) << 16).view(np.float32)  # BF16 -> F32, exact
            f.write(wide.astype(np_type).tobytes())
    config = json.load(open(os.path.join(src, "config.json")))
    config["torch_dtype"] = {"f16": "float16", "f32": "float32"}[out_type]
    json.dump(config, open(os.path.join(dst, "config.json"), "w"), indent=2)


def permute(w, n_head):
    # Hugging Face keeps each head's rotary pairs as (first half, second half); GGUF interleaves.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf(model_dir, out, llama_dir):
    sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))
    import gguf as g  # noqa: E402 (llama.cpp's own writer)
    c = json.load(open(os.path.join(model_dir, "config.json")))
    header, data = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    w = g.GGUFWriter(out, "llama")
    w.add_name("exaserve-synthetic")
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_dimension_count(c["hidden_size"] // c["num_attention_heads"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_vocab_size(c["vocab_size"])
    w.add_tokenizer_model("llama")
    vocab = c["vocab_size"]
    w.add_token_list([b"<unk>", b"<s>", b"</s>"] + [f"t{i}".encode() for i in range(3, vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [1] * (vocab - 3))
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])
    raw = {"BF16": g.GGMLQuantizationType.BF16, "F16": g.GGMLQuantizationType.F16,
           "F32": g.GGMLQuantizationType.F32}
    file_type = {"BF16": g.LlamaFileType.MOSTLY_BF16, "F16": g.LlamaFileType.MOSTLY_F16,
                 "F32": g.LlamaFileType.ALL_F32}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                 "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for i in range(c["num_hidden_layers"]):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    dtype = None
    for hf, gg in names.items():
        a, dtype_name = tensor(header, data, hf)
        if hf.endswith("norm.weight"):  # llama.cpp keeps norms in F32
            if dtype_name == "BF16":
                a = (a.astype(np.uint32) << 16).view(np.float32)
            w.add_tensor(gg, np.ascontiguousarray(a, dtype=np.float32))
            continue
        dtype = dtype_name
        if hf.endswith("q_proj.weight"):
            a = permute(a, c["num_attention_heads"])
        elif hf.endswith("k_proj.weight"):
            a = permute(a, c["num_key_value_heads"])
        w.add_tensor(gg, np.ascontiguousarray(a), raw_dtype=raw[dtype_name])
    w.add_file_type(file_type[dtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "retype":
        retype(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 5 and sys.argv[1] == "gguf":
        gguf(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
