#include "chat_template/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <set>
#include <string>

#include "chat_template/text.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

using Type = Value::Type;

constexpr const char* kFilters =
    "abs, capitalize, default, first, float, indent, int, items, join, last, length, list, "
    "lower, map, rejectattr, replace, reverse, safe, selectattr, sort, string, title, tojson, "
    "trim, unique, upper";
constexpr const char* kTests =
    "boolean, callable, defined, eq, equalto, even, false, integer, iterable, lower, mapping, "
    "none, number, odd, sequence, string, true, undefined, upper";
constexpr const char* kMethods =
    "capitalize, endswith, get, items, keys, lower, lstrip, replace, rstrip, split, startswith, "
    "strip, title, upper, values";
constexpr const char* kFunctions = "namespace, raise_exception, range, strftime_now";

bool InList(const char* list, std::string_view name) {
  std::string_view rest(list);
  while (!rest.empty()) {
    const size_t comma = rest.find(", ");
    if (rest.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 2);
  }
  return false;
}

absl::Status Fail(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

absl::Status NotForType(std::string_view filter, const Value& v) {
  return Fail(StrCat("filter ", filter, " cannot be applied to ", v.TypeName()));
}

// A positional argument, else the keyword one, else null.
const Value* Arg(const CallArgs& args, size_t index, std::string_view keyword) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.Keyword(keyword);
}

// JavaScript's parseInt(s, 10) / parseFloat(s); NaN when no number starts the string.
double ParseJsNumber(const std::string& s, bool integer) {
  const std::string t(TrimStart(s));
  char* end = nullptr;
  const double d = integer ? static_cast<double>(std::strtoll(t.c_str(), &end, 10))
                           : std::strtod(t.c_str(), &end);
  return end == t.c_str() ? NAN : d;
}

absl::StatusOr<int> CompareValues(const Value& a, const Value& b) {
  if (a.IsNothing() || b.IsNothing()) {
    if (a.type() == b.type()) return 0;
    return Fail(StrCat("cannot compare ", a.TypeName(), " with ", b.TypeName()));
  }
  const auto numeric = [](const Value& v) { return v.IsNumber() || v.is(Type::kBool); };
  if (numeric(a) && numeric(b)) {
    const double x = a.is(Type::kBool) ? a.boolean() : a.number();
    const double y = b.is(Type::kBool) ? b.boolean() : b.number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (!a.is(Type::kString) || !b.is(Type::kString)) {
    return Fail(StrCat("cannot compare ", a.TypeName(), " with ", b.TypeName()));
  }
  const std::string x = JsLower(a.str()), y = JsLower(b.str());
  return x < y ? -1 : x > y ? 1 : 0;
}

absl::StatusOr<Value> SortArray(const Value& operand) {
  Array items = operand.array();
  absl::Status error;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    auto c = CompareValues(a, b);
    if (!c.ok()) error = c.status();
    return c.ok() && *c < 0;
  });
  EXA_RETURN_IF_ERROR(error);
  return Value::MakeArray(std::move(items));
}

absl::StatusOr<Value> ArrayFilter(const Value& v, std::string_view name) {
  const Array& a = v.array();
  if (name == "list") return v;
  if (name == "first") return a.empty() ? Value() : a.front();
  if (name == "last") return a.empty() ? Value() : a.back();
  if (name == "length") return Value::Int(static_cast<int64_t>(a.size()));
  if (name == "reverse") return Value::MakeArray(Array(a.rbegin(), a.rend()));
  if (name == "sort") return SortArray(v);
  if (name == "join") {
    std::string out;
    for (const Value& item : a) {
      EXA_ASSIGN_OR_RETURN(std::string s, item.Primitive());
      out += s;
    }
    return Value::String(std::move(out));
  }
  if (name == "string") return Value::String(v.Display());
  if (name == "unique") {
    Array out;
    for (const Value& item : a) {
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&](const Value& o) { return StrictEquals(o, item); });
      if (!seen) out.push_back(item);
    }
    return Value::MakeArray(std::move(out));
  }
  return NotForType(name, v);
}

std::string Indent(std::string_view s, std::string_view pad, bool first, bool blank) {
  std::string out;
  size_t start = 0;
  for (size_t i = 0;; ++i) {
    const size_t end = s.find('\n', start);
    std::string_view line = s.substr(start, end == s.npos ? s.npos : end - start);
    if ((first || i > 0) && (blank || !line.empty())) out.append(pad);
    out.append(line);
    if (end == s.npos) break;
    out.push_back('\n');
    start = end + 1;
  }
  return out;
}

absl::StatusOr<Value> StringFilter(const Value& v, std::string_view name) {
  const std::string& s = v.str();
  if (name == "length") return Value::Int(Utf16Length(s));
  if (name == "upper") return Value::String(JsUpper(s));
  if (name == "lower") return Value::String(JsLower(s));
  if (name == "title") return Value::String(JsTitle(s));
  if (name == "capitalize") return Value::String(JsCapitalize(s));
  if (name == "trim") return Value::String(std::string(Trim(s)));
  if (name == "indent") return Value::String(Indent(s, "    ", false, false));
  if (name == "join" || name == "string") return v;
  if (name == "int" || name == "float") {
    const double d = ParseJsNumber(s, name == "int");
    if (name == "int") return Value::Number(std::isnan(d) ? 0 : d, false);
    return Value::Float(std::isnan(d) ? 0 : d);
  }
  return NotForType(name, v);
}

absl::StatusOr<Value> ScalarFilter(const Value& v, std::string_view name) {
  if (v.IsNumber()) {
    if (name == "abs") {
      return v.is(Type::kInt) ? Value::Int(std::llabs(v.integer()))
                              : Value::Float(std::fabs(v.number()));
    }
    if (name == "int") return Value::Number(std::trunc(v.number()), false);
    if (name == "float") return Value::Float(v.number());
    if (name == "string") return Value::String(v.Display());
  } else if (v.is(Type::kBool)) {
    if (name == "bool") return v;
    if (name == "int") return Value::Int(v.boolean() ? 1 : 0);
    if (name == "float") return Value::Float(v.boolean() ? 1 : 0);
    if (name == "string") return Value::String(v.boolean() ? "true" : "false");
  } else if (v.is(Type::kObject)) {
    if (name == "length") return Value::Int(static_cast<int64_t>(v.entries().size()));
    if (name == "items" || name == "keys" || name == "values") {
      EXA_ASSIGN_OR_RETURN(Value method, GetMember(v, Value::String(std::string(name))));
      CallArgs none;
      return method.function()(none);
    }
  }
  return NotForType(name, v);
}

absl::StatusOr<Value> ToJsonFilter(const Value& v, bool called, const CallArgs& args) {
  JsonOptions options;
  if (called) {
    const Value* indent = args.Keyword("indent");
    const Value* ascii = args.Keyword("ensure_ascii");
    const Value* sort = args.Keyword("sort_keys");
    if (indent && !indent->is(Type::kInt) && !indent->is(Type::kNull)) {
      return Fail("tojson: indent must be an integer");
    }
    if (indent && indent->is(Type::kInt)) options.indent = static_cast<int>(indent->integer());
    if (ascii && !ascii->is(Type::kBool)) return Fail("tojson: ensure_ascii must be a boolean");
    if (sort && !sort->is(Type::kBool)) return Fail("tojson: sort_keys must be a boolean");
    options.ensure_ascii = ascii && ascii->boolean();
    options.sort_keys = sort && sort->boolean();
    if (args.Keyword("separators")) return Fail("tojson: separators is not supported");
  }
  EXA_ASSIGN_OR_RETURN(std::string json, ToJson(v, options));
  return Value::String(std::move(json));
}

absl::StatusOr<Value> SelectAttr(const Value& v, bool select, const CallArgs& args) {
  const std::string_view name = select ? "selectattr" : "rejectattr";
  for (const Value& a : args.positional) {
    if (!a.is(Type::kString)) return Fail(StrCat(name, ": arguments must be strings"));
  }
  if (args.positional.empty()) return Fail(StrCat(name, ": expected an attribute name"));
  const std::string test = args.positional.size() > 1 ? args.positional[1].str() : "";
  if (!test.empty() && !IsKnownTest(test)) return Fail(StrCat(name, ": unknown test ", test));
  Array out;
  for (const Value& item : v.array()) {
    if (!item.IsMapping()) return Fail(StrCat(name, ": can only be applied to a list of objects"));
    const Value* attr = item.Find(args.positional[0].str());
    bool result = false;
    if (attr != nullptr && test.empty()) {
      result = attr->Truthy();
    } else if (attr != nullptr && (test == "equalto" || test == "eq")) {
      result = args.positional.size() > 2 && StrictEquals(*attr, args.positional[2]);
    } else if (attr != nullptr) {
      EXA_ASSIGN_OR_RETURN(result, ApplyTest(*attr, test));
    }
    if (result == select) out.push_back(item);
  }
  return Value::MakeArray(std::move(out));
}

absl::StatusOr<Value> MapAttribute(const Value& v, const CallArgs& args) {
  const Value* attr = args.Keyword("attribute");
  if (attr == nullptr) return Fail("map: only map(attribute=...) is supported");
  if (!attr->is(Type::kString)) return Fail("map: attribute must be a string");
  const Value* fallback = args.Keyword("default");
  Array out;
  for (const Value& item : v.array()) {
    if (!item.IsMapping()) return Fail("map: items must be objects");
    Value value = item;
    for (const std::string& part : SplitOn(attr->str(), ".", -1)) {
      const Value* next = value.Find(part);
      value = next ? *next : Value();
    }
    out.push_back(value.is(Type::kUndefined) && fallback ? *fallback : value);
  }
  return Value::MakeArray(std::move(out));
}

absl::StatusOr<Value> CalledFilter(const Value& v, std::string_view name, CallArgs& args) {
  if (name == "default") {
    const Value* fallback = Arg(args, 0, "default_value");
    const Value* boolean = Arg(args, 1, "boolean");
    if (boolean && !boolean->is(Type::kBool)) return Fail("default: boolean must be a boolean");
    const bool use = v.is(Type::kUndefined) || (boolean && boolean->boolean() && !v.Truthy());
    return use ? (fallback ? *fallback : Value::String("")) : v;
  }
  if (name == "join" && (v.is(Type::kArray) || v.is(Type::kString))) {
    const Value* sep = Arg(args, 0, "separator");
    if (sep && !sep->is(Type::kString)) return Fail("join: the separator must be a string");
    std::string out;
    const std::string separator = sep ? sep->str() : "";
    std::vector<std::string> parts;
    if (v.is(Type::kString)) {
      for (std::string_view cp : CodePoints(v.str())) parts.emplace_back(cp);
    } else {
      for (const Value& item : v.array()) {
        EXA_ASSIGN_OR_RETURN(std::string s, item.Primitive());
        parts.push_back(std::move(s));
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
    return Value::String(std::move(out));
  }
  if (v.is(Type::kArray) && (name == "selectattr" || name == "rejectattr")) {
    return SelectAttr(v, name == "selectattr", args);
  }
  if (v.is(Type::kArray) && name == "map") return MapAttribute(v, args);
  if (v.is(Type::kString) && name == "replace") {
    EXA_ASSIGN_OR_RETURN(Value method, GetMember(v, Value::String("replace")));
    return method.function()(args);
  }
  if (v.is(Type::kString) && name == "indent") {
    const Value* width = Arg(args, 0, "width");
    const Value* first = Arg(args, 1, "first");
    const Value* blank = Arg(args, 2, "blank");
    std::string pad = "    ";
    if (width && width->is(Type::kString)) pad = width->str();
    if (width && width->is(Type::kInt)) pad.assign(std::max<int64_t>(0, width->integer()), ' ');
    return Value::String(Indent(v.str(), pad, first && first->Truthy(), blank && blank->Truthy()));
  }
  return Fail(StrCat("filter ", name, "(...) cannot be applied to ", v.TypeName()));
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return InList(kFilters, name) || name == "bool"; }
bool IsKnownTest(std::string_view name) { return InList(kTests, name); }
bool IsKnownMethod(std::string_view name) { return InList(kMethods, name); }
bool IsKnownFunction(std::string_view name) { return InList(kFunctions, name); }
const char* KnownFilters() { return kFilters; }
const char* KnownTests() { return kTests; }
const char* KnownMethods() { return kMethods; }

absl::StatusOr<Value> ApplyFilter(const Value& operand, std::string_view name, bool called,
                                  CallArgs& args) {
  if (name == "tojson") return ToJsonFilter(operand, called, args);
  if (name == "safe" && !called) return operand;
  if (called) return CalledFilter(operand, name, args);
  if (operand.is(Type::kArray)) return ArrayFilter(operand, name);
  if (operand.is(Type::kString)) return StringFilter(operand, name);
  return ScalarFilter(operand, name);
}

absl::StatusOr<bool> ApplyTest(const Value& v, std::string_view name) {
  if (name == "odd" || name == "even") {
    if (!v.is(Type::kInt))
      return Fail(StrCat("test ", name, " needs an integer, not ", v.TypeName()));
    return (v.integer() % 2 != 0) == (name == "odd");
  }
  if (name == "boolean") return v.is(Type::kBool);
  if (name == "callable") return v.is(Type::kFunction);
  if (name == "false") return v.is(Type::kBool) && !v.boolean();
  if (name == "true") return v.is(Type::kBool) && v.boolean();
  if (name == "none") return v.is(Type::kNull);
  if (name == "string") return v.is(Type::kString);
  if (name == "number") return v.IsNumber();
  if (name == "integer") return v.is(Type::kInt);
  if (name == "iterable") return v.is(Type::kArray) || v.is(Type::kString);
  if (name == "mapping") return v.is(Type::kObject);
  if (name == "sequence") return v.is(Type::kArray) || v.is(Type::kObject) || v.is(Type::kString);
  if (name == "lower") return v.is(Type::kString) && JsLower(v.str()) == v.str();
  if (name == "upper") return v.is(Type::kString) && JsUpper(v.str()) == v.str();
  if (name == "defined") return !v.is(Type::kUndefined);
  if (name == "undefined") return v.is(Type::kUndefined);
  // equalto/eq without an argument compare with undefined.
  if (name == "equalto" || name == "eq") return v.IsNothing();
  return Fail(StrCat("unknown test ", name));
}

}  // namespace exa::chat_template
