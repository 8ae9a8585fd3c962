"""The tensors of a Hugging Face checkpoint of one config: the Llama family's names with each
family's additions (q/k/v bias, per-head q/k norms, Gemma's extra norms, Phi-3's fused
projections, an untied output head). Shared by scripts/reference-logits.py and
scripts/make-synthetic-model.py; the engine's loader (src/engine/model_weights.cc) reads the
same names."""


def checkpoint_shapes(c):
    """Every tensor a checkpoint of config `c` holds, in the order its random values are drawn:
    transformers' names for the Llama family, with each family's extra or fused tensors."""
    arch = c["architectures"][0]
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    bias = arch == "Qwen2ForCausalLM" or c.get("attention_bias", False)
    qk_norm = arch in ("Qwen3ForCausalLM", "Gemma3ForCausalLM")
    sandwich = arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
    fused = arch == "Phi3ForCausalLM"
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not c.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, h)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        norms = ["input_layernorm", "post_attention_layernorm"]
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"] if sandwich else []
        shapes.update({p + n + ".weight": (h,) for n in norms})
        a = p + "self_attn."
        if fused:
            shapes[a + "qkv_proj.weight"] = (q + 2 * kv, h)
        for name, rows in ([] if fused else [("q", q), ("k", kv), ("v", kv)]):
            shapes[a + name + "_proj.weight"] = (rows, h)
            if bias:
                shapes[a + name + "_proj.bias"] = (rows,)
        shapes[a + "o_proj.weight"] = (h, q)
        if qk_norm:
            shapes.update({a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)})
        if fused:
            shapes[p + "mlp.gate_up_proj.weight"] = (2 * inter, h)
        else:
            shapes.update({p + "mlp.gate_proj.weight": (inter, h),
                           p + "mlp.up_proj.weight": (inter, h)})
        shapes[p + "mlp.down_proj.weight"] = (h, inter)
    return shapes
