// The parsed form of a chat template (docs/reference/api.md#chat-templates): statements holding
// expressions, each with the template line it came from. Built once by Parse and only read by
// renders afterwards, so one parsed template serves any number of concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat_template/value.h"

namespace exa::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kMember,   // operands: object, property (a literal for `.name`)
    kSlice,    // operands: object, start, stop, step (each may be null)
    kCall,     // operands: callee; args
    kFilter,   // operands: operand; name; args when written with parentheses (call = true)
    kTest,     // operands: operand; name; negate
    kUnary,    // operands: argument; name: not, -, +
    kBinary,   // operands: left, right; name: the operator
    kTernary,  // operands: condition, then, else
    kSelect,   // operands: value, condition (`x if c` without else: undefined when false)
    kList,     // operands: items
    kTuple,    // operands: items
    kDict,     // operands: key, value, key, value...
    kKeyword,  // name = operands[0], in a call's arguments
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negate = false;
  bool call = false;
  std::vector<ExprPtr> operands;
  std::vector<ExprPtr> args;
};

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kMacro, kBreak, kContinue };
  Kind kind;
  int line = 0;
  std::string text;        // kText
  ExprPtr expr;            // kOutput: the value; kIf: the test; kFor: the iterable; kSet: the value
  ExprPtr target;          // kFor: the loop variable(s); kSet: the assignee
  ExprPtr condition;       // kFor: `for x in xs if condition`
  std::vector<Stmt> body;  // kSet without a value: the block whose output is assigned
  std::vector<Stmt> orelse;     // kIf: else (an elif is one nested kIf); kFor: else
  std::string name;             // kMacro
  std::vector<ExprPtr> params;  // kMacro: kName, or kKeyword with the default
};

}  // namespace exa::chat_template
