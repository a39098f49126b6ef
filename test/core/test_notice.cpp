// core/notice.h: a line from a layer without a logger reaches the executable's sink, or stderr.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/notice.h"

TEST_SUITE("fast") {
  TEST_CASE("notice: lines go to the sink set until it is unset") {
    std::vector<std::string> seen;
    titan::set_notice_sink([&](const std::string& line) { seen.push_back(line); });
    titan::notice("attention: first");
    titan::notice("attention: second");
    titan::set_notice_sink({});
    titan::notice("to stderr, not the sink");
    CHECK(seen == std::vector<std::string>{"attention: first", "attention: second"});
  }
}
