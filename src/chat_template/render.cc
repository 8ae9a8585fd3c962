// Template::Parse and Template::Render: the interpreter over the parsed statements, with
// @huggingface/jinja's scoping (a for loop and a macro call open a scope; if and set do not).
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"

#include "chat_template/builtins.h"
#include "chat_template/chat_template.h"
#include "chat_template/lexer.h"
#include "chat_template/parser.h"
#include "chat_template/text.h"
#include "common/status.h"
#include "common/strings.h"

namespace exa::chat_template {
namespace {

using Type = Value::Type;
using Kind = Expr::Kind;

absl::Status Fail(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// Prefixes the line an error happened on, once (the innermost line wins).
absl::Status AtLine(const absl::Status& s, int line) {
  if (s.ok() || absl::StartsWith(s.message(), "line ")) return s;
  return absl::Status(s.code(), StrCat("line ", line, ": ", s.message()));
}

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* Lookup(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
      for (const auto& [k, v] : s->vars_) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value value) {
    for (auto& [k, v] : vars_) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars_.emplace_back(name, std::move(value));
  }

 private:
  std::shared_ptr<Scope> parent_;
  Entries vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const RenderLimits& limits) : limits_(limits) {}
  absl::StatusOr<Flow> RenderBlock(const std::vector<Stmt>& body, const ScopePtr& scope,
                                   std::string* out);

 private:
  absl::StatusOr<Flow> Execute(const Stmt& s, const ScopePtr& scope, std::string* out);
  absl::StatusOr<Flow> RenderFor(const Stmt& s, const ScopePtr& scope, std::string* out);
  absl::StatusOr<Array> LoopItems(const Stmt& s, const Value& iterable, const ScopePtr& scope);
  absl::Status Bind(const Expr& target, const Value& value, Scope& scope);
  absl::Status Assign(const Stmt& s, const ScopePtr& scope);
  void DefineMacro(const Stmt& s, const ScopePtr& scope);
  absl::StatusOr<Value> CallMacro(const Stmt& s, const std::weak_ptr<Scope>& home, CallArgs& a);
  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCall(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<CallArgs> EvalArgs(const std::vector<ExprPtr>& args, const ScopePtr& scope);
  absl::StatusOr<Value> EvalSlice(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalBinary(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCollection(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> Sized(Value v) const;
  absl::Status CheckSize(size_t bytes) const {
    if (bytes <= limits_.max_output_bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        StrCat("the rendering is larger than ", limits_.max_output_bytes, " bytes"));
  }

  const RenderLimits& limits_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
};

absl::StatusOr<Flow> Renderer::RenderBlock(const std::vector<Stmt>& body, const ScopePtr& scope,
                                           std::string* out) {
  for (const Stmt& s : body) {
    absl::StatusOr<Flow> flow = Execute(s, scope, out);
    if (!flow.ok()) return AtLine(flow.status(), s.line);
    EXA_RETURN_IF_ERROR(CheckSize(out->size()));
    if (*flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Flow> Renderer::Execute(const Stmt& s, const ScopePtr& scope, std::string* out) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      out->append(s.text);
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      EXA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
      if (!v.IsNothing()) out->append(v.Display());
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf: {
      EXA_ASSIGN_OR_RETURN(Value test, Eval(*s.expr, scope));
      return RenderBlock(test.Truthy() ? s.body : s.orelse, scope, out);
    }
    case Stmt::Kind::kFor:
      return RenderFor(s, scope, out);
    case Stmt::Kind::kSet:
      EXA_RETURN_IF_ERROR(Assign(s, scope));
      return Flow::kNormal;
    case Stmt::Kind::kMacro:
      DefineMacro(s, scope);
      return Flow::kNormal;
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Value LoopValue(size_t i, const Array& items) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  return Value::Object({{"index", Value::Int(k + 1)},
                        {"index0", Value::Int(k)},
                        {"revindex", Value::Int(n - k)},
                        {"revindex0", Value::Int(n - k - 1)},
                        {"first", Value::Bool(k == 0)},
                        {"last", Value::Bool(k == n - 1)},
                        {"length", Value::Int(n)},
                        {"previtem", i > 0 ? items[i - 1] : Value()},
                        {"nextitem", k < n - 1 ? items[i + 1] : Value()}});
}

absl::StatusOr<Array> Renderer::LoopItems(const Stmt& s, const Value& iterable,
                                          const ScopePtr& scope) {
  Array candidates;
  if (iterable.is(Type::kObject)) {
    for (const auto& [key, value] : iterable.entries()) candidates.push_back(Value::String(key));
  } else if (iterable.is(Type::kArray)) {
    candidates = iterable.array();
  } else {
    return Fail(StrCat("for: cannot loop over ", iterable.TypeName()));
  }
  if (s.target->kind == Kind::kName && !s.condition) return candidates;
  Array items;
  for (const Value& item : candidates) {
    if (s.target->kind == Kind::kTuple &&
        (!item.is(Type::kArray) || item.array().size() != s.target->operands.size())) {
      return Fail(StrCat("for: cannot unpack ", item.TypeName(), " into ",
                         s.target->operands.size(), " names"));
    }
    if (s.condition) {
      if (++iterations_ > limits_.max_loop_iterations) break;
      auto loop_scope = std::make_shared<Scope>(scope);
      EXA_RETURN_IF_ERROR(Bind(*s.target, item, *loop_scope));
      EXA_ASSIGN_OR_RETURN(Value keep, Eval(*s.condition, loop_scope));
      if (!keep.Truthy()) continue;
    }
    items.push_back(item);
  }
  return items;
}

absl::StatusOr<Flow> Renderer::RenderFor(const Stmt& s, const ScopePtr& parent, std::string* out) {
  auto scope = std::make_shared<Scope>(parent);
  EXA_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
  EXA_ASSIGN_OR_RETURN(Array items, LoopItems(s, iterable, scope));
  bool no_iteration = true;
  for (size_t i = 0; i < items.size(); ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      return absl::ResourceExhaustedError(
          StrCat("the render ran more than ", limits_.max_loop_iterations, " loop iterations"));
    }
    scope->Set("loop", LoopValue(i, items));
    EXA_RETURN_IF_ERROR(Bind(*s.target, items[i], *scope));
    EXA_ASSIGN_OR_RETURN(Flow flow, RenderBlock(s.body, scope, out));
    if (flow == Flow::kContinue) continue;
    if (flow == Flow::kBreak) break;
    no_iteration = false;
  }
  if (iterations_ > limits_.max_loop_iterations) {
    return absl::ResourceExhaustedError(
        StrCat("the render ran more than ", limits_.max_loop_iterations, " loop iterations"));
  }
  if (no_iteration) EXA_RETURN_IF_ERROR(RenderBlock(s.orelse, scope, out).status());
  return Flow::kNormal;
}

absl::Status Renderer::Bind(const Expr& target, const Value& value, Scope& scope) {
  if (target.kind == Kind::kName) {
    scope.Set(target.name, value);
    return absl::OkStatus();
  }
  if (!value.is(Type::kArray) || value.array().size() != target.operands.size()) {
    return Fail(
        StrCat("cannot unpack ", value.TypeName(), " into ", target.operands.size(), " names"));
  }
  for (size_t i = 0; i < target.operands.size(); ++i) {
    scope.Set(target.operands[i]->name, value.array()[i]);
  }
  return absl::OkStatus();
}

absl::Status Renderer::Assign(const Stmt& s, const ScopePtr& scope) {
  Value value;
  if (s.expr) {
    EXA_ASSIGN_OR_RETURN(value, Eval(*s.expr, scope));
  } else {
    std::string block;
    EXA_RETURN_IF_ERROR(RenderBlock(s.body, scope, &block).status());
    value = Value::String(std::move(block));
  }
  if (s.target->kind != Kind::kMember) return Bind(*s.target, value, *scope);
  EXA_ASSIGN_OR_RETURN(Value object, Eval(*s.target->operands[0], scope));
  if (!object.is(Type::kNamespace)) {
    return Fail(StrCat("set: cannot assign an attribute of ", object.TypeName(),
                       " (only of a namespace())"));
  }
  const std::string& key = s.target->operands[1]->literal.str();
  for (auto& [k, v] : object.mutable_entries()) {
    if (k == key) {
      v = std::move(value);
      return absl::OkStatus();
    }
  }
  object.mutable_entries().emplace_back(key, std::move(value));
  return absl::OkStatus();
}

void Renderer::DefineMacro(const Stmt& s, const ScopePtr& scope) {
  // The macro sees the scope it was defined in; weak, so that the scope holding the macro does
  // not keep itself alive.
  std::weak_ptr<Scope> home = scope;
  scope->Set(s.name, Value::Function(s.name, [this, &s, home](CallArgs& args) {
               return CallMacro(s, home, args);
             }));
}

absl::StatusOr<Value> Renderer::CallMacro(const Stmt& s, const std::weak_ptr<Scope>& home,
                                          CallArgs& args) {
  ScopePtr parent = home.lock();
  if (!parent) return Fail(StrCat("macro ", s.name, " called outside the scope it lives in"));
  if (call_depth_ >= limits_.max_call_depth) {
    return absl::ResourceExhaustedError(
        StrCat("macro calls nested deeper than ", limits_.max_call_depth));
  }
  auto scope = std::make_shared<Scope>(parent);
  std::vector<std::pair<std::string, const Expr*>> defaults;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const Expr& p = *s.params[i];
    const Value* v = i < args.positional.size() ? &args.positional[i] : args.Keyword(p.name);
    if (v == nullptr && p.kind == Kind::kKeyword)
      defaults.emplace_back(p.name, p.operands[0].get());
    scope->Set(p.name, v ? *v : Value());
  }
  for (const auto& [key, value] : args.keyword) {
    bool known = false;
    for (const ExprPtr& p : s.params) known = known || p->name == key;
    if (!known) return Fail(StrCat("macro ", s.name, " takes no keyword argument '", key, "'"));
  }
  if (args.positional.size() > s.params.size()) {
    return Fail(StrCat("macro ", s.name, " takes at most ", s.params.size(), " arguments"));
  }
  for (const auto& [name, expr] : defaults) {
    EXA_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
    scope->Set(name, std::move(v));
  }
  ++call_depth_;
  std::string out;
  absl::StatusOr<Flow> flow = RenderBlock(s.body, scope, &out);
  --call_depth_;
  EXA_RETURN_IF_ERROR(flow.status());
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e, const ScopePtr& scope) {
  absl::StatusOr<Value> v = EvalInner(e, scope);
  if (!v.ok()) return AtLine(v.status(), e.line);
  return v;
}

absl::StatusOr<Value> Renderer::Sized(Value v) const {
  if (v.is(Type::kString)) EXA_RETURN_IF_ERROR(CheckSize(v.str().size()));
  return v;
}

absl::StatusOr<Value> Renderer::EvalInner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case Kind::kLiteral:
      return e.literal;
    case Kind::kName: {
      // A variable, else a global function, so that `strftime_now is defined` holds as in
      // transformers and @huggingface/jinja (Llama 3.2's template asks before calling it).
      const Value* v = scope->Lookup(e.name);
      return v ? *v : GlobalFunction(e.name, limits_.fixed_time);
    }
    case Kind::kMember: {
      EXA_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
      EXA_ASSIGN_OR_RETURN(Value property, Eval(*e.operands[1], scope));
      return GetMember(object, property);
    }
    case Kind::kSlice:
      return EvalSlice(e, scope);
    case Kind::kCall:
      return EvalCall(e, scope);
    case Kind::kFilter: {
      EXA_ASSIGN_OR_RETURN(Value operand, Eval(*e.operands[0], scope));
      EXA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, scope));
      EXA_ASSIGN_OR_RETURN(Value v, ApplyFilter(operand, e.name, e.call, args));
      return Sized(std::move(v));
    }
    case Kind::kTest: {
      EXA_ASSIGN_OR_RETURN(Value operand, Eval(*e.operands[0], scope));
      EXA_ASSIGN_OR_RETURN(bool result, ApplyTest(operand, e.name));
      return Value::Bool(result != e.negate);
    }
    case Kind::kBinary:
      return EvalBinary(e, scope);
    case Kind::kTernary:
    case Kind::kSelect: {
      const bool ternary = e.kind == Kind::kTernary;
      EXA_ASSIGN_OR_RETURN(Value test, Eval(*e.operands[ternary ? 0 : 1], scope));
      if (test.Truthy()) return Eval(*e.operands[ternary ? 1 : 0], scope);
      return ternary ? Eval(*e.operands[2], scope) : Value();
    }
    case Kind::kKeyword:
      return Fail("a keyword argument outside a call");
    default:
      return EvalCollection(e, scope);
  }
}

absl::StatusOr<Value> Renderer::EvalCollection(const Expr& e, const ScopePtr& scope) {
  if (e.kind == Kind::kUnary) {
    EXA_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0], scope));
    if (e.name == "not") return Value::Bool(!v.Truthy());
    const double sign = e.name == "-" ? -1 : 1;
    if (v.IsNumber()) return Value::Number(sign * v.number(), v.is(Type::kFloat));
    if (v.is(Type::kBool)) return Value::Int(e.name == "-" ? -v.boolean() : v.boolean());
    return Fail(StrCat("unary ", e.name, " on ", v.TypeName()));
  }
  if (e.kind == Kind::kDict) {
    Entries entries;
    for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
      EXA_ASSIGN_OR_RETURN(Value key, Eval(*e.operands[i], scope));
      if (!key.is(Type::kString)) return Fail("a mapping's keys must be strings");
      EXA_ASSIGN_OR_RETURN(Value value, Eval(*e.operands[i + 1], scope));
      entries.emplace_back(key.str(), std::move(value));
    }
    return Value::Object(std::move(entries));
  }
  Array items;  // kList, kTuple
  for (const ExprPtr& item : e.operands) {
    EXA_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
    items.push_back(std::move(v));
  }
  return Value::MakeArray(std::move(items));
}

absl::StatusOr<CallArgs> Renderer::EvalArgs(const std::vector<ExprPtr>& args,
                                            const ScopePtr& scope) {
  CallArgs out;
  for (const ExprPtr& arg : args) {
    if (arg->kind == Kind::kKeyword) {
      if (out.Keyword(arg->name) != nullptr) {
        return Fail(StrCat("keyword argument '", arg->name, "' given twice"));
      }
      EXA_ASSIGN_OR_RETURN(Value v, Eval(*arg->operands[0], scope));
      out.keyword.emplace_back(arg->name, std::move(v));
    } else {
      EXA_ASSIGN_OR_RETURN(Value v, Eval(*arg, scope));
      out.positional.push_back(std::move(v));
    }
  }
  return out;
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& e, const ScopePtr& scope) {
  EXA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, scope));
  const Expr& callee = *e.operands[0];
  Value fn;
  EXA_ASSIGN_OR_RETURN(fn, Eval(callee, scope));
  if (!fn.is(Type::kFunction)) return Fail(StrCat("cannot call ", fn.TypeName()));
  EXA_ASSIGN_OR_RETURN(Value result, fn.function()(args));
  return Sized(std::move(result));
}

// The list or string between start and stop by step, as Python slices (JavaScript's port).
absl::StatusOr<Value> Renderer::EvalSlice(const Expr& e, const ScopePtr& scope) {
  EXA_ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
  if (!object.is(Type::kArray) && !object.is(Type::kString)) {
    return Fail(StrCat("cannot slice ", object.TypeName()));
  }
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.operands[i + 1]) continue;
    EXA_ASSIGN_OR_RETURN(Value v, Eval(*e.operands[i + 1], scope));
    if (v.is(Type::kUndefined)) continue;
    if (!v.is(Type::kInt)) return Fail("slice bounds must be integers");
    bounds[i] = v.integer();
  }
  std::vector<std::string_view> chars;
  if (object.is(Type::kString)) chars = CodePoints(object.str());
  const int64_t n = object.is(Type::kString) ? static_cast<int64_t>(chars.size())
                                             : static_cast<int64_t>(object.array().size());
  const int64_t step = bounds[2].value_or(1);
  if (step == 0) return Fail("slice step must not be zero");
  int64_t start, stop;
  if (step > 0) {
    start = bounds[0].value_or(0);
    start = start < 0 ? std::max<int64_t>(n + start, 0) : std::min(start, n);
    stop = bounds[1].value_or(n);
    stop = stop < 0 ? std::max<int64_t>(n + stop, 0) : std::min(stop, n);
  } else {
    start = bounds[0].value_or(n - 1);
    start = start < 0 ? std::max<int64_t>(n + start, -1) : std::min(start, n - 1);
    stop = bounds[1].value_or(-1);
    stop = stop < -1 ? std::max<int64_t>(n + stop, -1) : std::min(stop, n - 1);
  }
  const int64_t direction = step > 0 ? 1 : -1;
  Array items;
  std::string text;
  for (int64_t i = start; direction * i < direction * stop; i += step) {
    if (object.is(Type::kString)) {
      text.append(chars[static_cast<size_t>(i)]);
    } else {
      items.push_back(object.array()[static_cast<size_t>(i)]);
    }
  }
  if (object.is(Type::kString)) return Value::String(std::move(text));
  return Value::MakeArray(std::move(items));
}

}  // namespace

absl::StatusOr<Value> Renderer::EvalBinary(const Expr& e, const ScopePtr& scope) {
  EXA_ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0], scope));
  if (e.name == "and" && !left.Truthy()) return left;
  if (e.name == "or" && left.Truthy()) return left;
  EXA_ASSIGN_OR_RETURN(Value right, Eval(*e.operands[1], scope));
  if (e.name == "and" || e.name == "or") return right;
  EXA_ASSIGN_OR_RETURN(Value v, BinaryOperation(e.name, left, right));
  return Sized(std::move(v));
}

absl::StatusOr<std::unique_ptr<const Template>> Template::Parse(std::string_view source) {
  EXA_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  EXA_ASSIGN_OR_RETURN(std::vector<Stmt> program, chat_template::Parse(std::move(tokens)));
  auto t = std::unique_ptr<Template>(new Template());
  t->program_ = std::move(program);
  return std::unique_ptr<const Template>(std::move(t));
}

absl::StatusOr<std::string> Template::Render(const Entries& variables,
                                             const RenderLimits& limits) const {
  auto root = std::make_shared<Scope>(nullptr);
  for (const char* name : {"true", "True"}) root->Set(name, Value::Bool(true));
  for (const char* name : {"false", "False"}) root->Set(name, Value::Bool(false));
  for (const char* name : {"none", "None"}) root->Set(name, Value::Null());
  for (const auto& [name, value] : variables) root->Set(name, value);
  Renderer renderer(limits);
  std::string out;
  EXA_RETURN_IF_ERROR(renderer.RenderBlock(program_, root, &out).status());
  return out;
}

}  // namespace exa::chat_template
