#include "engine/structured/regex.h"

#include <algorithm>
#include <bitset>
#include <deque>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "common/strings.h"
#include "engine/structured/regex_syntax.h"

namespace exa::engine::structured {
namespace {

using regex_syntax::Ast;
using regex_syntax::ByteRange;
using regex_syntax::CodeSet;
using regex_syntax::kMaxCodePoint;
using regex_syntax::Normalize;
using regex_syntax::ParsedRegex;
using regex_syntax::Utf8Sequences;

// NFA states visited while building the automaton: bounds the work a pattern can ask for.
constexpr int64_t kMaxRegexWork = 4'000'000;

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
    std::vector<std::vector<ByteRange>> seqs;
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
    std::vector<int32_t> pending(seeds.begin(), seeds.end());
    while (!pending.empty()) {
      const int32_t s = pending.back();
      pending.pop_back();
      if (mark_[static_cast<size_t>(s)] == stamp_) continue;
      mark_[static_cast<size_t>(s)] = stamp_;
      if (++work_ > kMaxRegexWork) {
        return absl::InvalidArgumentError(
            StrCat("the pattern is too complex: its automaton takes more than ", kMaxRegexWork,
                   " steps to build"));
      }
      const NfaState& st = nfa_[static_cast<size_t>(s)];
      if (st.byte || s == kNfaAccept) key.push_back(s);
      pending.insert(pending.end(), st.eps.begin(), st.eps.end());
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
    std::deque<int32_t> frontier;
    for (size_t s = 0; s < n; ++s) {
      if (dfa_.accepting_[s]) {
        live[s] = 1;
        frontier.push_back(static_cast<int32_t>(s));
      }
    }
    while (!frontier.empty()) {
      const int32_t s = frontier.front();
      frontier.pop_front();
      for (const int32_t from : into[static_cast<size_t>(s)]) {
        if (!live[static_cast<size_t>(from)]) {
          live[static_cast<size_t>(from)] = 1;
          frontier.push_back(from);
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
      auto* seqs = new std::vector<std::vector<ByteRange>>;
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
  EXA_ASSIGN_OR_RETURN(const ParsedRegex parsed, regex_syntax::ParseRegex(pattern));
  NfaBuilder nfa(parsed.nodes);
  EXA_ASSIGN_OR_RETURN(const int32_t start, nfa.Emit(parsed.root, kNfaAccept));
  return DfaBuilder(nfa.states, options).Run(start);
}

}  // namespace exa::engine::structured
