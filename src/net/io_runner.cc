#include "net/io_runner.h"

#include <pthread.h>

#include "common/check.h"

namespace exa::net {

IoRunner::IoRunner(int threads)
    : thread_count_(threads), context_(threads), work_(asio::make_work_guard(context_)) {
  EXA_CHECK(threads > 0) << "IoRunner needs at least one thread";
}

IoRunner::~IoRunner() { Stop(); }

void IoRunner::Start() {
  EXA_CHECK(threads_.empty()) << "IoRunner started twice";
  for (int i = 0; i < thread_count_; ++i) {
    threads_.emplace_back([this, i] {
      std::string name = "exa-io-" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      context_.run();
    });
  }
}

void IoRunner::Stop() {
  work_.reset();
  context_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace exa::net
