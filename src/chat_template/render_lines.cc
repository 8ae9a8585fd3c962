#include "chat_template/render_lines.h"

#include <string>

namespace exa::chat_template {

size_t RenderLines(const ChatTemplate& chat_template, std::istream& in, std::ostream& out,
                   const RenderLimits& limits) {
  using json = nlohmann::ordered_json;
  size_t errors = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
    absl::StatusOr<std::string> rendered =
        request.is_discarded() ? absl::InvalidArgumentError("the line is not valid JSON")
                               : chat_template.Render(request, limits);
    if (rendered.ok()) {
      out << json(*rendered).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    } else {
      ++errors;
      out << json({{"error", std::string(rendered.status().message())}})
                 .dump(-1, ' ', false, json::error_handler_t::replace)
          << '\n';
    }
  }
  return errors;
}

}  // namespace exa::chat_template
