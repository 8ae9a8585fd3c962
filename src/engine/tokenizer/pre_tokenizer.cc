#include "engine/tokenizer/pre_tokenizer.h"

#include <utf8proc.h>

#include <functional>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/parse_helpers.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

// Hugging Face's SplitDelimiterBehavior: what happens to the matched delimiters.
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// Covers `size` bytes with the matches and the gaps between them (Pattern::find_matches).
std::vector<Span> SpansFromMatches(const std::vector<Regex::Match>& matches, size_t size,
                                   bool invert) {
  std::vector<Span> spans;
  if (size == 0) return {{0, 0, false}};
  size_t previous = 0;
  for (const Regex::Match& m : matches) {
    if (previous != m.begin) spans.push_back({previous, m.begin, invert});
    spans.push_back({m.begin, m.end, !invert});
    previous = m.end;
  }
  if (previous != size) spans.push_back({previous, size, invert});
  return spans;
}

// Each character for which `is_delimiter` holds is a match of its own.
std::vector<Span> SpansFromChars(std::string_view text,
                                 const std::function<bool(char32_t)>& is_delimiter) {
  std::vector<Regex::Match> matches;
  utf8::ForEachChar(text, [&](char32_t c, size_t offset, size_t length) {
    if (is_delimiter(c)) matches.push_back({offset, offset + length});
  });
  return SpansFromMatches(matches, text.size(), false);
}

// Port of NormalizedString::split: folds the spans according to `behavior` into the byte
// ranges of the parts to keep.
std::vector<Span> ApplyBehavior(const std::vector<Span>& spans, Behavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Span& s : spans) out.push_back({s.begin, s.end, false});
      return out;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.push_back(s);
      }
      return out;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      return out;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      return out;
    case Behavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().begin = s.begin;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

void AppendParts(const Piece& piece, const std::vector<Span>& parts, std::vector<Piece>* out) {
  for (const Span& part : parts) {
    if (part.end <= part.begin) continue;
    out->push_back(
        {piece.text.substr(part.begin, part.end - part.begin), piece.at_start && part.begin == 0});
  }
}

// Replaces every piece by fn(piece)'s parts.
template <typename Fn>
void SplitEach(std::vector<Piece>* pieces, Fn&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (const Piece& piece : *pieces) fn(piece, &out);
  *pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitEach(pieces, [&](const Piece& piece, std::vector<Piece>* out) {
      const auto spans = SpansFromMatches(regex_->FindAll(piece.text), piece.text.size(), invert_);
      AppendParts(piece, ApplyBehavior(spans, behavior_), out);
    });
  }

 private:
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's split, used by the ByteLevel pre-tokenizer when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitEach(pieces, [&](const Piece& original, std::vector<Piece>* out) {
      Piece piece = original;
      if (add_prefix_space_ && !piece.text.starts_with(' ')) piece.text.insert(0, " ");
      const size_t first = out->size();
      if (regex_ == nullptr) {
        if (!piece.text.empty()) out->push_back(piece);
      } else {
        const auto spans = SpansFromMatches(regex_->FindAll(piece.text), piece.text.size(), false);
        AppendParts(piece, ApplyBehavior(spans, Behavior::kIsolated), out);
      }
      for (size_t i = first; i < out->size(); ++i) {
        std::string mapped;
        byte_level::AppendEncoded((*out)[i].text, &mapped);
        (*out)[i].text = std::move(mapped);
      }
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // Null when use_regex is false.
};

enum class PrependScheme { kAlways, kFirst, kNever };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    utf8::Append(&replacement_utf8_, replacement);
  }
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitEach(pieces, [&](const Piece& original, std::vector<Piece>* out) {
      Piece piece{ReplaceSpaces(original.text), original.at_start};
      const bool starts_with_replacement = piece.text.starts_with(replacement_utf8_);
      if (!starts_with_replacement && (scheme_ == PrependScheme::kAlways ||
                                       (scheme_ == PrependScheme::kFirst && piece.at_start))) {
        piece.text.insert(0, replacement_utf8_);
      }
      if (!split_) {
        if (!piece.text.empty()) out->push_back(std::move(piece));
        return;
      }
      const auto spans = SpansFromChars(piece.text, [&](char32_t c) { return c == replacement_; });
      AppendParts(piece, ApplyBehavior(spans, Behavior::kMergedWithNext), out);
    });
  }

 private:
  std::string ReplaceSpaces(const std::string& text) const {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
      if (c == ' ') {
        out += replacement_utf8_;
      } else {
        out.push_back(c);
      }
    }
    return out;
  }

  char32_t replacement_;
  std::string replacement_utf8_;
  PrependScheme scheme_;
  bool split_;
};

class CharSplit final : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> is_delimiter, Behavior behavior)
      : is_delimiter_(std::move(is_delimiter)), behavior_(behavior) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitEach(pieces, [&](const Piece& piece, std::vector<Piece>* out) {
      AppendParts(piece, ApplyBehavior(SpansFromChars(piece.text, is_delimiter_), behavior_), out);
    });
  }

 private:
  std::function<bool(char32_t)> is_delimiter_;
  Behavior behavior_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

bool IsNumeric(char32_t c) {
  const utf8proc_category_t category = utf8proc_category(static_cast<int32_t>(c));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}

absl::StatusOr<Behavior> ParseBehavior(const jf::Json& node, const std::string& path) {
  EXA_ASSIGN_OR_RETURN(const std::string name, jf::String(node, "behavior", path));
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return jf::Error(jf::Child(path, "behavior"), name,
                   "expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSplit(const jf::Json& node,
                                                         const std::string& path) {
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex,
                       ParsePattern(node, jf::Child(path, "pattern")));
  EXA_ASSIGN_OR_RETURN(const Behavior behavior, ParseBehavior(node, path));
  EXA_ASSIGN_OR_RETURN(const bool invert, jf::Bool(node, "invert", path, false));
  return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseByteLevel(const jf::Json& node,
                                                             const std::string& path) {
  EXA_ASSIGN_OR_RETURN(const bool add_prefix_space, jf::Bool(node, "add_prefix_space", path, true));
  EXA_ASSIGN_OR_RETURN(const bool use_regex, jf::Bool(node, "use_regex", path, true));
  std::unique_ptr<Regex> regex;
  if (use_regex) {
    EXA_ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern));
  }
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
}

absl::StatusOr<PrependScheme> ParsePrependScheme(const jf::Json& node, const std::string& path) {
  EXA_ASSIGN_OR_RETURN(const auto scheme_name, jf::OptionalString(node, "prepend_scheme", path));
  PrependScheme scheme = PrependScheme::kAlways;  // Hugging Face's default.
  if (scheme_name.has_value()) {
    if (*scheme_name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (*scheme_name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (*scheme_name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return jf::Error(jf::Child(path, "prepend_scheme"), *scheme_name,
                       "expected always, first or never");
    }
  }
  // Files written before prepend_scheme existed say add_prefix_space instead.
  const jf::Json* legacy = jf::Find(node, "add_prefix_space");
  if (legacy != nullptr && legacy->is_boolean() && !legacy->get<bool>()) {
    if (scheme != PrependScheme::kNever && scheme_name.has_value()) {
      return jf::Error(jf::Child(path, "add_prefix_space"), *legacy, "contradicts prepend_scheme");
    }
    scheme = PrependScheme::kNever;
  }
  return scheme;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseMetaspace(const jf::Json& node,
                                                             const std::string& path) {
  EXA_ASSIGN_OR_RETURN(const char32_t replacement, jf::Char(node, "replacement", path));
  EXA_ASSIGN_OR_RETURN(const PrependScheme scheme, ParsePrependScheme(node, path));
  EXA_ASSIGN_OR_RETURN(const bool split, jf::Bool(node, "split", path, true));
  return std::make_unique<Metaspace>(replacement, scheme, split);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseSequence(const jf::Json& node,
                                                            const std::string& path, int depth) {
  const std::string list_path = jf::Child(path, "pretokenizers");
  const jf::Json* list = jf::Find(node, "pretokenizers");
  if (list == nullptr) return jf::Missing(list_path);
  EXA_RETURN_IF_ERROR(jf::ExpectArray(*list, list_path));
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (size_t i = 0; i < list->size(); ++i) {
    EXA_ASSIGN_OR_RETURN(auto step,
                         ParsePreTokenizer((*list)[i], jf::Child(list_path, i), depth + 1));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequencePreTokenizer>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseWhitespace() {
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(R"(\w+|[^\w\s]+)"));
  return std::make_unique<SplitPreTokenizer>(std::move(regex), Behavior::kRemoved,
                                             /*invert=*/true);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const jf::Json& node,
                                                                const std::string& path,
                                                                int depth) {
  EXA_RETURN_IF_ERROR(CheckDepth(depth, path));
  EXA_RETURN_IF_ERROR(jf::ExpectObject(node, path));
  EXA_ASSIGN_OR_RETURN(const std::string type, jf::String(node, "type", path));
  if (type == "Split") return ParseSplit(node, path);
  if (type == "ByteLevel") return ParseByteLevel(node, path);
  if (type == "Metaspace") return ParseMetaspace(node, path);
  if (type == "Sequence") return ParseSequence(node, path, depth);
  if (type == "Whitespace") return ParseWhitespace();
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplit>(utf8::IsWhitespace, Behavior::kRemoved);
  }
  if (type == "Digits") {
    EXA_ASSIGN_OR_RETURN(const bool individual, jf::Bool(node, "individual_digits", path, false));
    return std::make_unique<CharSplit>(IsNumeric,
                                       individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  return jf::Error(jf::Child(path, "type"), type,
                   "unsupported pre-tokenizer; supported: Split, ByteLevel, Metaspace, Digits, "
                   "Whitespace, WhitespaceSplit, Sequence");
}

}  // namespace exa::engine
