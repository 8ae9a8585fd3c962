// The observer's HTTP client gets answers from a real server, and every failure — refused,
// slow, oversized — ends in an error by its deadline instead of a hang.
#include "net/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <mutex>
#include <vector>

#include <catch2/catch.hpp>

#include "net/http_server.h"

namespace exa::net {
namespace {

struct Server {
  Server() : io(2) {
    HttpServerOptions o;
    o.bind_address = "127.0.0.1";
    o.port = 0;
    server = std::make_unique<HttpServer>(io, o);
    server->AddRoute("GET", "/metrics", [](const HttpRequest&) {
      return HttpResponse{200, "text/plain", "up 1\n", {}};
    });
    server->AddRoute("POST", "/hook", [](const HttpRequest& r) {
      return HttpResponse{
          202, "application/json", std::string(r.Header("content-type")) + " " + r.body, {}};
    });
    server->AddRoute("GET", "/big", [](const HttpRequest&) {
      return HttpResponse{200, "text/plain", std::string(100000, 'x'), {}};
    });
    // Never answers (the responder is kept until the server goes).
    server->AddRoute("GET", "/hang",
                     HttpHandler([this](HttpRequest, std::shared_ptr<HttpResponder> r) {
                       std::lock_guard<std::mutex> lock(mu);
                       held.push_back(std::move(r));
                     }));
    REQUIRE(server->Start().ok());
    io.Start();
  }
  ~Server() {
    server->CloseAll();
    io.Stop();
  }
  absl::StatusOr<HttpClientResponse> Fetch(HttpClientRequest r) {
    r.host = "127.0.0.1";
    if (r.port == 80) r.port = server->port();
    std::promise<absl::StatusOr<HttpClientResponse>> result;
    HttpFetch(io.context(), std::move(r),
              [&](absl::StatusOr<HttpClientResponse> response) { result.set_value(response); });
    auto f = result.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    return f.get();
  }

  IoRunner io;
  std::unique_ptr<HttpServer> server;
  std::mutex mu;
  std::vector<std::shared_ptr<HttpResponder>> held;
};

TEST_CASE("GET and POST get the server's answer", "[http]") {
  Server s;
  auto get = s.Fetch({.target = "/metrics"});
  REQUIRE(get.ok());
  CHECK(get->status == 200);
  CHECK(get->body == "up 1\n");
  auto post = s.Fetch({.method = "POST",
                       .target = "/hook",
                       .body = "{\"a\":1}",
                       .content_type = "application/json"});
  REQUIRE(post.ok());
  CHECK(post->status == 202);
  CHECK(post->body == "application/json {\"a\":1}");
  auto missing = s.Fetch({.target = "/nope"});
  REQUIRE(missing.ok());
  CHECK(missing->status == 404);
}

TEST_CASE("Failures end in errors by the deadline", "[http]") {
  Server s;
  auto slow = s.Fetch({.target = "/hang", .timeout = absl::Milliseconds(200)});
  CHECK(slow.status().code() == absl::StatusCode::kDeadlineExceeded);
  auto big = s.Fetch({.target = "/big", .max_response_bytes = 1000});
  CHECK(big.status().code() == absl::StatusCode::kResourceExhausted);
  // A port nothing listens on: one the kernel gave a socket that is closed again.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const uint16_t closed_port = ntohs(addr.sin_port);
  close(fd);
  auto refused = s.Fetch({.port = closed_port, .target = "/metrics"});
  CHECK(refused.status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("Webhook URLs parse into host, port and target", "[http]") {
  HttpClientRequest r;
  REQUIRE(ParseHttpUrl("http://alerts.example:9093/api/v2/hook?x=1", &r).ok());
  CHECK(r.host == "alerts.example");
  CHECK(r.port == 9093);
  CHECK(r.target == "/api/v2/hook?x=1");
  REQUIRE(ParseHttpUrl("http://10.0.0.1", &r).ok());
  CHECK(r.port == 80);
  CHECK(r.target == "/");
  REQUIRE(ParseHttpUrl("http://[::1]:8080/x", &r).ok());
  CHECK(r.host == "::1");
  CHECK(r.port == 8080);
  CHECK_FALSE(ParseHttpUrl("https://x/", &r).ok());
  CHECK_FALSE(ParseHttpUrl("http://x:99999/", &r).ok());
  CHECK_FALSE(ParseHttpUrl("http://:80/", &r).ok());
  CHECK_FALSE(ParseHttpUrl("x", &r).ok());
}

}  // namespace
}  // namespace exa::net
