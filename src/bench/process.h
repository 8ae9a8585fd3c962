// Child processes for the benchmarks: `exaserved` daemons (started, waited for through their
// endpoints.json, drained at the end) and one-shot commands, optionally pinned to a CPU.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace exa::bench {

using EnvList = std::vector<std::pair<std::string, std::string>>;

class Process {
 public:
  // Starts `bin args...` with `env` added to this process's environment, logging to
  // <data_dir>.log, and waits for its endpoints.json. `cpu` >= 0 pins it (and every thread it
  // starts) to that CPU.
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& bin,
                                                        const std::string& data_dir,
                                                        std::vector<std::string> args,
                                                        const EnvList& env, int cpu = -1);

  ~Process() { Stop(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Kill9();
  // SIGTERM (drain), then SIGKILL after `grace`.
  void Stop(absl::Duration grace = absl::Seconds(15));

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  int gossip_port() const { return gossip_port_; }
  std::string grpc_target() const;

 private:
  Process() = default;
  std::string LogTail() const;
  absl::Status WaitReady(absl::Duration timeout);

  pid_t pid_ = -1;
  std::string data_dir_, log_;
  int grpc_port_ = 0, http_port_ = 0, gossip_port_ = 0;
};

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed by one
  absl::Duration wall;
  double cpu_seconds = 0;  // user + system, the command and its threads
  std::string output;      // stdout and stderr together
};

// Runs `argv` to completion (killed after `timeout`), pinned to `cpu` when >= 0.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& output_path, int cpu,
                                         absl::Duration timeout);

// Narrows the calling thread to one CPU (and what it spawns: children inherit the mask of the
// thread that spawns them) until destroyed, then restores its mask. cpu -1: does nothing.
class ScopedCpuPin {
 public:
  explicit ScopedCpuPin(int cpu);
  ~ScopedCpuPin();
  ScopedCpuPin(const ScopedCpuPin&) = delete;
  ScopedCpuPin& operator=(const ScopedCpuPin&) = delete;
  // OK when pinned or nothing was asked; else why the CPU could not be used.
  const absl::Status& status() const { return status_; }

 private:
  bool pinned_ = false;
  absl::Status status_;
  cpu_set_t saved_;
};

// The directory of this executable: the other binaries are installed beside it.
std::string SelfDir();

}  // namespace exa::bench
