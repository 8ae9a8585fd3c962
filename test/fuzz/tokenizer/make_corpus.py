#!/usr/bin/env python3
"""Writes the seed corpus of the tokenizer.json fuzz target: small tokenizer.json files covering
each supported component (and a few unsupported or malformed ones). Deterministic.

Usage: python3 test/fuzz/tokenizer/make_corpus.py   (writes test/fuzz/tokenizer/corpus/)
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def byte_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_level(use_regex, merges, extra=None):
    chars = byte_chars()
    vocab = {chars[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
          "use_regex": use_regex}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": bl, "post_processor": bl, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
                     "merges": [[a, b] for a, b in merges]}}
    doc.update(extra or {})
    return doc


def sentencepiece(extra=None):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for ch in "▁abcdehlorw":
        vocab[ch] = len(vocab)
    merges = ["▁ h", "e l", "▁h el", "l o", "▁hel lo", "▁ w", "o r", "▁w or", "l d", "▁wor ld"]
    for m in merges:
        a, b = m.split(" ")
        vocab.setdefault(a + b, len(vocab))
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": 2, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "vocab": vocab, "merges": merges},
    }
    doc.update(extra or {})
    return doc


QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HELLO = [("h", "e"), ("he", "l"), ("hel", "l"), ("hell", "o"), ("Ġ", "w"), ("o", "r")]


def main():
    out = os.path.join(HERE, "corpus")
    os.makedirs(out, exist_ok=True)
    docs = {
        "gpt2_byte_level.json": byte_level(True, HELLO),
        "byte_level_no_regex.json": byte_level(False, HELLO),
        "qwen_style_split.json": byte_level(False, HELLO, {
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                 "use_regex": False}]},
            "added_tokens": [
                {"id": 300, "content": "<|im_end|>", "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": True},
                {"id": 301, "content": "[M]", "single_word": True, "lstrip": True,
                 "rstrip": True, "normalized": True, "special": False}]}),
        "digits_whitespace.json": byte_level(False, HELLO, {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True,
                                                          "strip_right": True},
                {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True},
                {"type": "Whitespace"},
                {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]}}),
        "legacy_merges.json": dict(byte_level(True, HELLO), model=dict(
            byte_level(True, HELLO)["model"], merges=[a + " " + b for a, b in HELLO])),
        "sentencepiece_prepend.json": sentencepiece(),
        "sentencepiece_metaspace.json": sentencepiece({
            "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                              "split": False},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                 "split": False}, {"type": "ByteFallback"}, {"type": "Fuse"}]}}),
        "unsupported_wordpiece.json": {"model": {"type": "WordPiece", "vocab": {"a": 0}}},
        "wrong_types.json": {"model": {"type": "BPE", "vocab": [1, 2], "merges": {}}},
    }
    for name, doc in docs.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
    with open(os.path.join(out, "truncated.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(docs["sentencepiece_prepend.json"], ensure_ascii=False)[:500])


if __name__ == "__main__":
    main()
