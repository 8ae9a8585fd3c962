// Finding the bundled model (bundled_model.h): reads the file system only, safe from any thread.
#include "node/bundled_model.h"

#include <filesystem>
#include <vector>

namespace exa::node {

std::string FindBundledModel() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> candidates;
  if (!ec) {
    auto bin = exe.parent_path();
    candidates.push_back(bin / "../share/exaserve/models" / kBundledModelName);  // installed
    candidates.push_back(bin / "../../models" / kBundledModelName);              // build/bin
  }
  candidates.push_back(std::filesystem::current_path(ec) / "models" / kBundledModelName);
  for (const auto& c : candidates) {
    if (std::filesystem::exists(c / "config.json", ec)) {
      return std::filesystem::weakly_canonical(c, ec).string();
    }
  }
  return "";
}

}  // namespace exa::node
