#include "engine/structured/regex_syntax.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/strings.h"
#include "engine/structured/regex.h"

namespace exa::engine::structured::regex_syntax {
namespace {

constexpr uint32_t kSurrogateLow = 0xD800, kSurrogateHigh = 0xDFFF;
constexpr int kMaxGroupDepth = 64;

}  // namespace

CodeSet Normalize(CodeSet set) {
  CodeSet split;
  for (auto [lo, hi] : set) {  // UTF-8 cannot encode surrogates
    if (lo < kSurrogateLow && hi >= kSurrogateLow) {
      split.emplace_back(lo, kSurrogateLow - 1);
      lo = kSurrogateLow;
    }
    if (lo >= kSurrogateLow && lo <= kSurrogateHigh) lo = kSurrogateHigh + 1;
    if (lo <= hi) split.emplace_back(lo, hi);
  }
  std::sort(split.begin(), split.end());
  CodeSet out;
  for (const auto& r : split) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

namespace {

CodeSet Complement(const CodeSet& set) {
  CodeSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : Normalize(set)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return Normalize(std::move(out));
}

const CodeSet kDigits = {{'0', '9'}};
const CodeSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodeSet kSpace = Normalize({{'\t', '\r'},
                                  {' ', ' '},
                                  {0xA0, 0xA0},
                                  {0x1680, 0x1680},
                                  {0x2000, 0x200A},
                                  {0x2028, 0x2029},
                                  {0x202F, 0x202F},
                                  {0x205F, 0x205F},
                                  {0x3000, 0x3000},
                                  {0xFEFF, 0xFEFF}});
const CodeSet kDot = Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});

// ECMA-262 pattern syntax (the subset regex.h lists) into a tree of Ast nodes.
class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  absl::StatusOr<int32_t> Run() {
    EXA_ASSIGN_OR_RETURN(const int32_t root, Alternation(0));
    if (pos_ < p_.size()) return Error("')' without a matching '('");
    return root;
  }

  std::vector<Ast> nodes;

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("at byte ", pos_, ": ", what));
  }
  bool At(char c) const { return pos_ < p_.size() && p_[pos_] == c; }
  bool AtText(std::string_view s) const { return p_.substr(pos_).starts_with(s); }

  int32_t Add(Ast a) {
    nodes.push_back(std::move(a));
    return static_cast<int32_t>(nodes.size() - 1);
  }
  int32_t AddSet(CodeSet set) {
    Ast a;
    a.kind = Ast::Kind::kSet;
    a.set = Normalize(std::move(set));
    return Add(std::move(a));
  }

  absl::StatusOr<int32_t> Alternation(int depth) {
    Ast alt;
    alt.kind = Ast::Kind::kAlt;
    while (true) {
      EXA_ASSIGN_OR_RETURN(const int32_t branch, Concatenation(depth));
      alt.children.push_back(branch);
      if (!At('|')) break;
      ++pos_;
    }
    if (alt.children.size() == 1) return alt.children[0];
    return Add(std::move(alt));
  }

  absl::StatusOr<int32_t> Concatenation(int depth) {
    Ast cat;
    cat.kind = Ast::Kind::kConcat;
    while (pos_ < p_.size() && !At('|') && !At(')')) {
      if (At('^')) {
        if (depth != 0 || !cat.children.empty()) {
          return Error("'^' is supported only at the start of the pattern or of an alternative");
        }
        ++pos_;
        continue;
      }
      if (At('$')) {
        ++pos_;
        if (depth == 0 && (pos_ == p_.size() || At('|'))) continue;
        return Error("'$' is supported only at the end of the pattern or of an alternative");
      }
      EXA_ASSIGN_OR_RETURN(int32_t atom, Atom(depth));
      EXA_ASSIGN_OR_RETURN(atom, Quantified(atom));
      cat.children.push_back(atom);
    }
    if (cat.children.size() == 1) return cat.children[0];
    return Add(std::move(cat));
  }

  // A quantifier after `atom`, if one follows.
  absl::StatusOr<int32_t> Quantified(int32_t atom) {
    int64_t min = 0, max = -1;
    EXA_ASSIGN_OR_RETURN(const bool quantified, Quantifier(&min, &max));
    if (!quantified) return atom;
    if (At('?')) ++pos_;  // lazy: the same language
    EXA_ASSIGN_OR_RETURN(const bool again, Quantifier(&min, &max));
    if (again) return Error("nothing to repeat (a quantifier after a quantifier)");
    Ast r;
    r.kind = Ast::Kind::kRepeat;
    r.children = {atom};
    r.min = min;
    r.max = max;
    return Add(std::move(r));
  }

  // Reads a quantifier at the cursor into min / max; false (cursor unmoved) when none is here.
  // A '{' that does not open {n}, {n,} or {n,m} is a literal, as ECMA-262's Annex B reads it.
  absl::StatusOr<bool> Quantifier(int64_t* min, int64_t* max) {
    if (pos_ >= p_.size()) return false;
    const char c = p_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      *min = c == '+' ? 1 : 0;
      *max = c == '?' ? 1 : -1;
      return true;
    }
    if (c != '{') return false;
    size_t i = pos_ + 1;
    auto number = [&](int64_t* out) {
      const size_t from = i;
      int64_t v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[i] - '0'), kMaxRegexRepeat + 1);
        ++i;
      }
      *out = v;
      return i > from;
    };
    int64_t lo = 0, hi = 0;
    if (!number(&lo)) return false;
    hi = lo;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(&hi)) hi = -1;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    pos_ = i + 1;
    if (lo > kMaxRegexRepeat || hi > kMaxRegexRepeat) {
      return Error(StrCat("a repeat count above ", kMaxRegexRepeat));
    }
    if (hi != -1 && hi < lo) return Error("{n,m} with m less than n");
    *min = lo;
    *max = hi;
    return true;
  }

  absl::StatusOr<int32_t> Atom(int depth) {
    const char c = p_[pos_];
    if (c == '(') return Group(depth);
    if (c == '[') return Class();
    if (c == '.') {
      ++pos_;
      return AddSet(kDot);
    }
    if (c == '\\') {
      ++pos_;
      EXA_ASSIGN_OR_RETURN(CodeSet set, Escape(/*in_class=*/false));
      return AddSet(std::move(set));
    }
    if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat");
    if (c == '{') {
      const size_t at = pos_;
      int64_t min = 0, max = 0;
      EXA_ASSIGN_OR_RETURN(const bool quantifier, Quantifier(&min, &max));
      if (quantifier) {
        pos_ = at;
        return Error("nothing to repeat");
      }
    }
    EXA_ASSIGN_OR_RETURN(const uint32_t cp, Char());
    return AddSet({{cp, cp}});
  }

  absl::StatusOr<int32_t> Group(int depth) {
    if (depth + 1 > kMaxGroupDepth) {
      return Error(StrCat("groups nested deeper than ", kMaxGroupDepth));
    }
    ++pos_;
    if (AtText("?:")) {
      pos_ += 2;
    } else if (AtText("?<") && !AtText("?<=") && !AtText("?<!")) {
      const size_t close = p_.find('>', pos_);
      if (close == std::string_view::npos) return Error("a group name without '>'");
      pos_ = close + 1;
    } else if (At('?')) {
      return Error("lookahead and lookbehind ((?=, (?!, (?<=, (?<!) are not supported");
    }
    EXA_ASSIGN_OR_RETURN(const int32_t inner, Alternation(depth + 1));
    if (!At(')')) return Error("'(' without a matching ')'");
    ++pos_;
    return inner;
  }

  absl::StatusOr<int32_t> Class() {
    ++pos_;
    const bool negate = At('^');
    if (negate) ++pos_;
    CodeSet set;
    while (true) {
      if (pos_ >= p_.size()) return Error("'[' without a matching ']'");
      if (At(']')) break;
      bool single = false;
      EXA_ASSIGN_OR_RETURN(CodeSet lo, ClassAtom(&single));
      if (single && At('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        bool single_hi = false;
        EXA_ASSIGN_OR_RETURN(CodeSet hi, ClassAtom(&single_hi));
        if (!single_hi) return Error("a range in a class ends with a class escape");
        if (hi[0].first < lo[0].first) return Error("a range in a class out of order");
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    ++pos_;
    return AddSet(negate ? Complement(set) : std::move(set));
  }

  absl::StatusOr<CodeSet> ClassAtom(bool* single) {
    if (At('\\')) {
      ++pos_;
      const char e = pos_ < p_.size() ? p_[pos_] : '\0';
      *single = std::string_view("dDwWsS").find(e) == std::string_view::npos;
      return Escape(/*in_class=*/true);
    }
    *single = true;
    EXA_ASSIGN_OR_RETURN(const uint32_t cp, Char());
    return CodeSet{{cp, cp}};
  }

  // \d \D \w \W \s \S and the control escapes \t \n \r \f \v; nullopt for any other letter.
  static std::optional<CodeSet> ShorthandEscape(char c) {
    switch (c) {
      case 'd':
        return kDigits;
      case 'D':
        return Complement(kDigits);
      case 'w':
        return kWord;
      case 'W':
        return Complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return Complement(kSpace);
      case 't':
        return CodeSet{{'\t', '\t'}};
      case 'n':
        return CodeSet{{'\n', '\n'}};
      case 'r':
        return CodeSet{{'\r', '\r'}};
      case 'f':
        return CodeSet{{'\f', '\f'}};
      case 'v':
        return CodeSet{{'\v', '\v'}};
      default:
        return std::nullopt;
    }
  }

  // After a backslash.
  absl::StatusOr<CodeSet> Escape(bool in_class) {
    if (pos_ >= p_.size()) return Error("the pattern ends with a backslash");
    const char c = p_[pos_++];
    auto one = [](uint32_t cp) { return CodeSet{{cp, cp}}; };
    if (std::optional<CodeSet> set = ShorthandEscape(c)) return *set;
    switch (c) {
      case '0':
        if (At('0') || (pos_ < p_.size() && p_[pos_] >= '1' && p_[pos_] <= '9')) {
          return Error("octal escapes are not supported");
        }
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        return Error("word boundaries (\\b, \\B) are not supported");
      case 'B':
        return Error("word boundaries (\\b, \\B) are not supported");
      case 'k':
        return Error("backreferences are not supported");
      case 'p':
      case 'P':
        return Error("Unicode property classes (\\p{...}) are not supported");
      case 'c': {
        const char l = pos_ < p_.size() ? p_[pos_] : '\0';
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) {
          return Error("\\c takes a letter");
        }
        ++pos_;
        return one(static_cast<uint32_t>(l) % 32);
      }
      case 'x': {
        EXA_ASSIGN_OR_RETURN(const uint32_t cp, Hex(2));
        return one(cp);
      }
      case 'u': {
        EXA_ASSIGN_OR_RETURN(const uint32_t cp, UnicodeEscape());
        return one(cp);
      }
      default:
        break;
    }
    if (c >= '1' && c <= '9') return Error("backreferences are not supported");
    const auto u = static_cast<unsigned char>(c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      return Error(StrCat("\\", std::string(1, c), " is not a known escape"));
    }
    if (u >= 0x80) {  // an escaped non-ASCII character is itself
      --pos_;
      EXA_ASSIGN_OR_RETURN(const uint32_t cp, Char());
      return one(cp);
    }
    return one(u);
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (pos_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[pos_]))) {
        return Error(StrCat("an escape needs ", digits, " hex digits"));
      }
      const char h = p_[pos_];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  absl::StatusOr<uint32_t> UnicodeEscape() {
    if (At('{')) {
      const size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos || close == pos_ + 1 || close > pos_ + 7) {
        return Error("\\u{...} takes 1 to 6 hex digits");
      }
      ++pos_;
      EXA_ASSIGN_OR_RETURN(const uint32_t v, Hex(static_cast<int>(close - pos_)));
      ++pos_;
      if (v > kMaxCodePoint || (v >= kSurrogateLow && v <= kSurrogateHigh)) {
        return Error("\\u{...} names no Unicode scalar value");
      }
      return v;
    }
    EXA_ASSIGN_OR_RETURN(const uint32_t hi, Hex(4));
    if (hi < kSurrogateLow || hi > kSurrogateHigh) return hi;
    if (hi < 0xDC00 && AtText("\\u")) {
      pos_ += 2;
      EXA_ASSIGN_OR_RETURN(const uint32_t lo, Hex(4));
      if (lo >= 0xDC00 && lo <= kSurrogateHigh) {
        return 0x10000 + ((hi - kSurrogateLow) << 10) + (lo - 0xDC00);
      }
    }
    return Error("a lone surrogate (\\uD800 to \\uDFFF) matches no UTF-8 text");
  }

  // One UTF-8 character of the pattern itself.
  absl::StatusOr<uint32_t> Char() {
    const auto b = static_cast<unsigned char>(p_[pos_]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > p_.size()) {
      return Error("the pattern is not valid UTF-8");
    }
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto cb = static_cast<unsigned char>(p_[pos_ + static_cast<size_t>(i)]);
      if ((cb & 0xC0) != 0x80) return Error("the pattern is not valid UTF-8");
      cp = (cp << 6) | (cb & 0x3F);
    }
    if (cp > kMaxCodePoint || (cp >= kSurrogateLow && cp <= kSurrogateHigh)) {
      return Error("the pattern is not valid UTF-8");
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  std::string_view p_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<ParsedRegex> ParseRegex(std::string_view pattern) {
  Parser parser(pattern);
  EXA_ASSIGN_OR_RETURN(const int32_t root, parser.Run());
  return ParsedRegex{std::move(parser.nodes), root};
}

void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>* out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (const uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      Utf8Sequences(lo, end, out);
      Utf8Sequences(end + 1, hi, out);
      return;
    }
  }
  auto encode = [](uint32_t cp, uint8_t* bytes) {
    if (cp < 0x80) {
      bytes[0] = static_cast<uint8_t>(cp);
      return 1;
    }
    const int n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (int i = n - 1; i > 0; --i, cp >>= 6) bytes[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    bytes[0] = static_cast<uint8_t>((0xF00 >> n) | cp);
    return n;
  };
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  // Split until the range is a product of byte ranges: the continuation bytes below the first
  // differing one must run over all of 0x80..0xBF.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      Utf8Sequences(lo, lo | m, out);
      Utf8Sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      Utf8Sequences(lo, (hi & ~m) - 1, out);
      Utf8Sequences(hi & ~m, hi, out);
      return;
    }
  }
  encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

}  // namespace exa::engine::structured::regex_syntax
