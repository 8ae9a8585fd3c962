// Member access, the methods of strings and mappings, and the global functions
// (chat_template/builtins.h).
#include <ctime>
#include <string>

#include "chat_template/builtins.h"
#include "chat_template/text.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

using Type = Value::Type;

absl::Status Fail(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

Value Method(std::string name, NativeFunction fn) {
  return Value::Function(std::move(name), std::move(fn));
}

Value StringsOf(const std::vector<std::string>& parts) {
  Array out;
  for (const std::string& p : parts) out.push_back(Value::String(p));
  return Value::MakeArray(std::move(out));
}

// startswith/endswith: a string, or a list of strings any of which may match.
absl::StatusOr<Value> AffixTest(const std::string& s, const CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  if (args.positional.empty()) return Fail(StrCat(name, "() needs an argument"));
  const auto matches = [&](const std::string& affix) {
    return s.size() >= affix.size() &&
           s.compare(prefix ? 0 : s.size() - affix.size(), affix.size(), affix) == 0;
  };
  const Value& pattern = args.positional[0];
  if (pattern.is(Type::kString)) return Value::Bool(matches(pattern.str()));
  if (!pattern.is(Type::kArray)) return Fail(StrCat(name, "() takes a string or a tuple"));
  for (const Value& item : pattern.array()) {
    if (!item.is(Type::kString)) return Fail(StrCat(name, "() tuple items must be strings"));
    if (matches(item.str())) return Value::Bool(true);
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> Split(const std::string& s, const CallArgs& args) {
  const Value sep = !args.positional.empty() ? args.positional[0] : Value::Null();
  const Value maxsplit = args.positional.size() > 1 ? args.positional[1] : Value::Int(-1);
  if (!sep.is(Type::kString) && !sep.is(Type::kNull)) return Fail("split: sep must be a string");
  if (!maxsplit.is(Type::kInt)) return Fail("split: maxsplit must be an integer");
  if (sep.is(Type::kNull)) return StringsOf(SplitOnWhitespace(s, maxsplit.integer()));
  if (sep.str().empty()) return Fail("split: empty separator");
  return StringsOf(SplitOn(s, sep.str(), maxsplit.integer()));
}

absl::StatusOr<Value> Replace(const std::string& s, const CallArgs& args) {
  if (args.positional.size() < 2) return Fail("replace() needs two arguments");
  const Value& old_text = args.positional[0];
  const Value& new_text = args.positional[1];
  if (!old_text.is(Type::kString) || !new_text.is(Type::kString)) {
    return Fail("replace() arguments must be strings");
  }
  const Value* count = args.positional.size() > 2 ? &args.positional[2] : args.Keyword("count");
  if (count && !count->is(Type::kInt) && !count->is(Type::kNull)) {
    return Fail("replace() count must be an integer or none");
  }
  const int64_t n = count && count->is(Type::kInt) ? count->integer() : -1;
  if (n == 0) return Value::String(s);
  return Value::String(ReplaceAll(s, old_text.str(), new_text.str(), n));
}

// The strip family ignores its argument, as @huggingface/jinja does: strip('\n') trims all
// whitespace (docs/reference/api.md#chat-templates lists this difference from Python).
Value StringMethod(const Value& self, const std::string& name) {
  const std::string s = self.str();
  auto unary = [&](std::string result) {
    return Method(name,
                  [result](CallArgs&) -> absl::StatusOr<Value> { return Value::String(result); });
  };
  if (name == "upper") return unary(JsUpper(s));
  if (name == "lower") return unary(JsLower(s));
  if (name == "strip") return unary(std::string(Trim(s)));
  if (name == "lstrip") return unary(std::string(TrimStart(s)));
  if (name == "rstrip") return unary(std::string(TrimEnd(s)));
  if (name == "title") return unary(JsTitle(s));
  if (name == "capitalize") return unary(JsCapitalize(s));
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return Method(name, [s, prefix](CallArgs& a) { return AffixTest(s, a, prefix); });
  }
  if (name == "split") return Method(name, [s](CallArgs& a) { return Split(s, a); });
  if (name == "replace") return Method(name, [s](CallArgs& a) { return Replace(s, a); });
  return Value();
}

Value ObjectMethod(const Value& self, const std::string& name) {
  if (name == "get") {
    return Method(name, [self](CallArgs& a) -> absl::StatusOr<Value> {
      if (a.positional.empty() || !a.positional[0].is(Type::kString)) {
        return Fail("get(): the key must be a string");
      }
      if (const Value* v = self.Find(a.positional[0].str())) return *v;
      return a.positional.size() > 1 ? a.positional[1] : Value::Null();
    });
  }
  if (name != "items" && name != "keys" && name != "values") return Value();
  return Method(name, [self, name](CallArgs&) -> absl::StatusOr<Value> {
    Array out;
    for (const auto& [key, value] : self.entries()) {
      if (name == "items") {
        out.push_back(Value::MakeArray({Value::String(key), value}));
      } else {
        out.push_back(name == "keys" ? Value::String(key) : value);
      }
    }
    return Value::MakeArray(std::move(out));
  });
}

absl::StatusOr<Value> Range(CallArgs& args) {
  std::vector<int64_t> n;
  for (const Value& a : args.positional) {
    if (!a.is(Type::kInt)) return Fail("range() takes integers");
    n.push_back(a.integer());
  }
  if (n.empty() || n.size() > 3) return Fail("range() takes 1 to 3 integers");
  const int64_t start = n.size() == 1 ? 0 : n[0];
  const int64_t stop = n.size() == 1 ? n[0] : n[1];
  const int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) return Fail("range() step must not be zero");
  // A render's loops are bounded anyway; this keeps one range() from allocating without bound.
  if ((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step) >
      1000000) {
    return Fail("range() of more than 1000000 items");
  }
  Array out;
  const __int128 span = static_cast<__int128>(stop) - start;
  const __int128 count = (span > 0) == (step > 0) ? (span + step - (step > 0 ? 1 : -1)) / step : 0;
  for (__int128 k = 0; k < count; ++k)
    out.push_back(Value::Int(static_cast<int64_t>(start + k * step)));
  return Value::MakeArray(std::move(out));
}

absl::StatusOr<Value> MakeNamespace(CallArgs& args) {
  if (args.positional.size() > 1) return Fail("namespace() takes at most one mapping");
  Entries entries;
  if (!args.positional.empty()) {
    if (!args.positional[0].is(Type::kObject)) return Fail("namespace() takes a mapping");
    entries = args.positional[0].entries();
  }
  for (const auto& [key, value] : args.keyword) {
    bool replaced = false;
    for (auto& entry : entries) {
      if (entry.first == key) {
        entry.second = value;
        replaced = true;
      }
    }
    if (!replaced) entries.emplace_back(key, value);
  }
  return Value::Namespace(std::move(entries));
}

// strftime_now(format) as transformers defines it, datetime.now().strftime(format): the C
// library's directives, in local time and the C locale (English month and day names).
// @huggingface/jinja knows %Y %m %d %b %B %H %M %% of them and renders those the same.
absl::StatusOr<Value> StrftimeNow(int64_t fixed_time, CallArgs& args) {
  if (args.positional.empty() || !args.positional[0].is(Type::kString)) {
    return Fail("strftime_now() takes a format string");
  }
  const std::string& format = args.positional[0].str();
  constexpr size_t kMaxFormat = 256;
  if (format.size() > kMaxFormat || format.find('\0') != std::string::npos) {
    return Fail(
        StrCat("strftime_now(): the format must be at most ", kMaxFormat, " bytes with no NUL"));
  }
  const std::time_t now =
      fixed_time >= 0 ? static_cast<std::time_t>(fixed_time) : std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  // No directive writes more than 64 bytes (%c is about 24); 0 is also an empty rendering.
  std::string out(format.size() * 32 + 64, '\0');
  out.resize(std::strftime(out.data(), out.size(), format.c_str(), &local));
  return Value::String(std::move(out));
}

}  // namespace

absl::StatusOr<Value> GetMember(const Value& object, const Value& property) {
  if (object.IsMapping()) {
    if (!property.is(Type::kString)) {
      return Fail(StrCat("a mapping's keys are strings, not ", property.TypeName()));
    }
    if (const Value* v = object.Find(property.str())) return *v;
    return object.is(Type::kObject) ? ObjectMethod(object, property.str()) : Value();
  }
  const bool indexable = object.is(Type::kArray) || object.is(Type::kString);
  if (indexable && property.is(Type::kInt)) {
    if (object.is(Type::kString)) {
      std::string out;
      return Utf16At(object.str(), property.integer(), &out) ? Value::String(out) : Value();
    }
    const Array& a = object.array();
    int64_t i = property.integer();
    if (i < 0) i += static_cast<int64_t>(a.size());
    return i >= 0 && i < static_cast<int64_t>(a.size()) ? a[static_cast<size_t>(i)] : Value();
  }
  if (!property.is(Type::kString)) {
    return Fail(StrCat("cannot index ", object.TypeName(), " with ", property.TypeName()));
  }
  if (property.str() == "length" && object.is(Type::kArray)) {
    return Value::Int(static_cast<int64_t>(object.array().size()));
  }
  if (property.str() == "length" && object.is(Type::kString)) {
    return Value::Int(Utf16Length(object.str()));
  }
  return object.is(Type::kString) ? StringMethod(object, property.str()) : Value();
}

Value GlobalFunction(std::string_view name, int64_t fixed_time) {
  if (name == "raise_exception") {
    return Method("raise_exception", [](CallArgs& args) -> absl::StatusOr<Value> {
      std::string message;
      for (const Value& a : args.positional) {
        absl::StatusOr<std::string> s = a.Primitive();
        message += s.ok() ? *s : a.Display();
      }
      return Fail(StrCat("raise_exception: ", message));
    });
  }
  if (name == "range") return Method("range", Range);
  if (name == "namespace") return Method("namespace", MakeNamespace);
  if (name == "strftime_now") {
    return Method("strftime_now",
                  [fixed_time](CallArgs& args) { return StrftimeNow(fixed_time, args); });
  }
  return Value();
}

}  // namespace exa::chat_template
