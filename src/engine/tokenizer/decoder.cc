#include "engine/tokenizer/decoder.h"

#include "common/status.h"
#include "common/strings.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/parse_helpers.h"
#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"

namespace exa::engine {
namespace {

namespace jf = json_fields;

class ByteLevelDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    std::string bytes;
    for (const std::string& token : *tokens) AppendTokenBytes(token, &bytes);
    tokens->assign(1, invalid == InvalidUtf8::kKeep ? bytes : utf8::Lossy(bytes));
  }

 private:
  // A token made only of byte-level characters gives its bytes; any other token (an added
  // token such as <|im_end|> with characters outside the map) gives its own UTF-8.
  static void AppendTokenBytes(const std::string& token, std::string* bytes) {
    const size_t start = bytes->size();
    bool all_mapped = true;
    utf8::ForEachChar(token, [&](char32_t c, size_t, size_t) {
      if (!all_mapped) return;
      const auto b = byte_level::ByteForChar(c);
      if (b) {
        bytes->push_back(static_cast<char>(*b));
      } else {
        all_mapped = false;
      }
    });
    if (!all_mapped) {
      bytes->resize(start);
      bytes->append(token);
    }
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepends)
      : replacement_(replacement), prepends_(prepends) {}
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string out;
      utf8::ForEachChar((*tokens)[i], [&](char32_t c, size_t, size_t) {
        // Hugging Face drops every replacement char of the first token, not just a leading one.
        if (c != replacement_) {
          utf8::Append(&out, c);
        } else if (i != 0 || !prepends_) {
          out.push_back(' ');
        }
      });
      (*tokens)[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool prepends_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    for (std::string& token : *tokens) {
      std::string out;
      size_t previous = 0;
      for (const Regex::Match& m : regex_->FindAll(token)) {
        out.append(token, previous, m.begin - previous);
        out += content_;
        previous = m.end;
      }
      out.append(token, previous, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// "<0xAB>" -> 0xAB, parsed like Rust's u8::from_str_radix on the two characters after "0x".
std::optional<uint8_t> ByteToken(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const char hi = token[3];
  const int lo = digit(token[4]);
  if (lo < 0) return std::nullopt;
  if (hi == '+') return static_cast<uint8_t>(lo);
  const int high = digit(hi);
  if (high < 0) return std::nullopt;
  return static_cast<uint8_t>(high * 16 + lo);
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (invalid == InvalidUtf8::kKeep || utf8::IsValid(pending)) {
        out.push_back(pending);
      } else {
        // One replacement character per byte, as Hugging Face does.
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(utf8::kReplacementUtf8);
      }
      pending.clear();
    };
    for (std::string& token : *tokens) {
      if (const auto byte = ByteToken(token)) {
        pending.push_back(static_cast<char>(*byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    std::string all;
    for (const std::string& token : *tokens) all += token;
    tokens->clear();
    tokens->push_back(std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    for (std::string& token : *tokens) {
      std::vector<char32_t> chars;
      utf8::ForEachChar(token, [&](char32_t c, size_t, size_t) { chars.push_back(c); });
      size_t begin = 0;
      while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
      size_t end = chars.size();
      for (size_t i = 0; i < stop_ && end > begin && chars[end - 1] == content_; ++i) --end;
      std::string out;
      for (size_t i = begin; i < end; ++i) utf8::Append(&out, chars[i]);
      token = std::move(out);
    }
  }

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens, InvalidUtf8 invalid) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens, invalid);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

absl::StatusOr<std::unique_ptr<Decoder>> ParseSequence(const jf::Json& node,
                                                       const std::string& path, int depth) {
  const std::string list_path = jf::Child(path, "decoders");
  const jf::Json* list = jf::Find(node, "decoders");
  if (list == nullptr) return jf::Missing(list_path);
  EXA_RETURN_IF_ERROR(jf::ExpectArray(*list, list_path));
  std::vector<std::unique_ptr<Decoder>> steps;
  for (size_t i = 0; i < list->size(); ++i) {
    EXA_ASSIGN_OR_RETURN(auto step, ParseDecoder((*list)[i], jf::Child(list_path, i), depth + 1));
    steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseMetaspace(const jf::Json& node,
                                                        const std::string& path) {
  EXA_ASSIGN_OR_RETURN(const char32_t replacement, jf::Char(node, "replacement", path));
  EXA_ASSIGN_OR_RETURN(const auto scheme, jf::OptionalString(node, "prepend_scheme", path));
  bool prepends = scheme.value_or("always") != "never";
  const jf::Json* legacy = jf::Find(node, "add_prefix_space");
  if (legacy != nullptr && legacy->is_boolean() && !legacy->get<bool>()) prepends = false;
  return std::make_unique<MetaspaceDecoder>(replacement, prepends);
}

absl::StatusOr<std::unique_ptr<Decoder>> ParseStrip(const jf::Json& node, const std::string& path) {
  EXA_ASSIGN_OR_RETURN(const char32_t content, jf::Char(node, "content", path));
  // Counts of characters; anything beyond a token's length behaves the same.
  EXA_ASSIGN_OR_RETURN(const int64_t start, jf::Int(node, "start", path, 0, 1 << 20));
  EXA_ASSIGN_OR_RETURN(const int64_t stop, jf::Int(node, "stop", path, 0, 1 << 20));
  return std::make_unique<StripDecoder>(content, start, stop);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const jf::Json& node, const std::string& path,
                                                      int depth) {
  EXA_RETURN_IF_ERROR(CheckDepth(depth, path));
  EXA_RETURN_IF_ERROR(jf::ExpectObject(node, path));
  EXA_ASSIGN_OR_RETURN(const std::string type, jf::String(node, "type", path));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Metaspace") return ParseMetaspace(node, path);
  if (type == "Strip") return ParseStrip(node, path);
  if (type == "Sequence") return ParseSequence(node, path, depth);
  if (type == "Replace") {
    EXA_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex,
                         ParsePattern(node, jf::Child(path, "pattern")));
    EXA_ASSIGN_OR_RETURN(std::string content, jf::String(node, "content", path));
    return std::make_unique<ReplaceDecoder>(std::move(regex), std::move(content));
  }
  return jf::Error(jf::Child(path, "type"), type,
                   "unsupported decoder; supported: ByteLevel, Metaspace, Replace, ByteFallback, "
                   "Fuse, Strip, Sequence");
}

}  // namespace exa::engine
