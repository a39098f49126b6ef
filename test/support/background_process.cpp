#include "support/background_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/process.h"

namespace titan::testing {

namespace {

// Fields of /proc/<pid>/stat: the command name (in parentheses, may hold spaces) and the
// session id (the 4th field after it). False when the process is gone.
bool read_stat(pid_t pid, std::string& name, pid_t& session, char& state) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  name = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 2));
  pid_t ppid = 0, pgrp = 0;
  rest >> state >> ppid >> pgrp >> session;
  return static_cast<bool>(rest);
}

struct SessionProcess {
  pid_t pid;
  std::string name;
  char state;
};

// The live processes of session `session`, from /proc.
std::vector<SessionProcess> session_processes(pid_t session) {
  std::vector<SessionProcess> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string dir = entry.path().filename().string();
    if (dir.find_first_not_of("0123456789") != std::string::npos) continue;
    SessionProcess p{static_cast<pid_t>(std::stol(dir)), "", 0};
    pid_t its_session = 0;
    if (read_stat(p.pid, p.name, its_session, p.state) && its_session == session) {
      found.push_back(p);
    }
  }
  return found;
}

}  // namespace

BackgroundProcess::BackgroundProcess(const std::string& command, const std::string& log_prefix)
    : log_prefix_(log_prefix) {
  const std::string out = log_prefix + ".out", err = log_prefix + ".err";
  // Gone before the fork, not only truncated by the child: until the child runs, the parent
  // would read an earlier run's logs and wait_for_output could match their text.
  std::error_code ec;
  std::filesystem::remove(out, ec);
  std::filesystem::remove(err, ec);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setsid();
    const int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0 || err_fd < 0 || chdir(source_path("").c_str()) != 0) _exit(126);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
}

BackgroundProcess::~BackgroundProcess() {
  if (exit_code_) return;
  kill_session(SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::optional<int> BackgroundProcess::poll() {
  if (exit_code_) return exit_code_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

std::optional<int> BackgroundProcess::wait_for(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (poll()) return exit_code_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill_session(SIGKILL);
  return std::nullopt;
}

bool BackgroundProcess::wait_for_output(const std::string& text, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (out().find(text) != std::string::npos) return true;
    if (poll()) return out().find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<pid_t> BackgroundProcess::processes_named(const std::string& name) const {
  std::vector<pid_t> found;
  for (const SessionProcess& p : session_processes(pid_)) {
    if (p.name == name && p.state != 'Z') found.push_back(p.pid);
  }
  return found;
}

std::optional<pid_t> BackgroundProcess::rank_process(const std::string& name,
                                                     int world_rank) const {
  for (pid_t pid : processes_named(name)) {
    // The environment is NUL-separated NAME=VALUE entries.
    const std::string environ = read_file("/proc/" + std::to_string(pid) + "/environ");
    size_t start = 0;
    while (start < environ.size()) {
      size_t end = environ.find('\0', start);
      if (end == std::string::npos) end = environ.size();
      const std::string entry = environ.substr(start, end - start);
      for (const char* key : {"OMPI_COMM_WORLD_RANK=", "PMIX_RANK=", "SLURM_PROCID="}) {
        if (entry.starts_with(key) && entry.substr(std::string(key).size()) == std::to_string(world_rank)) {
          return pid;
        }
      }
      start = end + 1;
    }
  }
  return std::nullopt;
}

void BackgroundProcess::kill_session(int signal) const {
  // Every process of the session, whatever process group mpirun gave its ranks.
  for (const SessionProcess& p : session_processes(pid_)) ::kill(p.pid, signal);
}

std::string BackgroundProcess::out() const { return read_file(log_prefix_ + ".out"); }
std::string BackgroundProcess::err() const { return read_file(log_prefix_ + ".err"); }

}  // namespace titan::testing
