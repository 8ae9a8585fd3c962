#include "chat_template/lexer.h"

#include <cstdlib>

#include "chat_template/text.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

// The template text after each preprocessing pass, with the source line of every byte.
struct Source {
  std::string text;
  std::vector<int> lines;
  void Add(const Source& from, size_t i) {
    text.push_back(from.text[i]);
    lines.push_back(from.lines[i]);
  }
  int LineAt(size_t i) const {
    if (lines.empty()) return 1;
    return i < lines.size() ? lines[i] : lines.back();
  }
};

Source Annotated(std::string_view s) {
  Source out;
  int line = 1;
  for (char c : s) {
    out.text.push_back(c);
    out.lines.push_back(line);
    if (c == '\n') ++line;
  }
  return out;
}

bool IsBlockOpen(const std::string& t, size_t j) {
  return j + 1 < t.size() && t[j] == '{' && (t[j + 1] == '#' || t[j + 1] == '%' || t[j + 1] == '-');
}

// lstrip_blocks: /^[ \t]*({[#%-])/gm.
Source LstripBlocks(const Source& in) {
  Source out;
  const std::string& t = in.text;
  for (size_t i = 0; i < t.size(); ++i) {
    if (i == 0 || t[i - 1] == '\n' || t[i - 1] == '\r') {
      size_t j = i;
      while (j < t.size() && (t[j] == ' ' || t[j] == '\t')) ++j;
      if (j > i && IsBlockOpen(t, j)) i = j;
    }
    out.Add(in, i);
  }
  return out;
}

// trim_blocks: /([#%-]})\n/g.
Source TrimBlocks(const Source& in) {
  Source out;
  const std::string& t = in.text;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\n' && i >= 2 && t[i - 1] == '}' &&
        (t[i - 2] == '#' || t[i - 2] == '%' || t[i - 2] == '-')) {
      continue;
    }
    out.Add(in, i);
  }
  return out;
}

size_t SkipSpace(const std::string& t, size_t i) {
  while (i < t.size()) {
    size_t next = i;
    if (!IsJsWhitespace(NextCodePoint(t, &next))) break;
    i = next;
  }
  return i;
}

// The end of a {% generation %} or {% endgeneration %} tag at `i`, or 0; the tags only mark
// what the assistant wrote, for training masks, and render as nothing.
size_t GenerationTagEnd(const std::string& t, size_t i, bool* lstrip, bool* rstrip) {
  if (t.compare(i, 2, "{%") != 0) return 0;
  size_t j = i + 2;
  *lstrip = j < t.size() && t[j] == '-';
  j = SkipSpace(t, j + (*lstrip ? 1 : 0));
  if (t.compare(j, 3, "end") == 0 && t.compare(j + 3, 10, "generation") == 0) j += 3;
  if (t.compare(j, 10, "generation") != 0) return 0;
  j = SkipSpace(t, j + 10);
  *rstrip = j < t.size() && t[j] == '-';
  if (*rstrip) ++j;
  return t.compare(j, 2, "%}") == 0 ? j + 2 : 0;
}

Source DropGenerationTags(const Source& in) {
  Source out;
  const std::string& t = in.text;
  size_t floor = 0;  // output bytes before the last tag are not stripped again
  for (size_t i = 0; i < t.size();) {
    bool lstrip = false, rstrip = false;
    const size_t end = t[i] == '{' ? GenerationTagEnd(t, i, &lstrip, &rstrip) : 0;
    if (end == 0) {
      out.Add(in, i++);
      continue;
    }
    if (lstrip) {
      const std::string_view kept = TrimEnd(std::string_view(out.text).substr(floor));
      out.text.resize(floor + kept.size());
      out.lines.resize(out.text.size());
    }
    i = end;
    if (rstrip) i = SkipSpace(t, i);
    floor = out.text.size();
  }
  return out;
}

Source Preprocess(std::string_view template_text) {
  if (!template_text.empty() && template_text.back() == '\n') template_text.remove_suffix(1);
  return DropGenerationTags(TrimBlocks(LstripBlocks(Annotated(template_text))));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWord(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '_';
}

struct Rule {
  const char* text;
  TokenType type;
};
// Longest first where one spelling starts another, as @huggingface/jinja orders them.
constexpr Rule kRules[] = {
    {"{%", TokenType::kOpenStatement},  {"%}", TokenType::kCloseStatement},
    {"{{", TokenType::kOpenExpression}, {"}}", TokenType::kCloseExpression},
    {"(", TokenType::kOpenParen},       {")", TokenType::kCloseParen},
    {"{", TokenType::kOpenCurly},       {"}", TokenType::kCloseCurly},
    {"[", TokenType::kOpenSquare},      {"]", TokenType::kCloseSquare},
    {",", TokenType::kComma},           {".", TokenType::kDot},
    {":", TokenType::kColon},           {"|", TokenType::kPipe},
    {"<=", TokenType::kComparison},     {">=", TokenType::kComparison},
    {"==", TokenType::kComparison},     {"!=", TokenType::kComparison},
    {"<", TokenType::kComparison},      {">", TokenType::kComparison},
    {"+", TokenType::kAdditive},        {"-", TokenType::kAdditive},
    {"~", TokenType::kAdditive},        {"**", TokenType::kPower},
    {"*", TokenType::kMultiplicative},  {"//", TokenType::kMultiplicative},
    {"/", TokenType::kMultiplicative},  {"%", TokenType::kMultiplicative},
    {"=", TokenType::kEquals},
};

class Lexer {
 public:
  explicit Lexer(Source src) : src_(std::move(src)), t_(src_.text) {}
  absl::StatusOr<std::vector<Token>> Run();

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("line ", src_.LineAt(pos_), ": ", what));
  }
  void Push(TokenType type, std::string value, size_t at) {
    tokens_.push_back({type, std::move(value), src_.LineAt(at)});
  }
  TokenType LastType() const { return tokens_.empty() ? TokenType::kText : tokens_.back().type; }
  bool AfterTag() const {
    return tokens_.empty() || LastType() == TokenType::kCloseStatement ||
           LastType() == TokenType::kCloseExpression || LastType() == TokenType::kComment;
  }
  void StripTrailingWhitespace();
  bool LexText();
  absl::StatusOr<bool> LexTagOpen();
  bool LexTagClose();
  absl::StatusOr<bool> LexSign();
  absl::StatusOr<std::string> LexString(char quote);
  absl::Status LexEscape(std::string* out);
  absl::Status LexOne();

  Source src_;
  const std::string& t_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

void Lexer::StripTrailingWhitespace() {
  if (tokens_.empty() || tokens_.back().type != TokenType::kText) return;
  std::string& value = tokens_.back().value;
  value.resize(TrimEnd(value).size());
  if (value.empty()) tokens_.pop_back();
}

bool Lexer::LexText() {
  size_t end = pos_;
  while (true) {
    end = t_.find('{', end);
    if (end == std::string::npos) {
      end = t_.size();
      break;
    }
    const char next = end + 1 < t_.size() ? t_[end + 1] : '\0';
    if (next == '%' || next == '{' || next == '#') break;
    ++end;
  }
  if (end == pos_) return false;
  Push(TokenType::kText, t_.substr(pos_, end - pos_), pos_);
  pos_ = end;
  return true;
}

// {# comments #}, and {%- / {{- which strip the text before them.
absl::StatusOr<bool> Lexer::LexTagOpen() {
  if (t_[pos_] != '{' || pos_ + 1 >= t_.size()) return false;
  const char next = t_[pos_ + 1];
  if (next == '#') {
    size_t start = pos_ + 2;
    const bool strip_before = start < t_.size() && t_[start] == '-';
    if (strip_before) ++start;
    const size_t end = t_.find("#}", start);
    if (end == std::string::npos) return Error("a {# comment #} is not closed");
    std::string comment = t_.substr(start, end - start);
    const bool strip_after = !comment.empty() && comment.back() == '-';
    if (strip_before) StripTrailingWhitespace();
    Push(TokenType::kComment, comment, pos_);
    pos_ = end + 2;
    if (strip_after) pos_ = SkipSpace(t_, pos_);
    return true;
  }
  if (pos_ + 2 < t_.size() && t_[pos_ + 2] == '-' && (next == '%' || next == '{')) {
    StripTrailingWhitespace();
    Push(next == '%' ? TokenType::kOpenStatement : TokenType::kOpenExpression,
         next == '%' ? "{%" : "{{", pos_);
    if (next == '{') curly_depth_ = 0;
    pos_ += 3;
    return true;
  }
  return false;
}

// -%} and -}}, which strip the text after them.
bool Lexer::LexTagClose() {
  if (t_[pos_] != '-' || pos_ + 2 >= t_.size() || t_[pos_ + 2] != '}') return false;
  const char next = t_[pos_ + 1];
  if (next != '%' && next != '}') return false;
  Push(next == '%' ? TokenType::kCloseStatement : TokenType::kCloseExpression,
       next == '%' ? "%}" : "}}", pos_);
  pos_ = SkipSpace(t_, pos_ + 3);
  return true;
}

// A sign after an operator is unary (or part of a number literal); after an operand it is
// binary and left to the operator rules.
absl::StatusOr<bool> Lexer::LexSign() {
  const char c = t_[pos_];
  if (c != '-' && c != '+') return false;
  if (tokens_.empty() || LastType() == TokenType::kText) {
    return Error(StrCat("unexpected character '", std::string(1, c), "'"));
  }
  switch (LastType()) {
    case TokenType::kIdentifier:
    case TokenType::kNumber:
    case TokenType::kString:
    case TokenType::kCloseParen:
    case TokenType::kCloseSquare:
      return false;
    default:
      break;
  }
  const size_t at = pos_++;
  std::string num;
  while (pos_ < t_.size() && IsDigit(t_[pos_])) num.push_back(t_[pos_++]);
  if (!num.empty() && pos_ + 1 < t_.size() && t_[pos_] == '.' && IsDigit(t_[pos_ + 1])) {
    num.push_back(t_[pos_++]);
    while (pos_ < t_.size() && IsDigit(t_[pos_])) num.push_back(t_[pos_++]);
  }
  Push(num.empty() ? TokenType::kUnary : TokenType::kNumber, std::string(1, c) + num, at);
  return true;
}

absl::Status Lexer::LexEscape(std::string* out) {
  if (pos_ >= t_.size()) return Error("a string literal is not closed");
  const char e = t_[pos_++];
  switch (e) {
    case 'n':
      out->push_back('\n');
      return absl::OkStatus();
    case 't':
      out->push_back('\t');
      return absl::OkStatus();
    case 'r':
      out->push_back('\r');
      return absl::OkStatus();
    case 'b':
      out->push_back('\b');
      return absl::OkStatus();
    case 'f':
      out->push_back('\f');
      return absl::OkStatus();
    case 'v':
      out->push_back('\v');
      return absl::OkStatus();
    case '\'':
    case '"':
    case '\\':
      out->push_back(e);
      return absl::OkStatus();
    case 'x':
    case 'u':
      break;
    default:
      return Error(StrCat("unknown escape \\", std::string(1, e), " in a string literal"));
  }
  const size_t width = e == 'x' ? 2 : 4;
  const std::string hex = t_.substr(pos_, width);
  if (hex.size() != width || hex.find_first_not_of("0123456789abcdefABCDEF") != hex.npos) {
    return Error(StrCat("invalid escape \\", std::string(1, e), hex));
  }
  pos_ += width;
  uint32_t unit = static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
  if (unit >= 0xD800 && unit < 0xDC00 && t_.compare(pos_, 2, "\\u") == 0) {
    const std::string low = t_.substr(pos_ + 2, 4);
    const uint32_t second = static_cast<uint32_t>(std::strtoul(low.c_str(), nullptr, 16));
    if (low.size() == 4 && second >= 0xDC00 && second < 0xE000) {
      unit = 0x10000 + ((unit - 0xD800) << 10) + (second - 0xDC00);
      pos_ += 6;
    }
  }
  AppendUtf8(unit >= 0xD800 && unit < 0xE000 ? 0xFFFD : unit, out);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Lexer::LexString(char quote) {
  std::string out;
  while (true) {
    if (pos_ >= t_.size()) return Error("a string literal is not closed");
    const char c = t_[pos_++];
    if (c == quote) return out;
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    EXA_RETURN_IF_ERROR(LexEscape(&out));
  }
}

absl::Status Lexer::LexOne() {
  const size_t at = pos_;
  for (const Rule& rule : kRules) {
    std::string_view text(rule.text);
    if (text == "}}" && curly_depth_ > 0) continue;
    if (t_.compare(pos_, text.size(), text) != 0) continue;
    Push(rule.type, std::string(text), at);
    if (rule.type == TokenType::kOpenExpression) curly_depth_ = 0;
    if (rule.type == TokenType::kOpenCurly) ++curly_depth_;
    if (rule.type == TokenType::kCloseCurly) --curly_depth_;
    pos_ += text.size();
    return absl::OkStatus();
  }
  const char c = t_[pos_];
  if (c == '\'' || c == '"') {
    ++pos_;
    EXA_ASSIGN_OR_RETURN(std::string s, LexString(c));
    Push(TokenType::kString, std::move(s), at);
  } else if (IsDigit(c)) {
    std::string num;
    while (pos_ < t_.size() && IsDigit(t_[pos_])) num.push_back(t_[pos_++]);
    if (LastType() != TokenType::kDot && pos_ + 1 < t_.size() && t_[pos_] == '.' &&
        IsDigit(t_[pos_ + 1])) {
      num.push_back(t_[pos_++]);
      while (pos_ < t_.size() && IsDigit(t_[pos_])) num.push_back(t_[pos_++]);
    }
    Push(TokenType::kNumber, std::move(num), at);
  } else if (IsWord(c)) {
    std::string word;
    while (pos_ < t_.size() && IsWord(t_[pos_])) word.push_back(t_[pos_++]);
    Push(TokenType::kIdentifier, std::move(word), at);
  } else {
    return Error(StrCat("unexpected character '", std::string(1, c), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ < t_.size()) {
    if (AfterTag() && LexText()) continue;
    EXA_ASSIGN_OR_RETURN(bool opened, LexTagOpen());
    if (opened) continue;
    pos_ = SkipSpace(t_, pos_);
    if (pos_ >= t_.size()) return Error("the template ends inside a tag");
    if (LexTagClose()) continue;
    EXA_ASSIGN_OR_RETURN(bool signed_number, LexSign());
    if (signed_number) continue;
    EXA_RETURN_IF_ERROR(LexOne());
  }
  return std::move(tokens_);
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  return Lexer(Preprocess(source)).Run();
}

}  // namespace exa::chat_template
