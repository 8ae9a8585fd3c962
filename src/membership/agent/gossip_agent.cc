#include "membership/agent/gossip_agent.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <thread>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::membership {
namespace {

namespace asio = boost::asio;
using udp = asio::ip::udp;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr size_t kMaxDatagramBytes = 65507;
// Reliable messages in flight at once; beyond this new ones are dropped (SWIM tolerates loss).
constexpr int kMaxOutboundTcp = 64;
constexpr int kMaxInboundTcp = 128;

std::string PutU32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (24 - 8 * i));
  return s;
}
uint32_t GetU32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// "host:port" with an IP literal host ("[::1]:7946" for IPv6).
bool ParseEndpoint(const std::string& address, asio::ip::address* ip, uint16_t* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size()) return false;
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  error_code ec;
  *ip = asio::ip::make_address(host, ec);
  if (ec) return false;
  unsigned long p = std::strtoul(address.c_str() + colon + 1, nullptr, 10);
  if (p == 0 || p > 65535) return false;
  *port = static_cast<uint16_t>(p);
  return true;
}

std::string FormatEndpoint(const asio::ip::address& ip, uint16_t port) {
  return ip.is_v6() ? StrCat("[", ip.to_string(), "]:", port) : StrCat(ip.to_string(), ":", port);
}

}  // namespace

struct GossipAgent::Impl : std::enable_shared_from_this<Impl> {
  Impl(net::IoRunner& io, GossipAgentOptions opts, std::shared_ptr<Keyring> keys,
       metrics::Registry& registry)
      : options(std::move(opts)),
        keyring(std::move(keys)),
        strand(asio::make_strand(io.context())),
        udp_socket(strand),
        acceptor(strand),
        timer(strand) {
    RegisterMetrics(registry);
  }

  void RegisterMetrics(metrics::Registry& r);
  absl::Status Bind(uint16_t* port);
  void Begin(SwimCore::LocalNode self, std::vector<Address> seeds);
  void Receive();
  void Accept();
  void ReadFrame(std::shared_ptr<tcp::socket> socket);
  void Deliver(const Address& from, std::string_view sealed, Channel channel);
  void Flush();
  void SendReliable(const Address& to, std::string sealed);
  void ArmTimer();
  void Close();

  const GossipAgentOptions options;
  std::shared_ptr<Keyring> keyring;
  asio::strand<asio::io_context::executor_type> strand;
  udp::socket udp_socket;
  tcp::acceptor acceptor;
  asio::steady_timer timer;
  std::unique_ptr<SwimCore> core;  // strand-owned
  std::vector<char> receive_buffer = std::vector<char>(kMaxDatagramBytes);
  udp::endpoint receive_from;
  int outbound_tcp = 0;
  int inbound_tcp = 0;
  std::atomic<bool> closed{false};

  mutable absl::Mutex mu;
  std::vector<Member> snapshot ABSL_GUARDED_BY(mu);
  Stats stats ABSL_GUARDED_BY(mu);
  int health ABSL_GUARDED_BY(mu) = 0;
  size_t pending_broadcasts ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::function<void(const Event&)>> subscribers ABSL_GUARDED_BY(mu);
  std::atomic<uint64_t> decrypt_failures{0};
  std::atomic<uint64_t> unroutable{0};
  metrics::Family<metrics::Gauge>* members_gauge = nullptr;
};

void GossipAgent::Impl::RegisterMetrics(metrics::Registry& r) {
  members_gauge = &r.AddGauge("exaserve_gossip_members", "Members by SWIM state.", {"state"});
  auto stat = [this](uint64_t Stats::*field) {
    return [this, field] {
      absl::MutexLock lock(&mu);
      return static_cast<double>(stats.*field);
    };
  };
  r.AddCounterCallback("exaserve_gossip_probes_sent_total", "Direct probes sent.",
                       stat(&Stats::probes_sent));
  r.AddCounterCallback("exaserve_gossip_probes_failed_total", "Probes that got no ack.",
                       stat(&Stats::probes_failed));
  r.AddCounterCallback("exaserve_gossip_suspicions_total", "Members this node suspected.",
                       stat(&Stats::suspicions));
  r.AddCounterCallback("exaserve_gossip_refutations_total", "Times this node refuted.",
                       stat(&Stats::refutations));
  r.AddCounterCallback("exaserve_gossip_stale_accusations_answered_total",
                       "Suspicions or deaths of this node at an incarnation it had already "
                       "refuted, answered with its alive state straight to the accuser.",
                       stat(&Stats::stale_accusations_answered));
  r.AddCounterCallback("exaserve_gossip_deaths_total", "Members declared dead.",
                       stat(&Stats::deaths));
  r.AddCounterCallback("exaserve_gossip_bytes_in_total", "Gossip bytes received.",
                       stat(&Stats::bytes_in));
  r.AddCounterCallback("exaserve_gossip_bytes_out_total", "Gossip bytes sent.",
                       stat(&Stats::bytes_out));
  r.AddCounterCallback("exaserve_gossip_bad_packets_total",
                       "Malformed, truncated or oversized packets dropped.",
                       stat(&Stats::bad_packets));
  r.AddCounterCallback("exaserve_gossip_decrypt_failures_total",
                       "Packets no installed key could open, dropped.",
                       [this] { return static_cast<double>(decrypt_failures.load()); });
  r.AddGaugeCallback("exaserve_gossip_health_score",
                     "Lifeguard local health: 0 is healthy, 8 the worst.", [this] {
                       absl::MutexLock lock(&mu);
                       return static_cast<double>(health);
                     });
}

absl::Status GossipAgent::Impl::Bind(uint16_t* port) {
  error_code ec;
  auto ip = asio::ip::make_address(options.bind_address, ec);
  if (ec)
    return absl::InvalidArgumentError(StrCat("gossip bind address \"", options.bind_address, "\""));
  // TCP first: with port 0 the kernel picks one, and UDP then takes the same number.
  tcp::endpoint tcp_endpoint(ip, options.port);
  acceptor.open(tcp_endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(tcp_endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(StrCat("cannot listen on ", options.bind_address, ":",
                                         options.port, " (gossip TCP): ", ec.message()));
  }
  *port = acceptor.local_endpoint().port();
  udp::endpoint udp_endpoint(ip, *port);
  udp_socket.open(udp_endpoint.protocol(), ec);
  if (!ec) udp_socket.bind(udp_endpoint, ec);
  if (ec) {
    return absl::UnavailableError(
        StrCat("cannot bind ", options.bind_address, ":", *port, " (gossip UDP): ", ec.message()));
  }
  return absl::OkStatus();
}

void GossipAgent::Impl::Begin(SwimCore::LocalNode self, std::vector<Address> seeds) {
  absl::Time now = absl::Now();
  core = std::make_unique<SwimCore>(options.core, std::move(self), absl::ToUnixNanos(now), now);
  Receive();
  Accept();
  if (!seeds.empty()) core->Join(now, seeds);
  Flush();
}

void GossipAgent::Impl::Receive() {
  udp_socket.async_receive_from(
      asio::buffer(receive_buffer), receive_from,
      [self = shared_from_this()](error_code ec, size_t n) {
        if (ec == asio::error::operation_aborted || self->closed) return;
        if (!ec) {
          self->Deliver(FormatEndpoint(self->receive_from.address(), self->receive_from.port()),
                        std::string_view(self->receive_buffer.data(), n), Channel::kDatagram);
          self->Flush();
        }
        self->Receive();
      });
}

void GossipAgent::Impl::Deliver(const Address& from, std::string_view sealed, Channel channel) {
  auto plain = keyring->Open(sealed);
  if (!plain.ok()) {
    decrypt_failures++;
    return;
  }
  core->HandlePacket(absl::Now(), from, *plain, channel);
}

void GossipAgent::Impl::Accept() {
  acceptor.async_accept(strand, [self = shared_from_this()](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || self->closed) return;
    if (!ec && self->inbound_tcp < kMaxInboundTcp) {
      self->ReadFrame(std::make_shared<tcp::socket>(std::move(socket)));
    }
    self->Accept();
  });
}

// Reads one frame: length:u32 then a sealed body of sender_len:u16 sender payload.
void GossipAgent::Impl::ReadFrame(std::shared_ptr<tcp::socket> socket) {
  inbound_tcp++;
  auto header = std::make_shared<std::array<unsigned char, 4>>();
  auto deadline = std::make_shared<asio::steady_timer>(strand);
  deadline->expires_after(absl::ToChronoNanoseconds(options.core.push_pull_timeout));
  deadline->async_wait([socket](error_code ec) {
    if (!ec) socket->close(ec);
  });
  auto done = [self = shared_from_this(), deadline] {
    deadline->cancel();
    self->inbound_tcp--;
  };
  asio::async_read(
      *socket, asio::buffer(*header),
      asio::bind_executor(strand, [self = shared_from_this(), socket, header, done](error_code ec,
                                                                                    size_t) {
        size_t length = ec ? 0 : GetU32(header->data());
        size_t limit = self->options.core.max_push_pull_bytes + kSealOverheadBytes + 2 + 256;
        if (ec || length == 0 || length > limit) {
          done();
          return;
        }
        auto body = std::make_shared<std::string>(length, '\0');
        asio::async_read(
            *socket, asio::buffer(*body),
            asio::bind_executor(self->strand, [self, socket, body, done](error_code ec, size_t) {
              done();
              if (ec) return;
              auto plain = self->keyring->Open(*body);
              if (!plain.ok()) {
                self->decrypt_failures++;
                return;
              }
              std::string_view v = *plain;
              if (v.size() < 2) return;
              size_t sender_len = (static_cast<uint8_t>(v[0]) << 8) | static_cast<uint8_t>(v[1]);
              if (v.size() < 2 + sender_len || sender_len > kMaxAddressBytes) return;
              Address sender(v.substr(2, sender_len));
              self->core->HandlePacket(absl::Now(), sender, v.substr(2 + sender_len),
                                       Channel::kReliable);
              self->Flush();
            }));
      }));
}

void GossipAgent::Impl::SendReliable(const Address& to, std::string payload) {
  asio::ip::address ip;
  uint16_t port = 0;
  if (!ParseEndpoint(to, &ip, &port) || outbound_tcp >= kMaxOutboundTcp) {
    unroutable++;
    return;
  }
  const Address& me = core->self().address;
  std::string inner;
  inner.push_back(static_cast<char>(me.size() >> 8));
  inner.push_back(static_cast<char>(me.size() & 0xff));
  inner += me;
  inner += payload;
  std::string sealed = keyring->Seal(inner);
  auto frame = std::make_shared<std::string>(PutU32(static_cast<uint32_t>(sealed.size())) + sealed);
  auto socket = std::make_shared<tcp::socket>(strand);
  auto deadline = std::make_shared<asio::steady_timer>(strand);
  deadline->expires_after(absl::ToChronoNanoseconds(options.core.push_pull_timeout));
  deadline->async_wait([socket](error_code ec) {
    if (!ec) socket->close(ec);
  });
  outbound_tcp++;
  socket->async_connect(tcp::endpoint(ip, port),
                        [self = shared_from_this(), socket, frame, deadline](error_code ec) {
                          if (ec) {
                            deadline->cancel();
                            self->outbound_tcp--;
                            return;
                          }
                          asio::async_write(*socket, asio::buffer(*frame),
                                            [self, socket, frame, deadline](error_code, size_t) {
                                              deadline->cancel();
                                              self->outbound_tcp--;
                                              error_code ignored;
                                              socket->shutdown(tcp::socket::shutdown_both, ignored);
                                            });
                        });
}

void GossipAgent::Impl::Flush() {
  if (closed || !core) return;
  for (OutPacket& p : core->TakePackets()) {
    if (p.channel == Channel::kReliable) {
      SendReliable(p.to, std::move(p.bytes));
      continue;
    }
    asio::ip::address ip;
    uint16_t port = 0;
    if (!ParseEndpoint(p.to, &ip, &port)) {
      unroutable++;
      continue;
    }
    auto sealed = std::make_shared<std::string>(keyring->Seal(p.bytes));
    udp_socket.async_send_to(asio::buffer(*sealed), udp::endpoint(ip, port),
                             [sealed](error_code, size_t) {});
  }
  std::vector<Event> events = core->TakeEvents();
  std::vector<std::function<void(const Event&)>> subs;
  {
    absl::MutexLock lock(&mu);
    snapshot = core->members();
    stats = core->stats();
    health = core->health_score();
    pending_broadcasts = core->PendingBroadcasts();
    subs = subscribers;
  }
  for (MemberState s :
       {MemberState::kAlive, MemberState::kSuspect, MemberState::kDead, MemberState::kLeft}) {
    members_gauge->WithLabels({std::string(MemberStateName(s))})
        .Set(static_cast<double>(core->CountInState(s)));
  }
  for (const Event& e : events) {
    EXA_LOG_INFO("membership", EventTypeName(e.type),
                 {{"node", e.member.id},
                  {"address", e.member.address},
                  {"incarnation", e.member.incarnation}});
    for (auto& cb : subs) cb(e);
  }
  ArmTimer();
}

void GossipAgent::Impl::ArmTimer() {
  absl::Duration wait = std::max(absl::ZeroDuration(), core->NextTick() - absl::Now());
  timer.expires_after(absl::ToChronoNanoseconds(wait));
  timer.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->closed) return;
    self->core->Tick(absl::Now());
    self->Flush();
  });
}

void GossipAgent::Impl::Close() {
  closed = true;
  error_code ignored;
  timer.cancel();
  acceptor.close(ignored);
  udp_socket.close(ignored);
}

GossipAgent::GossipAgent(net::IoRunner& io, GossipAgentOptions options,
                         std::shared_ptr<Keyring> keyring, metrics::Registry& registry)
    : impl_(std::make_shared<Impl>(io, std::move(options), keyring, registry)),
      keyring_(std::move(keyring)) {}

GossipAgent::~GossipAgent() { Stop(); }

absl::Status GossipAgent::Start(SwimCore::LocalNode self) {
  EXA_RETURN_IF_ERROR(impl_->options.core.Validate());
  EXA_RETURN_IF_ERROR(impl_->Bind(&port_));
  self.address = StrCat(impl_->options.advertise_address, ":", port_);
  std::vector<Address> seeds;
  for (const std::string& j : impl_->options.join) {
    // Resolve names once at start; the core only deals in IP:port.
    size_t colon = j.rfind(':');
    boost::asio::io_context resolver_context;
    tcp::resolver resolver(resolver_context);
    error_code ec;
    auto results = resolver.resolve(j.substr(0, colon), j.substr(colon + 1), ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(
          StrCat("--join \"", j, "\": cannot resolve: ", ec.message()));
    }
    auto endpoint = results.begin()->endpoint();
    seeds.push_back(FormatEndpoint(endpoint.address(), endpoint.port()));
  }
  if (!keyring_->enabled()) {
    EXA_LOG_WARN("membership", "gossip is not encrypted: no key configured (--gossip-key-file)");
  }
  asio::post(impl_->strand, [impl = impl_, self, seeds]() mutable {
    impl->Begin(std::move(self), std::move(seeds));
  });
  return absl::OkStatus();
}

void GossipAgent::UpdateMetadata(std::function<void(Metadata*)> change) {
  asio::post(impl_->strand, [impl = impl_, change = std::move(change)] {
    if (!impl->core || impl->closed) return;
    Metadata metadata = impl->core->self().metadata;
    change(&metadata);
    if (absl::Status s = impl->core->UpdateMetadata(absl::Now(), std::move(metadata)); !s.ok()) {
      EXA_LOG_ERROR("membership", "metadata not updated", {{"error", std::string(s.message())}});
      return;
    }
    impl->Flush();
  });
}

void GossipAgent::Leave(absl::Time deadline) {
  asio::post(impl_->strand, [impl = impl_] {
    if (!impl->core || impl->closed) return;
    impl->core->Leave(absl::Now());
    impl->Flush();
  });
  // Alone, there is nobody to tell; otherwise wait for the leave to go out.
  {
    absl::MutexLock lock(&impl_->mu);
    size_t others =
        std::count_if(impl_->snapshot.begin(), impl_->snapshot.end(), [](const Member& m) {
          return m.state == MemberState::kAlive || m.state == MemberState::kSuspect;
        });
    if (others <= 1) return;
  }
  while (absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    absl::MutexLock lock(&impl_->mu);
    if (impl_->pending_broadcasts == 0) break;
  }
}

void GossipAgent::Stop() {
  if (impl_->closed) return;
  std::promise<void> done;
  asio::post(impl_->strand, [impl = impl_, &done] {
    impl->Close();
    done.set_value();
  });
  if (done.get_future().wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    impl_->closed = true;  // the io threads are gone; nothing runs the strand any more
  }
}

std::vector<Member> GossipAgent::Members() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->snapshot;
}

int GossipAgent::HealthScore() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->health;
}

void GossipAgent::Subscribe(std::function<void(const Event&)> callback) {
  absl::MutexLock lock(&impl_->mu);
  impl_->subscribers.push_back(std::move(callback));
}

}  // namespace exa::membership
