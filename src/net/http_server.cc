#include "net/http_server.h"

#include <deque>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include "common/check.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"
#include "net/http_request_beast.h"

namespace exa::net {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;
using TlsStream = ssl::stream<tcp::socket&>;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::chrono::nanoseconds ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

// Header values come from handlers; CR or LF would let one split the response.
std::string SafeHeaderValue(std::string_view v) {
  std::string out;
  for (char c : v) out.push_back(c == '\r' || c == '\n' ? ' ' : c);
  return out;
}

std::string StatusLine(int status) {
  auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return StrCat("HTTP/1.1 ", status, " ", std::string_view(reason.data(), reason.size()), "\r\n");
}

// How a response's body is delimited: Content-Length, chunks (HTTP/1.1 streams), or the end of
// the connection (streams to HTTP/1.0 clients, which must not be sent chunks).
enum class Framing { kLength, kChunked, kUntilClose };

std::string SerializeHead(int status, std::string_view content_type, const Headers& headers,
                          bool keep_alive, Framing framing, size_t content_length = 0) {
  std::string out = StatusLine(status);
  StrAppend(&out, "Server: exaserved\r\nContent-Type: ", SafeHeaderValue(content_type), "\r\n");
  for (const auto& [k, v] : headers)
    StrAppend(&out, SafeHeaderValue(k), ": ", SafeHeaderValue(v), "\r\n");
  if (framing == Framing::kLength) {
    StrAppend(&out, "Content-Length: ", content_length, "\r\n");
  } else if (framing == Framing::kChunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  }
  StrAppend(&out, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n\r\n");
  return out;
}

struct Route {
  std::string method;
  std::string path;
  HttpHandler handler;
};

}  // namespace

void RegisterConfig(config::Schema& schema, std::string_view section, HttpServerOptions* options) {
  std::string s(section);
  schema.Add(s + ".max_body_bytes", &options->max_body_bytes,
             "largest request body accepted; larger gets 413",
             config::Validator<config::Bytes>(config::PositiveBytes));
  // Beast keeps the head limit in 32 bits.
  schema.Add(s + ".max_header_bytes", &options->max_header_bytes,
             "largest request head (request line + headers); larger gets 431",
             config::BytesBetween(1 << 10, 1 << 30));
  schema.Add(s + ".read_timeout", &options->read_timeout,
             "time allowed to receive a whole request; slower gets 408",
             config::Validator<absl::Duration>(config::PositiveDuration));
  schema.Add(s + ".idle_timeout", &options->idle_timeout,
             "keep-alive connections idle this long are closed",
             config::Validator<absl::Duration>(config::PositiveDuration));
  schema.Add(s + ".write_timeout", &options->write_timeout,
             "a client that does not take a write this long is disconnected",
             config::Validator<absl::Duration>(config::PositiveDuration));
  schema.Add<int>(s + ".max_connections", &options->max_connections,
                  "open connections beyond this get 503 and are closed",
                  [](const int& v) { return v > 0 ? "" : StrCat(v, ": must be positive"); });
  schema.Add(s + ".max_stream_buffer_bytes", &options->max_stream_buffer_bytes,
             "unsent streaming data per response before the stream is treated as stalled",
             config::Validator<config::Bytes>(config::PositiveBytes));
}

class Connection;

struct HttpServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(IoRunner& io_runner, HttpServerOptions opts)
      : io(io_runner), options(std::move(opts)), acceptor(asio::make_strand(io_runner.context())) {}

  void DoAccept();
  // The route for `method` on `path`; HEAD runs the GET route. When none matches, `allowed`
  // lists the path's methods ("" for an unknown path).
  const Route* FindRoute(const std::string& method, const std::string& path,
                         std::string* allowed) const;
  void Track(const std::shared_ptr<Connection>& c);
  HttpParseLimits parse_limits() const {
    return {options.max_body_bytes.value, options.max_header_bytes.value};
  }

  IoRunner& io;
  const HttpServerOptions options;
  std::optional<ssl::context> tls;  // set by Start when the options name a certificate
  std::vector<Route> routes;
  tcp::acceptor acceptor;
  std::atomic<bool> accepting{false};
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0};
  absl::Mutex mu;
  std::vector<std::weak_ptr<Connection>> live ABSL_GUARDED_BY(mu);
};

// One client connection. Everything below runs on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<HttpServer::Impl> server)
      : socket_(std::move(socket)),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        server_(std::move(server)) {
    server_->connections++;
    if (server_->tls) tls_ = std::make_unique<TlsStream>(socket_, *server_->tls);
  }
  ~Connection() { server_->connections--; }

  void Start() {
    if (tls_) {
      DoHandshake();
    } else {
      DoReadRequest();
    }
  }
  void Reject(HttpResponse response) {
    if (tls_) {
      Shutdown();  // no handshake yet: nothing can be said to the client
    } else {
      SendAndClose(std::move(response));
    }
  }
  void Close() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Shutdown(); });
  }

  // --- called by the responder, on the strand ---
  void Respond(HttpResponse r);
  void StartStream(int status, std::string content_type, Headers headers);
  void WriteChunk(std::string data);
  void FinishStream();
  void AddGoneCallback(std::function<void()> cb) {
    if (gone_) {
      cb();
    } else {
      gone_callbacks_.push_back(std::move(cb));
    }
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }
  std::atomic<size_t> queued_bytes{0};
  std::atomic<bool> gone{false};
  size_t max_stream_buffer() const { return server_->options.max_stream_buffer_bytes.value; }

 private:
  void DoHandshake();
  void DoReadRequest();
  void OnHead(beast::error_code ec);
  void ReadBody();
  bool ReadFailed(beast::error_code ec);
  void OnRead(beast::error_code ec);
  void Dispatch();
  void SendAndClose(HttpResponse r);
  void Enqueue(std::string bytes, size_t payload = 0);
  void DoWrite();
  void OnWrite(beast::error_code ec, size_t bytes);
  void EndRequest();
  void Shutdown();

  tcp::socket socket_;
  std::unique_ptr<TlsStream> tls_;  // over socket_ when the server speaks HTTPS
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  std::shared_ptr<HttpServer::Impl> server_;
  beast::flat_buffer buffer_;
  std::optional<internal::RequestParser> parser_;
  bool first_request_ = true;
  bool read_timed_out_ = false;
  bool keep_alive_ = false;
  bool head_only_ = false;  // a HEAD request: the head of the GET response, no body
  Framing stream_framing_ = Framing::kChunked;
  bool request_active_ = false;  // dispatched, response not complete
  bool response_started_ = false;
  bool response_complete_ = false;
  bool close_after_write_ = false;
  bool writing_ = false;
  bool gone_ = false;
  // Bytes waiting for the socket; `payload` is the part counted in queued_bytes (stream data),
  // released only once the socket took it, so a client that stops reading stalls the producer.
  struct Pending {
    std::string bytes;
    size_t payload = 0;
  };
  std::deque<Pending> pending_;
  std::vector<std::function<void()>> gone_callbacks_;
};

class ResponderImpl final : public HttpResponder {
 public:
  explicit ResponderImpl(std::shared_ptr<Connection> c) : conn_(std::move(c)) {}
  ~ResponderImpl() override {
    // A handler that dropped its responder without answering still owes the client a reply.
    if (!started_.exchange(true)) {
      Post([c = conn_] { c->Respond(JsonError(500, "handler returned no response")); });
    } else if (streaming_ && !finished_.exchange(true)) {
      Post([c = conn_] { c->FinishStream(); });
    }
  }
  void Respond(HttpResponse response) override {
    if (started_.exchange(true)) return;
    finished_ = true;
    Post([c = conn_, r = std::move(response)]() mutable { c->Respond(std::move(r)); });
  }
  void StartStream(int status, std::string content_type, Headers headers) override {
    if (started_.exchange(true)) return;
    streaming_ = true;
    Post([c = conn_, status, ct = std::move(content_type), h = std::move(headers)]() mutable {
      c->StartStream(status, std::move(ct), std::move(h));
    });
  }
  bool Write(std::string data) override {
    if (!streaming_ || finished_ || conn_->gone) return false;
    if (conn_->queued_bytes + data.size() > conn_->max_stream_buffer()) return false;
    conn_->queued_bytes += data.size();
    Post([c = conn_, d = std::move(data)]() mutable { c->WriteChunk(std::move(d)); });
    return true;
  }
  void Finish() override {
    if (!streaming_ || finished_.exchange(true)) return;
    Post([c = conn_] { c->FinishStream(); });
  }
  bool ClientGone() const override { return conn_->gone; }
  void OnClientGone(std::function<void()> callback) override {
    Post([c = conn_, cb = std::move(callback)]() mutable { c->AddGoneCallback(std::move(cb)); });
  }

 private:
  template <typename F>
  void Post(F&& f) {
    asio::post(conn_->executor(), std::forward<F>(f));
  }
  std::shared_ptr<Connection> conn_;
  std::atomic<bool> started_{false};
  std::atomic<bool> streaming_{false};
  std::atomic<bool> finished_{false};
};

void Connection::DoHandshake() {
  read_timed_out_ = false;
  read_timer_.expires_after(ToChrono(server_->options.read_timeout));
  read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->socket_.cancel(ignored);
  });
  tls_->async_handshake(ssl::stream_base::server,
                        [self = shared_from_this()](beast::error_code ec) {
                          self->read_timer_.cancel();
                          if (ec || self->read_timed_out_) {
                            // Not TLS, a certificate the client refused, or too slow.
                            self->Shutdown();
                            return;
                          }
                          self->DoReadRequest();
                        });
}

void Connection::DoReadRequest() {
  parser_.emplace();
  internal::ApplyLimits(server_->parse_limits(), &*parser_);
  read_timed_out_ = false;
  // The first request gets read_timeout; later ones on a kept-alive connection idle_timeout.
  read_timer_.expires_after(
      ToChrono(first_request_ ? server_->options.read_timeout : server_->options.idle_timeout));
  read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;  // cancelled: the read finished first
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->socket_.cancel(ignored);
  });
  // The head first: it is checked (and a client expecting 100-continue told to go on) before
  // the body is read.
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); };
  if (tls_) {
    http::async_read_header(*tls_, buffer_, *parser_, std::move(done));
  } else {
    http::async_read_header(socket_, buffer_, *parser_, std::move(done));
  }
}

void Connection::OnHead(beast::error_code ec) {
  if (ReadFailed(ec)) return;
  if (auto refusal = internal::CheckHead(*parser_)) {
    read_timer_.cancel();
    SendAndClose(std::move(*refusal));
    return;
  }
  if (!internal::ExpectsContinue(*parser_)) {
    ReadBody();
    return;
  }
  // Written directly, not queued: no response has started on this connection yet. The read
  // timer still runs, and cancels this write too.
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  auto next = [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) {
      self->read_timer_.cancel();
      self->Shutdown();
      return;
    }
    self->ReadBody();
  };
  if (tls_) {
    asio::async_write(*tls_, asio::buffer(kContinue), std::move(next));
  } else {
    asio::async_write(socket_, asio::buffer(kContinue), std::move(next));
  }
}

void Connection::ReadBody() {
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); };
  if (tls_) {
    http::async_read(*tls_, buffer_, *parser_, std::move(done));
  } else {
    http::async_read(socket_, buffer_, *parser_, std::move(done));
  }
}

// Ends the connection when a read failed or timed out (408 for a partial request, 400, 413 or
// 431 for a refused one, quietly for a closed or idle one); false when `ec` is success.
bool Connection::ReadFailed(beast::error_code ec) {
  if (read_timed_out_) {
    read_timer_.cancel();
    if (parser_->got_some() || buffer_.size() > 0) {
      SendAndClose(JsonError(408, "request not received within http.read_timeout"));
    } else {
      Shutdown();  // an idle keep-alive connection: close quietly
    }
    return true;
  }
  if (!ec) return false;
  read_timer_.cancel();
  if (ec == http::error::end_of_stream || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
      ec == ssl::error::stream_truncated) {
    Shutdown();
  } else {
    SendAndClose(internal::RejectionFor(ec, server_->parse_limits()));  // 413, 431 or 400
  }
  return true;
}

void Connection::OnRead(beast::error_code ec) {
  if (ReadFailed(ec)) return;
  read_timer_.cancel();
  Dispatch();
}

void Connection::Dispatch() {
  first_request_ = false;
  internal::BeastRequest msg = parser_->release();
  keep_alive_ = msg.keep_alive() && server_->accepting;
  HttpRequest req = internal::ToHttpRequest(std::move(msg));
  head_only_ = req.method == "HEAD";
  // HTTP/1.0 has no chunked encoding: a stream to it is delimited by closing the connection.
  stream_framing_ = req.version >= 11 ? Framing::kChunked : Framing::kUntilClose;
  beast::error_code ignored;
  auto remote = socket_.remote_endpoint(ignored);
  if (!ignored) req.remote_address = remote.address().to_string();

  request_active_ = true;
  response_started_ = false;
  response_complete_ = false;
  server_->in_flight++;
  std::string allowed;
  const Route* route = server_->FindRoute(req.method, req.path, &allowed);
  auto responder = std::make_shared<ResponderImpl>(shared_from_this());
  if (route == nullptr) {
    if (allowed.empty()) {
      responder->Respond(JsonError(404, StrCat("no route for ", req.path)));
    } else {
      HttpResponse r = JsonError(
          405, StrCat("method ", req.method, " not allowed on ", req.path, "; allowed: ", allowed));
      r.headers.emplace_back("Allow", allowed);
      responder->Respond(std::move(r));
    }
    return;
  }
  // Handlers report failures through the responder; an exception escaping one is a bug, but it
  // must cost one request a 500, not the whole daemon.
  try {
    route->handler(std::move(req), responder);
  } catch (const std::exception& e) {
    EXA_LOG_ERROR("http", "handler threw", {{"path", route->path}, {"error", e.what()}});
    responder->Respond(JsonError(500, "internal error"));
  }
}

void Connection::Respond(HttpResponse r) {
  if (!request_active_ || response_started_) return;
  response_started_ = true;
  response_complete_ = true;
  std::string bytes = SerializeHead(r.status, r.content_type, r.headers, keep_alive_,
                                    Framing::kLength, r.body.size());
  if (!head_only_) bytes += r.body;
  Enqueue(std::move(bytes));
}

void Connection::StartStream(int status, std::string content_type, Headers headers) {
  if (!request_active_ || response_started_) return;
  response_started_ = true;
  headers.emplace_back("Cache-Control", "no-cache");
  if (stream_framing_ == Framing::kUntilClose) keep_alive_ = false;
  Enqueue(SerializeHead(status, content_type, headers, keep_alive_, stream_framing_));
}

void Connection::WriteChunk(std::string data) {
  size_t size = data.size();
  if (!response_started_ || response_complete_ || gone_ || size == 0 || head_only_) {
    queued_bytes -= size;
    return;
  }
  if (stream_framing_ == Framing::kUntilClose) {
    Enqueue(std::move(data), size);
    return;
  }
  std::string chunk = fmt::format("{:x}\r\n", size);
  chunk.append(data);
  chunk.append("\r\n");
  Enqueue(std::move(chunk), size);
}

void Connection::FinishStream() {
  if (!response_started_ || response_complete_) return;
  response_complete_ = true;
  if (head_only_ || stream_framing_ == Framing::kUntilClose) {
    // No terminating chunk; an empty write completes the response (and, until close, ends the
    // connection, as keep_alive_ is off).
    Enqueue(std::string());
    return;
  }
  Enqueue("0\r\n\r\n");
}

void Connection::SendAndClose(HttpResponse r) {
  keep_alive_ = false;
  close_after_write_ = true;
  Enqueue(
      SerializeHead(r.status, r.content_type, r.headers, false, Framing::kLength, r.body.size()) +
      r.body);
}

void Connection::Enqueue(std::string bytes, size_t payload) {
  if (gone_) {
    queued_bytes -= payload;
    return;
  }
  pending_.push_back({std::move(bytes), payload});
  if (!writing_) DoWrite();
}

void Connection::DoWrite() {
  writing_ = true;
  write_timer_.expires_after(ToChrono(server_->options.write_timeout));
  write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->Shutdown();  // the client stopped reading
  });
  auto done = [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnWrite(ec, n); };
  if (tls_) {
    asio::async_write(*tls_, asio::buffer(pending_.front().bytes), std::move(done));
  } else {
    asio::async_write(socket_, asio::buffer(pending_.front().bytes), std::move(done));
  }
}

void Connection::OnWrite(beast::error_code ec, size_t) {
  write_timer_.cancel();
  writing_ = false;
  if (ec) {
    Shutdown();
    return;
  }
  queued_bytes -= pending_.front().payload;
  pending_.pop_front();
  if (!pending_.empty()) {
    DoWrite();
    return;
  }
  if (close_after_write_) {
    Shutdown();
    return;
  }
  if (request_active_ && response_complete_) {
    EndRequest();
    if (keep_alive_ && server_->accepting) {
      DoReadRequest();
    } else {
      Shutdown();
    }
  }
}

void Connection::EndRequest() {
  if (!request_active_) return;
  request_active_ = false;
  server_->in_flight--;
}

void Connection::Shutdown() {
  if (gone_) return;
  gone_ = true;
  gone = true;
  EndRequest();
  beast::error_code ignored;
  read_timer_.cancel();
  write_timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  auto callbacks = std::move(gone_callbacks_);
  for (auto& cb : callbacks) cb();
}

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(
      asio::make_strand(io.context()),
      [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !self->accepting) return;
        if (!ec) {
          auto conn = std::make_shared<Connection>(std::move(socket), self);
          if (self->connections > self->options.max_connections) {
            conn->Reject(JsonError(503, "too many connections (http.max_connections)"));
          } else {
            self->Track(conn);
            conn->Start();
          }
        } else {
          EXA_LOG_WARN("http", "accept failed", {{"error", ec.message()}});
        }
        self->DoAccept();
      });
}

void HttpServer::Impl::Track(const std::shared_ptr<Connection>& c) {
  absl::MutexLock lock(&mu);
  // Prune dead entries now and then so the list stays the size of the live set.
  if (live.size() > 64 && live.size() > 2 * static_cast<size_t>(connections.load())) {
    std::erase_if(live, [](const auto& w) { return w.expired(); });
  }
  live.push_back(c);
}

const Route* HttpServer::Impl::FindRoute(const std::string& method, const std::string& path,
                                         std::string* allowed) const {
  const std::string& wanted = method == "HEAD" ? std::string("GET") : method;
  allowed->clear();
  // Exact routes first; then the prefix routes ("/v1/models/*").
  for (const bool prefix : {false, true}) {
    for (const Route& r : routes) {
      const bool is_prefix = !r.path.empty() && r.path.back() == '*';
      if (is_prefix != prefix) continue;
      const std::string_view stem = std::string_view(r.path).substr(0, r.path.size() - prefix);
      if (prefix ? !(path.size() > stem.size() && path.starts_with(stem)) : r.path != path) {
        continue;
      }
      if (r.method == wanted) return &r;
      StrAppend(allowed, allowed->empty() ? "" : ", ", r.method, r.method == "GET" ? ", HEAD" : "");
    }
    if (!allowed->empty()) return nullptr;
  }
  return nullptr;
}

namespace {

// Loads the certificate chain and key of `o` into `tls` (TLS 1.2 or later); errors name the
// file and what it must hold.
absl::Status LoadTls(const HttpServerOptions& o, ssl::context& tls) {
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "http.tls_cert_file and http.tls_key_file: set both for HTTPS, or neither");
  }
  beast::error_code ec;
  tls.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                      ssl::context::single_dh_use,
                  ec);
  if (!ec) tls.use_certificate_chain_file(o.tls_cert_file, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        StrCat("http.tls_cert_file \"", o.tls_cert_file, "\": ", ec.message(),
               " (a PEM certificate chain, the server's certificate first)"));
  }
  tls.use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError(StrCat("http.tls_key_file \"", o.tls_key_file,
                                             "\": ", ec.message(),
                                             " (the PEM private key of http.tls_cert_file)"));
  }
  if (SSL_CTX_check_private_key(tls.native_handle()) != 1) {
    return absl::InvalidArgumentError(StrCat("http.tls_key_file \"", o.tls_key_file,
                                             "\" is not the key of http.tls_cert_file \"",
                                             o.tls_cert_file, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

bool HttpsConfigured(const HttpServerOptions& options) {
  return !options.tls_cert_file.empty() || !options.tls_key_file.empty();
}

absl::Status CheckHttpsFiles(const HttpServerOptions& options) {
  ssl::context tls(ssl::context::tls_server);
  return LoadTls(options, tls);
}

HttpServer::HttpServer(IoRunner& io, HttpServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))), in_flight_(impl_->in_flight) {}

HttpServer::~HttpServer() {
  StopAccepting();
  CloseAll();
}

void HttpServer::AddRoute(std::string method, std::string path, HttpHandler handler) {
  EXA_CHECK(!impl_->accepting) << "routes are added before Start";
  impl_->routes.push_back(Route{std::move(method), std::move(path), std::move(handler)});
}

void HttpServer::AddRoute(std::string method, std::string path,
                          std::function<HttpResponse(const HttpRequest&)> handler) {
  AddRoute(std::move(method), std::move(path),
           HttpHandler(
               [h = std::move(handler)](HttpRequest req, std::shared_ptr<HttpResponder> responder) {
                 responder->Respond(h(req));
               }));
}

absl::Status HttpServer::Start() {
  beast::error_code ec;
  if (HttpsConfigured(impl_->options)) {
    EXA_RETURN_IF_ERROR(LoadTls(impl_->options, impl_->tls.emplace(ssl::context::tls_server)));
  }
  auto address = asio::ip::make_address(impl_->options.bind_address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        StrCat("bind address \"", impl_->options.bind_address, "\": ", ec.message()));
  }
  tcp::endpoint endpoint(address, impl_->options.port);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(StrCat("cannot listen on ", impl_->options.bind_address, ":",
                                         impl_->options.port, ": ", ec.message()));
  }
  bound_port_ = impl_->acceptor.local_endpoint().port();
  impl_->accepting = true;
  impl_->DoAccept();
  return absl::OkStatus();
}

void HttpServer::StopAccepting() {
  if (!impl_->accepting.exchange(false)) return;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
}

void HttpServer::CloseAll() {
  absl::MutexLock lock(&impl_->mu);
  for (auto& weak : impl_->live) {
    if (auto c = weak.lock()) c->Close();
  }
  impl_->live.clear();
}

}  // namespace exa::net
