#include "chat_template/parser.h"

#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "chat_template/builtins.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

// Nesting deeper than this is refused rather than risk the parser's stack; real chat templates
// nest a handful of levels.
constexpr int kMaxDepth = 200;

constexpr const char* kSupportedStatements =
    "chat templates may use if/elif/else, for, set, macro, break and continue "
    "(docs/reference/api.md#chat-templates)";

using Kind = Expr::Kind;

ExprPtr Make(Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr MakeBinary(std::string op, ExprPtr left, ExprPtr right, int line) {
  ExprPtr e = Make(Kind::kBinary, line);
  e->name = std::move(op);
  e->operands.push_back(std::move(left));
  e->operands.push_back(std::move(right));
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  absl::StatusOr<std::vector<Stmt>> Run();

 private:
  using ExprOr = absl::StatusOr<ExprPtr>;
  using ExprFn = ExprOr (Parser::*)();

  const Token* Peek(size_t ahead = 0) const {
    return pos_ + ahead < tokens_.size() ? &tokens_[pos_ + ahead] : nullptr;
  }
  bool Is(TokenType type) const { return Peek() != nullptr && Peek()->type == type; }
  bool IsWord(std::string_view word, size_t ahead = 0) const {
    const Token* t = Peek(ahead);
    return t != nullptr && t->type == TokenType::kIdentifier && t->value == word;
  }
  bool IsStatement(std::initializer_list<std::string_view> names) const;
  int Line() const {
    if (const Token* t = Peek()) return t->line;
    return tokens_.empty() ? 1 : tokens_.back().line;
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(StrCat("line ", Line(), ": ", what));
  }
  absl::Status Expect(TokenType type, std::string_view what);
  absl::Status ExpectEnd(std::string_view end_word);

  absl::StatusOr<std::vector<Stmt>> ParseUntil(std::initializer_list<std::string_view> ends,
                                               std::string_view opener, int opener_line);
  absl::StatusOr<std::optional<Stmt>> ParseAny();
  absl::StatusOr<Stmt> ParseStatement();
  absl::StatusOr<Stmt> ParseSet(int line);
  // `consume_end`: false for an elif, whose {% endif %} the first if of the chain reads.
  absl::StatusOr<Stmt> ParseIf(int line, bool consume_end);
  absl::StatusOr<Stmt> ParseFor(int line);
  absl::StatusOr<Stmt> ParseMacro(int line);
  absl::Status CheckAssignee(const Expr& target) const;

  ExprOr ParseSequence(bool primary);
  ExprOr ParseExpression();
  ExprOr ParseLeftAssociative(ExprFn operand, const std::function<bool()>& at_operator);
  ExprOr ParseOr();
  ExprOr ParseAnd();
  ExprOr ParseNot();
  ExprOr ParseComparison();
  ExprOr ParseAdditive();
  ExprOr ParseMultiplicative();
  ExprOr ParsePower();
  ExprOr ParseTest();
  ExprOr ParseFilter();
  ExprOr ParseUnarySign();
  ExprOr ParseCallMember();
  ExprOr ParseCall(ExprPtr callee);
  absl::Status ParseArgs(std::vector<ExprPtr>* args, bool parameters);
  ExprOr ParseMember(ExprPtr object);
  ExprOr ParseSubscript(ExprPtr object, int line);
  ExprOr ParsePrimary();
  ExprOr ParseListOrDict(const Token& open);
  absl::Status CheckCallee(const Expr& callee);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, int>> called_names_;
};

// Counts nesting for the parse functions that recurse.
class DepthGuard {
 public:
  explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
  ~DepthGuard() { --*depth_; }
  bool too_deep() const { return *depth_ > kMaxDepth; }

 private:
  int* depth_;
};

bool Parser::IsStatement(std::initializer_list<std::string_view> names) const {
  if (!Is(TokenType::kOpenStatement)) return false;
  for (std::string_view name : names) {
    if (IsWord(name, 1)) return true;
  }
  return false;
}

absl::Status Parser::Expect(TokenType type, std::string_view what) {
  if (!Is(type)) {
    return Error(Peek() == nullptr ? StrCat("expected ", what, ", the template ends")
                                   : StrCat("expected ", what, ", got '", Peek()->value, "'"));
  }
  ++pos_;
  return absl::OkStatus();
}

absl::Status Parser::ExpectEnd(std::string_view end_word) {
  EXA_RETURN_IF_ERROR(Expect(TokenType::kOpenStatement, "{%"));
  if (!IsWord(end_word)) return Error(StrCat("expected ", end_word));
  ++pos_;
  return Expect(TokenType::kCloseStatement, "%}");
}

absl::StatusOr<std::vector<Stmt>> Parser::Run() {
  std::vector<Stmt> program;
  while (pos_ < tokens_.size()) {
    EXA_ASSIGN_OR_RETURN(std::optional<Stmt> stmt, ParseAny());
    if (stmt) program.push_back(*std::move(stmt));
  }
  for (const auto& [name, line] : called_names_) {
    if (!IsKnownFunction(name) && macros_.count(name) == 0) {
      return absl::InvalidArgumentError(
          StrCat("line ", line, ": unknown function ", name,
                 "() (a chat template may call its own macros and raise_exception, range, "
                 "namespace, strftime_now)"));
    }
  }
  return program;
}

absl::StatusOr<std::vector<Stmt>> Parser::ParseUntil(std::initializer_list<std::string_view> ends,
                                                     std::string_view opener, int opener_line) {
  std::vector<Stmt> body;
  while (!IsStatement(ends)) {
    if (pos_ >= tokens_.size()) {
      return absl::InvalidArgumentError(StrCat("line ", opener_line, ": {% ", opener,
                                               " %} is never closed (expected {% ", *ends.begin(),
                                               " %})"));
    }
    EXA_ASSIGN_OR_RETURN(std::optional<Stmt> stmt, ParseAny());
    if (stmt) body.push_back(*std::move(stmt));
  }
  return body;
}

absl::StatusOr<std::optional<Stmt>> Parser::ParseAny() {
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Error(StrCat("nested deeper than ", kMaxDepth, " levels"));
  const Token& t = tokens_[pos_];
  switch (t.type) {
    case TokenType::kComment:
      ++pos_;
      return std::optional<Stmt>();
    case TokenType::kText: {
      Stmt s{Stmt::Kind::kText, t.line};
      s.text = t.value;
      ++pos_;
      return std::optional<Stmt>(std::move(s));
    }
    case TokenType::kOpenStatement: {
      EXA_ASSIGN_OR_RETURN(Stmt s, ParseStatement());
      return std::optional<Stmt>(std::move(s));
    }
    case TokenType::kOpenExpression: {
      ++pos_;
      Stmt s{Stmt::Kind::kOutput, t.line};
      EXA_ASSIGN_OR_RETURN(s.expr, ParseExpression());
      EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseExpression, "}}"));
      return std::optional<Stmt>(std::move(s));
    }
    default:
      return Error(StrCat("unexpected '", t.value, "' outside a tag"));
  }
}

absl::StatusOr<Stmt> Parser::ParseStatement() {
  const int line = Line();
  ++pos_;  // {%
  if (!Is(TokenType::kIdentifier)) return Error("expected a statement name after {%");
  const std::string name = Peek()->value;
  ++pos_;
  if (name == "set") return ParseSet(line);
  if (name == "if") return ParseIf(line, /*consume_end=*/true);
  if (name == "for") return ParseFor(line);
  if (name == "macro") return ParseMacro(line);
  if (name == "break" || name == "continue") {
    EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
    return Stmt{name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line};
  }
  return absl::InvalidArgumentError(
      StrCat("line ", line, ": {% ", name, " %} is not supported: ", kSupportedStatements));
}

absl::Status Parser::CheckAssignee(const Expr& target) const {
  if (target.kind == Kind::kName) return absl::OkStatus();
  if (target.kind == Kind::kTuple) {
    for (const ExprPtr& item : target.operands) {
      if (item->kind != Kind::kName) break;
      if (&item == &target.operands.back()) return absl::OkStatus();
    }
  }
  if (target.kind == Kind::kMember && target.operands[1]->kind == Kind::kLiteral &&
      target.operands[1]->literal.is(Value::Type::kString)) {
    return absl::OkStatus();  // namespace.attribute; anything else is refused when it runs
  }
  return absl::InvalidArgumentError(StrCat(
      "line ", target.line, ": {% set %} assigns to a name, names a, b or namespace.attribute"));
}

absl::StatusOr<Stmt> Parser::ParseSet(int line) {
  Stmt s{Stmt::Kind::kSet, line};
  EXA_ASSIGN_OR_RETURN(s.target, ParseSequence(false));
  EXA_RETURN_IF_ERROR(CheckAssignee(*s.target));
  if (Is(TokenType::kEquals)) {
    ++pos_;
    EXA_ASSIGN_OR_RETURN(s.expr, ParseSequence(false));
  } else {
    EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "= or %}"));
    EXA_ASSIGN_OR_RETURN(s.body, ParseUntil({"endset"}, "set", line));
    EXA_RETURN_IF_ERROR(Expect(TokenType::kOpenStatement, "{%"));
    ++pos_;
  }
  EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
  return s;
}

absl::StatusOr<Stmt> Parser::ParseIf(int line, bool consume_end) {
  Stmt s{Stmt::Kind::kIf, line};
  EXA_ASSIGN_OR_RETURN(s.expr, ParseExpression());
  EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
  EXA_ASSIGN_OR_RETURN(s.body, ParseUntil({"endif", "elif", "else"}, "if", line));
  if (IsStatement({"elif"})) {
    const int elif_line = Line();
    pos_ += 2;
    EXA_ASSIGN_OR_RETURN(Stmt elif, ParseIf(elif_line, /*consume_end=*/false));
    s.orelse.push_back(std::move(elif));
  } else if (IsStatement({"else"})) {
    pos_ += 2;
    EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
    EXA_ASSIGN_OR_RETURN(s.orelse, ParseUntil({"endif"}, "if", line));
  }
  if (consume_end) EXA_RETURN_IF_ERROR(ExpectEnd("endif"));
  return s;
}

absl::StatusOr<Stmt> Parser::ParseFor(int line) {
  Stmt s{Stmt::Kind::kFor, line};
  EXA_ASSIGN_OR_RETURN(s.target, ParseSequence(true));
  if (s.target->kind != Kind::kName) EXA_RETURN_IF_ERROR(CheckAssignee(*s.target));
  if (s.target->kind == Kind::kMember) return Error("a loop variable must be a name or names");
  if (!IsWord("in")) return Error("expected 'in' after the loop variable");
  ++pos_;
  EXA_ASSIGN_OR_RETURN(s.expr, ParseExpression());
  if (s.expr->kind == Kind::kSelect) {  // for x in xs if condition
    s.condition = std::move(s.expr->operands[1]);
    s.expr = std::move(s.expr->operands[0]);
  }
  EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
  EXA_ASSIGN_OR_RETURN(s.body, ParseUntil({"endfor", "else"}, "for", line));
  if (IsStatement({"else"})) {
    pos_ += 2;
    EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
    EXA_ASSIGN_OR_RETURN(s.orelse, ParseUntil({"endfor"}, "for", line));
  }
  EXA_RETURN_IF_ERROR(ExpectEnd("endfor"));
  return s;
}

absl::StatusOr<Stmt> Parser::ParseMacro(int line) {
  Stmt s{Stmt::Kind::kMacro, line};
  if (!Is(TokenType::kIdentifier)) return Error("expected the macro's name");
  s.name = Peek()->value;
  ++pos_;
  macros_.insert(s.name);
  EXA_RETURN_IF_ERROR(ParseArgs(&s.params, /*parameters=*/true));
  EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseStatement, "%}"));
  const size_t body_start = pos_;
  EXA_ASSIGN_OR_RETURN(s.body, ParseUntil({"endmacro"}, "macro", line));
  for (size_t i = body_start; i < pos_; ++i) {
    const std::string& v = tokens_[i].value;
    if (tokens_[i].type == TokenType::kIdentifier &&
        (v == "varargs" || v == "kwargs" || v == "caller")) {
      return absl::InvalidArgumentError(StrCat("line ", tokens_[i].line, ": macro ", s.name,
                                               " uses ", v, ", which is not supported"));
    }
  }
  EXA_RETURN_IF_ERROR(ExpectEnd("endmacro"));
  return s;
}

absl::StatusOr<ExprPtr> Parser::ParseSequence(bool primary) {
  const int line = Line();
  EXA_ASSIGN_OR_RETURN(ExprPtr first, primary ? ParsePrimary() : ParseExpression());
  if (!Is(TokenType::kComma)) return first;
  ExprPtr tuple = Make(Kind::kTuple, line);
  tuple->operands.push_back(std::move(first));
  while (Is(TokenType::kComma)) {
    ++pos_;
    EXA_ASSIGN_OR_RETURN(ExprPtr next, primary ? ParsePrimary() : ParseExpression());
    tuple->operands.push_back(std::move(next));
  }
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression() {
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Error(StrCat("nested deeper than ", kMaxDepth, " levels"));
  const int line = Line();
  EXA_ASSIGN_OR_RETURN(ExprPtr value, ParseOr());
  if (!IsWord("if")) return value;
  ++pos_;
  EXA_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
  ExprPtr e = Make(Kind::kSelect, line);
  if (IsWord("else")) {
    ++pos_;
    EXA_ASSIGN_OR_RETURN(ExprPtr otherwise, ParseExpression());
    e->kind = Kind::kTernary;
    e->operands.push_back(std::move(test));
    e->operands.push_back(std::move(value));
    e->operands.push_back(std::move(otherwise));
    return e;
  }
  e->operands.push_back(std::move(value));
  e->operands.push_back(std::move(test));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseLeftAssociative(ExprFn operand,
                                                     const std::function<bool()>& at_operator) {
  EXA_ASSIGN_OR_RETURN(ExprPtr left, (this->*operand)());
  while (at_operator()) {
    const Token& op = tokens_[pos_++];
    EXA_ASSIGN_OR_RETURN(ExprPtr right, (this->*operand)());
    left = MakeBinary(op.value, std::move(left), std::move(right), op.line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  return ParseLeftAssociative(&Parser::ParseAnd, [this] { return IsWord("or"); });
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  return ParseLeftAssociative(&Parser::ParseNot, [this] { return IsWord("and"); });
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsWord("not")) return ParseComparison();
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Error(StrCat("nested deeper than ", kMaxDepth, " levels"));
  ExprPtr e = Make(Kind::kUnary, Line());
  e->name = "not";
  ++pos_;
  EXA_ASSIGN_OR_RETURN(ExprPtr argument, ParseNot());
  e->operands.push_back(std::move(argument));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseComparison() {
  EXA_ASSIGN_OR_RETURN(ExprPtr left, ParseAdditive());
  while (true) {
    const int line = Line();
    std::string op;
    if (IsWord("not") && IsWord("in", 1)) {
      op = "not in";
      pos_ += 2;
    } else if (IsWord("in") || Is(TokenType::kComparison)) {
      op = tokens_[pos_++].value;
    } else {
      return left;
    }
    EXA_ASSIGN_OR_RETURN(ExprPtr right, ParseAdditive());
    left = MakeBinary(op, std::move(left), std::move(right), line);
  }
}

absl::StatusOr<ExprPtr> Parser::ParseAdditive() {
  return ParseLeftAssociative(&Parser::ParseMultiplicative,
                              [this] { return Is(TokenType::kAdditive); });
}

absl::StatusOr<ExprPtr> Parser::ParseMultiplicative() {
  return ParseLeftAssociative(&Parser::ParsePower,
                              [this] { return Is(TokenType::kMultiplicative); });
}

absl::StatusOr<ExprPtr> Parser::ParsePower() {
  return ParseLeftAssociative(&Parser::ParseTest, [this] { return Is(TokenType::kPower); });
}

absl::StatusOr<ExprPtr> Parser::ParseTest() {
  EXA_ASSIGN_OR_RETURN(ExprPtr operand, ParseFilter());
  while (IsWord("is")) {
    ExprPtr e = Make(Kind::kTest, Line());
    ++pos_;
    if (IsWord("not")) {
      e->negate = true;
      ++pos_;
    }
    if (!Is(TokenType::kIdentifier)) return Error("expected a test name after 'is'");
    e->name = tokens_[pos_++].value;
    if (!IsKnownTest(e->name)) {
      return absl::InvalidArgumentError(StrCat("line ", e->line, ": unknown test '", e->name,
                                               "' (supported: ", KnownTests(), ")"));
    }
    e->operands.push_back(std::move(operand));
    operand = std::move(e);
  }
  return operand;
}

absl::StatusOr<ExprPtr> Parser::ParseFilter() {
  EXA_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnarySign());
  while (Is(TokenType::kPipe)) {
    ExprPtr e = Make(Kind::kFilter, Line());
    ++pos_;
    if (!Is(TokenType::kIdentifier)) return Error("expected a filter name after '|'");
    e->name = tokens_[pos_++].value;
    if (!IsKnownFilter(e->name)) {
      return absl::InvalidArgumentError(StrCat("line ", e->line, ": unknown filter '", e->name,
                                               "' (supported: ", KnownFilters(), ")"));
    }
    if (Is(TokenType::kOpenParen)) {
      e->call = true;
      EXA_RETURN_IF_ERROR(ParseArgs(&e->args, /*parameters=*/false));
    }
    e->operands.push_back(std::move(operand));
    operand = std::move(e);
  }
  return operand;
}

absl::StatusOr<ExprPtr> Parser::ParseUnarySign() {
  const Token* t = Peek();
  if (t == nullptr || (t->type != TokenType::kUnary && t->type != TokenType::kAdditive) ||
      (t->value != "-" && t->value != "+")) {
    return ParseCallMember();
  }
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Error(StrCat("nested deeper than ", kMaxDepth, " levels"));
  ExprPtr e = Make(Kind::kUnary, t->line);
  e->name = t->value;
  ++pos_;
  EXA_ASSIGN_OR_RETURN(ExprPtr argument, ParseUnarySign());
  e->operands.push_back(std::move(argument));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseCallMember() {
  EXA_ASSIGN_OR_RETURN(ExprPtr primary, ParsePrimary());
  EXA_ASSIGN_OR_RETURN(ExprPtr member, ParseMember(std::move(primary)));
  if (!Is(TokenType::kOpenParen)) return member;
  return ParseCall(std::move(member));
}

absl::Status Parser::CheckCallee(const Expr& callee) {
  if (callee.kind == Kind::kName) {
    called_names_.emplace_back(callee.name, callee.line);
    return absl::OkStatus();
  }
  if (callee.kind == Kind::kMember && callee.operands[1]->kind == Kind::kLiteral &&
      callee.operands[1]->literal.is(Value::Type::kString)) {
    const std::string& method = callee.operands[1]->literal.str();
    if (IsKnownMethod(method)) return absl::OkStatus();
    return absl::InvalidArgumentError(StrCat("line ", callee.line, ": unknown method .", method,
                                             "() (supported: ", KnownMethods(), ")"));
  }
  return absl::InvalidArgumentError(
      StrCat("line ", callee.line, ": only functions, macros and methods can be called"));
}

absl::StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee) {
  EXA_RETURN_IF_ERROR(CheckCallee(*callee));
  ExprPtr e = Make(Kind::kCall, callee->line);
  e->operands.push_back(std::move(callee));
  EXA_RETURN_IF_ERROR(ParseArgs(&e->args, /*parameters=*/false));
  EXA_ASSIGN_OR_RETURN(e, ParseMember(std::move(e)));
  if (Is(TokenType::kOpenParen)) return ParseCall(std::move(e));
  return e;
}

absl::Status Parser::ParseArgs(std::vector<ExprPtr>* args, bool parameters) {
  EXA_RETURN_IF_ERROR(Expect(TokenType::kOpenParen, "("));
  bool keyword_seen = false;
  while (!Is(TokenType::kCloseParen)) {
    if (Peek() == nullptr) return Error("an argument list is not closed");
    if (Is(TokenType::kPower) || (Is(TokenType::kMultiplicative) && Peek()->value == "*")) {
      return Error("argument unpacking (* and **) is not supported");
    }
    EXA_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
    if (Is(TokenType::kEquals)) {
      ++pos_;
      if (arg->kind != Kind::kName) return Error("expected a name before '=' in arguments");
      ExprPtr keyword = Make(Kind::kKeyword, arg->line);
      keyword->name = arg->name;
      EXA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      keyword->operands.push_back(std::move(value));
      arg = std::move(keyword);
      keyword_seen = true;
    } else if (keyword_seen) {
      return Error("a positional argument follows a keyword argument");
    }
    if (parameters && arg->kind != Kind::kName && arg->kind != Kind::kKeyword) {
      return Error("a macro's parameters are names, each with an optional default");
    }
    args->push_back(std::move(arg));
    if (Is(TokenType::kComma)) ++pos_;
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseMember(ExprPtr object) {
  while (Is(TokenType::kDot) || Is(TokenType::kOpenSquare)) {
    const int line = Line();
    if (Is(TokenType::kOpenSquare)) {
      ++pos_;
      EXA_ASSIGN_OR_RETURN(object, ParseSubscript(std::move(object), line));
      continue;
    }
    ++pos_;
    EXA_ASSIGN_OR_RETURN(ExprPtr property, ParsePrimary());
    if (property->kind == Kind::kName) {
      property->kind = Kind::kLiteral;
      property->literal = Value::String(property->name);
    } else if (property->kind != Kind::kLiteral || !property->literal.is(Value::Type::kInt)) {
      return Error("expected a name or an integer after '.'");
    }
    ExprPtr e = Make(Kind::kMember, line);
    e->operands.push_back(std::move(object));
    e->operands.push_back(std::move(property));
    object = std::move(e);
  }
  return object;
}

// After '[': an index, or a slice start:stop:step whose parts may each be missing.
absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr object, int line) {
  std::vector<ExprPtr> parts;
  bool slice = false;
  while (!Is(TokenType::kCloseSquare)) {
    if (Peek() == nullptr) return Error("a '[' is not closed");
    if (Is(TokenType::kColon)) {
      parts.push_back(nullptr);
      ++pos_;
      slice = true;
      continue;
    }
    EXA_ASSIGN_OR_RETURN(ExprPtr part, ParseExpression());
    parts.push_back(std::move(part));
    if (Is(TokenType::kColon)) {
      ++pos_;
      slice = true;
    }
  }
  ++pos_;
  if (parts.empty()) return Error("expected an index or a slice inside [ ]");
  if (slice && parts.size() > 3) return Error("a slice has at most start:stop:step");
  ExprPtr e = Make(slice ? Kind::kSlice : Kind::kMember, line);
  e->operands.push_back(std::move(object));
  if (!slice) {
    e->operands.push_back(std::move(parts[0]));
    return e;
  }
  parts.resize(3);
  for (ExprPtr& part : parts) e->operands.push_back(std::move(part));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token* t = Peek();
  if (t == nullptr) return Error("the template ends inside an expression");
  ++pos_;
  ExprPtr e = Make(Kind::kLiteral, t->line);
  switch (t->type) {
    case TokenType::kNumber:
      e->literal = t->value.find('.') != std::string::npos
                       ? Value::Float(std::strtod(t->value.c_str(), nullptr))
                       : Value::Int(std::strtoll(t->value.c_str(), nullptr, 10));
      return e;
    case TokenType::kString: {
      std::string text = t->value;
      while (Is(TokenType::kString)) text += tokens_[pos_++].value;
      e->literal = Value::String(std::move(text));
      return e;
    }
    case TokenType::kIdentifier:
      e->kind = Kind::kName;
      e->name = t->value;
      return e;
    case TokenType::kOpenParen: {
      EXA_ASSIGN_OR_RETURN(ExprPtr inner, ParseSequence(false));
      EXA_RETURN_IF_ERROR(Expect(TokenType::kCloseParen, ")"));
      return inner;
    }
    case TokenType::kOpenSquare:
    case TokenType::kOpenCurly:
      return ParseListOrDict(*t);
    default:
      return Error(StrCat("unexpected '", t->value, "' in an expression"));
  }
}

absl::StatusOr<ExprPtr> Parser::ParseListOrDict(const Token& open) {
  const bool list = open.type == TokenType::kOpenSquare;
  const TokenType close = list ? TokenType::kCloseSquare : TokenType::kCloseCurly;
  ExprPtr e = Make(list ? Kind::kList : Kind::kDict, open.line);
  while (!Is(close)) {
    if (Peek() == nullptr) return Error(StrCat("a '", open.value, "' is not closed"));
    EXA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    e->operands.push_back(std::move(item));
    if (!list) {
      EXA_RETURN_IF_ERROR(Expect(TokenType::kColon, "':' between a key and its value"));
      EXA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      e->operands.push_back(std::move(value));
    }
    if (Is(TokenType::kComma)) ++pos_;
  }
  ++pos_;
  return e;
}

}  // namespace

absl::StatusOr<std::vector<Stmt>> Parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).Run();
}

}  // namespace exa::chat_template
