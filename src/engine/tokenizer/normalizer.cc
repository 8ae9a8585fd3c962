#include "engine/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/parse_helpers.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(utf8proc_option_t options) : options_(options) {}
  std::string Normalize(std::string text) const override {
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &result, options_);
    // utf8proc only fails on invalid UTF-8 or out of memory; our input is valid, so keep it as is.
    if (n < 0) return text;
    std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
    return out;
  }

 private:
  utf8proc_option_t options_;
};

class Lowercase final : public Normalizer {
 public:
  std::string Normalize(std::string text) const override {
    std::string out;
    out.reserve(text.size());
    utf8::ForEachChar(text, [&](char32_t c, size_t, size_t) {
      // Rust's char::to_lowercase maps U+0130 to two characters; utf8proc has simple mappings.
      if (c == 0x130) {
        out += "i\xCC\x87";
        return;
      }
      utf8::Append(&out, static_cast<char32_t>(utf8proc_tolower(static_cast<int32_t>(c))));
    });
    return out;
  }
};

class StripWhitespace final : public Normalizer {
 public:
  StripWhitespace(bool left, bool right) : left_(left), right_(right) {}
  std::string Normalize(std::string text) const override {
    size_t begin = 0;
    size_t end = text.size();
    bool seen_text = false;
    utf8::ForEachChar(text, [&](char32_t c, size_t offset, size_t length) {
      if (utf8::IsWhitespace(c)) {
        if (!seen_text && left_) begin = offset + length;
      } else {
        seen_text = true;
        end = offset + length;
      }
    });
    if (!seen_text) return left_ || right_ ? std::string() : text;
    if (!right_) end = text.size();
    return text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class StripAccents final : public Normalizer {
 public:
  std::string Normalize(std::string text) const override {
    std::string out;
    utf8::ForEachChar(text, [&](char32_t c, size_t, size_t) {
      const utf8proc_category_t category = utf8proc_category(static_cast<int32_t>(c));
      if (category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_MC ||
          category == UTF8PROC_CATEGORY_ME) {
        return;
      }
      utf8::Append(&out, c);
    });
    return out;
  }
};

class Replace final : public Normalizer {
 public:
  Replace(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  std::string Normalize(std::string text) const override {
    std::string out;
    size_t previous = 0;
    for (const Regex::Match& m : regex_->FindAll(text)) {
      out.append(text, previous, m.begin - previous);
      out += content_;
      previous = m.end;
    }
    out.append(text, previous, std::string::npos);
    return out;
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  std::string Normalize(std::string text) const override {
    std::string out;
    byte_level::AppendEncoded(text, &out);
    return out;
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string Normalize(std::string text) const override {
    for (const auto& step : steps_) text = step->Normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::unique_ptr<Normalizer>> ParseSequence(const jf::Json& node,
                                                          const std::string& path, int depth) {
  const std::string list_path = jf::Child(path, "normalizers");
  const jf::Json* list = jf::Find(node, "normalizers");
  if (list == nullptr) return jf::Missing(list_path);
  EXA_RETURN_IF_ERROR(jf::ExpectArray(*list, list_path));
  std::vector<std::unique_ptr<Normalizer>> steps;
  for (size_t i = 0; i < list->size(); ++i) {
    EXA_ASSIGN_OR_RETURN(auto step,
                         ParseNormalizer((*list)[i], jf::Child(list_path, i), depth + 1));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseReplace(const jf::Json& node,
                                                         const std::string& path) {
  EXA_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex,
                       ParsePattern(node, jf::Child(path, "pattern")));
  EXA_ASSIGN_OR_RETURN(std::string content, jf::String(node, "content", path));
  return std::make_unique<Replace>(std::move(regex), std::move(content));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const jf::Json& node,
                                                            const std::string& path, int depth) {
  EXA_RETURN_IF_ERROR(CheckDepth(depth, path));
  EXA_RETURN_IF_ERROR(jf::ExpectObject(node, path));
  EXA_ASSIGN_OR_RETURN(const std::string type, jf::String(node, "type", path));
  if (type == "NFC")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (type == "NFD")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  if (type == "NFKC")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Strip") {
    EXA_ASSIGN_OR_RETURN(const bool left, jf::Bool(node, "strip_left", path, true));
    EXA_ASSIGN_OR_RETURN(const bool right, jf::Bool(node, "strip_right", path, true));
    return std::make_unique<StripWhitespace>(left, right);
  }
  if (type == "Prepend") {
    EXA_ASSIGN_OR_RETURN(std::string prefix, jf::String(node, "prepend", path));
    return std::make_unique<Prepend>(std::move(prefix));
  }
  if (type == "Replace") return ParseReplace(node, path);
  if (type == "Sequence") return ParseSequence(node, path, depth);
  return jf::Error(jf::Child(path, "type"), type,
                   "unsupported normalizer; supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                   "StripAccents, Replace, Prepend, ByteLevel, Sequence");
}

}  // namespace exa::engine
