// exa-raft-history: the client side of the scheduler's Jepsen-style test and its bench
// (docs/testing.md#control-plane). A test tool, not installed.
//   run    concurrent clients put / delete / read a few keys through every scheduler for a
//          duration, recording every operation to a JSONL history
//   final  one read of every key through every scheduler, appended as final reads
//   check  the history per key through the linearizability checker; exit 1 on a violation
//   bench  Apply latency through the leader and a follower
//   failover  kill -9 of the leader → the next write acknowledged through a survivor
// Each prints one JSON object on stdout; errors go to stderr with exit 2.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "raft_history/history.h"
#include "raft_history/workload.h"

namespace {

using exa::raft_history::BenchNode;
using json = nlohmann::json;

int Print(const absl::StatusOr<json>& result, bool fail_on_violation = false) {
  if (!result.ok()) {
    std::cerr << "exa-raft-history: " << result.status().message() << "\n";
    return 2;
  }
  std::cout << result->dump() << std::endl;
  if (fail_on_violation &&
      (result->value("violations", 0) > 0 || result->value("inconclusive", 0) > 0)) {
    return 1;
  }
  return 0;
}

// "ID,HOST:PORT[,PID]" → a bench node.
absl::StatusOr<std::vector<BenchNode>> ParseNodes(const std::vector<std::string>& specs) {
  std::vector<BenchNode> out;
  for (const std::string& s : specs) {
    std::vector<std::string> parts = absl::StrSplit(s, ',');
    BenchNode n;
    if (parts.size() < 2 || parts.size() > 3 || parts[0].empty() || parts[1].empty() ||
        (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &n.pid))) {
      return absl::InvalidArgumentError("--node \"" + s + "\": expected ID,HOST:PORT[,PID]");
    }
    n.id = parts[0];
    n.address = parts[1];
    out.push_back(std::move(n));
  }
  return out;
}

absl::Duration Millis(int ms) { return absl::Milliseconds(ms); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exa-raft-history: Jepsen-style history, checker and bench of the spec store"};
  app.require_subcommand(1);
  std::vector<std::string> addresses, keys = {"k0", "k1", "k2", "k3"}, nodes;
  std::string history;
  int clients = 5, seconds = 60, deadline_ms = 2500, pause_ms = 20, applies = 300;
  double reads = 0.5, deletes = 0.15;
  uint64_t seed = 1;
  size_t max_steps = exa::raft_history::CheckOptions{}.max_steps;

  CLI::App* run = app.add_subcommand("run", "drive the clients, write the history");
  run->add_option("--addr", addresses, "scheduler gRPC addresses")->delimiter(',')->required();
  run->add_option("--keys", keys, "spec names to churn")->delimiter(',');
  run->add_option("--history", history, "JSONL history (appended)")->required();
  run->add_option("--clients", clients)->check(CLI::Range(1, 64));
  run->add_option("--seconds", seconds)->check(CLI::Range(1, 3600));
  run->add_option("--deadline-ms", deadline_ms, "per call")->check(CLI::Range(100, 60000));
  run->add_option("--pause-ms", pause_ms, "mean gap between a client's calls")
      ->check(CLI::Range(0, 10000));
  run->add_option("--reads", reads, "share of reads")->check(CLI::Range(0.0, 1.0));
  run->add_option("--deletes", deletes, "share of deletes")->check(CLI::Range(0.0, 1.0));
  run->add_option("--seed", seed);

  CLI::App* final_cmd = app.add_subcommand("final", "read every key through every scheduler");
  final_cmd->add_option("--addr", addresses)->delimiter(',')->required();
  final_cmd->add_option("--keys", keys)->delimiter(',');
  final_cmd->add_option("--history", history)->required();

  CLI::App* check = app.add_subcommand("check", "check a history for linearizability");
  check->add_option("history", history)->required();
  check->add_option("--max-steps", max_steps, "search budget per key");

  CLI::App* bench = app.add_subcommand("bench", "Apply latency through leader and follower");
  bench->add_option("--node", nodes, "ID,HOST:PORT per scheduler")->required();
  bench->add_option("--applies", applies)->check(CLI::Range(1, 100000));
  CLI::App* failover = app.add_subcommand("failover", "kill -9 the leader, time the next write");
  failover->add_option("--node", nodes, "ID,HOST:PORT,PID per scheduler")->required();

  CLI11_PARSE(app, argc, argv);
  if (*run) {
    exa::raft_history::RunOptions o;
    o.addresses = addresses;
    o.keys = keys;
    o.history = history;
    o.clients = clients;
    o.duration = absl::Seconds(seconds);
    o.deadline = Millis(deadline_ms);
    o.pause = Millis(pause_ms);
    o.read_fraction = reads;
    o.delete_fraction = deletes;
    o.seed = seed;
    return Print(exa::raft_history::RunClients(o));
  }
  if (*final_cmd) {
    return Print(exa::raft_history::FinalReads({addresses, keys, history}));
  }
  if (*check) return Print(exa::raft_history::CheckHistory(history, {max_steps}), true);
  absl::StatusOr<std::vector<BenchNode>> parsed = ParseNodes(nodes);
  if (!parsed.ok()) return Print(parsed.status());
  exa::raft_history::BenchOptions o;
  o.nodes = *parsed;
  o.applies = applies;
  if (*bench) return Print(exa::raft_history::BenchLatency(o));
  return Print(exa::raft_history::BenchFailover(o));
}
