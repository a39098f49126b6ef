// test/checkpoint/hf_llama_reference.py: an independent Llama 3 forward in PyTorch (Debian's
// python3-torch, which scripts/setup.sh --tests installs), with its own safetensors parser and
// Hugging Face's names and rotate-half RoPE, over a Hugging Face folder titan_train wrote.
#pragma once

#include <cstdint>
#include <string>

namespace titan::testing {

// The mean token loss PyTorch computes over `tokens_file` (ids separated by spaces, read as
// `batch` sequences of `seq_len` + 1) with the weights of the Hugging Face folder `hf_folder`;
// the test stops (REQUIRE) with the script's error when it fails.
// With `peft_folder`, the LoRA adapters saved there in PEFT's layout are merged into the
// folder's weights first (W += alpha/r · B·A), by the script, from PEFT's files alone.
double hf_reference_loss(const std::string& hf_folder, const std::string& tokens_file,
                         int64_t seq_len, int64_t batch, const std::string& peft_folder = "");

}  // namespace titan::testing
