// exaserved: the one ExaServe binary that runs on every node (docs/architecture.md#roles).
//
// Exit codes: 0 after a clean drain, 1 when it cannot run (port in use, data dir not writable),
// 2 for bad flags or configuration.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "common/crash_report.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/schema.h"
#include "daemon/daemon.h"
#include "daemon/options.h"
#include "engine/cuda/gpu.h"
#include "node/inference_options.h"

extern char** environ;

namespace {

// A flag and the config key it sets: flags are the last and strongest config source.
struct FlagBinding {
  const char* flag;
  const char* key;
  const char* help;
};

constexpr FlagBinding kFlags[] = {
    {"--role", "node.roles",
     "Comma list of roles: inference, gateway, scheduler, storage, observer; or auto (default: "
     "elected; alone with no --join, every role)"},
    {"--node-id", "node.id", "Stable node id (default: generated once, kept in the data dir)"},
    {"--rack", "node.rack", "Rack this node is in"},
    {"--data-dir", "node.data_dir", "State directory (node id, spec store)"},
    {"--cache-dir", "node.cache_dir", "Model weight cache directory"},
    {"--origin-dir", "weights.origin_dir",
     "Serve this directory as the weights origin (storage role; exaserve-cli model publish)"},
    {"--origin", "weights.origin", "host:port (gRPC) of the weights origin"},
    {"--bind", "network.bind",
     "Address every listener binds (default 127.0.0.1; with --join, 0.0.0.0). Another than "
     "loopback needs --gossip-key-file (or --insecure)"},
    {"--listen", "network.bind", "Same as --bind"},
    {"--advertise", "network.advertise", "Address peers use to reach this node"},
    {"--join", "network.join", "Comma list of host:port of members to join through"},
    {"--gossip-port", "network.gossip_port", "Membership gossip port, UDP and TCP (default 7946)"},
    {"--grpc-port", "network.grpc_port", "gRPC port (default 7070; 0 picks a free one)"},
    {"--http-port", "network.http_port", "HTTP port (default 8080; 0 picks a free one)"},
    {"--https-port", "network.https_port",
     "HTTPS port of the OpenAI API with --http-tls-cert/--http-tls-key (default 8443)"},
    {"--http-tls-cert", "http.tls_cert_file",
     "PEM certificate chain: serve the OpenAI API over HTTPS"},
    {"--http-tls-key", "http.tls_key_file", "PEM private key of --http-tls-cert"},
    {"--gossip-key-file", "gossip.key_file",
     "File of base64 gossip keys, primary first (exaserve-cli gossip keygen)"},
    {"--tls-ca", "tls.ca_file", "PEM cluster CA: with --tls-cert/--tls-key, gRPC is mutual TLS"},
    {"--tls-cert", "tls.cert_file", "PEM certificate of this node (exaserve-cli certs init)"},
    {"--tls-key", "tls.key_file", "PEM private key of --tls-cert"},
    {"--admin-token-file", "admin.token_file",
     "SHA-256 hashes of admin tokens; admin RPCs need one (exaserve-cli certs init writes one)"},
    {"--node-token-file", "scheduler.node_token_file",
     "File with the admin token a scheduler presents to node agents (certs init: admin.token)"},
    {"--api-keys-file", "gateway.api_keys_file",
     "SHA-256 hashes of API keys; the public API needs one (exaserve-cli apikey new)"},
    {"--served-model-name", "inference.served_model_name",
     "The name clients give in \"model\" for the one --model (default: its directory's name)"},
    {"--log-format", "log.format", "json or text"},
    {"--log-level", "log.level", "trace, debug, info, warn, error or off"},
};

// A flag given on the command line: the config key it sets, its value, and its name for errors.
struct SetFlag {
  std::string key, value, source;
};

// The configuration sources, weakest first: the YAML file (when given), the environment, flags.
absl::Status LoadConfig(exa::config::Schema& schema, const std::string& config_path,
                        const std::vector<SetFlag>& flags) {
  if (!config_path.empty()) EXA_RETURN_IF_ERROR(schema.LoadYamlFile(config_path));
  EXA_RETURN_IF_ERROR(schema.LoadEnvironment(environ));
  for (const SetFlag& f : flags) EXA_RETURN_IF_ERROR(schema.Set(f.key, f.value, f.source));
  return absl::OkStatus();
}

// --model, repeatable: the list inference.models takes, comma-separated (so a directory with a
// comma in its name goes in the config file's list instead).
absl::Status AddModelFlags(const std::vector<std::string>& models, std::vector<SetFlag>* flags) {
  if (models.empty()) return absl::OkStatus();
  for (const std::string& m : models) {
    if (m.empty() || m.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(
          exa::StrCat("flag --model \"", m,
                      "\": expected DIR or DIR@VERSION, without a comma (list such a directory "
                      "under inference.models in a --config file)"));
    }
  }
  flags->push_back({"inference.models", absl::StrJoin(models, ","), "flag --model"});
  return absl::OkStatus();
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "exaserved: %s\n", message.c_str());
  return code;
}

// --burn-in: the GEMM and copy tests on every GPU against its class. Prints JSON;
// exit 0 when every device passed, 1 when one failed or there is no GPU to test.
int BurnIn() {
  std::cout << "{\"inventory\": " << exa::engine::cuda::ToJson(exa::engine::cuda::DiscoverGpus())
            << ",\n";
  auto results = exa::engine::cuda::RunBurnIn({});
  if (!results.ok()) {
    std::cout << "\"error\": " << nlohmann::json(std::string(results.status().message())) << "}\n";
    return Fail(1, "burn-in: " + std::string(results.status().message()));
  }
  bool passed = true;
  for (const auto& r : *results) passed = passed && r.passed;
  std::cout << "\"burn_in\": " << exa::engine::cuda::ToJson(*results).dump(2)
            << ",\n\"passed\": " << (passed ? "true" : "false") << "}\n";
  return passed ? 0 : 1;
}

// What the command line said: the flags of their own, then kFlags' values.
struct CommandLine {
  std::string config_path;
  bool print_config = false, secure = false, insecure = false;
  bool burn_in = false, gpu_inventory = false;
  std::vector<std::string> models;
  std::vector<std::string> flag_values = std::vector<std::string>(std::size(kFlags));
  std::vector<CLI::Option*> flag_options;
};

void AddFlags(CLI::App& app, CommandLine* c) {
  app.add_option("--config", c->config_path, "YAML config file (see config/exaserved.yaml)");
  app.add_flag("--print-config", c->print_config,
               "Print the effective configuration as YAML and exit");
  app.add_flag("--secure", c->secure,
               "Refuse to start unless gRPC is mutual TLS, gossip is encrypted and admin RPCs "
               "(and the public API on gateways) need credentials");
  app.add_flag("--insecure", c->insecure,
               "Labs only: listen on an address other hosts can reach without a gossip key and "
               "with admin RPCs open (logged as a warning)");
  app.add_flag("--burn-in", c->burn_in,
               "Run the GPU burn-in (cuBLAS GEMM TFLOP/s, copy bandwidth vs the device class), "
               "print JSON and exit: 0 passed, 1 failed or no GPU");
  app.add_flag("--gpu-inventory", c->gpu_inventory,
               "Print this node's GPU inventory as JSON (empty without a driver) and exit");
  app.add_option("--model", c->models,
                 "Serve this model directory (Hugging Face layout), DIR or DIR@VERSION; repeat "
                 "for more (sets inference.models; default: the bundled model)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  for (size_t i = 0; i < std::size(kFlags); ++i) {
    c->flag_options.push_back(app.add_option(kFlags[i].flag, c->flag_values[i], kFlags[i].help));
  }
}

// The config keys the command line sets, in the order given to the schema.
absl::StatusOr<std::vector<SetFlag>> FlagsSet(const CommandLine& c) {
  std::vector<SetFlag> flags;
  for (size_t i = 0; i < std::size(kFlags); ++i) {
    if (c.flag_options[i]->count() == 0) continue;
    flags.push_back({kFlags[i].key, c.flag_values[i], exa::StrCat("flag ", kFlags[i].flag)});
  }
  EXA_RETURN_IF_ERROR(AddModelFlags(c.models, &flags));
  if (c.secure) flags.push_back({"security.secure", "true", "flag --secure"});
  if (c.insecure) flags.push_back({"security.insecure", "true", "flag --insecure"});
  return flags;
}

}  // namespace

int main(int argc, char** argv) {
  exa::InstallCrashReport(argv[0]);
  exa::TuneMalloc();
  CLI::App app{
      "exaserved: the ExaServe node daemon. Serves LLM inference; every node runs it and takes "
      "roles (inference, gateway, scheduler, storage, observer).\nAlone with no flags it runs "
      "every role on this machine."};
  app.set_version_flag("--version", std::string("exaserved ") + exa::daemon::Version());
  CommandLine c;
  AddFlags(app, &c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(2, std::string(e.what()) + "\nRun with --help for the flags.");
  }

  if (c.gpu_inventory) {
    std::cout << exa::engine::cuda::ToJson(exa::engine::cuda::DiscoverGpus()).dump(2) << "\n";
    return 0;
  }
  if (c.burn_in) return BurnIn();

  exa::daemon::DaemonOptions options;
  exa::config::Schema schema;
  exa::daemon::RegisterConfig(schema, &options);
  absl::StatusOr<std::vector<SetFlag>> flags = FlagsSet(c);
  if (!flags.ok()) return Fail(2, std::string(flags.status().message()));
  if (absl::Status s = LoadConfig(schema, c.config_path, *flags); !s.ok()) {
    return Fail(2, std::string(s.message()));
  }
  if (c.print_config) {
    std::cout << schema.ToYaml();
    return 0;
  }
  exa::LogFormat format;
  exa::LogLevel level;
  (void)exa::ParseLogFormat(options.log.format, &format);  // validated by the schema
  (void)exa::ParseLogLevel(options.log.level, &level);
  exa::InitLogging(format, level);
  exa::daemon::ResolveDefaults(&options);
  if (absl::Status s = exa::daemon::ValidateSecurity(options); !s.ok()) {
    return Fail(2, std::string(s.message()));
  }
  if (absl::Status s = exa::node::ValidateModels(options.inference); !s.ok()) {
    return Fail(2, std::string(s.message()));
  }

  exa::daemon::Daemon daemon(options);
  if (absl::Status s = daemon.Start(); !s.ok()) {
    EXA_LOG_ERROR("daemon", "cannot start", {{"error", std::string(s.message())}});
    return Fail(1, std::string(s.message()));
  }
  return daemon.Run();
}
