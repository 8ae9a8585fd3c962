#include "engine/structured/json_matcher.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "absl/container/flat_hash_map.h"

namespace exa::engine::structured {
namespace {

bool IsWhitespace(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// One byte inside a JSON string. `sub` holds the escape state in its low 3 bits (1: after a
// backslash; 2 to 5: that many hex digits of \u left, plus one; 6: after a first digit D, so
// the second may not make a surrogate: \uD800 to \uDFFF are refused, as strict parsers refuse
// unpaired ones, and a model writes such characters as UTF-8) and, above them, the UTF-8 state:
// continuation bytes left × 5 + which range the next byte must be in.
enum class StringByte { kReject, kPartial, kChar, kClose };

// The UTF-8 state after lead byte `b` (continuation bytes left × 5 + the next byte's range), or 0
// when `b` leads no character. RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF.
uint8_t Utf8Lead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return 1 * 5;
  if (b == 0xE0) return 2 * 5 + 1;
  if (b == 0xED) return 2 * 5 + 2;
  if (b >= 0xE1 && b <= 0xEF) return 2 * 5;
  if (b == 0xF0) return 3 * 5 + 3;
  if (b >= 0xF1 && b <= 0xF3) return 3 * 5;
  if (b == 0xF4) return 3 * 5 + 4;
  return 0;
}

StringByte StepStringByte(uint8_t* sub, uint8_t b) {
  const uint8_t esc = *sub & 7;
  const uint8_t utf8 = *sub >> 3;
  if (utf8 != 0) {
    static constexpr uint8_t kLow[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
    static constexpr uint8_t kHigh[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
    const int left = utf8 / 5;
    const int range = utf8 % 5;
    if (b < kLow[range] || b > kHigh[range]) return StringByte::kReject;
    *sub = static_cast<uint8_t>(((left - 1) * 5) << 3);
    return left == 1 ? StringByte::kChar : StringByte::kPartial;
  }
  if (esc == 1) {
    switch (b) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        *sub = 0;
        return StringByte::kChar;
      case 'u':
        *sub = 5;
        return StringByte::kPartial;
      default:
        return StringByte::kReject;
    }
  }
  if (esc == 6) {
    if (!(b >= '0' && b <= '7')) return StringByte::kReject;
    *sub = 3;
    return StringByte::kPartial;
  }
  if (esc >= 2) {
    if (!IsHex(b)) return StringByte::kReject;
    if (esc == 5 && (b == 'd' || b == 'D')) {
      *sub = 6;
      return StringByte::kPartial;
    }
    *sub = esc == 2 ? 0 : static_cast<uint8_t>(esc - 1);
    return esc == 2 ? StringByte::kChar : StringByte::kPartial;
  }
  if (b == '"') return StringByte::kClose;
  if (b == '\\') {
    *sub = 1;
    return StringByte::kPartial;
  }
  if (b < 0x20) return StringByte::kReject;
  if (b < 0x80) return StringByte::kChar;
  const uint8_t lead = Utf8Lead(b);
  if (lead == 0) return StringByte::kReject;
  *sub = static_cast<uint8_t>(lead << 3);
  return StringByte::kPartial;
}

// The character a short escape's letter stands for (\n: a newline); the letter itself for \" \\ \/.
uint8_t UnescapedByte(uint8_t letter) {
  switch (letter) {
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return letter;
  }
}

// Numbers: RFC 8259's grammar as a DFA. States: 0 start, 1 after '-', 2 a leading 0, 3 integer
// digits, 4 after '.', 5 fraction digits, 6 after 'e', 7 after the exponent's sign, 8 one
// exponent digit, 9 two (no more: 1e999 is valid JSON that most parsers refuse or make infinite).
// kIntegerOnly in `sub` forbids the fraction and exponent. -1: no transition.
constexpr uint8_t kIntegerOnly = 0x80;
int NumberNext(int state, uint8_t b, bool integer) {
  const bool digit = IsDigit(b);
  switch (state) {
    case 0:
      if (b == '-') return 1;
      [[fallthrough]];
    case 1:
      return b == '0' ? 2 : digit ? 3 : -1;
    case 2:
    case 3:
      if (state == 3 && digit) return 3;
      if (integer) return -1;
      return b == '.' ? 4 : (b == 'e' || b == 'E') ? 6 : -1;
    case 4:
      return digit ? 5 : -1;
    case 5:
      if (digit) return 5;
      return (b == 'e' || b == 'E') ? 6 : -1;
    case 6:
      if (b == '+' || b == '-') return 7;
      [[fallthrough]];
    case 7:
      return digit ? 8 : -1;
    case 8:
      return digit ? 9 : -1;
  }
  return -1;
}
bool NumberAccepts(int state) {
  return state == 2 || state == 3 || state == 5 || state == 8 || state == 9;
}

const std::vector<std::string> kBooleans = {"true", "false"};
const std::vector<std::string> kNull = {"null"};
constexpr uint8_t kNodeLiterals = 0, kBooleanLiterals = 1, kNullLiterals = 2;

uint64_t AllBits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// Whether `f` (a phase that allows whitespace) takes `b` as one more whitespace byte.
bool Whitespace(const Frame& f, uint8_t b, std::vector<Stack>* out, FrameArena* arena) {
  if (!IsWhitespace(b)) return false;
  if (f.ws < kMaxWhitespaceRun) {
    Frame g = f;
    ++g.ws;
    out->push_back(arena->Make(g));
  }
  return true;
}

}  // namespace

const Frame* FrameArena::Make(const Frame& f) {
  if (used_ == chunks_.size() * kChunk) chunks_.push_back(std::make_unique<Frame[]>(kChunk));
  Frame* slot = &chunks_[used_ / kChunk][used_ % kChunk];
  ++used_;
  *slot = f;
  return slot;
}

JsonMatcher::JsonMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  // Bottom to top: the end, the suffix, the value, the prefix.
  // A bare literal takes no whitespace: its frames start with the run used up.
  const uint8_t ws = grammar_->bare ? kMaxWhitespaceRun : 0;
  Frame end;
  end.phase = Phase::kEnd;
  end.ws = ws;
  const Frame* below = arena_.Make(end);
  if (!grammar_->suffix.empty()) {
    Frame suffix;
    suffix.parent = below;
    suffix.phase = Phase::kText;
    suffix.sub = 1;
    below = arena_.Make(suffix);
  }
  Frame value;
  value.parent = below;
  value.node = grammar_->root;
  value.phase = Phase::kValue;
  value.depth = 1;
  value.ws = ws;
  if (grammar_->bare && grammar_->nodes[static_cast<size_t>(grammar_->root)].pattern >= 0) {
    value.phase = Phase::kRaw;
    value.seen = static_cast<uint64_t>(Pattern(value).start());
  }
  const Frame* top = arena_.Make(value);
  if (!grammar_->prefix.empty()) {
    Frame prefix;
    prefix.parent = top;
    prefix.phase = Phase::kText;
    top = arena_.Make(prefix);
  }
  stacks_.push_back(top);
}

bool JsonMatcher::Follow(std::string_view bytes, bool commit) {
  // Frames made on the way stay in the arena until the next compaction.
  if (arena_.used() > 4 * 4096) Compact();
  std::vector<Stack> current = stacks_;
  for (const char c : bytes) {
    scratch_.clear();
    if (!Step(current, static_cast<uint8_t>(c), &scratch_, &arena_)) return false;
    current.swap(scratch_);
  }
  if (commit) stacks_ = std::move(current);
  return true;
}

void JsonMatcher::Compact() {
  spare_.Reset();
  absl::flat_hash_map<const Frame*, const Frame*> moved;
  // Parents first, so each copy points at its parent's copy.
  auto copy = [&](auto&& self, const Frame* f) -> const Frame* {
    if (f == nullptr) return nullptr;
    if (auto it = moved.find(f); it != moved.end()) return it->second;
    Frame g = *f;
    g.parent = self(self, f->parent);
    const Frame* made = spare_.Make(g);
    moved[f] = made;
    return made;
  };
  for (Stack& s : stacks_) s = copy(copy, s);
  std::swap(arena_, spare_);
}

bool JsonMatcher::Terminal() const {
  return std::all_of(stacks_.begin(), stacks_.end(), [&](Stack s) {
    if (s->phase == Phase::kEnd) return true;
    if (s->phase == Phase::kRaw) {
      const auto state = static_cast<int32_t>(s->seen);
      return Pattern(*s).Accepting(state) && !Pattern(*s).HasNext(state);
    }
    if (s->phase != Phase::kLiteral || s->parent->phase != Phase::kEnd) return false;
    // A whole enum value, true, false or null that no candidate extends.
    return WholeLiterals(*s) == s->candidates;
  });
}

int64_t JsonMatcher::PlainStringRoom() const {
  int64_t room = std::numeric_limits<int64_t>::max();
  for (Stack s : stacks_) {
    if (s->sub != 0) return -1;
    if (s->phase == Phase::kObjectKey && s->free_key && s->candidates == 0) continue;
    if (s->phase != Phase::kString) return -1;
    const SchemaNode& node = grammar_->nodes[static_cast<size_t>(s->node)];
    // A pattern's state that plain text leaves as it is (".*") bounds nothing; any other moves.
    if (node.pattern >= 0) {
      if (!Pattern(*s).LoopsOnPlainText(static_cast<int32_t>(s->seen))) return -1;
      continue;
    }
    if (node.counts_length()) room = std::min(room, node.max_length - s->count);
  }
  return room;
}

bool JsonMatcher::Complete(std::span<const Stack> stacks) const {
  for (Stack s : stacks) {
    if (s->phase == Phase::kEnd) return true;
    if (s->parent == nullptr || s->parent->phase != Phase::kEnd) continue;
    if (s->phase == Phase::kNumber && NumberEnds(*s)) return true;
    if (s->phase == Phase::kLiteral && WholeLiterals(*s) != 0) return true;
    if (s->phase == Phase::kRaw && Pattern(*s).Accepting(static_cast<int32_t>(s->seen))) {
      return true;
    }
  }
  return false;
}

bool JsonMatcher::Step(std::span<const Stack> in, uint8_t byte, std::vector<Stack>* out,
                       FrameArena* arena) const {
  const size_t start = out->size();
  for (Stack s : in) StepOne(s, byte, out, arena);
  if (out->size() - start <= 1) return out->size() > start;
  // Alternatives that met again are one.
  size_t kept = start;
  for (size_t i = start; i < out->size(); ++i) {
    const Stack s = (*out)[i];
    if (std::find(out->begin() + static_cast<std::ptrdiff_t>(start),
                  out->begin() + static_cast<std::ptrdiff_t>(kept),
                  s) == out->begin() + static_cast<std::ptrdiff_t>(kept)) {
      (*out)[kept++] = s;
    }
  }
  out->resize(std::min(kept, start + kMaxThreads));
  return out->size() > start;
}

uint64_t JsonMatcher::WholeLiterals(const Frame& f) const {
  const std::vector<std::string>& lits = Literals(f);
  uint64_t whole = 0;
  for (uint64_t c = f.candidates; c != 0; c &= c - 1) {
    const int i = std::countr_zero(c);
    if (static_cast<int64_t>(lits[static_cast<size_t>(i)].size()) == f.count) {
      whole |= uint64_t{1} << i;
    }
  }
  return whole;
}

const std::vector<std::string>& JsonMatcher::Literals(const Frame& f) const {
  if (f.sub == kBooleanLiterals) return kBooleans;
  if (f.sub == kNullLiterals) return kNull;
  return grammar_->nodes[static_cast<size_t>(f.node)].literals;
}

void JsonMatcher::StepOne(Stack s, uint8_t byte, std::vector<Stack>* out, FrameArena* arena) const {
  const Frame& f = *s;
  switch (f.phase) {
    case Phase::kEnd:
      Whitespace(f, byte, out, arena);
      return;
    case Phase::kValue:
      StepValue(f, byte, out, arena);
      return;
    case Phase::kObjectFirst:
    case Phase::kObjectKeyNext:
    case Phase::kObjectColon:
    case Phase::kObjectNext:
      StepObject(f, byte, out, arena);
      return;
    case Phase::kObjectKey:
      StepKey(f, byte, out, arena);
      return;
    case Phase::kArrayFirst:
    case Phase::kArrayNext:
      StepArray(f, byte, out, arena);
      return;
    case Phase::kString:
      StepString(f, s, byte, out, arena);
      return;
    case Phase::kNumber:
      StepNumber(f, byte, out, arena);
      return;
    case Phase::kLiteral:
      StepLiteral(f, byte, out, arena);
      return;
    case Phase::kText:
      StepText(f, byte, out, arena);
      return;
    case Phase::kRaw:
      StepRaw(f, byte, out, arena);
      return;
  }
}

const ByteDfa& JsonMatcher::Pattern(const Frame& f) const {
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  return grammar_->patterns[static_cast<size_t>(node.pattern)];
}

void JsonMatcher::StepRaw(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                          FrameArena* arena) const {
  const ByteDfa& dfa = Pattern(f);
  const int32_t next = dfa.Next(static_cast<int32_t>(f.seen), byte);
  if (next != ByteDfa::kDead) {
    Frame g = f;
    g.seen = static_cast<uint64_t>(next);
    out->push_back(arena->Make(g));
  } else if (dfa.Accepting(static_cast<int32_t>(f.seen))) {
    StepOne(f.parent, byte, out, arena);  // the text ended; the byte is its parent's
  }
}

void JsonMatcher::StepText(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                           FrameArena* arena) const {
  const std::string& text = f.sub == 0 ? grammar_->prefix : grammar_->suffix;
  if (static_cast<uint8_t>(text[static_cast<size_t>(f.count)]) != byte) return;
  if (f.count + 1 == static_cast<int64_t>(text.size())) {
    out->push_back(f.parent);  // all of it: on to the value, or the end
    return;
  }
  Frame g = f;
  ++g.count;
  out->push_back(arena->Make(g));
}

void JsonMatcher::StepValue(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                            FrameArena* arena) const {
  if (Whitespace(f, byte, out, arena)) return;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  if (!node.alternatives.empty()) {
    // `count` bounds a chain of alternatives that consume nothing (a $ref cycle).
    if (f.count > static_cast<int64_t>(kMaxAlternatives)) return;
    for (const int32_t alt : node.alternatives) {
      Frame g = f;
      g.node = alt;
      g.count = f.count + 1;
      StepValue(g, byte, out, arena);
    }
    return;
  }
  Frame g;
  g.parent = f.parent;
  g.node = f.node;
  g.depth = f.depth;
  if (!node.literals.empty()) {
    g.phase = Phase::kLiteral;
    g.sub = kNodeLiterals;
    g.candidates = AllBits(node.literals.size());
    StepLiteral(g, byte, out, arena);
    return;
  }
  const uint8_t types = node.types;
  const bool container = byte == '{' || byte == '[';
  if (container && f.depth >= kMaxJsonDepth) return;
  if (byte == '{' && (types & kObjectType)) {
    g.phase = Phase::kObjectFirst;
    out->push_back(arena->Make(g));
  } else if (byte == '[' && (types & kArrayType)) {
    g.phase = Phase::kArrayFirst;
    out->push_back(arena->Make(g));
  } else if (byte == '"' && (types & kStringType)) {
    g.phase = Phase::kString;
    if (node.pattern >= 0) g.seen = static_cast<uint64_t>(Pattern(g).start());
    out->push_back(arena->Make(g));
  } else if ((byte == '-' || IsDigit(byte)) && (types & (kNumberType | kIntegerType))) {
    g.phase = Phase::kNumber;
    g.sub = (types & kNumberType) ? 0 : kIntegerOnly;
    StepNumber(g, byte, out, arena);
  } else if ((byte == 't' || byte == 'f') && (types & kBooleanType)) {
    g.phase = Phase::kLiteral;
    g.sub = kBooleanLiterals;
    g.candidates = 3;
    StepLiteral(g, byte, out, arena);
  } else if (byte == 'n' && (types & kNullType)) {
    g.phase = Phase::kLiteral;
    g.sub = kNullLiterals;
    g.candidates = 1;
    StepLiteral(g, byte, out, arena);
  }
}

void JsonMatcher::StepObject(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                             FrameArena* arena) const {
  if (Whitespace(f, byte, out, arena)) return;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  const uint64_t all = AllBits(node.properties.size());
  const bool free_keys = node.additional != kNoNode;
  const bool closes = (node.required & ~f.seen) == 0;
  switch (f.phase) {
    case Phase::kObjectFirst:
    case Phase::kObjectKeyNext:
      if (byte == '"') {
        Frame g = f;
        g.phase = Phase::kObjectKey;
        g.ws = 0;
        g.sub = 0;
        g.count = 0;
        g.free_key = free_keys;
        // With free keys a seen name must still be recognised, to refuse it as a duplicate.
        g.candidates = free_keys ? all : all & ~f.seen;
        if (g.candidates != 0 || free_keys) out->push_back(arena->Make(g));
      } else if (byte == '}' && f.phase == Phase::kObjectFirst && closes) {
        out->push_back(f.parent);
      }
      return;
    case Phase::kObjectColon:
      if (byte == ':') {
        Frame g = f;
        g.phase = Phase::kObjectNext;
        g.ws = 0;
        Frame value;
        value.parent = arena->Make(g);
        value.node = f.member;
        value.phase = Phase::kValue;
        value.depth = static_cast<uint8_t>(f.depth + 1);
        out->push_back(arena->Make(value));
      }
      return;
    case Phase::kObjectNext:
      if (byte == ',' && (free_keys || (all & ~f.seen) != 0)) {
        Frame g = f;
        g.phase = Phase::kObjectKeyNext;
        g.ws = 0;
        out->push_back(arena->Make(g));
      } else if (byte == '}' && closes) {
        out->push_back(f.parent);
      }
      return;
    default:
      return;
  }
}

void JsonMatcher::StepKey(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                          FrameArena* arena) const {
  uint8_t sub = f.sub;
  const StringByte r = StepStringByte(&sub, byte);
  if (r == StringByte::kReject) return;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  if (r == StringByte::kClose) {
    Frame g = f;
    g.phase = Phase::kObjectColon;
    g.sub = 0;
    g.ws = 0;
    g.candidates = 0;
    int32_t exact = -1;
    for (uint64_t c = f.candidates; c != 0; c &= c - 1) {
      const int i = std::countr_zero(c);
      if (static_cast<int64_t>(node.properties[static_cast<size_t>(i)].key.size()) == f.count) {
        exact = i;
      }
    }
    if (exact >= 0) {
      const uint64_t bit = uint64_t{1} << exact;
      if (f.seen & bit) return;  // a duplicate
      g.seen |= bit;
      g.member = node.properties[static_cast<size_t>(exact)].node;
    } else if (f.free_key) {
      g.member = node.additional;
    } else {
      return;
    }
    out->push_back(arena->Make(g));
    return;
  }
  uint64_t next = 0;
  for (uint64_t c = f.candidates; c != 0; c &= c - 1) {
    const int i = std::countr_zero(c);
    const std::string& key = node.properties[static_cast<size_t>(i)].key;
    if (static_cast<int64_t>(key.size()) > f.count &&
        static_cast<uint8_t>(key[static_cast<size_t>(f.count)]) == byte) {
      next |= uint64_t{1} << i;
    }
  }
  if (next == 0 && !f.free_key) return;
  if (next == 0 && f.candidates == 0 && sub == f.sub) {
    out->push_back(&f);  // an unknown key's bytes change nothing
    return;
  }
  Frame g = f;
  g.sub = sub;
  g.candidates = next;
  ++g.count;
  out->push_back(arena->Make(g));
}

void JsonMatcher::StepArray(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                            FrameArena* arena) const {
  if (Whitespace(f, byte, out, arena)) return;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  const bool closes = f.count >= node.min_items;
  if (byte == ']') {
    if (closes) out->push_back(f.parent);
    return;
  }
  const bool first = f.phase == Phase::kArrayFirst;
  if (!first && byte != ',') return;
  if (f.count >= node.max_items) return;
  Frame g = f;
  g.phase = Phase::kArrayNext;
  g.ws = 0;
  ++g.count;
  Frame value;
  value.parent = arena->Make(g);
  const size_t index = static_cast<size_t>(f.count);
  value.node = index < node.prefix_items.size() ? node.prefix_items[index] : node.items;
  value.phase = Phase::kValue;
  value.depth = static_cast<uint8_t>(f.depth + 1);
  if (first) {
    StepValue(value, byte, out, arena);  // the byte is the element's first
  } else {
    out->push_back(arena->Make(value));
  }
}

void JsonMatcher::StepString(const Frame& f, Stack s, uint8_t byte, std::vector<Stack>* out,
                             FrameArena* arena) const {
  if (grammar_->nodes[static_cast<size_t>(f.node)].pattern >= 0) {
    StepPatternString(f, byte, out, arena);
    return;
  }
  uint8_t sub = f.sub;
  const StringByte r = StepStringByte(&sub, byte);
  if (r == StringByte::kReject) return;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  if (r == StringByte::kClose) {
    if (f.count >= node.min_length) out->push_back(f.parent);
    return;
  }
  if (!node.counts_length()) {
    out->push_back(sub == f.sub ? s : [&] {
      Frame g = f;
      g.sub = sub;
      return arena->Make(g);
    }());
    return;
  }
  Frame g = f;
  g.sub = sub;
  if (f.sub == 0) {  // a character starts here
    if (f.count >= node.max_length) return;
    ++g.count;
  }
  out->push_back(arena->Make(g));
}

// The string's value, decoded, moves the pattern's automaton: a plain byte is itself, an escape
// the character it stands for. No \u escapes: the automaton's paths run through bytes a JSON
// string can hold as such or as a short escape (regex.h RegexOptions::json_string).
void JsonMatcher::StepPatternString(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                                    FrameArena* arena) const {
  uint8_t sub = f.sub;
  const StringByte r = StepStringByte(&sub, byte);
  if (r == StringByte::kReject) return;
  const ByteDfa& dfa = Pattern(f);
  const auto state = static_cast<int32_t>(f.seen);
  if (r == StringByte::kClose) {
    if (dfa.Accepting(state)) out->push_back(f.parent);
    return;
  }
  int32_t next = state;
  if ((f.sub & 7) == 1) {  // the escaped character
    if (byte == 'u') return;
    next = dfa.Next(state, UnescapedByte(byte));
  } else if (byte == '\\') {
    // Only into an escape that some character the pattern takes comes out of.
    static constexpr uint8_t kEscapes[] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
    if (std::none_of(std::begin(kEscapes), std::end(kEscapes),
                     [&](uint8_t e) { return dfa.Next(state, e) != ByteDfa::kDead; })) {
      return;
    }
  } else {
    next = dfa.Next(state, byte);
  }
  if (next == ByteDfa::kDead) return;
  Frame g = f;
  g.sub = sub;
  g.seen = static_cast<uint64_t>(next);
  out->push_back(arena->Make(g));
}

namespace {

NumberPrefix PrefixOf(const Frame& f) {
  NumberPrefix p;
  p.state = f.sub & ~kIntegerOnly;
  p.integer = (f.sub & kIntegerOnly) != 0;
  p.negative = f.negative;
  p.int_value = f.seen;
  p.int_digits = f.int_digits;
  p.frac_value = f.candidates;
  p.frac_digits = f.frac_digits;
  return p;
}

// Takes `byte` into a number frame under bounds (its DFA state already `next`): false when no
// number so begun can end within them.
bool AdvanceBounded(Frame* g, int next, uint8_t byte, const NumberBounds& bounds) {
  if (byte == '-') {
    g->negative = true;
  } else if (IsDigit(byte) && (next == 2 || next == 3)) {
    if (g->int_digits >= kBoundedDigits) return false;
    g->seen = g->seen * 10 + (byte - '0');
    ++g->int_digits;
  } else if (IsDigit(byte) && next == 5) {
    if (g->frac_digits >= kBoundedDigits) return false;
    g->candidates = g->candidates * 10 + (byte - '0');
    ++g->frac_digits;
  }
  return NumberFeasible(PrefixOf(*g), bounds);
}

}  // namespace

bool JsonMatcher::NumberEnds(const Frame& f) const {
  if (f.count == 0 || !NumberAccepts(f.sub & ~kIntegerOnly)) return false;
  const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
  return !node.bounds || NumberWithin(PrefixOf(f), *node.bounds);
}

void JsonMatcher::StepNumber(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                             FrameArena* arena) const {
  const int state = f.sub & ~kIntegerOnly;
  const int next = NumberNext(state, byte, (f.sub & kIntegerOnly) != 0);
  const bool integer = (f.sub & kIntegerOnly) != 0;
  if (next >= 0 && f.count < (integer ? kMaxIntegerBytes : kMaxNumberBytes)) {
    Frame g = f;
    g.sub = static_cast<uint8_t>(next | (f.sub & kIntegerOnly));
    ++g.count;
    const SchemaNode& node = grammar_->nodes[static_cast<size_t>(f.node)];
    if (!node.bounds || AdvanceBounded(&g, next, byte, *node.bounds)) {
      out->push_back(arena->Make(g));
    }
  } else if (NumberEnds(f)) {
    StepOne(f.parent, byte, out, arena);  // the number ended; the byte is its parent's
  }
}

void JsonMatcher::StepLiteral(const Frame& f, uint8_t byte, std::vector<Stack>* out,
                              FrameArena* arena) const {
  const std::vector<std::string>& lits = Literals(f);
  uint64_t next = 0;
  bool whole = false;
  for (uint64_t c = f.candidates; c != 0; c &= c - 1) {
    const int i = std::countr_zero(c);
    const std::string& lit = lits[static_cast<size_t>(i)];
    if (static_cast<int64_t>(lit.size()) > f.count &&
        static_cast<uint8_t>(lit[static_cast<size_t>(f.count)]) == byte) {
      next |= uint64_t{1} << i;
    }
    whole = whole || static_cast<int64_t>(lit.size()) == f.count;
  }
  if (next != 0) {
    Frame g = f;
    g.candidates = next;
    ++g.count;
    out->push_back(arena->Make(g));
  } else if (whole) {
    StepOne(f.parent, byte, out, arena);  // the value ended; the byte is its parent's
  }
}

}  // namespace exa::engine::structured
