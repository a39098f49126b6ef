#include "app/metrics/tensorboard/tensorboard_sink.h"

#include <algorithm>

namespace titan::app {

std::string markdown_code_block(const std::string& text, const std::string& language) {
  size_t longest_run = 0;
  size_t run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest_run = std::max(longest_run, run);
  }
  const std::string fence(std::max<size_t>(3, longest_run + 1), '`');
  std::string block = fence + language + "\n" + text;
  if (!text.empty() && text.back() != '\n') block += '\n';
  return block + fence + "\n";
}

TensorBoardSink::TensorBoardSink(const std::string& folder) : writer_(folder) {}

void TensorBoardSink::write_config(const std::string& yaml) {
  writer_.add_text("config", markdown_code_block(yaml, "yaml"), 0);
}

void TensorBoardSink::write(const StepReport& report) {
  const double wall_time = unix_seconds();
  for (const Scalar& scalar : report.scalars) {
    writer_.add_scalar(scalar.name, static_cast<float>(scalar.value), report.step, wall_time);
  }
}

void TensorBoardSink::flush() { writer_.flush(); }

}  // namespace titan::app
