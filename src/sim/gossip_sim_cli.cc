// Command line of `exaserve-sim gossip`.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/status.h"
#include "common/strings.h"
#include "sim/cli_flags.h"
#include "sim/gossip_sim.h"

namespace exa::sim {
namespace {

absl::Status ParseDouble(const std::string& text, const std::string& flag, double* out) {
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0') {
    return absl::InvalidArgumentError(StrCat(flag, " \"", text, "\": expected a number"));
  }
  // nan and inf would run forever or poison every comparison; 1e9 is past any sane run.
  if (!std::isfinite(*out) || std::fabs(*out) > 1e9) {
    return absl::InvalidArgumentError(
        StrCat(flag, " \"", text, "\": expected a finite number of at most 1e9"));
  }
  return absl::OkStatus();
}

// "halves:60" / "3:20": a count (or the word halves) and seconds.
absl::Status ParsePair(const std::string& text, const std::string& flag, std::string* first,
                       double* seconds) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat(flag, " \"", text, "\": expected COUNT:SECONDS, e.g. 3:20"));
  }
  *first = text.substr(0, colon);
  EXA_RETURN_IF_ERROR(ParseDouble(text.substr(colon + 1), flag, seconds));
  if (*seconds < 0) {
    return absl::InvalidArgumentError(StrCat(flag, " \"", text, "\": seconds must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status Apply(const std::string& key, const std::string& value, GossipSimOptions* o) {
  double v = 0;
  auto number = [&]() { return ParseDouble(value, key, &v); };
  if (key == "--nodes" || key == "--kill" || key == "--racks" || key == "--seed" ||
      key == "--duration" || key == "--latency" || key == "--jitter" ||
      key == "--update-interval") {
    if (auto s = number(); !s.ok()) return s;
    if (v < 0 || (key == "--nodes" && v < 1)) {
      return absl::InvalidArgumentError(
          StrCat(key, " ", value, key == "--nodes" ? ": must be >= 1" : ": must be >= 0"));
    }
    if (key == "--nodes") o->nodes = static_cast<int>(v);
    if (key == "--kill") o->kill = static_cast<int>(v);
    if (key == "--racks") o->racks = static_cast<int>(v);
    if (key == "--seed") o->seed = static_cast<uint64_t>(v);
    if (key == "--duration") o->duration_s = v;
    if (key == "--latency") o->latency_ms = v;
    if (key == "--jitter") o->jitter_ms = v;
    if (key == "--update-interval") o->update_interval_s = v;
    return absl::OkStatus();
  }
  if (key == "--loss") {
    bool percent = !value.empty() && value.back() == '%';
    if (auto s = ParseDouble(percent ? value.substr(0, value.size() - 1) : value, key, &v);
        !s.ok()) {
      return s;
    }
    o->loss = percent ? v / 100.0 : v;
    if (o->loss < 0 || o->loss > 1) {
      return absl::InvalidArgumentError(StrCat("--loss ", value, ": expected 0..1 or 0%..100%"));
    }
    return absl::OkStatus();
  }
  if (key == "--pause" || key == "--partition") {
    std::string first;
    if (auto s = ParsePair(value, key, &first, &v); !s.ok()) return s;
    if (key == "--partition") {
      if (first != "halves") {
        return absl::InvalidArgumentError(
            StrCat("--partition ", value, ": only halves:SECONDS is supported"));
      }
      o->partition_s = v;
      return absl::OkStatus();
    }
    double count = 0;
    if (auto s = ParseDouble(first, key, &count); !s.ok()) return s;
    if (count < 0)
      return absl::InvalidArgumentError(StrCat(key, " ", value, ": count must be >= 0"));
    o->pause_nodes = static_cast<int>(count);
    o->pause_s = v;
    return absl::OkStatus();
  }
  if (key == "--profile") {
    if (value != "lan" && value != "wan") {
      return absl::InvalidArgumentError(StrCat("--profile ", value, ": expected lan or wan"));
    }
    o->profile = value;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(StrCat("unknown flag ", key));
}

}  // namespace

absl::StatusOr<GossipSimOptions> ParseGossipSimArgs(const std::vector<std::string>& args) {
  GossipSimOptions o;
  EXA_ASSIGN_OR_RETURN(auto flags, SplitFlags(args));
  for (const auto& [key, value] : flags) EXA_RETURN_IF_ERROR(Apply(key, value, &o));
  if (o.nodes < 1 || o.nodes > 100000) {
    return absl::InvalidArgumentError(StrCat("--nodes ", o.nodes, ": must be in [1, 100000]"));
  }
  if (o.kill + o.pause_nodes >= o.nodes) {
    return absl::InvalidArgumentError(StrCat("--kill ", o.kill, " + paused ", o.pause_nodes,
                                             ": must leave at least one healthy node of ",
                                             o.nodes));
  }
  if (o.racks < 1) o.racks = 1;
  return o;
}

int GossipSimMain(int argc, char** argv) {
  CLI::App app{"exaserve-sim: simulations that run the real cores on virtual time"};
  app.require_subcommand(1);
  CLI::App* gossip = app.add_subcommand(
      "gossip",
      "N SWIM cores on a simulated network; prints one JSON object. Flags: --nodes N --seed S "
      "--duration SECONDS [--loss P|P%] [--latency MS --jitter MS] [--kill K] "
      "[--pause K:SECONDS] [--partition halves:SECONDS] [--racks R] [--profile lan|wan] "
      "[--update-interval SECONDS]");
  gossip->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (106 for a missing subcommand) are not this project's: usage is 2.
    std::cerr << "exaserve-sim: " << e.what() << "\nSubcommands: gossip, cluster (--help)\n";
    return 2;
  }
  absl::StatusOr<GossipSimOptions> options = ParseGossipSimArgs(gossip->remaining());
  if (!options.ok()) {
    std::cerr << "exaserve-sim gossip: " << options.status().message() << "\n";
    return 2;
  }
  std::cout << RunGossipSim(*options).dump(2) << std::endl;
  return 0;
}

}  // namespace exa::sim
