#include "parallel/comm/watchdog_report.h"

#include <charconv>
#include <cstdio>
#include <sstream>

#include "core/check.h"

namespace titan::parallel {
namespace {

// Fields are tab-separated and records newline-separated: neither may appear inside a field.
std::string field(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  return text;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

template <class T>
std::optional<T> parse_number(const std::string& text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", s);
  return text;
}

std::string encode_op(const char* key, const ReportedOp& op) {
  return detail::concat(key, "\t", op.age_s, "\t", field(op.what), "\n");
}

std::optional<ReportedOp> decode_op(const std::vector<std::string>& fields) {
  if (fields.size() != 3) return std::nullopt;
  const std::optional<double> age = parse_number<double>(fields[1]);
  if (!age) return std::nullopt;
  return ReportedOp{fields[2], *age};
}

// What a rank that answered is doing, in words.
std::string activity(const PeerAnswer& answer) {
  if (answer.blocked) {
    return detail::concat("blocked on ", answer.blocked->what, " for ", seconds(answer.blocked->age_s));
  }
  if (answer.last) {
    return detail::concat("not blocked: busy outside communication since its last operation, ",
                          answer.last->what, ", posted ", seconds(answer.last->age_s), " ago");
  }
  return "not blocked, and nothing posted yet";
}

std::string rank_list(const std::vector<PeerVerdict>& verdicts,
                      std::initializer_list<PeerState> states) {
  std::string text;
  for (const PeerVerdict& v : verdicts) {
    bool chosen = false;
    for (PeerState s : states) chosen = chosen || v.state == s;
    if (!chosen) continue;
    if (!text.empty()) text += ", ";
    text += detail::concat("rank ", v.world_rank, " (", v.detail, ")");
  }
  return text;
}

// Where the hang most likely starts, when not among the ranks already named: ranks anywhere in
// the world that do not answer, or else ranks that are not blocked at all (everyone else waits,
// directly or through others, for them). Empty when the world's answers show nothing more.
std::string likely_cause(const WorldAnswers& answers, const std::vector<int>& named) {
  auto is_named = [&named](int rank) {
    for (int r : named) {
      if (r == rank) return true;
    }
    return false;
  };
  constexpr int kMaxNamed = 8;
  std::string silent;
  int silent_count = 0;
  for (const auto& [rank, answer] : answers) {
    if (answer || is_named(rank)) continue;
    if (silent_count++ < kMaxNamed) silent += detail::concat(silent.empty() ? "" : ", ", rank);
  }
  if (silent_count > kMaxNamed) silent += detail::concat(" and ", silent_count - kMaxNamed, " more");
  if (!silent.empty()) {
    return detail::concat("no answer from rank", silent_count == 1 ? " " : "s ", silent,
                          " (stopped, or frozen), for whom the others wait");
  }
  std::string busy;
  int busy_count = 0;
  for (const auto& [rank, answer] : answers) {
    if (!answer || answer->blocked || is_named(rank)) continue;
    if (busy_count++ < kMaxNamed) {
      busy += detail::concat(busy.empty() ? "" : ", ", "rank ", rank, " (", activity(*answer), ")");
    }
  }
  if (!busy.empty()) return "not blocked, so the others wait for them: " + busy;
  return "";
}

}  // namespace

std::string encode_question(const WatchdogQuestion& question) {
  std::string ranks;
  for (int r : question.group.world_ranks) {
    if (!ranks.empty()) ranks += ",";
    ranks += std::to_string(r);
  }
  return detail::concat("question\t", field(question.group.name), "\t", question.seq, "\t", ranks);
}

std::optional<WatchdogQuestion> decode_question(const std::string& text) {
  const std::vector<std::string> fields = split(text, '\t');
  if (fields.size() != 4 || fields[0] != "question") return std::nullopt;
  WatchdogQuestion question;
  question.group.name = fields[1];
  const std::optional<int64_t> seq = parse_number<int64_t>(fields[2]);
  if (!seq) return std::nullopt;
  question.seq = *seq;
  if (!fields[3].empty()) {
    for (const std::string& r : split(fields[3], ',')) {
      const std::optional<int> rank = parse_number<int>(r);
      if (!rank) return std::nullopt;
      question.group.world_ranks.push_back(*rank);
    }
  }
  return question;
}

std::string encode_answer(const PeerAnswer& answer) {
  std::string text =
      detail::concat("group\t", answer.knows_group ? 1 : 0, "\t", answer.posted, "\n");
  if (answer.op_at_seq) text += detail::concat("op\t", field(*answer.op_at_seq), "\n");
  if (answer.blocked) text += encode_op("blocked", *answer.blocked);
  if (answer.timeout_in_s) text += detail::concat("timeout_in\t", *answer.timeout_in_s, "\n");
  if (answer.last) text += encode_op("last", *answer.last);
  for (const std::string& line : answer.recent) text += "recent\t" + field(line) + "\n";
  return text;
}

PeerAnswer decode_answer(const std::string& text) {
  PeerAnswer answer;
  for (const std::string& line : split(text, '\n')) {
    const std::vector<std::string> fields = split(line, '\t');
    const std::string& key = fields[0];
    if (key == "group" && fields.size() == 3) {
      answer.knows_group = fields[1] == "1";
      answer.posted = parse_number<int64_t>(fields[2]).value_or(0);
    } else if (key == "op" && fields.size() == 2) {
      answer.op_at_seq = fields[1];
    } else if (key == "blocked") {
      answer.blocked = decode_op(fields);
    } else if (key == "timeout_in" && fields.size() == 2) {
      answer.timeout_in_s = parse_number<double>(fields[1]);
    } else if (key == "last") {
      answer.last = decode_op(fields);
    } else if (key == "recent" && fields.size() == 2) {
      answer.recent.push_back(fields[1]);
    }
  }
  return answer;
}

bool timed_out_by_now(const PeerAnswer& answer, double since_answer_s) {
  return answer.timeout_in_s && *answer.timeout_in_s <= since_answer_s;
}

std::string describe_for_dump(const OpRecord& record, RecorderClock::time_point now) {
  if (!record.done) {
    std::string text = detail::concat(record.describe(), ", in flight for ", seconds(record.age_s(now)));
    if (record.wait_started) text += detail::concat(", waited for ", seconds(record.blocked_s(now)));
    return text;
  }
  const double took = std::chrono::duration<double>(record.completed - record.posted).count();
  const double since = std::chrono::duration<double>(now - record.completed).count();
  char took_text[32];
  std::snprintf(took_text, sizeof took_text, "%.3f s", took);
  return detail::concat(record.describe(), ", done in ", took_text, ", ", seconds(since), " ago");
}

PeerAnswer answer_question(const CollectiveRecorder& recorder, const WatchdogQuestion& question,
                           RecorderClock::time_point now, size_t recent_count) {
  PeerAnswer answer;
  const CollectiveRecorder::GroupProgress progress = recorder.progress(question.group, question.seq);
  answer.knows_group = progress.known;
  answer.posted = progress.posted;
  answer.op_at_seq = progress.op_at_seq;
  if (const std::optional<OpRecord> blocked = recorder.blocked_on()) {
    answer.blocked = ReportedOp{blocked->describe(), blocked->blocked_s(now)};
    answer.timeout_in_s = blocked->timeout_s - blocked->blocked_s(now);
  }
  const std::vector<OpRecord> recent = recorder.recent(recent_count);
  if (!recent.empty()) answer.last = ReportedOp{recent.back().describe(), recent.back().age_s(now)};
  for (const OpRecord& record : recent) answer.recent.push_back(describe_for_dump(record, now));
  return answer;
}

std::vector<PeerVerdict> judge(const OpRecord& overdue, const WorldAnswers& answers) {
  std::vector<PeerVerdict> verdicts;
  for (int rank : overdue.waits_for) {
    const auto found = answers.find(rank);
    if (found == answers.end()) continue;  // this rank itself
    const std::optional<PeerAnswer>& answer = found->second;
    PeerVerdict v;
    v.world_rank = rank;
    if (!answer) {
      v.state = PeerState::NoAnswer;
      v.detail = "no answer: stopped (SIGSTOP, a debugger) or frozen";
    } else if (overdue.seq == 0) {
      v.state = PeerState::Answered;
      v.detail = activity(*answer);
    } else if (!answer->knows_group) {
      v.state = PeerState::NotArrived;
      v.detail = detail::concat("has no ", overdue.comm_name, " communicator yet; ", activity(*answer));
    } else if (answer->posted < overdue.seq) {
      v.state = PeerState::NotArrived;
      v.detail = detail::concat("at #", answer->posted, " on ", overdue.comm_name, "; ",
                                activity(*answer));
    } else if (answer->op_at_seq && *answer->op_at_seq != overdue.op) {
      v.state = PeerState::DifferentCollective;
      v.detail = detail::concat("its #", overdue.seq, " on ", overdue.comm_name, " is ",
                                *answer->op_at_seq);
    } else {
      // The same operation (or one too old to be in its history: it got past it).
      v.state = PeerState::Arrived;
      v.detail = activity(*answer);
    }
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

std::vector<std::string> watchdog_report(int world_rank, const OpRecord& overdue, double blocked_s,
                                         const std::vector<PeerVerdict>& verdicts,
                                         const WorldAnswers& answers,
                                         const std::vector<std::string>& own_recent) {
  std::ostringstream first;
  first << "MPI watchdog: blocked " << seconds(blocked_s) << " (parallelism.comm_timeout_s "
        << overdue.timeout_s << ") on ";
  if (overdue.seq > 0) {
    first << "collective #" << overdue.seq << " on " << overdue.comm_name << ", " << overdue.op;
  } else {
    first << overdue.op << " on " << overdue.comm_name;
  }
  first << " (" << overdue.bytes << " B); ";
  const std::string missing = rank_list(verdicts, {PeerState::NoAnswer, PeerState::NotArrived});
  const std::string different = rank_list(verdicts, {PeerState::DifferentCollective});
  if (overdue.seq == 0) {
    first << "its peer: " << rank_list(verdicts, {PeerState::NoAnswer, PeerState::Answered});
  } else if (missing.empty() && different.empty()) {
    first << "every rank of " << overdue.comm_name << " posted it";
  } else {
    if (!missing.empty()) first << "not arrived: " << missing;
    if (!missing.empty() && !different.empty()) first << "; ";
    if (!different.empty()) {
      first << "in a different collective (the ranks disagree on the order of collectives): "
            << different;
    }
  }
  // The group's verdicts explain the hang when a rank of it is stopped or busy outside
  // communication; when its ranks only wait elsewhere, the cause lies further away.
  bool explained = false;
  for (const PeerVerdict& v : verdicts) {
    const auto found = answers.find(v.world_rank);
    const bool busy = found != answers.end() && found->second && !found->second->blocked;
    explained = explained || v.state == PeerState::NoAnswer ||
                (v.state == PeerState::NotArrived && busy);
  }
  std::vector<int> named{world_rank};
  for (const PeerVerdict& v : verdicts) named.push_back(v.world_rank);
  const std::string cause = explained ? "" : likely_cause(answers, named);
  if (!cause.empty()) {
    first << "; " << cause;
  } else if (overdue.seq > 0 && missing.empty() && different.empty()) {
    first << ", and every rank answered: communication itself is stuck (the network or MPI)";
  }
  first << "; aborting the job";

  std::vector<std::string> lines{first.str()};
  auto dump = [&lines](int rank, const std::vector<std::string>& recent) {
    if (recent.empty()) return;
    lines.push_back(detail::concat("MPI watchdog: the last ", recent.size(),
                                   " operations of rank ", rank, ", oldest first:"));
    for (const std::string& line : recent) lines.push_back("  " + line);
  };
  dump(world_rank, own_recent);
  for (const PeerVerdict& v : verdicts) {
    const auto found = answers.find(v.world_rank);
    if (found != answers.end() && found->second) dump(v.world_rank, found->second->recent);
  }
  return lines;
}

}  // namespace titan::parallel
