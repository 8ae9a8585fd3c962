// Parses a chat template's tokens into statements (docs/reference/api.md#chat-templates), with the
// grammar and operator precedence of @huggingface/jinja. Everything a render could not do is
// refused here, with its line: statements other than if/for/set/macro/break/continue (call,
// filter blocks, include, import, extends, block, raw...), filters, tests, methods and functions
// this engine does not implement, and macros using varargs, kwargs or caller.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "chat_template/ast.h"
#include "chat_template/lexer.h"

namespace exa::chat_template {

// INVALID_ARGUMENT "line N: ..." naming the construct.
absl::StatusOr<std::vector<Stmt>> Parse(std::vector<Token> tokens);

}  // namespace exa::chat_template
