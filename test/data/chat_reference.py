#!/usr/bin/env python3
"""Llama 3's chat template rendered by real Jinja, the reference for data/chat.h.

Reads the chat_template and bos_token of a tokenizer_config.json (the one Llama 3's reference
tokenizer package ships beside its tokenizer.json) and renders each conversation of a JSON lines
file with jinja2, as transformers' apply_chat_template does (a sandboxed environment with
trim_blocks and lstrip_blocks), then writes the rendered texts as a JSON array of base64 UTF-8
strings: the input of `node reference.js encode`. This template always ends with a generation
prompt for the assistant; a training conversation has none, so it is cut off the end.

    chat_reference.py TOKENIZER_CONFIG CONVERSATIONS_JSONL OUT_JSON

Needs Debian 12's python3-jinja2 (3.1).
"""
import base64
import json
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

GENERATION_PROMPT = "<|start_header_id|>assistant<|end_header_id|>\n\n"


def main():
    config_path, conversations_path, out_path = sys.argv[1:]
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = environment.from_string(config["chat_template"])
    texts = []
    with open(conversations_path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            messages = json.loads(line)["messages"]
            text = template.render(messages=messages, bos_token=config["bos_token"],
                                   eos_token=config["eos_token"], add_generation_prompt=False)
            if text.endswith(GENERATION_PROMPT):
                text = text[:-len(GENERATION_PROMPT)]
            texts.append(base64.b64encode(text.encode("utf-8")).decode("ascii"))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(texts, f)


if __name__ == "__main__":
    main()
