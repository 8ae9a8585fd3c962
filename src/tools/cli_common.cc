// exaserve-cli's shared error lines and call context (cli_common.h): no state, safe from any
// thread.
#include "tools/cli_common.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/file_util.h"
#include "common/strings.h"

namespace exa::tools {

namespace {

// "exaserve-cli[ <command>]: <message>" on stderr, in one write.
void PrintError(std::string_view message, std::string_view command) {
  std::fprintf(stderr, "exaserve-cli%s%.*s: %.*s\n", command.empty() ? "" : " ",
               static_cast<int>(command.size()), command.data(), static_cast<int>(message.size()),
               message.data());
}

// Whether `host` (a name or an IP literal) is this machine: loopback, or an address one of its
// interfaces holds.
bool IsLocalHost(std::string_view host) {
  if (host == "localhost" || host.starts_with("127.") || host == "::1") return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* a = list; a != nullptr && !local; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = a->ifa_addr->sa_family;
    const void* raw = nullptr;
    if (family == AF_INET) raw = &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr;
    if (family == AF_INET6) raw = &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr;
    if (raw != nullptr && inet_ntop(family, raw, text, sizeof(text)) != nullptr) {
      local = host == text;
    }
  }
  freeifaddrs(list);
  return local;
}

}  // namespace

std::string LocalAdminToken(std::string_view addr, const std::string& data_dir) {
  std::string_view host = addr.substr(0, addr.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!IsLocalHost(host)) return {};
  std::vector<std::string> dirs;
  if (!data_dir.empty()) {
    dirs.push_back(data_dir);
  } else {
    if (const char* env = std::getenv("EXASERVE_NODE_DATA_DIR"); env && *env) dirs.push_back(env);
    dirs.push_back("/var/lib/exaserve");
    if (const char* home = std::getenv("HOME"); home && *home) {
      dirs.push_back(StrCat(home, "/.local/state/exaserve"));
    }
  }
  for (const std::string& dir : dirs) {
    absl::StatusOr<std::string> text = ReadFile(dir + "/admin.token", 4096);
    if (text.ok() && !StripWhitespace(*text).empty()) return std::string(StripWhitespace(*text));
  }
  return {};
}

int Usage(std::string_view message, std::string_view command) {
  PrintError(message, command);
  return kUsageExitCode;
}

int Failure(std::string_view message, std::string_view command) {
  PrintError(message, command);
  return kFailureExitCode;
}

int RpcFailure(std::string_view addr, const grpc::Status& status) {
  return RpcFailure(addr, status, status.error_message());
}

int RpcFailure(std::string_view addr, const grpc::Status& status, std::string_view message) {
  std::fprintf(stderr, "exaserve-cli: %.*s: %.*s (%d)\n", static_cast<int>(addr.size()),
               addr.data(), static_cast<int>(message.size()), message.data(),
               static_cast<int>(status.error_code()));
  return kFailureExitCode;
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ClusterAccess& cluster) {
  return MakeContext(cluster, cluster.timeout);
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ClusterAccess& cluster,
                                                 absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
  if (!cluster.token.empty()) ctx->AddMetadata("authorization", "Bearer " + cluster.token);
  return ctx;
}

std::string SplitModelVersion(std::string_view flag, std::string* model, std::string* version) {
  const size_t at = model->find_first_of("@:");
  if (at == std::string::npos) return "";
  const std::string name = model->substr(0, at), v = model->substr(at + 1);
  if (name.empty() || v.empty() || v.find_first_of("@:") != std::string::npos) {
    return StrCat(flag, " \"", *model, "\": expected NAME or NAME@VERSION");
  }
  if (!version->empty() && *version != v) {
    return StrCat(flag, " \"", *model, "\" names version ", v, ", --version says ", *version);
  }
  *model = name;
  *version = v;
  return "";
}

bool ParsePairs(const std::string& flag, const std::vector<std::string>& pairs,
                std::map<std::string, std::string>* out) {
  for (const std::string& p : pairs) {
    const size_t eq = p.find('=');
    if (eq == 0 || eq == std::string::npos) {
      Usage(flag + " \"" + p + "\": expected KEY=VALUE", /*command=*/"");
      return false;
    }
    (*out)[p.substr(0, eq)] = p.substr(eq + 1);
  }
  return true;
}

}  // namespace exa::tools
