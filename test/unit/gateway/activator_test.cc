// Scale from zero at the gateway: held requests resume once their model is served, are refused
// past the timeout or beyond the bound, and give their place back when the client leaves.
#include "gateway/activator.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "metrics/registry.h"

namespace exa::gateway {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

struct Client {
  int resumed = 0;
  std::vector<std::string> refusals;
  bool gone = false;
  Activator::Parked Parked() {
    return {.resume = [this] { resumed++; },
            .refuse = [this](const absl::Status& s) { refusals.emplace_back(s.message()); },
            .gone = [this] { return gone; }};
  }
};

TEST_CASE("A held request resumes once its model is served; demand is reported meanwhile") {
  metrics::Registry registry;
  Activator activator({.max_waiting = 4, .timeout = absl::Seconds(30)}, registry);
  activator.SetActivatable({"chat"});
  CHECK(activator.Activatable("chat"));
  CHECK(activator.Activatable("chat@v2"));  // a version of it
  CHECK_FALSE(activator.Activatable("other"));
  Client c;
  REQUIRE(activator.Park("chat@v2", kT0, c.Parked()).ok());
  CHECK(activator.TakeNewDemand());  // reported at once
  CHECK_FALSE(activator.TakeNewDemand());
  CHECK(activator.Waiting(kT0) == std::vector<std::string>{"chat"});
  bool served = false;
  auto is_served = [&](const std::string& m) { return m == "chat" && served; };
  activator.Tick(kT0 + absl::Seconds(10), is_served);
  CHECK(c.resumed == 0);
  CHECK(activator.Waiting(kT0 + absl::Seconds(10)) == std::vector<std::string>{"chat"});
  served = true;
  activator.Tick(kT0 + absl::Seconds(11), is_served);
  CHECK(c.resumed == 1);
  CHECK(c.refusals.empty());
  activator.Tick(kT0 + absl::Seconds(12), is_served);
  CHECK(c.resumed == 1);  // once
  CHECK(activator.Waiting(kT0 + absl::Seconds(20)).empty());
}

TEST_CASE("Held requests are refused past the timeout and beyond the bound, naming the setting") {
  metrics::Registry registry;
  Activator activator({.max_waiting = 2, .timeout = absl::Seconds(30)}, registry);
  activator.SetActivatable({"chat"});
  Client a, b, c;
  REQUIRE(activator.Park("chat", kT0, a.Parked()).ok());
  REQUIRE(activator.Park("chat", kT0 + absl::Seconds(5), b.Parked()).ok());
  absl::Status full = activator.Park("chat", kT0 + absl::Seconds(6), c.Parked());
  CHECK(absl::IsUnavailable(full));
  CHECK_THAT(std::string(full.message()), Catch::Contains("gateway.activation_queue"));
  auto never = [](const std::string&) { return false; };
  activator.Tick(kT0 + absl::Seconds(31), never);
  REQUIRE(a.refusals.size() == 1);
  CHECK_THAT(a.refusals[0], Catch::Contains("gateway.activation_timeout"));
  CHECK(b.refusals.empty());
  // a's place is free again.
  CHECK(activator.Park("chat", kT0 + absl::Seconds(32), c.Parked()).ok());
  CHECK(activator.retry_after_s() >= 1);
}

TEST_CASE("A client that left gives its place back and is neither resumed nor refused") {
  metrics::Registry registry;
  Activator activator({.max_waiting = 1, .timeout = absl::Seconds(30)}, registry);
  activator.SetActivatable({"chat"});
  Client a, b;
  REQUIRE(activator.Park("chat", kT0, a.Parked()).ok());
  a.gone = true;
  activator.Tick(kT0 + absl::Seconds(1), [](const std::string&) { return true; });
  CHECK(a.resumed == 0);
  CHECK(a.refusals.empty());
  CHECK(activator.Park("chat", kT0 + absl::Seconds(2), b.Parked()).ok());
}

}  // namespace
}  // namespace exa::gateway
