#include "engine/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>

#include "common/strings.h"

namespace exa::engine {
namespace {

// Oniguruma's Unicode `\s` is White_Space (= \t-\r, U+0085 and the Z categories); PCRE2's also
// takes U+180E. Its `\w` is Letter, Mark, Decimal_Number and Connector_Punctuation; PCRE2 10.42
// takes Letter, any Number and '_'.
constexpr std::string_view kSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";
constexpr std::string_view kWordClassBody = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";

// Pattern text never needs more than this; it bounds the work of a hostile tokenizer.json.
constexpr size_t kMaxPatternBytes = size_t{64} * 1024;
// Backtracking budget of one match attempt. Real tokenizer patterns backtrack over at most one
// whitespace run (`\s*[\r\n]+` on a million spaces), so the budget grows with the text: PCRE2's
// default of 10 million plus 64 steps per byte. It still stops a catastrophic pattern from
// running for hours.
uint32_t MatchLimit(size_t text_bytes) {
  const uint64_t limit = 10'000'000 + 64 * static_cast<uint64_t>(text_bytes);
  return static_cast<uint32_t>(std::min<uint64_t>(limit, UINT32_MAX));
}

std::string PcreErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return std::string(reinterpret_cast<const char*>(buffer));
}

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const bool in_class = class_depth > 0;
      if (e == 's' || e == 'w') {
        const std::string_view body = e == 's' ? kSpaceClassBody : kWordClassBody;
        out += in_class ? std::string(body) : StrCat("[", body, "]");
      } else if ((e == 'S' || e == 'W') && !in_class) {
        out += StrCat("[^", e == 'S' ? kSpaceClassBody : kWordClassBody, "]");
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (c == '[') {
      if (class_depth > 0 && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        const size_t close = pattern.find(":]", i + 2);
        if (close != std::string_view::npos) {
          out.append(pattern.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(
        StrCat("regex of ", pattern.size(), " bytes; at most ", kMaxPatternBytes, " allowed"));
  }
  const std::string translated = TranslateOnigurumaPattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(StrCat("regex \"", pattern,
                                             "\": ", PcreErrorMessage(error_code), " (at offset ",
                                             error_offset, " of the translated pattern)"));
  }
  // JIT is an optimisation only: where it is unavailable the interpreter runs the same pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(code));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  std::string quoted;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) {
      quoted.push_back('\\');
    }
    quoted.push_back(c);
  }
  return Compile(quoted);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<Regex::Match> Regex::FindAll(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::vector<Match> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(context, MatchLimit(text.size()));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool have_previous = false;
  size_t previous_end = 0;
  while (search_from <= text.size()) {
    const int rc =
        pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data, context);
    if (rc < 0) break;  // No match, or the engine gave up (match limit): keep what we have.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin == end && have_previous && previous_end == end) {
      // Oniguruma's find_iter: step one character past an empty match at the last end.
      size_t step = 1;
      while (search_from + step < text.size() &&
             (static_cast<uint8_t>(text[search_from + step]) & 0xC0) == 0x80) {
        ++step;
      }
      search_from += step;
      continue;
    }
    matches.push_back({begin, end});
    search_from = end;
    have_previous = true;
    previous_end = end;
  }
  pcre2_match_context_free(context);
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace exa::engine
