#!/usr/bin/env python3
"""A small tokenizer.json with Llama 3's chat tokens, for training tests on conversations.

From Llama 3's tokenizer.json it keeps the normalizer, the pre-tokenizer (its Split regex and
ByteLevel), the decoder and the post-processor, and replaces the model by a byte-level BPE
without merges: the 256 byte symbols as ids 0..255, then the five special tokens of the chat
format as 256..260. Every text encodes to its bytes, so a model of a few hundred ids (the debug
model's vocabulary of 2048) trains on Llama 3-formatted conversations.

    chat_tokenizer.py LLAMA3_TOKENIZER_JSON OUT_JSON
"""
import json
import sys

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>"]


def bytes_to_unicode():
    """GPT-2's byte-to-symbol table, which ByteLevel uses."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    symbols = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            symbols.append(256 + n)
            n += 1
    return {b: chr(s) for b, s in zip(printable, symbols)}


def main():
    source, out = sys.argv[1:]
    with open(source, encoding="utf-8") as f:
        llama3 = json.load(f)
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    model = dict(llama3["model"])
    model["vocab"] = vocab
    model["merges"] = []
    added = [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, s in enumerate(SPECIALS)]
    small = dict(llama3)
    small["model"] = model
    small["added_tokens"] = added
    with open(out, "w", encoding="utf-8") as f:
        json.dump(small, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
