// The filters, tests, methods and global functions a chat template may use
// (docs/reference/api.md#chat-templates), with @huggingface/jinja's semantics. The parser checks
// names against these lists so that a template using anything else fails when it is loaded.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "chat_template/value.h"

namespace exa::chat_template {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
bool IsKnownMethod(std::string_view name);
bool IsKnownFunction(std::string_view name);
// The names above, comma-separated, for error messages.
const char* KnownFilters();
const char* KnownTests();
const char* KnownMethods();

// `operand | name` (`called`: written name(...), with `args`).
absl::StatusOr<Value> ApplyFilter(const Value& operand, std::string_view name, bool called,
                                  CallArgs& args);
// `operand is name`.
absl::StatusOr<bool> ApplyTest(const Value& operand, std::string_view name);
// `object.name`: a key of a mapping, an index of a list or string, or a method of the type
// (bound to `object`); undefined when there is none.
absl::StatusOr<Value> GetMember(const Value& object, const Value& property);
// `left op right` for the binary operators other than and/or (which short-circuit), with
// @huggingface/jinja's rules: == is JavaScript's loose equality, + concatenates when either side
// is a string, ~ concatenates anything but none, arithmetic follows JavaScript numbers.
absl::StatusOr<Value> BinaryOperation(std::string_view op, const Value& left, const Value& right);
// The global functions: raise_exception, range, namespace, strftime_now (reading the clock, or
// `fixed_time` in Unix seconds when it is not negative); undefined for any other name.
Value GlobalFunction(std::string_view name, int64_t fixed_time);

}  // namespace exa::chat_template
