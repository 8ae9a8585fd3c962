#include "engine/tokenizer/tokenize_lines.h"

#include <string>
#include <vector>

#include "common/strings.h"
#include "engine/tokenizer/json_fields.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

absl::Status LineError(size_t line_number, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("line ", line_number, ": ", what));
}

// Parses `line` as JSON without throwing; `what` says what was expected, for the message.
absl::StatusOr<jf::Json> ParseLine(const std::string& line, size_t line_number,
                                   std::string_view what) {
  jf::Json value = jf::Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return LineError(line_number, StrCat("not valid JSON; expected ", what));
  }
  return value;
}

absl::Status EncodeLine(const Tokenizer& tokenizer, const std::string& line, size_t line_number,
                        const TokenizeLinesOptions& options, std::ostream& out) {
  auto value = ParseLine(line, line_number, "a JSON string");
  if (!value.ok()) return value.status();
  if (!value->is_string()) {
    return LineError(line_number, StrCat(jf::Show(*value), ": expected a JSON string"));
  }
  const auto ids =
      tokenizer.Encode(value->get_ref<const std::string&>(), options.add_special_tokens);
  out << jf::Json(ids).dump() << '\n';
  return absl::OkStatus();
}

absl::Status DecodeLine(const Tokenizer& tokenizer, const std::string& line, size_t line_number,
                        const TokenizeLinesOptions& options, std::ostream& out) {
  auto value = ParseLine(line, line_number, "a JSON array of token ids");
  if (!value.ok()) return value.status();
  if (!value->is_array()) {
    return LineError(line_number, StrCat(jf::Show(*value), ": expected a JSON array of token ids"));
  }
  std::vector<int32_t> ids;
  ids.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    auto id = jf::IntValue((*value)[i], StrCat("[", i, "]"), 0, tokenizer.vocab_size() - 1);
    if (!id.ok()) return LineError(line_number, ToStd(id.status().message()));
    ids.push_back(static_cast<int32_t>(*id));
  }
  const std::string text = tokenizer.Decode(ids, options.skip_special_tokens);
  out << jf::Json(text).dump(-1, ' ', false, jf::Json::error_handler_t::replace) << '\n';
  return absl::OkStatus();
}

}  // namespace

absl::Status TokenizeLines(const Tokenizer& tokenizer, std::istream& in, std::ostream& out,
                           const TokenizeLinesOptions& options) {
  std::string line;
  for (size_t line_number = 1; std::getline(in, line); ++line_number) {
    if (StripWhitespace(line).empty()) continue;
    absl::Status status = options.decode ? DecodeLine(tokenizer, line, line_number, options, out)
                                         : EncodeLine(tokenizer, line, line_number, options, out);
    if (!status.ok()) return status;
  }
  out.flush();
  return absl::OkStatus();
}

}  // namespace exa::engine
