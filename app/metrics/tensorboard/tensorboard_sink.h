// The TensorBoard sink: each figure of a step becomes a point of the scalar series named after
// it (the same names as the JSON lines keys), and the effective config a text at step 0.
#pragma once

#include <string>

#include "app/metrics/metric_sink.h"
#include "app/metrics/tensorboard/event_file_writer.h"

namespace titan::app {

class TensorBoardSink : public MetricSink {
 public:
  // Opens a new event file in `folder` (created if needed); InputError when it cannot.
  explicit TensorBoardSink(const std::string& folder);

  // The YAML as a markdown code block under the tag "config", at step 0.
  void write_config(const std::string& yaml) override;
  // One scalar per figure, tag = figure name, all at the report's step and one wall time.
  void write(const StepReport& report) override;
  void flush() override;

  const std::string& path() const { return writer_.path(); }  // the event file

 private:
  EventFileWriter writer_;
};

// `text` inside a fenced markdown code block of `language`, the fence longer than any run of
// backticks in the text so that nothing in it can close the block early.
std::string markdown_code_block(const std::string& text, const std::string& language);

}  // namespace titan::app
