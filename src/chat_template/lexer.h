// Splits a chat template into tokens the way @huggingface/jinja does
// (docs/reference/api.md#chat-templates), including the whitespace rules transformers sets:
// trim_blocks (the newline after a block tag goes), lstrip_blocks (spaces and tabs before a block
// tag on its line go), the single trailing newline of the template dropped, and `-` on a tag
// stripping whitespace on that side. Each token keeps the line of the original template it came
// from, for error messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace exa::chat_template {

enum class TokenType {
  kText,
  kNumber,
  kString,
  kIdentifier,
  kEquals,
  kOpenParen,
  kCloseParen,
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kOpenSquare,
  kCloseSquare,
  kOpenCurly,
  kCloseCurly,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // < > <= >= == !=
  kUnary,           // a sign before an operand
  kComment,
};

struct Token {
  TokenType type;
  std::string value;
  int line = 0;
};

// INVALID_ARGUMENT "line N: ..." for what cannot be tokenized.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace exa::chat_template
