#include "bench/process.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/strings.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace exa::bench {
namespace {

// posix_spawn, not fork: it runs no pthread_atfork handlers, and gRPC's (the benches hold live
// channels) corrupt its completion queues across a fork. The child inherits the CPU mask of the
// thread that spawns it (ScopedCpuPin).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv_s, const EnvList& env,
                            const std::string& output_path, int cpu) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  for (const auto& [k, v] : env) env_s.push_back(StrCat(k, "=", v));
  std::vector<char*> argv, envp;
  for (const std::string& s : argv_s) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  for (std::string& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  ScopedCpuPin pin(cpu);
  EXA_RETURN_IF_ERROR(pin.status());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return absl::InternalError(StrCat("cannot start ", argv_s[0], ": ", std::strerror(rc)));
  return pid;
}

std::string ReadTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > max_bytes ? all.substr(all.size() - max_bytes) : all;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::string& bin,
                                                        const std::string& data_dir,
                                                        std::vector<std::string> args,
                                                        const EnvList& env, int cpu) {
  std::filesystem::remove_all(data_dir);
  std::filesystem::create_directories(data_dir);
  auto p = std::unique_ptr<Process>(new Process());
  p->data_dir_ = data_dir;
  p->log_ = data_dir + ".log";
  std::vector<std::string> argv = {bin,         "--data-dir",    data_dir, "--bind",
                                   "127.0.0.1", "--http-port",   "0",      "--grpc-port",
                                   "0",         "--gossip-port", "0",      "--log-format",
                                   "text",      "--log-level",   "warn"};
  argv.insert(argv.end(), args.begin(), args.end());
  EXA_ASSIGN_OR_RETURN(p->pid_, Spawn(argv, env, p->log_, cpu));
  EXA_RETURN_IF_ERROR(p->WaitReady(absl::Seconds(60)));
  return p;
}

void Process::Kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void Process::Stop(absl::Duration grace) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  Kill9();
}

std::string Process::grpc_target() const { return StrCat("127.0.0.1:", grpc_port_); }

std::string Process::LogTail() const { return ReadTail(log_, 2000); }

absl::Status Process::WaitReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string path = data_dir_ + "/endpoints.json";
  while (absl::Now() < deadline) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          StrCat("exaserved exited during start-up; log ", log_, ":\n", LogTail()));
    }
    // endpoints.json is three ports; 64 KiB is far past it.
    if (absl::StatusOr<std::string> text = ReadFile(path, 64 << 10); text.ok()) {
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (!j.is_discarded() && j.contains("grpc_port")) {
        grpc_port_ = j["grpc_port"].get<int>();
        http_port_ = j["http_port"].get<int>();
        gossip_port_ = j["gossip_port"].get<int>();
        return absl::OkStatus();
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      StrCat("exaserved not ready within ", absl::FormatDuration(timeout), "; log ", log_));
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& output_path, int cpu,
                                         absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  const absl::Time start = absl::Now();
  EXA_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, {}, output_path, cpu));
  CommandResult r;
  int status = 0;
  rusage usage{};
  bool killed = false;
  while (true) {
    const pid_t got = ::wait4(pid, &status, WNOHANG, &usage);
    if (got == pid) break;
    if (got < 0 && errno != EINTR)
      return absl::InternalError(StrCat("wait4: ", std::strerror(errno)));
    if (!killed && absl::Now() - start > timeout) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  r.wall = absl::Now() - start;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.cpu_seconds = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  r.output = ReadTail(output_path, 64 << 10);
  if (killed) {
    return absl::DeadlineExceededError(
        StrCat(argv[0], " did not finish within ", absl::FormatDuration(timeout)));
  }
  return r;
}

ScopedCpuPin::ScopedCpuPin(int cpu) {
  CPU_ZERO(&saved_);
  if (cpu < 0) return;
  if (cpu >= CPU_SETSIZE) {
    status_ = absl::InvalidArgumentError(StrCat("cpu ", cpu, " out of range"));
    return;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ::pthread_getaffinity_np(::pthread_self(), sizeof(saved_), &saved_);
  if (const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof(one), &one); rc != 0) {
    status_ = absl::InternalError(StrCat("cannot pin to cpu ", cpu, ": ", std::strerror(rc)));
    return;
  }
  pinned_ = true;
}

ScopedCpuPin::~ScopedCpuPin() {
  if (pinned_) ::pthread_setaffinity_np(::pthread_self(), sizeof(saved_), &saved_);
}

std::string SelfDir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
}

}  // namespace exa::bench
