#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace titan {

namespace {

thread_local bool inside_job = false;

class ThreadPool {
 public:
  ~ThreadPool() { resize(1); }

  void resize(int threads) {
    threads = std::max(1, threads);
    std::unique_lock lock(mutex_);
    if (threads - 1 == static_cast<int>(workers_.size())) return;
    stopping_ = true;
    wake_.notify_all();
    std::vector<std::thread> old = std::move(workers_);
    lock.unlock();
    for (std::thread& t : old) t.join();
    lock.lock();
    stopping_ = false;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
    threads_ = threads;
  }

  int threads() {
    std::lock_guard lock(mutex_);
    return threads_;
  }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
    const int64_t chunks = chunk_count(n, grain);
    if (chunks == 0) return;
    std::unique_lock job_lock(job_mutex_, std::defer_lock);
    // Inline: one chunk, one thread, a job already under way on this thread, or another thread
    // holding the pool (its jobs do not nest into this one's).
    if (chunks == 1 || inside_job || threads() == 1 || !job_lock.try_lock()) {
      for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(n, (c + 1) * grain));
      return;
    }
    {
      std::lock_guard lock(mutex_);
      job_ = {&f, n, grain, chunks};
      next_.store(0);
      pending_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    take_chunks();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* f = nullptr;
    int64_t n = 0, grain = 1, chunks = 0;
  };

  void take_chunks() {
    inside_job = true;
    for (int64_t c = next_.fetch_add(1); c < job_.chunks; c = next_.fetch_add(1)) {
      try {
        (*job_.f)(c * job_.grain, std::min(job_.n, (c + 1) * job_.grain));
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    inside_job = false;
  }

  void work() {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      lock.unlock();
      take_chunks();
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  int threads_ = 1;
  bool stopping_ = false;
  uint64_t generation_ = 0;
  Job job_;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  std::exception_ptr error_;
};

ThreadPool& pool() {
  // Never destroyed: a job may run from a static destructor's thread at exit.
  static auto* p = new ThreadPool();
  return *p;
}

}  // namespace

void set_cpu_threads(int threads) { pool().resize(threads); }

int cpu_threads() { return pool().threads(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  pool().run(n, std::max<int64_t>(grain, 1), f);
}

}  // namespace titan
