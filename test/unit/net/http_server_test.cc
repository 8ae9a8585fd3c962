// The HTTP server answers, keeps connections alive, streams, and turns every kind of bad request
// into a 4xx with a JSON body instead of crashing or hanging.
#include "net/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <catch2/catch.hpp>

namespace exa::net {
namespace {

// A blocking loopback client; every read has a deadline so a server bug fails instead of hangs.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~Client() { close(fd_); }
  void Send(std::string_view data) {
    size_t sent = 0;
    while (sent < data.size()) {
      ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early on oversized input
      sent += static_cast<size_t>(n);
    }
  }
  // Reads until `marker` has been seen and then `extra` more bytes, or the peer closes.
  std::string ReadUntil(std::string_view marker) {
    while (buffer_.find(marker) == std::string::npos) {
      if (!ReadSome()) break;
    }
    return buffer_;
  }
  // Reads one whole response with Content-Length, leaving any rest in the buffer.
  std::string ReadResponse() {
    ReadUntil("\r\n\r\n");
    size_t head_end = buffer_.find("\r\n\r\n");
    if (head_end == std::string::npos) return std::exchange(buffer_, "");
    size_t cl = buffer_.find("Content-Length: ");
    size_t length = cl < head_end ? std::stoul(buffer_.substr(cl + 16)) : 0;
    while (buffer_.size() < head_end + 4 + length && ReadSome()) {
    }
    std::string response = buffer_.substr(0, head_end + 4 + length);
    buffer_.erase(0, response.size());
    return response;
  }
  bool ClosedByPeer() {
    while (ReadSome()) {
    }
    return closed_;
  }

 private:
  bool ReadSome() {
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n == 0) closed_ = true;
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_;
  std::string buffer_;
  bool closed_ = false;
};

struct Fixture {
  explicit Fixture(HttpServerOptions options = {}) : io(2) {
    options.bind_address = "127.0.0.1";
    options.port = 0;
    server = std::make_unique<HttpServer>(io, options);
    server->AddRoute("GET", "/hello", [](const HttpRequest& req) {
      return HttpResponse{200, "text/plain", "hi " + std::string(req.Header("x-name")), {}};
    });
    server->AddRoute("POST", "/echo", [](const HttpRequest& req) {
      return HttpResponse{200, "application/octet-stream", req.body, {}};
    });
    server->AddRoute("GET", "/items/*", [](const HttpRequest& req) {
      return HttpResponse{200, "text/plain", "item " + req.path, {}};
    });
    server->AddRoute("GET", "/items/special", [](const HttpRequest&) {
      return HttpResponse{200, "text/plain", "exact", {}};
    });
    server->AddRoute("GET", "/stream",
                     HttpHandler([](HttpRequest, std::shared_ptr<HttpResponder> r) {
                       std::thread([r] {
                         r->StartStream(200, "text/event-stream");
                         for (int i = 0; i < 3; ++i)
                           r->Write("data: " + std::to_string(i) + "\n\n");
                         r->Finish();
                       }).detach();
                     }));
    server->AddRoute("GET", "/firehose",
                     HttpHandler([this](HttpRequest, std::shared_ptr<HttpResponder> r) {
                       std::thread([this, r] {
                         r->StartStream(200, "text/event-stream");
                         // A producer slower than the connection's strand, so only the
                         // socket can hold it back. Stops at the first refused write, or
                         // after 64 MiB.
                         std::string chunk(16 << 10, 'x');
                         for (int i = 0; i < 4096 && r->Write(chunk); ++i) {
                           accepted += 16 << 10;
                           std::this_thread::sleep_for(std::chrono::microseconds(100));
                         }
                         firehose_done = true;
                         r->Finish();
                       }).detach();
                     }));
    server->AddRoute("GET", "/forgetful",
                     HttpHandler([](HttpRequest, std::shared_ptr<HttpResponder>) {}));
    REQUIRE(server->Start().ok());
    io.Start();
  }
  ~Fixture() {
    server.reset();
    io.Stop();
  }
  IoRunner io;
  std::unique_ptr<HttpServer> server;
  std::atomic<int64_t> accepted{0};
  std::atomic<bool> firehose_done{false};
};

TEST_CASE("Requests are answered and keep-alive serves several on one connection", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("GET /hello HTTP/1.1\r\nHost: x\r\nX-Name: ada\r\n\r\n");
  std::string r1 = c.ReadResponse();
  CHECK(r1.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(r1.find("Connection: keep-alive") != std::string::npos);
  CHECK(r1.substr(r1.size() - 6) == "hi ada");
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  std::string r2 = c.ReadResponse();
  CHECK(r2.substr(r2.size() - 5) == "hello");
  c.Send("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(c.ReadResponse().find("Connection: close") != std::string::npos);
  CHECK(c.ClosedByPeer());
}

TEST_CASE("Unknown paths get 404 and wrong methods 405, as JSON", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadResponse();
  CHECK(r.rfind("HTTP/1.1 404", 0) == 0);
  // OpenAI's shape: `code` is a string or null, never the HTTP status.
  CHECK(r.find("{\"error\":{\"code\":null,\"message\":\"no route for /nope\"") !=
        std::string::npos);
  c.Send("DELETE /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(c.ReadResponse().rfind("HTTP/1.1 405", 0) == 0);
}

TEST_CASE("A route ending in * serves the paths under it, after the exact routes", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("GET /items/a%40b HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadResponse();
  CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(r.substr(r.size() - 17) == "item /items/a%40b");
  c.Send("GET /items/special HTTP/1.1\r\nHost: x\r\n\r\n");
  r = c.ReadResponse();
  CHECK(r.substr(r.size() - 5) == "exact");
  c.Send("GET /items/ HTTP/1.1\r\nHost: x\r\n\r\n");  // nothing after the stem
  CHECK(c.ReadResponse().rfind("HTTP/1.1 404", 0) == 0);
  c.Send("POST /items/a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  r = c.ReadResponse();
  CHECK(r.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(r.find("Allow: GET, HEAD") != std::string::npos);
}

TEST_CASE("An oversized body gets 413 and the connection is closed", "[http]") {
  HttpServerOptions o;
  o.max_body_bytes.value = 1024;
  Fixture f(o);
  Client c(f.server->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
         std::string(100000, 'a'));
  std::string r = c.ReadResponse();
  CHECK(r.rfind("HTTP/1.1 413", 0) == 0);
  CHECK(r.find("http.max_body_bytes (1024 bytes)") != std::string::npos);
  CHECK(c.ClosedByPeer());
}

TEST_CASE("Oversized headers get 431", "[http]") {
  HttpServerOptions o;
  o.max_header_bytes.value = 512;
  Fixture f(o);
  Client c(f.server->port());
  c.Send("GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4096, 'b') + "\r\n\r\n");
  CHECK(c.ReadResponse().rfind("HTTP/1.1 431", 0) == 0);
  CHECK(c.ClosedByPeer());
}

TEST_CASE("Malformed requests get 400 and the server keeps serving", "[http]") {
  Fixture f;
  std::vector<std::string> junks = {"THIS IS NOT HTTP\r\n\r\n", "GET / HTTP/9.9\r\n\r\n",
                                    "POST /echo HTTP/1.1\r\nContent-Length: zz\r\n\r\n",
                                    std::string("\x00\x01\x02\xff\r\n\r\n", 8)};
  for (const std::string& junk : junks) {
    Client c(f.server->port());
    c.Send(junk);
    CHECK(c.ReadResponse().rfind("HTTP/1.1 400", 0) == 0);
  }
  Client ok(f.server->port());
  ok.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ok.ReadResponse().rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("A request that arrives too slowly gets 408", "[http]") {
  HttpServerOptions o;
  o.read_timeout = absl::Milliseconds(200);
  Fixture f(o);
  Client c(f.server->port());
  c.Send("GET /hello HTTP/1.1\r\nHo");
  CHECK(c.ReadResponse().rfind("HTTP/1.1 408", 0) == 0);
  CHECK(c.ClosedByPeer());
}

TEST_CASE("Streaming responses are chunked and end cleanly", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadUntil("0\r\n\r\n");
  CHECK(r.find("Transfer-Encoding: chunked") != std::string::npos);
  CHECK(r.find("Content-Type: text/event-stream") != std::string::npos);
  CHECK(r.find("9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n") !=
        std::string::npos);
}

TEST_CASE("A client that stops reading stalls the stream instead of growing memory", "[http]") {
  HttpServerOptions o;
  o.max_stream_buffer_bytes.value = 64 << 10;
  Fixture f(o);
  Client c(f.server->port());
  c.Send("GET /firehose HTTP/1.1\r\nHost: x\r\n\r\n");  // and never read
  for (int i = 0; i < 500 && !f.firehose_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(f.firehose_done);
  // What was accepted is bounded by the kernel's socket buffers plus the 64 KiB budget, far
  // below the 64 MiB the handler wanted to send.
  CHECK(f.accepted < (32 << 20));
}

TEST_CASE("A handler that never answers still produces a 500", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("GET /forgetful HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(c.ReadResponse().rfind("HTTP/1.1 500", 0) == 0);
}

TEST_CASE("Connections beyond the cap get 503", "[http]") {
  HttpServerOptions o;
  o.max_connections = 2;
  Fixture f(o);
  Client a(f.server->port()), b(f.server->port());
  a.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  b.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  a.ReadResponse();
  b.ReadResponse();
  Client extra(f.server->port());
  CHECK(extra.ReadResponse().rfind("HTTP/1.1 503", 0) == 0);
}

TEST_CASE("Bodies the server cannot delimit or decode are refused before they are read", "[http]") {
  Fixture f;
  struct Case {
    std::string request;
    std::string status;
    std::string says;
  };
  const std::vector<Case> cases = {
      // An unknown coding would leave the body to be read as the next request.
      {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"
       "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
       "501", "Transfer-Encoding \\\"gzip\\\" is not supported"},
      {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
       "501", "Transfer-Encoding"},
      {"POST /echo HTTP/1.1\r\nHost: x\r\n\r\n{}", "411", "Content-Length"},
      {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
       "415", "Content-Encoding"},
      {"GET /hello HTTP/1.1\r\n\r\n", "400", "Host"},
      {"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nContent-Length: 2\r\n\r\n{}", "417",
       "100-continue"},
  };
  for (const Case& c : cases) {
    INFO(c.request);
    Client client(f.server->port());
    client.Send(c.request);
    std::string r = client.ReadResponse();
    CHECK(r.rfind("HTTP/1.1 " + c.status, 0) == 0);
    CHECK(r.find(c.says) != std::string::npos);
    CHECK(r.find("\"param\":null") != std::string::npos);
    CHECK(client.ClosedByPeer());  // and nothing after it was served as a request
  }
}

TEST_CASE("A client sending Expect: 100-continue is told to go on", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  CHECK(c.ReadResponse() == "HTTP/1.1 100 Continue\r\n\r\n");  // before any body byte
  c.Send("hello");
  std::string r = c.ReadResponse();
  CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(r.find("\r\n\r\nhello") != std::string::npos);
}

TEST_CASE("HEAD gets the GET route's head without a body; 405 lists the allowed methods",
          "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("HEAD /hello HTTP/1.1\r\nHost: x\r\nX-Name: a\r\n\r\n");
  std::string r = c.ReadUntil("\r\n\r\n");
  CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(r.find("Content-Length: 4\r\n") != std::string::npos);    // "hi a", not sent
  c.Send("GET /hello HTTP/1.1\r\nHost: x\r\nX-Name: b\r\n\r\n");  // same connection
  std::string next = c.ReadUntil("hi b");
  CHECK(next.find("hi a") == std::string::npos);
  CHECK(next.find("hi b") != std::string::npos);

  Client d(f.server->port());
  d.Send("DELETE /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string refused = d.ReadResponse();
  CHECK(refused.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(refused.find("Allow: POST\r\n") != std::string::npos);
}

TEST_CASE("A stream to an HTTP/1.0 client is not chunked and ends with the connection", "[http]") {
  Fixture f;
  Client c(f.server->port());
  c.Send("GET /stream HTTP/1.0\r\n\r\n");
  CHECK(c.ClosedByPeer());
  std::string r = c.ReadUntil("never");
  CHECK(r.find("Transfer-Encoding") == std::string::npos);
  CHECK(r.find("Connection: close") != std::string::npos);
  CHECK(r.find("\r\n\r\ndata: 0\n\ndata: 1\n\ndata: 2\n\n") != std::string::npos);
  CHECK(r.size() == r.find("data: 2\n\n") + 9);  // no terminating chunk
}

TEST_CASE("A port already in use is reported with its address", "[http]") {
  Fixture f;
  IoRunner io(1);
  HttpServerOptions o;
  o.bind_address = "127.0.0.1";
  o.port = f.server->port();
  HttpServer second(io, o);
  absl::Status s = second.Start();
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(s.message()).find("127.0.0.1:" + std::to_string(o.port)) != std::string::npos);
}

}  // namespace
}  // namespace exa::net
