// The daemon's HTTP listeners: probes and scrapes, the OpenAI API on gateways, and /metrics on
// its own address when metrics.listen says so.
#include "common/status.h"
#include "common/strings.h"
#include "daemon/daemon.h"
#include "gateway/openai_api.h"
#include "net/http_server.h"

namespace exa::daemon {

// The HTTP server(s): probes, scrapes and the admin pages, and the OpenAI API when this node is a
// gateway.
absl::Status Daemon::StartHttp() {
  // With a certificate, the OpenAI API is served over HTTPS on its own port, and the plain HTTP
  // port keeps the open, read-only endpoints (probes, scrapes) only.
  net::HttpServerOptions plain = options_.http;
  plain.tls_cert_file.clear();
  plain.tls_key_file.clear();
  http_ = std::make_unique<net::HttpServer>(io_, plain);
  const bool own_metrics_port = !options_.metrics.listen.empty();
  AddHttpRoutes(*http_, /*metrics=*/!own_metrics_port);
  if (net::HttpsConfigured(options_.http)) {
    net::HttpServerOptions tls = options_.http;
    tls.port = options_.network.https_port;
    https_ = std::make_unique<net::HttpServer>(io_, tls);
    AddHttpRoutes(*https_, /*metrics=*/!own_metrics_port);
  }
  if (frontend_) gateway::AddOpenAiRoutes(https_ ? *https_ : *http_, *frontend_);
  if (frontend_ && https_) {
    // A client still on plain HTTP gets told where the API went (every route of it), not a bare
    // 404.
    gateway::AddOpenAiRoutes(
        [this](std::string method, std::string path, net::HttpHandler) {
          http_->AddRoute(std::move(method), std::move(path), [this](const net::HttpRequest&) {
            net::HttpResponse r = net::JsonError(
                426, StrCat("this node serves the OpenAI API over HTTPS only, on port ",
                            https_->port()));
            r.headers.emplace_back("Upgrade", "TLS/1.2, HTTP/1.1");
            return r;
          });
        },
        *frontend_);
  }
  if (absl::Status s = http_->Start(); !s.ok()) {
    return absl::UnavailableError(
        StrCat(ToStd(s.message()), " (HTTP; set another with --http-port)"));
  }
  if (https_) {
    if (absl::Status s = https_->Start(); !s.ok()) {
      if (absl::IsInvalidArgument(s)) return s;  // the certificate or key
      return absl::UnavailableError(
          StrCat(ToStd(s.message()), " (HTTPS; set another with --https-port)"));
    }
  }
  return own_metrics_port ? StartMetricsHttp() : absl::OkStatus();
}

// metrics.listen: /metrics on its own address (e.g. loopback for a local agent), and nowhere
// else (docs/security.md#data-plane).
absl::Status Daemon::StartMetricsHttp() {
  net::HttpServerOptions o = options_.http;
  o.tls_cert_file.clear();
  o.tls_key_file.clear();
  const std::string& listen = options_.metrics.listen;
  const size_t colon = listen.rfind(':');
  o.bind_address = listen.substr(0, colon);
  if (o.bind_address.size() >= 2 && o.bind_address.front() == '[') {
    o.bind_address = o.bind_address.substr(1, o.bind_address.size() - 2);
  }
  o.port = static_cast<uint16_t>(std::stoi(listen.substr(colon + 1)));  // validated: 0-65535
  metrics_http_ = std::make_unique<net::HttpServer>(io_, o);
  AddMetricsRoute(*metrics_http_);
  if (absl::Status s = metrics_http_->Start(); !s.ok()) {
    return absl::UnavailableError(StrCat(ToStd(s.message()), " (metrics.listen ", listen, ")"));
  }
  return absl::OkStatus();
}

void Daemon::AddHttpRoutes(net::HttpServer& http, bool metrics) {
  http.AddRoute("GET", "/healthz", [](const net::HttpRequest&) {
    return net::HttpResponse{200, "application/json", "{\"status\":\"ok\"}\n", {}};
  });
  http.AddRoute("GET", "/readyz", [this](const net::HttpRequest&) {
    State s = state_;
    if (s == State::kReady) {
      return net::HttpResponse{200, "application/json", "{\"status\":\"ready\"}\n", {}};
    }
    std::string why = s == State::kDraining ? "draining" : "starting";
    return net::HttpResponse{503, "application/json", StrCat("{\"status\":\"", why, "\"}\n"), {}};
  });
  if (metrics) AddMetricsRoute(http);
}

void Daemon::AddMetricsRoute(net::HttpServer& http) {
  http.AddRoute("GET", "/metrics", [this](const net::HttpRequest&) {
    return net::HttpResponse{
        200, "text/plain; version=0.0.4; charset=utf-8", registry_.Expose(), {}};
  });
}

}  // namespace exa::daemon
