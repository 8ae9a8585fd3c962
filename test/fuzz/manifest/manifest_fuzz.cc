// libFuzzer entry for the manifest parser (docs/testing.md): any byte string either fails with a
// status or yields a manifest that passes validation and round-trips through its JSON.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/check.h"
#include "weights/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = exa::weights::ParseManifestJson(text);
  if (!m.ok()) return 0;
  EXA_CHECK(exa::weights::ValidateManifest(*m).ok()) << "parsed manifest fails validation";
  auto again = exa::weights::ParseManifestJson(exa::weights::ManifestToJson(*m));
  EXA_CHECK(again.ok() && *again == *m) << "manifest does not round-trip";
  return 0;
}
