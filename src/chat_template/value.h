// The values a chat template computes with (docs/reference/api.md#chat-templates). Their semantics
// are those of @huggingface/jinja, the Jinja of transformers.js that the conformance test holds
// this module to: JSON-shaped data whose objects keep their insertion order, numbers that print the
// way JavaScript prints them, truthiness as in Python (an empty list or mapping is false), and two
// kinds of "nothing": undefined (a missing variable or key) and none.
//
// Thread safety: a Value is a plain value; arrays and objects are shared between copies and only
// a namespace() is ever changed after it is built, by the render that owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exa::chat_template {

class Value;
struct CallArgs;
using Array = std::vector<Value>;
// Insertion-ordered, as JavaScript's Map: tojson and items() must list keys in the order given.
using Entries = std::vector<std::pair<std::string, Value>>;
using NativeFunction = std::function<absl::StatusOr<Value>(CallArgs&)>;

class Value {
 public:
  enum class Type {
    kUndefined,
    kNull,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,
    kFunction
  };

  Value() = default;
  static Value Null();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeArray(Array items);
  static Value Object(Entries entries);
  static Value Namespace(Entries entries);
  static Value Function(std::string name, NativeFunction fn);
  // A JavaScript number as @huggingface/jinja keeps it: an integer unless `floating`, or unless
  // it is out of int64's range (or not finite), where it stays a float.
  static Value Number(double d, bool floating);
  // JSON as JSON.parse gives it to @huggingface/jinja: integral numbers are integers and keys
  // that are array indices come first, ascending (JavaScript's own-property order).
  static Value FromJson(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is(Type t) const { return type_ == t; }
  bool IsNumber() const { return type_ == Type::kInt || type_ == Type::kFloat; }
  bool IsNothing() const { return type_ == Type::kUndefined || type_ == Type::kNull; }
  bool IsMapping() const { return type_ == Type::kObject || type_ == Type::kNamespace; }
  bool boolean() const { return bool_; }
  int64_t integer() const { return int_; }
  double number() const { return type_ == Type::kInt ? static_cast<double>(int_) : float_; }
  const std::string& str() const { return *string_; }
  const Array& array() const { return *array_; }
  const Entries& entries() const { return *entries_; }
  Entries& mutable_entries() const { return *entries_; }
  const std::string& function_name() const { return function_->first; }
  const NativeFunction& function() const { return function_->second; }
  // Pointer identity of an array or mapping, which is what JavaScript's == compares.
  const void* identity() const;

  // The entry `key` of a mapping, or nullptr.
  const Value* Find(std::string_view key) const;
  // Python truthiness as @huggingface/jinja has it.
  bool Truthy() const;
  // What {{ value }} prints: numbers as JavaScript prints them (a float that is integral with
  // ".0"), true/false, lists and mappings as JSON; undefined and none print nothing.
  std::string Display() const;
  // The value JavaScript's String() gives the underlying value, which `~` and `+` concatenate.
  absl::StatusOr<std::string> Primitive() const;
  // "an integer", "a string", "none"...: the type, as an error message names it.
  const char* TypeName() const;

 private:
  Type type_ = Type::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const Array> array_;
  std::shared_ptr<Entries> entries_;
  std::shared_ptr<const std::pair<std::string, NativeFunction>> function_;
};

// Positional then keyword arguments of a call, as the caller wrote them.
struct CallArgs {
  Array positional;
  Entries keyword;
  const Value* Keyword(std::string_view name) const;
};

struct JsonOptions {
  int indent = 0;  // 0: one line, with ", " and ": " as separators
  bool undefined_as_null = true;
  bool sort_keys = false;
  bool ensure_ascii = false;
  const std::pair<std::string, std::string>* separators = nullptr;
};
// JSON.stringify's rendering of `v` as @huggingface/jinja's tojson writes it.
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options, int depth = 0);
// JavaScript's Number.prototype.toString.
std::string JsNumber(double d);
// JavaScript's loose ==, on the values @huggingface/jinja compares.
bool LooseEquals(const Value& a, const Value& b);
// JavaScript's ===, which `in` over a list uses.
bool StrictEquals(const Value& a, const Value& b);

}  // namespace exa::chat_template
