#include "engine/structured/regex.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <deque>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::engine::structured {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLow = 0xD800, kSurrogateHigh = 0xDFFF;
constexpr int kMaxGroupDepth = 64;
// NFA states visited while building the automaton: bounds the work a pattern can ask for.
constexpr int64_t kMaxRegexWork = 4'000'000;

// Code points as sorted, disjoint, non-adjacent ranges, surrogates never included.
using CodeSet = std::vector<std::pair<uint32_t, uint32_t>>;

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

struct Ast {
  enum class Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  CodeSet set;
  std::vector<int32_t> children;
  int64_t min = 0;
  int64_t max = -1;  // -1: unbounded
};

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

// The UTF-8 encodings of code points lo..hi (one encoded length, no surrogates) as sequences of
// byte ranges: each sequence's bytes each in their range, every such byte string one of them.
void Utf8Sequences(uint32_t lo, uint32_t hi,
                   std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
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

struct NfaState {
  bool byte = false;  // a byte in [lo, hi] leads to `out`; else epsilon edges to `eps`
  uint8_t lo = 0, hi = 0;
  int32_t out = -1;
  std::vector<int32_t> eps;
};

constexpr int32_t kNfaAccept = 0;

// Thompson's construction, built back to front: Emit returns the start of a piece that goes on
// to `next` when it has matched.
class NfaBuilder {
 public:
  explicit NfaBuilder(const std::vector<Ast>& ast) : ast_(ast) { states.emplace_back(); }

  absl::StatusOr<int32_t> Emit(int32_t node, int32_t next) {
    const Ast& a = ast_[static_cast<size_t>(node)];
    switch (a.kind) {
      case Ast::Kind::kEmpty:
        return next;
      case Ast::Kind::kSet:
        return EmitSet(a.set, next);
      case Ast::Kind::kConcat:
        for (auto it = a.children.rbegin(); it != a.children.rend(); ++it) {
          EXA_ASSIGN_OR_RETURN(next, Emit(*it, next));
        }
        return next;
      case Ast::Kind::kAlt: {
        std::vector<int32_t> starts;
        for (const int32_t child : a.children) {
          EXA_ASSIGN_OR_RETURN(const int32_t s, Emit(child, next));
          starts.push_back(s);
        }
        EXA_ASSIGN_OR_RETURN(const int32_t split, New());
        states[static_cast<size_t>(split)].eps = std::move(starts);
        return split;
      }
      case Ast::Kind::kRepeat:
        return EmitRepeat(a, next);
    }
    return next;
  }

  std::vector<NfaState> states;  // states[kNfaAccept] accepts

 private:
  absl::StatusOr<int32_t> New() {
    if (states.size() >= static_cast<size_t>(kMaxRegexNfaStates)) {
      return absl::InvalidArgumentError(
          StrCat("the pattern needs more than ", kMaxRegexNfaStates, " automaton states"));
    }
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }

  absl::StatusOr<int32_t> EmitSet(const CodeSet& set, int32_t next) {
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (const auto& [lo, hi] : set) Utf8Sequences(lo, hi, &seqs);
    std::vector<int32_t> starts;
    // Sequences share their tails (most end in the same continuation-byte ranges): one state per
    // distinct (range, what follows).
    absl::flat_hash_map<std::tuple<uint8_t, uint8_t, int32_t>, int32_t> made;
    for (const auto& seq : seqs) {
      int32_t s = next;
      for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
        auto [slot, fresh] = made.try_emplace({it->first, it->second, s}, 0);
        if (fresh) {
          EXA_ASSIGN_OR_RETURN(slot->second, New());
          NfaState& st = states[static_cast<size_t>(slot->second)];
          st.byte = true;
          st.lo = it->first;
          st.hi = it->second;
          st.out = s;
        }
        s = slot->second;
      }
      if (std::find(starts.begin(), starts.end(), s) == starts.end()) starts.push_back(s);
    }
    if (starts.size() == 1) return starts[0];
    EXA_ASSIGN_OR_RETURN(const int32_t split, New());  // no edges when the set is empty
    states[static_cast<size_t>(split)].eps = std::move(starts);
    return split;
  }

  absl::StatusOr<int32_t> EmitRepeat(const Ast& a, int32_t next) {
    const int32_t child = a.children[0];
    int32_t n = next;
    if (a.max < 0) {
      EXA_ASSIGN_OR_RETURN(const int32_t loop, New());
      EXA_ASSIGN_OR_RETURN(const int32_t body, Emit(child, loop));
      states[static_cast<size_t>(loop)].eps = {body, next};
      n = loop;
    } else {
      // x{0,k}: (x(x(...)?)?)?, every copy free to stop for `next`.
      for (int64_t i = a.min; i < a.max; ++i) {
        EXA_ASSIGN_OR_RETURN(const int32_t body, Emit(child, n));
        EXA_ASSIGN_OR_RETURN(const int32_t split, New());
        states[static_cast<size_t>(split)].eps = {body, next};
        n = split;
      }
    }
    for (int64_t i = 0; i < a.min; ++i) {
      EXA_ASSIGN_OR_RETURN(n, Emit(child, n));
    }
    return n;
  }

  const std::vector<Ast>& ast_;
};

bool Continuation(uint8_t b) { return b >= 0x80 && b < 0xC0; }
// Control characters JsonMatcher writes as short escapes (\b \t \n \f \r).
bool EscapableControl(uint8_t b) {
  return b == '\b' || b == '\t' || b == '\n' || b == '\f' || b == '\r';
}

}  // namespace

// Subset construction over byte classes, each state an NFA state set and (when lengths are
// bounded) the characters so far, then every state that cannot reach acceptance dropped.
class DfaBuilder {
 public:
  DfaBuilder(const std::vector<NfaState>& nfa, const RegexOptions& options)
      : nfa_(nfa), options_(options), mark_(nfa.size(), 0) {
    counting_ = options.min_length > 0 || options.max_length != std::numeric_limits<int64_t>::max();
    bounded_ = options.max_length != std::numeric_limits<int64_t>::max();
  }

  absl::StatusOr<ByteDfa> Run(int32_t nfa_start) {
    Classes();
    EXA_ASSIGN_OR_RETURN(const int32_t start, Intern({nfa_start}, 0));
    for (size_t s = 0; s < keys_.size(); ++s) {
      for (size_t c = 0; c < dfa_.classes_; ++c) {
        EXA_ASSIGN_OR_RETURN(const int32_t to, Move(s, representative_[c]));
        next_.push_back(to);
      }
    }
    return Prune(start);
  }

 private:
  void Classes() {
    std::bitset<257> cut;
    cut[0] = cut[256] = true;
    for (const NfaState& s : nfa_) {
      if (!s.byte) continue;
      cut[s.lo] = true;
      cut[static_cast<size_t>(s.hi) + 1] = true;
    }
    if (options_.json_string) {
      for (size_t b = 0; b <= 0x20; ++b) cut[b] = true;
    }
    if (counting_) cut[0x80] = cut[0xC0] = true;
    int32_t cls = -1;
    for (size_t b = 0; b < 256; ++b) {
      if (cut[b]) {
        ++cls;
        representative_.push_back(static_cast<uint8_t>(b));
      }
      dfa_.class_of_[b] = static_cast<uint8_t>(cls);
    }
    dfa_.classes_ = representative_.size();
  }

  // The DFA state of the epsilon closure of `seeds` with `count` characters; made if new.
  absl::StatusOr<int32_t> Intern(const std::vector<int32_t>& seeds, int64_t count) {
    ++stamp_;
    std::vector<int32_t> key;
    std::vector<int32_t> todo(seeds.begin(), seeds.end());
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      if (mark_[static_cast<size_t>(s)] == stamp_) continue;
      mark_[static_cast<size_t>(s)] = stamp_;
      if (++work_ > kMaxRegexWork) {
        return absl::InvalidArgumentError(
            StrCat("the pattern is too complex: its automaton takes more than ", kMaxRegexWork,
                   " steps to build"));
      }
      const NfaState& st = nfa_[static_cast<size_t>(s)];
      if (st.byte || s == kNfaAccept) key.push_back(s);
      todo.insert(todo.end(), st.eps.begin(), st.eps.end());
    }
    if (key.empty()) return ByteDfa::kDead;
    std::sort(key.begin(), key.end());
    const bool accepts = key[0] == kNfaAccept && count >= options_.min_length;
    key.push_back(static_cast<int32_t>(count));
    auto [it, made] = ids_.try_emplace(key, static_cast<int32_t>(keys_.size()));
    if (made) {
      if (keys_.size() >= static_cast<size_t>(kMaxRegexDfaStates)) {
        return absl::InvalidArgumentError(
            StrCat("the pattern", counting_ ? " with its length bounds" : "", " needs more than ",
                   kMaxRegexDfaStates, " automaton states"));
      }
      keys_.push_back(std::move(key));
      dfa_.accepting_.push_back(accepts ? 1 : 0);
    }
    return it->second;
  }

  absl::StatusOr<int32_t> Move(size_t state, uint8_t b) {
    if (options_.json_string && b < 0x20 && !EscapableControl(b)) return ByteDfa::kDead;
    const std::vector<int32_t>& key = keys_[state];
    int64_t count = key.back();
    if (counting_ && !Continuation(b)) {
      ++count;
      if (bounded_ && count > options_.max_length) return ByteDfa::kDead;
      if (!bounded_) count = std::min(count, options_.min_length);
    }
    std::vector<int32_t> seeds;
    work_ += static_cast<int64_t>(key.size());
    for (size_t i = 0; i + 1 < key.size(); ++i) {
      const NfaState& st = nfa_[static_cast<size_t>(key[i])];
      if (st.byte && b >= st.lo && b <= st.hi) seeds.push_back(st.out);
    }
    if (seeds.empty()) return ByteDfa::kDead;
    return Intern(seeds, count);
  }

  absl::StatusOr<ByteDfa> Prune(int32_t start) {
    const size_t n = keys_.size(), classes = dfa_.classes_;
    std::vector<std::vector<int32_t>> into(n);
    for (size_t s = 0; s < n; ++s) {
      for (size_t c = 0; c < classes; ++c) {
        const int32_t to = next_[s * classes + c];
        if (to != ByteDfa::kDead) into[static_cast<size_t>(to)].push_back(static_cast<int32_t>(s));
      }
    }
    std::vector<uint8_t> live(n, 0);
    std::deque<int32_t> todo;
    for (size_t s = 0; s < n; ++s) {
      if (dfa_.accepting_[s]) {
        live[s] = 1;
        todo.push_back(static_cast<int32_t>(s));
      }
    }
    while (!todo.empty()) {
      const int32_t s = todo.front();
      todo.pop_front();
      for (const int32_t from : into[static_cast<size_t>(s)]) {
        if (!live[static_cast<size_t>(from)]) {
          live[static_cast<size_t>(from)] = 1;
          todo.push_back(from);
        }
      }
    }
    if (start == ByteDfa::kDead || !live[static_cast<size_t>(start)]) {
      return absl::InvalidArgumentError(
          StrCat("no text matches the pattern", counting_ ? " within its length bounds" : "",
                 options_.json_string ? " that a JSON string can hold" : ""));
    }
    std::vector<int32_t> id(n, ByteDfa::kDead);
    int32_t kept = 0;
    for (size_t s = 0; s < n; ++s) {
      if (live[s]) id[s] = kept++;
    }
    ByteDfa out;
    out.class_of_ = dfa_.class_of_;
    out.classes_ = classes;
    out.start_ = id[static_cast<size_t>(start)];
    for (size_t s = 0; s < n; ++s) {
      if (!live[s]) continue;
      bool any = false;
      for (size_t c = 0; c < classes; ++c) {
        const int32_t to = next_[s * classes + c];
        const int32_t mapped = to == ByteDfa::kDead ? ByteDfa::kDead : id[static_cast<size_t>(to)];
        any = any || mapped != ByteDfa::kDead;
        out.next_.push_back(mapped);
      }
      out.accepting_.push_back(dfa_.accepting_[s]);
      out.has_next_.push_back(any ? 1 : 0);
    }
    if (options_.json_string) {
      for (int32_t s = 0; s < out.states(); ++s)
        out.plain_loop_.push_back(LoopsOnPlainText(out, s));
    }
    return out;
  }

  static bool LoopsOnPlainText(const ByteDfa& dfa, int32_t s) {
    for (int b = 0x20; b < 0x7F; ++b) {
      if (b != '"' && b != '\\' && dfa.Next(s, static_cast<uint8_t>(b)) != s) return false;
    }
    // Every multi-byte character, a byte range at a time over the states it may be in.
    static const auto* const kNonAscii = [] {
      auto* seqs = new std::vector<std::vector<std::pair<uint8_t, uint8_t>>>;
      for (const auto& [lo, hi] : Normalize({{0x80, kMaxCodePoint}})) Utf8Sequences(lo, hi, seqs);
      return seqs;
    }();
    for (const auto& seq : *kNonAscii) {
      std::vector<int32_t> at = {s};
      for (const auto& [lo, hi] : seq) {
        std::vector<int32_t> next;
        for (const int32_t x : at) {
          for (int b = lo; b <= hi; ++b) {
            const int32_t y = dfa.Next(x, static_cast<uint8_t>(b));
            if (y == ByteDfa::kDead) return false;
            if (std::find(next.begin(), next.end(), y) == next.end()) next.push_back(y);
          }
        }
        at = std::move(next);
      }
      if (at.size() != 1 || at[0] != s) return false;
    }
    return true;
  }

  const std::vector<NfaState>& nfa_;
  RegexOptions options_;
  bool counting_ = false, bounded_ = false;
  ByteDfa dfa_;  // classes and acceptance while building
  std::vector<uint8_t> representative_;
  std::vector<std::vector<int32_t>> keys_;  // sorted NFA states, then the character count
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids_;
  std::vector<int32_t> next_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  int64_t work_ = 0;
};

absl::StatusOr<ByteDfa> CompileRegex(std::string_view pattern, const RegexOptions& options) {
  if (pattern.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(StrCat(pattern.size(), " bytes; at most ", kMaxPatternBytes));
  }
  if (options.min_length > options.max_length) {
    return absl::InvalidArgumentError("minLength more than maxLength");
  }
  Parser parser(pattern);
  EXA_ASSIGN_OR_RETURN(const int32_t root, parser.Run());
  NfaBuilder nfa(parser.nodes);
  EXA_ASSIGN_OR_RETURN(const int32_t start, nfa.Emit(root, kNfaAccept));
  return DfaBuilder(nfa.states, options).Run(start);
}

}  // namespace exa::engine::structured
