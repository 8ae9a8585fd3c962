// BinaryOperation (chat_template/builtins.h), in the order @huggingface/jinja tries its cases.
#include <cmath>
#include <string>

#include "chat_template/builtins.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

using Type = Value::Type;

absl::Status Fail(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

absl::Status Unsupported(std::string_view op, const Value& left, const Value& right) {
  return Fail(StrCat("operator ", op, " is not defined between ", left.TypeName(), " and ",
                     right.TypeName()));
}

absl::StatusOr<Value> Arithmetic(std::string_view op, const Value& left, const Value& right) {
  const double a = left.number(), b = right.number();
  const bool floating = left.is(Type::kFloat) || right.is(Type::kFloat);
  const auto number = [floating](double d) { return Value::Number(d, floating); };
  if (op == "+") return number(a + b);
  if (op == "-") return number(a - b);
  if (op == "*") return number(a * b);
  if ((op == "/" || op == "//" || op == "%") && b == 0) return Fail("division by zero");
  if (op == "/") return Value::Float(a / b);
  if (op == "//") return number(std::floor(a / b));
  if (op == "%") return number(std::fmod(a, b));
  if (op == "<") return Value::Bool(a < b);
  if (op == ">") return Value::Bool(a > b);
  if (op == "<=") return Value::Bool(a <= b);
  if (op == ">=") return Value::Bool(a >= b);
  return Unsupported(op, left, right);
}

absl::StatusOr<Value> Power(const Value& left, const Value& right) {
  const double a = left.is(Type::kBool) ? left.boolean() : left.number();
  const double b = right.is(Type::kBool) ? right.boolean() : right.number();
  if (a == 0 && b < 0) return Fail("0.0 cannot be raised to a negative power");
  const double result = std::pow(a, b);
  if (!std::isfinite(result)) return Fail("exponentiation result is not a finite number");
  const bool floating = left.is(Type::kFloat) || right.is(Type::kFloat) || b < 0;
  return Value::Number(result, floating);
}

absl::StatusOr<Value> Concatenate(const Value& left, const Value& right) {
  EXA_ASSIGN_OR_RETURN(std::string a, left.Primitive());
  EXA_ASSIGN_OR_RETURN(std::string b, right.Primitive());
  return Value::String(a + b);
}

absl::StatusOr<Value> WithNothing(std::string_view op, const Value& left, const Value& right) {
  if (right.is(Type::kUndefined) && (op == "in" || op == "not in")) {
    return Value::Bool(op == "not in");
  }
  if (op == "~" && !left.is(Type::kNull) && !right.is(Type::kNull)) {
    return Concatenate(left, right);
  }
  return Fail(StrCat("operator ", op, " on an undefined value (a missing variable or key)"));
}

// `in` / `not in` over a list, a string or a mapping's keys; nullopt when not defined.
std::optional<bool> Membership(const Value& left, const Value& right) {
  if (right.is(Type::kArray)) {
    for (const Value& item : right.array()) {
      if (StrictEquals(item, left)) return true;
    }
    return false;
  }
  if (left.is(Type::kString) && right.is(Type::kString)) {
    return right.str().find(left.str()) != std::string::npos;
  }
  if (left.is(Type::kString) && right.is(Type::kObject)) return right.Find(left.str()) != nullptr;
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Value> BinaryOperation(std::string_view op, const Value& left, const Value& right) {
  if (op == "==") return Value::Bool(LooseEquals(left, right));
  if (op == "!=") return Value::Bool(!LooseEquals(left, right));
  const bool membership = op == "in" || op == "not in";
  if (left.IsNumber() && right.IsNumber() && op != "~" && op != "**") {
    if (membership) return Unsupported(op, left, right);
    return Arithmetic(op, left, right);
  }
  if (left.is(Type::kUndefined) || right.is(Type::kUndefined)) {
    return WithNothing(op, left, right);
  }
  if (left.is(Type::kNull) || right.is(Type::kNull)) {
    return Fail(StrCat("operator ", op, " on none"));
  }
  if (op == "~") return Concatenate(left, right);
  const auto numeric = [](const Value& v) { return v.IsNumber() || v.is(Type::kBool); };
  if (op == "**" && numeric(left) && numeric(right)) return Power(left, right);
  if (op == "+" && left.is(Type::kArray) && right.is(Type::kArray)) {
    Array items = left.array();
    items.insert(items.end(), right.array().begin(), right.array().end());
    return Value::MakeArray(std::move(items));
  }
  if (op == "+" && !(left.is(Type::kArray) && right.is(Type::kArray)) &&
      (left.is(Type::kString) || right.is(Type::kString))) {
    return Concatenate(left, right);
  }
  if (membership) {
    if (std::optional<bool> in = Membership(left, right)) {
      return Value::Bool(*in == (op == "in"));
    }
  }
  return Unsupported(op, left, right);
}

}  // namespace exa::chat_template
