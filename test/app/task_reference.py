#!/usr/bin/env python3
"""Multiple-choice scoring as lm-evaluation-harness does it, in PyTorch: the reference that
titan_generate --tasks is held to.

It shares no code with titan_generate: it builds each format's prompt from the JSON itself (the
harness's doc_to_text, doc_to_choice and HellaSwag's preprocess), splits each choice's tokens as
the harness's _encode_pair (the context's trailing whitespace moved onto the continuation) with
the byte-level tokenizer (a UTF-8 byte is its id; BOS 256 before every context), and runs each
request alone through hf_llama_reference.py's float64 Llama forward over a Hugging Face folder.

    task_reference.py HF_FOLDER TASK.jsonl...

Prints one JSON line per item ({"task", "line", "loglik": [per choice]}) and one per task
({"task", "n", "acc", "acc_norm"}).

Needs Debian 12's python3-torch (1.13) and python3-numpy.
"""
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
import hf_llama_reference as ref  # noqa: E402

BOS = 256


def hellaswag_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def prompt(doc):
    """(context, [continuation], [choice text], gold) the harness builds for one line."""
    if "endings" in doc:
        ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize() if "ctx_a" in doc else doc["ctx"]
        choices = [hellaswag_preprocess(e) for e in doc["endings"]]
        context = hellaswag_preprocess(doc["activity_label"] + ": " + ctx)
        return context, [" " + c for c in choices], choices, int(doc["label"])
    if "answerKey" in doc:
        choices = doc["choices"]["text"]
        gold = doc["choices"]["label"].index(doc["answerKey"])
        return "Question: " + doc["question"] + "\nAnswer:", [" " + c for c in choices], choices, gold
    if "goal" in doc:
        choices = [doc["sol1"], doc["sol2"]]
        return "Question: " + doc["goal"] + "\nAnswer:", [" " + c for c in choices], choices, doc["label"]
    if "answer" in doc:
        letters = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
        context = ""
        if "subject" in doc:
            context = ("The following are multiple choice questions (with answers) about "
                       + doc["subject"].replace("_", " ") + ".\n\n")
        context += doc["question"].strip() + "".join(
            f"\n{k}. {c}" for k, c in zip(letters, doc["choices"])) + "\nAnswer:"
        answer = doc["answer"]
        gold = letters.index(answer) if isinstance(answer, str) else answer
        return context, [" " + k for k in letters], letters, gold
    return doc["context"], list(doc["choices"]), list(doc["choices"]), doc["label"]


def encode(text):
    return list(text.encode("utf-8"))


def encode_pair(context, continuation):
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = encode(context + continuation)
    context_enc = encode(context)
    return [BOS] + context_enc, whole[len(context_enc):]


def loglik(config, weights, context_ids, continuation_ids):
    ids = context_ids + continuation_ids
    inputs = torch.tensor([ids[:-1]], dtype=torch.long)
    logprobs = torch.log_softmax(ref.llama_logits(config, weights, inputs)[0], dim=-1)
    n = len(continuation_ids)
    rows = logprobs[-n:]
    return float(rows.gather(1, torch.tensor(continuation_ids).view(-1, 1)).sum())


def main():
    folder, files = sys.argv[1], sys.argv[2:]
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    weights = ref.read_folder(folder)
    for path in files:
        task = os.path.splitext(os.path.basename(path))[0]
        n = right = right_norm = 0
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            context, continuations, choices, gold = prompt(json.loads(line))
            with torch.no_grad():
                sums = [loglik(config, weights, *encode_pair(context, c)) for c in continuations]
            norm = [s / len(c.encode("utf-8")) for s, c in zip(sums, choices)]
            n += 1
            right += int(max(range(len(sums)), key=lambda i: (sums[i], -i)) == gold)
            right_norm += int(max(range(len(norm)), key=lambda i: (norm[i], -i)) == gold)
            print(json.dumps({"task": task, "line": number, "loglik": sums}))
        print(json.dumps({"task": task, "n": n, "acc": right / n, "acc_norm": right_norm / n}))


if __name__ == "__main__":
    main()
