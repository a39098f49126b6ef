#include "app/yaml_document.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <sstream>

namespace titan::app {
namespace {

// Sees the events of one document at a time: where it starts and whether it holds anything
// but the empty root.
class DocumentScan : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    holds_content = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { content(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    content(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    content(mark);
  }
  void OnMapEnd() override {}

  YAML::Mark start;
  YAML::Mark first_content;
  bool holds_content = false;

 private:
  void content(const YAML::Mark& mark) {
    if (!holds_content) first_content = mark;
    holds_content = true;
  }
};

}  // namespace

YamlDocument read_yaml_document(const std::string& text) {
  YamlDocument result;
  // Pass 1, events only: count the documents, and stop where the parser stops moving. Every
  // document consumes at least its "---" or one character, so more documents than characters
  // would also mean the parser is stuck.
  {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentScan scan;
    int documents = 0;
    int previous_start = -1;
    while (parser.HandleNextDocument(scan)) {
      if (scan.start.pos == previous_start || documents > static_cast<int>(text.size())) {
        const char stray = scan.start.pos >= 0 && scan.start.pos < static_cast<int>(text.size())
                               ? text[static_cast<size_t>(scan.start.pos)]
                               : '?';
        throw YAML::ParserException(
            scan.start, std::string("unexpected '") + stray + "' after the end of a value");
      }
      previous_start = scan.start.pos;
      if (documents > 0 && scan.holds_content && result.second_document_line == 0) {
        result.second_document_line = scan.first_content.line + 1;
      }
      ++documents;
    }
  }
  // Pass 2: the first document as nodes (yaml-cpp's node builder is not public).
  result.root = YAML::Load(text);
  return result;
}

}  // namespace titan::app
