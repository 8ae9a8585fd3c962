#include "chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "chat_template/text.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {

Value Value::Null() {
  Value v;
  v.type_ = Type::kNull;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.int_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.float_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::MakeArray(Array items) {
  Value v;
  v.type_ = Type::kArray;
  v.array_ = std::make_shared<const Array>(std::move(items));
  return v;
}

Value Value::Object(Entries entries) {
  Value v;
  v.type_ = Type::kObject;
  v.entries_ = std::make_shared<Entries>(std::move(entries));
  return v;
}

Value Value::Namespace(Entries entries) {
  Value v = Object(std::move(entries));
  v.type_ = Type::kNamespace;
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.type_ = Type::kFunction;
  v.function_ = std::make_shared<const std::pair<std::string, NativeFunction>>(std::move(name),
                                                                               std::move(fn));
  return v;
}

Value Value::Number(double d, bool floating) {
  // 2^63: the first double past int64's range.
  if (floating || !std::isfinite(d) || std::fabs(d) >= 9223372036854775808.0) return Float(d);
  return Int(static_cast<int64_t>(d));
}

namespace {

// A key JavaScript treats as an array index, which own-property order lists first.
bool IsArrayIndex(const std::string& key, uint64_t* index) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return false;
  uint64_t n = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  *index = n;
  return n < 4294967295ULL;
}

Value NumberFromJson(const nlohmann::ordered_json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::Int(static_cast<int64_t>(u));
    return Value::Float(static_cast<double>(u));
  }
  if (j.is_number_integer()) return Value::Int(j.get<int64_t>());
  const double d = j.get<double>();
  // Number.isInteger: JSON's 2.0 is the integer 2 in JavaScript.
  if (std::trunc(d) == d && std::fabs(d) < 9007199254740992.0) {
    return Value::Int(static_cast<int64_t>(d));
  }
  return Value::Float(d);
}

}  // namespace

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Null();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(FromJson(item));
      return MakeArray(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<uint64_t, std::string>> indices;
      Entries named;
      for (const auto& [key, item] : j.items()) {
        uint64_t index = 0;
        if (IsArrayIndex(key, &index)) {
          indices.emplace_back(index, key);
        } else {
          named.emplace_back(key, FromJson(item));
        }
      }
      std::sort(indices.begin(), indices.end());
      Entries entries;
      for (const auto& [index, key] : indices) entries.emplace_back(key, FromJson(j.at(key)));
      for (auto& entry : named) entries.push_back(std::move(entry));
      return Object(std::move(entries));
    }
    default:
      return NumberFromJson(j);
  }
}

const void* Value::identity() const {
  if (array_) return array_.get();
  if (entries_) return entries_.get();
  if (function_) return function_.get();
  return nullptr;
}

const Value* Value::Find(std::string_view key) const {
  if (!IsMapping()) return nullptr;
  for (const auto& [k, v] : *entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNull:
      return false;
    case Type::kBool:
      return bool_;
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0 && !std::isnan(float_);
    case Type::kString:
      return !string_->empty();
    case Type::kArray:
      return !array_->empty();
    case Type::kObject:
      return !entries_->empty();
    case Type::kNamespace:
    case Type::kFunction:
      return true;
  }
  return false;
}

std::string Value::Display() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNull:
      return "";
    case Type::kBool:
      return bool_ ? "true" : "false";
    case Type::kInt:
      return std::to_string(int_);
    case Type::kFloat: {
      if (float_ == 0 && std::signbit(float_)) return "-0.0";
      std::string s = JsNumber(float_);
      // FloatValue.toString: toFixed(1) for an integral value.
      if (std::isfinite(float_) && std::trunc(float_) == float_ && s.find('e') == s.npos) {
        s += ".0";
      }
      return s;
    }
    case Type::kString:
      return *string_;
    case Type::kFunction:
      return StrCat("function ", function_->first);
    default: {
      JsonOptions options;
      options.undefined_as_null = false;
      auto json = ToJson(*this, options);
      return json.ok() ? *json : "";
    }
  }
}

absl::StatusOr<std::string> Value::Primitive() const {
  switch (type_) {
    case Type::kUndefined:
      return std::string();
    case Type::kNull:
      return absl::InvalidArgumentError("cannot concatenate none");
    case Type::kBool:
      return std::string(bool_ ? "true" : "false");
    case Type::kInt:
    case Type::kFloat:
      return JsNumber(number());
    case Type::kString:
      return *string_;
    case Type::kArray: {
      std::string out;
      for (size_t i = 0; i < array_->size(); ++i) {
        if (i > 0) out += ",";
        out += (*array_)[i].Display();
      }
      return out;
    }
    case Type::kObject:
    case Type::kNamespace:
      return std::string("[object Map]");
    case Type::kFunction:
      break;
  }
  return absl::InvalidArgumentError(StrCat("cannot concatenate function ", function_->first));
}

const char* Value::TypeName() const {
  switch (type_) {
    case Type::kUndefined:
      return "an undefined value";
    case Type::kNull:
      return "none";
    case Type::kBool:
      return "a boolean";
    case Type::kInt:
      return "an integer";
    case Type::kFloat:
      return "a float";
    case Type::kString:
      return "a string";
    case Type::kArray:
      return "a list";
    case Type::kObject:
      return "a mapping";
    case Type::kNamespace:
      return "a namespace";
    case Type::kFunction:
      return "a function";
  }
  return "?";
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string JsNumber(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  if (d < 0) return "-" + JsNumber(-d);
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, end);  // shortest round trip: "1.2345e+02"
  const size_t e_at = sci.find('e');
  std::string digits = sci.substr(0, e_at);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int k = static_cast<int>(digits.size());
  const int n = std::atoi(sci.c_str() + e_at + 1) + 1;  // value = 0.digits * 10^n
  if (k <= n && n <= 21) return digits + std::string(static_cast<size_t>(n - k), '0');
  if (0 < n && n <= 21) return digits.substr(0, n) + "." + digits.substr(n);
  if (-6 < n && n <= 0) return "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  const int e = n - 1;
  std::string out = digits.substr(0, 1);
  if (k > 1) out += "." + digits.substr(1);
  return StrCat(out, "e", e < 0 ? "-" : "+", std::abs(e));
}

namespace {

using Type = Value::Type;

bool NumericLike(const Value& v) { return v.IsNumber() || v.is(Type::kBool); }
double NumericOf(const Value& v) {
  return v.is(Type::kBool) ? (v.boolean() ? 1.0 : 0.0) : v.number();
}

// JavaScript's ToNumber on a string: trimmed, empty is 0, anything else not a number is NaN.
double JsStringToNumber(const std::string& s) {
  const std::string trimmed(Trim(s));
  if (trimmed.empty()) return 0;
  char* end = nullptr;
  const double d = std::strtod(trimmed.c_str(), &end);
  return end == trimmed.c_str() + trimmed.size() ? d : NAN;
}

}  // namespace

bool LooseEquals(const Value& a, const Value& b) {
  if (a.IsNothing() || b.IsNothing()) return a.IsNothing() && b.IsNothing();
  if (NumericLike(a) && NumericLike(b)) return NumericOf(a) == NumericOf(b);
  if (a.is(Type::kString) && b.is(Type::kString)) return a.str() == b.str();
  if (a.is(Type::kString) && NumericLike(b)) return JsStringToNumber(a.str()) == NumericOf(b);
  if (b.is(Type::kString) && NumericLike(a)) return JsStringToNumber(b.str()) == NumericOf(a);
  return a.identity() != nullptr && a.identity() == b.identity();
}

bool StrictEquals(const Value& a, const Value& b) {
  if (a.IsNothing() || b.IsNothing()) return a.IsNothing() && b.IsNothing();
  if (a.IsNumber() && b.IsNumber()) return a.number() == b.number();
  if (a.type() != b.type()) return false;
  if (a.is(Type::kBool)) return a.boolean() == b.boolean();
  if (a.is(Type::kString)) return a.str() == b.str();
  return a.identity() == b.identity();
}

namespace {

absl::StatusOr<std::string> ContainerToJson(const Value& v, const JsonOptions& o, int depth) {
  const std::string item_separator = o.separators ? o.separators->first : o.indent ? "," : ", ";
  const std::string key_separator = o.separators ? o.separators->second : ": ";
  const std::string base = "\n" + std::string(static_cast<size_t>(o.indent * depth), ' ');
  const std::string child = base + std::string(static_cast<size_t>(o.indent), ' ');
  std::vector<std::string> core;
  if (v.is(Type::kArray)) {
    for (const Value& item : v.array()) {
      EXA_ASSIGN_OR_RETURN(std::string s, ToJson(item, o, depth + 1));
      core.push_back(std::move(s));
    }
  } else {
    Entries entries = v.entries();
    if (o.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
    }
    for (const auto& [key, item] : entries) {
      std::string s = o.indent ? child : "";
      AppendJsonString(key, o.ensure_ascii, &s);
      s += key_separator;
      EXA_ASSIGN_OR_RETURN(std::string value, ToJson(item, o, depth + 1));
      core.push_back(s + value);
    }
  }
  const bool is_array = v.is(Type::kArray);
  std::string out = is_array ? "[" : "{";
  const bool spread = o.indent && !core.empty();
  if (spread && is_array) out += child;
  for (size_t i = 0; i < core.size(); ++i) {
    if (i > 0) out += item_separator + (spread && is_array ? child : "");
    out += core[i];
  }
  if (spread) out += base;
  out += is_array ? "]" : "}";
  return out;
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& o, int depth) {
  switch (v.type()) {
    case Type::kNull:
      return std::string("null");
    case Type::kUndefined:
      return std::string(o.undefined_as_null ? "null" : "undefined");
    case Type::kBool:
      return std::string(v.boolean() ? "true" : "false");
    case Type::kInt:
      return std::to_string(v.integer());
    case Type::kFloat:
      return std::isfinite(v.number()) ? JsNumber(v.number()) : "null";
    case Type::kString: {
      std::string out;
      AppendJsonString(v.str(), o.ensure_ascii, &out);
      return out;
    }
    case Type::kFunction:
      return absl::InvalidArgumentError(
          StrCat("tojson: cannot convert function ", v.function_name(), " to JSON"));
    default:
      return ContainerToJson(v, o, depth);
  }
}

}  // namespace exa::chat_template
