#include "net/http_client.h"

#include <memory>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include "absl/status/status.h"
#include "common/strings.h"

namespace exa::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One exchange; its handlers run on one strand, and it lives as long as they hold it.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(asio::io_context& io, HttpClientRequest request, HttpClientCallback done)
      : strand_(asio::make_strand(io)),
        resolver_(strand_),
        stream_(strand_),
        timer_(strand_),
        request_(std::move(request)),
        done_(std::move(done)) {}

  void Start() {
    auto self = shared_from_this();
    asio::dispatch(strand_, [self] {
      self->timer_.expires_after(absl::ToChronoNanoseconds(self->request_.timeout));
      self->timer_.async_wait([self](const boost::system::error_code& ec) {
        if (ec) return;  // cancelled: finished in time
        self->timed_out_ = true;
        self->resolver_.cancel();
        beast::error_code ignored;
        self->stream_.socket().close(ignored);
      });
      self->resolver_.async_resolve(
          self->request_.host, std::to_string(self->request_.port),
          [self](const beast::error_code& ec, tcp::resolver::results_type results) {
            if (ec) return self->Fail(ec, "resolve");
            self->Connect(results);
          });
    });
  }

 private:
  void Connect(const tcp::resolver::results_type& results) {
    auto self = shared_from_this();
    stream_.async_connect(results, [self](const beast::error_code& ec, const tcp::endpoint&) {
      if (ec) return self->Fail(ec, "connect");
      self->Send();
    });
  }

  void Send() {
    message_.method_string(request_.method);
    message_.target(request_.target);
    message_.version(11);
    message_.set(http::field::host, StrCat(request_.host, ":", request_.port));
    message_.set(http::field::user_agent, "exaserved");
    message_.set(http::field::connection, "close");
    if (!request_.content_type.empty()) {
      message_.set(http::field::content_type, request_.content_type);
    }
    message_.body() = request_.body;
    message_.prepare_payload();
    auto self = shared_from_this();
    http::async_write(stream_, message_, [self](const beast::error_code& ec, size_t) {
      if (ec) return self->Fail(ec, "send");
      self->Read();
    });
  }

  void Read() {
    parser_.body_limit(request_.max_response_bytes);
    parser_.header_limit(64 << 10);
    auto self = shared_from_this();
    // The header first: Boost 1.74's parser does not apply body_limit to a Content-Length body
    // (it does to chunked ones), so the length is checked here.
    http::async_read_header(stream_, buffer_, parser_, [self](const beast::error_code& ec, size_t) {
      if (ec == http::error::body_limit) return self->TooLarge();
      if (ec) return self->Fail(ec, "read");
      auto length = self->parser_.content_length();
      if (length && *length > self->request_.max_response_bytes) return self->TooLarge();
      http::async_read(stream_of(self), self->buffer_, self->parser_,
                       [self](const beast::error_code& ec, size_t) {
                         if (ec == http::error::body_limit) return self->TooLarge();
                         if (ec) return self->Fail(ec, "read");
                         HttpClientResponse response;
                         response.status = static_cast<int>(self->parser_.get().result_int());
                         response.body = std::move(self->parser_.get().body());
                         self->Finish(std::move(response));
                       });
    });
  }

  static beast::tcp_stream& stream_of(const std::shared_ptr<Exchange>& e) { return e->stream_; }

  void TooLarge() {
    Finish(absl::ResourceExhaustedError(
        StrCat("response from ", Where(), " over ", request_.max_response_bytes, " bytes")));
  }

  std::string Where() const { return StrCat(request_.host, ":", request_.port); }

  void Fail(const beast::error_code& ec, std::string_view step) {
    if (timed_out_) {
      return Finish(absl::DeadlineExceededError(
          StrCat(Where(), ": no answer within ", absl::FormatDuration(request_.timeout))));
    }
    Finish(absl::UnavailableError(StrCat(Where(), ": ", step, ": ", ec.message())));
  }

  void Finish(absl::StatusOr<HttpClientResponse> result) {
    timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    if (done_) {
      auto done = std::move(done_);
      done_ = nullptr;
      done(std::move(result));
    }
  }

  asio::strand<asio::io_context::executor_type> strand_;
  tcp::resolver resolver_;
  beast::tcp_stream stream_;
  asio::steady_timer timer_;
  HttpClientRequest request_;
  HttpClientCallback done_;
  http::request<http::string_body> message_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  bool timed_out_ = false;
};

}  // namespace

void HttpFetch(asio::io_context& io, HttpClientRequest request, HttpClientCallback done) {
  std::make_shared<Exchange>(io, std::move(request), std::move(done))->Start();
}

absl::Status ParseHttpUrl(std::string_view url, HttpClientRequest* request) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return absl::InvalidArgumentError(
        StrCat("\"", url, "\": expected http://host[:port][/path] (https is not supported)"));
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  request->target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  uint32_t port = 80;
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    std::string_view digits = authority.substr(colon + 1);
    port = 0;
    for (char c : digits) {
      if (c < '0' || c > '9' || port > 65535) {
        port = 0;
        break;
      }
      port = port * 10 + static_cast<uint32_t>(c - '0');
    }
    if (digits.empty() || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(StrCat("\"", url, "\": port must be 1-65535"));
    }
    authority = authority.substr(0, colon);
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty()) return absl::InvalidArgumentError(StrCat("\"", url, "\": no host"));
  request->host = std::string(authority);
  request->port = static_cast<uint16_t>(port);
  return absl::OkStatus();
}

}  // namespace exa::net
