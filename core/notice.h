// One line for the user's log from a layer that has no logger of its own.
//
// core, model, fp8 and parallel log nothing themselves: the executables own the log (spdlog, its
// pattern and ranks). A library that must tell the user something once — a backend that fell
// back for one shape, a choice made for them — calls notice(); the executable routes it to its
// logger with set_notice_sink() at start-up. Until then, or in a test, it goes to stderr.
#pragma once

#include <functional>
#include <string>

namespace titan {

// Called from any thread; the sink is called under a lock, one line at a time.
void notice(const std::string& line);

// Where notice() writes; an empty function restores stderr.
void set_notice_sink(std::function<void(const std::string&)> sink);

}  // namespace titan
