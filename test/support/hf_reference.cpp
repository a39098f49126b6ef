#include "support/hf_reference.h"

#include <doctest/doctest.h>

#include "support/process.h"

namespace titan::testing {

double hf_reference_loss(const std::string& hf_folder, const std::string& tokens_file,
                         int64_t seq_len, int64_t batch, const std::string& peft_folder) {
  const ProcessResult reference = run_process(
      "/usr/bin/python3 test/checkpoint/hf_llama_reference.py " + hf_folder + " " + tokens_file +
      " --seq-len " + std::to_string(seq_len) + " --batch " + std::to_string(batch) +
      (peft_folder.empty() ? "" : " --peft " + peft_folder));
  REQUIRE_MESSAGE(reference.exit_code == 0,
                  "hf_llama_reference.py failed (Debian's python3-torch and python3-numpy are "
                  "needed; scripts/setup.sh --tests installs them): "
                      << reference.err);
  const size_t at = reference.out.find("loss ");
  REQUIRE_MESSAGE(at != std::string::npos, "hf_llama_reference.py printed no loss: " << reference.out);
  return std::stod(reference.out.substr(at + 5));
}

}  // namespace titan::testing
