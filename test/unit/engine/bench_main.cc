// Development driver for RunEngineBench until `exaserve-bench engine` wires it:
//   engine_bench_main MODEL_DIR [--accuracy] [--threads N] [--batches 1,8,32] [--decode N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/bench/engine_bench.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--accuracy] [--threads N] [--batches 1,8,32] [--decode N] "
                 "[--prefill N]\n",
                 argv[0]);
    return 2;
  }
  exa::engine::EngineBenchOptions o;
  o.model_dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--accuracy") o.accuracy = true;
    if (a == "--threads" && i + 1 < argc) o.threads = std::atoi(argv[++i]);
    if (a == "--decode" && i + 1 < argc) o.decode_tokens = std::atoi(argv[++i]);
    if (a == "--prefill" && i + 1 < argc) o.prefill_tokens = std::atoi(argv[++i]);
    if (a == "--batches" && i + 1 < argc) {
      o.batch_sizes.clear();
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ","))
        o.batch_sizes.push_back(std::atoi(t));
    }
  }
  auto r = exa::engine::RunEngineBench(o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", r->dump(2).c_str());
  return 0;
}
