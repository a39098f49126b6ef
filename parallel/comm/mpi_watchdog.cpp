#include "parallel/comm/mpi_watchdog.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "parallel/comm/collective_recorder.h"
#include "parallel/comm/watchdog_report.h"
#include "parallel/comm/mpi_failure.h"

namespace titan::parallel {
namespace {

using Clock = RecorderClock;

constexpr int kQuestionTag = 1;
constexpr int kAnswerTag = 2;
// How often the thread answers questions and looks for overdue operations: a timeout is seen
// at most this late, and an idle thread costs 20 wake-ups a second.
constexpr auto kPoll = std::chrono::milliseconds(50);
// How long a report waits for the answers of the ranks it asked: a live rank answers within a
// poll; a stopped one never does.
constexpr auto kAnswerWindow = std::chrono::seconds(2);
// How long a rank leaves the report to a lower rank that timed out too, before it reports itself.
constexpr auto kLeaveToLowerRank = std::chrono::seconds(5);
// Operations per rank in the report's dump.
constexpr size_t kRecentInReport = 8;

std::atomic<double> g_timeout_s{600.0};
std::atomic<int> g_world_comm{-1};  // the recorder's id of MPI_COMM_WORLD; -1 before start

class Watchdog {
 public:
  // `comm` is the watchdogs' own duplicate of the world; with `can_ask` false (MPI without
  // MPI_THREAD_MULTIPLE) this thread makes no MPI call but MPI_Abort, and the report says that
  // the other ranks could not be asked.
  Watchdog(MPI_Comm comm, int world_rank, int world_size, bool can_ask)
      : comm_(comm),
        rank_(world_rank),
        size_(world_size),
        can_ask_(can_ask),
        thread_([this] { run(); }) {}

  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    // Answers still on their way to a rank that asked: nobody waits for them any more.
    for (Sent& sent : sent_) {
      if (sent.request != MPI_REQUEST_NULL) MPI_Request_free(&sent.request);
    }
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  struct Sent {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      lock.unlock();
      if (can_ask_) serve_questions();
      if (std::optional<OpRecord> overdue = CollectiveRecorder::instance().first_overdue(Clock::now())) {
        report(*overdue);
      }
      lock.lock();
      wake_.wait_for(lock, kPoll, [this] { return stop_; });
    }
  }

  // Answers every question waiting, and forgets the answers that have left.
  void serve_questions() {
    for (;;) {
      int waiting = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQuestionTag, comm_, &waiting, &status) != MPI_SUCCESS ||
          !waiting) {
        break;
      }
      const std::optional<WatchdogQuestion> question =
          decode_question(receive(status, kQuestionTag));
      const PeerAnswer answer =
          question ? answer_question(CollectiveRecorder::instance(), *question, Clock::now(),
                                     kRecentInReport)
                   : PeerAnswer{};
      send(status.MPI_SOURCE, kAnswerTag, encode_answer(answer));
    }
    sent_.remove_if([](Sent& sent) {
      int done = 0;
      return MPI_Test(&sent.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0;
    });
  }

  std::string receive(const MPI_Status& status, int tag) {
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string text(static_cast<size_t>(count), '\0');
    MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE);
    return text;
  }

  void send(int world_rank, int tag, std::string text) {
    Sent& sent = sent_.emplace_back(Sent{std::move(text)});
    MPI_Isend(sent.text.data(), static_cast<int>(sent.text.size()), MPI_CHAR, world_rank, tag,
              comm_, &sent.request);
  }

  // The answers of the other ranks, and when each arrived.
  struct Asked {
    WorldAnswers answers;
    std::map<int, Clock::time_point> arrived_at;
  };

  // Asks every other rank about `overdue`'s group; collects what answers within kAnswerWindow
  // (answering their questions meanwhile: they may be reporting too).
  Asked ask(const OpRecord& overdue) {
    Asked asked;
    WorldAnswers& answers = asked.answers;
    const WatchdogQuestion question{CollectiveRecorder::instance().group(overdue.comm),
                                    overdue.seq};
    const std::string text = encode_question(question);
    for (int rank = 0; rank < size_; ++rank) {
      if (rank == rank_) continue;
      answers[rank] = std::nullopt;
      send(rank, kQuestionTag, text);
    }
    size_t unanswered = answers.size();
    const Clock::time_point deadline = Clock::now() + kAnswerWindow;
    while (unanswered > 0 && Clock::now() < deadline) {
      serve_questions();
      int arrived = 0;
      MPI_Status status;
      while (MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_, &arrived, &status) == MPI_SUCCESS &&
             arrived) {
        const std::string text = receive(status, kAnswerTag);
        auto it = answers.find(status.MPI_SOURCE);
        if (it != answers.end() && !it->second) {
          it->second = decode_answer(text);
          asked.arrived_at[status.MPI_SOURCE] = Clock::now();
          --unanswered;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return asked;
  }

  // When a lower rank has timed out too by now, it reports for the job: wait for the end it
  // brings. "By now", not "when it answered": a rank that answered a moment short of its
  // timeout fires during the window this rank waited for the answers, and would report too.
  void leave_to_lower_rank(const Asked& asked) {
    const Clock::time_point now = Clock::now();
    bool lower_reports = false;
    for (const auto& [rank, answer] : asked.answers) {
      if (rank >= rank_ || !answer) continue;
      const double since_answer_s =
          std::chrono::duration<double>(now - asked.arrived_at.at(rank)).count();
      lower_reports = lower_reports || timed_out_by_now(*answer, since_answer_s);
    }
    if (!lower_reports) return;
    const Clock::time_point until = Clock::now() + kLeaveToLowerRank;
    while (Clock::now() < until) {
      serve_questions();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  [[noreturn]] void report(const OpRecord& overdue) {
    WorldAnswers answers;
    if (can_ask_) {
      Asked asked = ask(overdue);
      leave_to_lower_rank(asked);
      answers = std::move(asked.answers);
    }
    const Clock::time_point now = Clock::now();
    std::vector<std::string> own;
    for (const OpRecord& record : CollectiveRecorder::instance().recent(kRecentInReport)) {
      own.push_back(describe_for_dump(record, now));
    }
    std::vector<std::string> lines = watchdog_report(
        rank_, overdue, overdue.blocked_s(now), judge(overdue, answers), answers, own);
    if (!can_ask_) {
      lines.push_back("MPI watchdog: the other ranks could not be asked (MPI was not "
                      "initialised with MPI_THREAD_MULTIPLE)");
    }
    std::fprintf(stderr, "titan_train: rank %d: error: %s\n", rank_, lines[0].c_str());
    for (size_t i = 1; i < lines.size(); ++i) std::fprintf(stderr, "%s\n", lines[i].c_str());
    std::fflush(stderr);
    end_job(1);
  }

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const bool can_ask_;
  std::list<Sent> sent_;  // a list: MPI holds the address of each text until the send completes
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts in the constructor and uses everything above
};

std::unique_ptr<Watchdog> g_watchdog;

}  // namespace

void start_mpi_watchdog() {
  if (g_watchdog) return;
  int rank = 0, size = 1, level = MPI_THREAD_SINGLE;
  TT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  TT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  TT_MPI_CHECK(MPI_Query_thread(&level));
  std::vector<int> world(static_cast<size_t>(size));
  std::iota(world.begin(), world.end(), 0);
  g_world_comm = CollectiveRecorder::instance().add_comm({"MPI_COMM_WORLD", std::move(world)});
  if (size == 1) return;  // every operation completes alone: nothing to watch
  MPI_Comm comm = MPI_COMM_NULL;
  TT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  TT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  g_watchdog = std::make_unique<Watchdog>(comm, rank, size, level == MPI_THREAD_MULTIPLE);
}

void stop_mpi_watchdog() { g_watchdog.reset(); }

void set_comm_timeout(double seconds) { g_timeout_s = seconds; }
double comm_timeout() { return g_timeout_s; }

WatchedMpiCall::WatchedMpiCall(std::string op, int64_t bytes) {
  const int world = g_world_comm;
  if (world < 0) return;
  CollectiveRecorder& recorder = CollectiveRecorder::instance();
  id_ = recorder.post_collective(world, std::move(op), bytes, comm_timeout());
  recorder.begin_wait(id_);
}

WatchedMpiCall::~WatchedMpiCall() {
  if (id_ != 0) CollectiveRecorder::instance().complete(id_);
}

}  // namespace titan::parallel
