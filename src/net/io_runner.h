// One Asio io_context on a small thread pool, for sockets and timers
// (docs/architecture.md#module-map rule 4). Handlers must never block: anything slow goes to its
// own thread (engine loops, disk).
//
// Thread safety: Start/Stop from the owning thread; context() from any thread.
#pragma once

#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

namespace exa::net {

namespace asio = boost::asio;

class IoRunner {
 public:
  explicit IoRunner(int threads);
  ~IoRunner();
  IoRunner(const IoRunner&) = delete;
  IoRunner& operator=(const IoRunner&) = delete;

  asio::io_context& context() { return context_; }
  void Start();
  // Stops the context and joins the threads; pending handlers are dropped. Idempotent.
  void Stop();

 private:
  const int thread_count_;
  asio::io_context context_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
};

}  // namespace exa::net
