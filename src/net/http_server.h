// HTTP/1.1 server on Boost.Beast: keep-alive, request size limits, timeouts, a connection cap,
// and chunked streaming responses (used for Server-Sent Events by the OpenAI API). With a
// certificate and key it serves HTTPS (TLS 1.2 or later) instead: the handshake must finish
// within read_timeout, like the first request.
//
// A route's handler gets the request and an HttpResponder. It may answer at once (Respond), or
// later from any thread, or stream (StartStream, Write..., Finish). Bad requests never reach
// handlers: oversized bodies get 413, oversized headers 431, malformed requests 400, slow
// requests 408, each with a JSON body, and the connection is closed cleanly.
//
// Thread safety: AddRoute before Start. HttpResponder methods may be called from any thread;
// they are serialized onto the connection's strand.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/schema.h"
#include "net/http_request.h"
#include "net/io_runner.h"

namespace exa::net {

struct HttpServerOptions {
  std::string bind_address = "0.0.0.0";
  uint16_t port = 8080;
  config::Bytes max_body_bytes{1 << 20};             // prompts are text; 1 MiB is ~250k tokens
  config::Bytes max_header_bytes{16 << 10};          // nginx's large_client_header_buffers ballpark
  absl::Duration read_timeout = absl::Seconds(30);   // to receive one whole request
  absl::Duration idle_timeout = absl::Seconds(60);   // between keep-alive requests
  absl::Duration write_timeout = absl::Seconds(60);  // for one write to a slow client
  int max_connections = 4096;
  config::Bytes max_stream_buffer_bytes{4 << 20};  // unsent stream data before Write() fails
  // PEM certificate chain and private key: both set, the server speaks HTTPS only. Set by the
  // daemon for its HTTPS listener (http.tls_cert_file / http.tls_key_file), not by section.
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Whether `options` name a certificate or key (the server then speaks HTTPS only).
bool HttpsConfigured(const HttpServerOptions& options);
// Loads the certificate and key as Start would: INVALID_ARGUMENT naming the file and what is
// wrong (unreadable, not PEM, key not matching the certificate, one of the two missing).
absl::Status CheckHttpsFiles(const HttpServerOptions& options);

// Registers the options under `section` ("http") in a config schema.
void RegisterConfig(config::Schema& schema, std::string_view section, HttpServerOptions* options);

class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  // Sends a whole response. Only the first of Respond/StartStream has effect.
  virtual void Respond(HttpResponse response) = 0;
  // Starts a chunked response; follow with Write() calls and one Finish().
  virtual void StartStream(int status, std::string content_type,
                           std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // Queues one chunk. Returns false when the client is gone or more than
  // max_stream_buffer_bytes are waiting: the caller should stop producing (and cancel work).
  virtual bool Write(std::string data) = 0;
  virtual void Finish() = 0;
  // True once the client has disconnected.
  virtual bool ClientGone() const = 0;
  // Called once, on the connection's strand, if the client disconnects before Finish.
  virtual void OnClientGone(std::function<void()> callback) = 0;
};

using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpResponder>)>;

class HttpServer {
 public:
  HttpServer(IoRunner& io, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Exact-path routes; a path ending in '*' matches every longer path starting with what comes
  // before it (e.g. "/v1/models/*"), after the exact routes. A request with a known path and
  // another method gets 405.
  void AddRoute(std::string method, std::string path, HttpHandler handler);
  // Convenience for handlers that answer at once.
  void AddRoute(std::string method, std::string path,
                std::function<HttpResponse(const HttpRequest&)> handler);

  // Binds and starts accepting. Fails with the address when the port is taken, and naming the
  // file when a TLS certificate or key cannot be loaded.
  absl::Status Start();
  uint16_t port() const { return bound_port_; }
  // Stops accepting new connections; existing ones finish their current request.
  void StopAccepting();
  // Requests started but not yet answered or finished.
  int in_flight() const { return in_flight_.load(); }
  // Closes every connection now.
  void CloseAll();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  uint16_t bound_port_ = 0;
  std::atomic<int>& in_flight_;
};

}  // namespace exa::net
