#include "core/expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/identifier.h"

namespace teeny {

struct Expr::Node {
  Kind kind;
  int64_t value = 0;
  std::string name;
  Expr lhs, rhs;  // default-constructed children are never read for leaves
  int depth = 1;
  uint32_t terms = 1;
  Node(Kind k, int64_t v, std::string n) : kind(k), value(v), name(std::move(n)), lhs(nullptr), rhs(nullptr) {}
  Node(Kind k, Expr a, Expr b)
      : kind(k),
        lhs(std::move(a)),
        rhs(std::move(b)),
        depth(1 + std::max(lhs.depth(), rhs.depth())),
        terms(static_cast<uint32_t>(std::min<uint64_t>(uint64_t{1} + lhs.terms() + rhs.terms(), kMaxExprTerms + 1))) {}
};

namespace {

bool is_division(Expr::Kind k) {
  return k == Expr::Kind::kFloorDiv || k == Expr::Kind::kMod || k == Expr::Kind::kCeilDiv || k == Expr::Kind::kRoundUp;
}

// Quotients rounded down and up; nothing where the quotient does not fit (INT64_MIN / -1).
// The adjustments cannot overflow: they happen only where |b| >= 2.
std::optional<int64_t> floor_quotient(int64_t a, int64_t b) {
  if (b == -1) return a == INT64_MIN ? std::nullopt : std::optional<int64_t>(-a);
  int64_t q = a / b;
  if (a % b != 0 && (a < 0) != (b < 0)) --q;
  return q;
}

std::optional<int64_t> ceil_quotient(int64_t a, int64_t b) {
  if (b == -1) return floor_quotient(a, b);
  int64_t q = a / b;
  if (a % b != 0 && (a < 0) == (b < 0)) ++q;
  return q;
}

int64_t floor_remainder(int64_t a, int64_t b) {
  if (b == -1) return 0;  // a % -1 traps for INT64_MIN
  int64_t r = a % b;
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

std::optional<int64_t> rounded_up(int64_t a, int64_t b) {
  std::optional<int64_t> q = ceil_quotient(a, b);
  int64_t r = 0;
  if (!q || __builtin_mul_overflow(*q, b, &r)) return std::nullopt;
  return r;
}

// a `k` b; nothing where the result does not fit in 64 bits. b != 0 for divisions.
std::optional<int64_t> apply(Expr::Kind k, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (k) {
    case Expr::Kind::kAdd:
      return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
    case Expr::Kind::kSub:
      return __builtin_sub_overflow(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
    case Expr::Kind::kMul:
      return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
    case Expr::Kind::kFloorDiv:
      return floor_quotient(a, b);
    case Expr::Kind::kMod:
      return floor_remainder(a, b);
    case Expr::Kind::kCeilDiv:
      return ceil_quotient(a, b);
    case Expr::Kind::kMin:
      return std::min(a, b);
    case Expr::Kind::kMax:
      return std::max(a, b);
    case Expr::Kind::kRoundUp:
      return rounded_up(a, b);
    case Expr::Kind::kLe:
      return a <= b ? 1 : 0;
    default:
      return 0;
  }
}

bool commutative(Expr::Kind k) {
  return k == Expr::Kind::kAdd || k == Expr::Kind::kMul || k == Expr::Kind::kMin || k == Expr::Kind::kMax;
}

const char* function_name(Expr::Kind k) {
  switch (k) {
    case Expr::Kind::kCeilDiv:
      return "ceil_div";
    case Expr::Kind::kMin:
      return "min";
    case Expr::Kind::kMax:
      return "max";
    case Expr::Kind::kRoundUp:
      return "round_up";
    case Expr::Kind::kLe:
      return "le";
    default:
      return nullptr;
  }
}

// Expression text quoted in an error: long ones (a hostile spec's) are cut, not echoed whole.
std::string excerpt(const std::string& text) {
  constexpr size_t kShown = 60;
  return text.size() <= kShown + 3 ? text : text.substr(0, kShown) + "...";
}

// x*c as (x, c); any other x as (x, 1): the like terms of a sum.
std::pair<Expr, int64_t> scaled_term(const Expr& e) {
  if (e.kind() == Expr::Kind::kMul && e.rhs().is_const()) return {e.lhs(), *e.rhs().const_value()};
  return {e, 1};
}

}  // namespace

// Launches, args and tensors hold several small constants each (a grid's 1s, a default 0): one
// node each for the whole program saves an allocation, and its freeing, per such Expr.
std::shared_ptr<const Expr::Node> Expr::constant(int64_t value) {
  constexpr int64_t kLow = -64, kHigh = 1024;
  static const auto* shared = [] {
    auto* nodes = new std::vector<std::shared_ptr<const Node>>();  // never freed: Exprs may outlive statics
    for (int64_t v = kLow; v <= kHigh; ++v) nodes->push_back(std::make_shared<const Node>(Kind::kConst, v, ""));
    return nodes;
  }();
  if (value >= kLow && value <= kHigh) return (*shared)[value - kLow];
  return std::make_shared<const Node>(Kind::kConst, value, "");
}

Expr::Expr() : Expr(int64_t{0}) {}
Expr::Expr(int64_t value) : node_(constant(value)) {}
Expr::Expr(std::shared_ptr<const Node> node) : node_(std::move(node)) {}

Expr Expr::dim(const std::string& name) { return Expr(std::make_shared<const Node>(Kind::kDim, 0, name)); }

Expr::Kind Expr::kind() const { return node_->kind; }
std::optional<int64_t> Expr::const_value() const {
  if (node_->kind == Kind::kConst) return node_->value;
  return std::nullopt;
}
const std::string& Expr::dim_name() const { return node_->name; }
const Expr& Expr::lhs() const { return node_->lhs; }
const Expr& Expr::rhs() const { return node_->rhs; }
int Expr::depth() const { return node_->depth; }
uint32_t Expr::terms() const { return node_->terms; }

std::string Expr::written(Kind k, const Expr& a, const Expr& b) {
  return excerpt(Expr(std::make_shared<const Node>(k, a, b)).str());
}

Expr Expr::node(Kind k, Expr a, Expr b) {
  auto built = std::make_shared<const Node>(k, std::move(a), std::move(b));
  if (built->depth > kMaxExprDepth) {
    throw Error(
        fmt::format("expression nested deeper than {} levels: '{}'", kMaxExprDepth, excerpt(Expr(built).str())));
  }
  // Not quoted: the text of a tree this size would be as large.
  if (built->terms > kMaxExprTerms) throw Error(fmt::format("expression of more than {} terms", kMaxExprTerms));
  return Expr(std::move(built));
}

Expr Expr::make(Kind k, Expr a, Expr b) {
  auto ca = a.const_value(), cb = b.const_value();
  if (is_division(k) && cb == 0) throw Error(fmt::format("division by zero in '{}'", written(k, a, b)));
  // c1 `op` c2 while simplifying a `k` b; an overflow is an error quoting a `k` b as written.
  auto fold = [&](Kind op, int64_t c1, int64_t c2) {
    if (std::optional<int64_t> r = apply(op, c1, c2)) return *r;
    throw Error(fmt::format("integer overflow in '{}'", written(k, a, b)));
  };
  if (ca && cb) return Expr(fold(k, *ca, *cb));
  // Canonical form: constants on the right of commutative ops; x - c becomes x + (-c).
  if (commutative(k) && ca) {
    std::swap(a, b);
    std::swap(ca, cb);
  }
  if (k == Kind::kSub && cb) return make(Kind::kAdd, a, Expr(fold(Kind::kSub, 0, *cb)));
  switch (k) {
    case Kind::kAdd:
      if (cb == 0) return a;
      if (cb && a.kind() == Kind::kAdd && a.rhs().is_const())  // (x + c1) + c2
        return make(Kind::kAdd, a.lhs(), Expr(fold(Kind::kAdd, *a.rhs().const_value(), *cb)));
      if (!cb) {  // x*c1 + x*c2, as x + x in a chain B + B + ... + B
        auto [x, c1] = scaled_term(a);
        auto [y, c2] = scaled_term(b);
        if (x == y) return make(Kind::kMul, x, Expr(fold(Kind::kAdd, c1, c2)));
      }
      break;
    case Kind::kSub:
      if (a == b) return Expr(0);
      if (ca == 0) return make(Kind::kMul, b, Expr(-1));
      break;
    case Kind::kMul:
      if (cb == 1) return a;
      if (cb == 0) return Expr(0);
      if (cb && a.kind() == Kind::kMul && a.rhs().is_const())  // (x * c1) * c2
        return make(Kind::kMul, a.lhs(), Expr(fold(Kind::kMul, *a.rhs().const_value(), *cb)));
      break;
    case Kind::kFloorDiv:
    case Kind::kCeilDiv:
      if (cb == 1) return a;
      if (ca == 0) return Expr(0);
      // (x * c) / c == x exactly (for c > 0).
      if (cb && *cb > 0 && a.kind() == Kind::kMul && a.rhs().const_value() == cb) return a.lhs();
      break;
    case Kind::kMod:
      if (cb == 1) return Expr(0);
      if (cb && *cb > 0 && a.kind() == Kind::kMul && a.rhs().const_value() == cb) return Expr(0);
      break;
    case Kind::kRoundUp:
      if (cb == 1) return a;
      if (cb && *cb > 0 && a.kind() == Kind::kMul && a.rhs().const_value() == cb) return a;
      break;
    case Kind::kMin:
    case Kind::kMax:
      if (a == b) return a;
      break;
    default:
      break;
  }
  return node(k, std::move(a), std::move(b));
}

Expr operator+(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kAdd, a, b); }
Expr operator-(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kSub, a, b); }
Expr operator*(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kMul, a, b); }
Expr operator/(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kFloorDiv, a, b); }
Expr operator%(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kMod, a, b); }
Expr ceil_div(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kCeilDiv, a, b); }
Expr min(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kMin, a, b); }
Expr max(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kMax, a, b); }
Expr round_up(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kRoundUp, a, b); }
Expr le(const Expr& a, const Expr& b) { return Expr::make(Expr::Kind::kLe, a, b); }

bool operator==(const Expr& a, const Expr& b) {
  if (a.node_ == b.node_) return true;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Expr::Kind::kConst:
      return a.node_->value == b.node_->value;
    case Expr::Kind::kDim:
      return a.node_->name == b.node_->name;
    default:
      return a.lhs() == b.lhs() && a.rhs() == b.rhs();
  }
}

int64_t Expr::eval(const Bindings& bindings) const {
  switch (kind()) {
    case Kind::kConst:
      return node_->value;
    case Kind::kDim: {
      auto it = bindings.find(node_->name);
      if (it != bindings.end()) return it->second;
      if (is_device_symbol(node_->name)) {
        throw Error(
            fmt::format("device symbol '{}' is not bound (it is bound on a GPU; inspect takes "
                        "--device-sms, --device-smem and --device-l2)",
                        node_->name));
      }
      throw Error(fmt::format("dim '{}' is not bound", node_->name));
    }
    default: {
      const int64_t b = rhs().eval(bindings);
      if (b == 0 && is_division(kind())) throw Error(fmt::format("division by zero evaluating '{}'", excerpt(str())));
      const int64_t a = lhs().eval(bindings);
      if (std::optional<int64_t> r = apply(kind(), a, b)) return *r;
      throw Error(fmt::format("integer overflow evaluating '{}': {} is out of the 64-bit range", excerpt(str()),
                              written(kind(), Expr(a), Expr(b))));
    }
  }
}

Expr Expr::substitute(const Bindings& bindings) const {
  switch (kind()) {
    case Kind::kConst:
      return *this;
    case Kind::kDim: {
      auto it = bindings.find(node_->name);
      return it == bindings.end() ? *this : Expr(it->second);
    }
    default:
      return make(kind(), lhs().substitute(bindings), rhs().substitute(bindings));
  }
}

std::vector<std::string> Expr::dims() const {
  std::set<std::string> names;
  std::vector<const Expr*> stack{this};
  while (!stack.empty()) {
    const Expr* e = stack.back();
    stack.pop_back();
    if (e->kind() == Kind::kDim) names.insert(e->dim_name());
    if (!e->is_const() && e->kind() != Kind::kDim) {
      stack.push_back(&e->lhs());
      stack.push_back(&e->rhs());
    }
  }
  return {names.begin(), names.end()};
}

namespace {

int precedence(Expr::Kind k) {
  switch (k) {
    case Expr::Kind::kAdd:
    case Expr::Kind::kSub:
      return 1;
    case Expr::Kind::kMul:
    case Expr::Kind::kFloorDiv:
    case Expr::Kind::kMod:
      return 2;
    default:
      return 3;  // atoms and function calls
  }
}

void append_integer(std::string& out, int64_t value) {
  char digits[24];
  out.append(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr);
}

}  // namespace

std::string Expr::str() const {
  std::string out;
  append_str(out);
  return out;
}

// Into one string: the tree's text made of a string per node took a third of writing a bundle.
void Expr::append_str(std::string& out) const {
  switch (kind()) {
    case Kind::kConst: {
      // INT64_MIN has no literal: its negation does not fit.
      if (node_->value == INT64_MIN) {
        out += "(-9223372036854775807 - 1)";
        return;
      }
      append_integer(out, node_->value);
      return;
    }
    case Kind::kDim:
      out += node_->name;
      return;
    default:
      break;
  }
  if (const char* fn = function_name(kind())) {
    out += fn;
    out += '(';
    lhs().append_str(out);
    out += ", ";
    rhs().append_str(out);
    out += ')';
    return;
  }
  const int p = precedence(kind());
  auto operand = [&](const Expr& e, bool right) {
    const int q = precedence(e.kind());
    // A negative constant operand of * / % reads as unary minus; it binds tighter, so no parens.
    const bool paren = right ? q <= p : q < p;
    if (paren) out += '(';
    e.append_str(out);
    if (paren) out += ')';
  };
  operand(lhs(), false);
  if (kind() == Kind::kAdd && rhs().is_const() && *rhs().const_value() < 0 && *rhs().const_value() != INT64_MIN) {
    out += " - ";
    append_integer(out, -*rhs().const_value());
    return;
  }
  out += kind() == Kind::kAdd        ? " + "
         : kind() == Kind::kSub      ? " - "
         : kind() == Kind::kMul      ? "*"
         : kind() == Kind::kFloorDiv ? "/"
                                     : "%";
  operand(rhs(), true);
}

// ---- parsing ---------------------------------------------------------------------------------
namespace {

using Function = Expr (*)(const Expr&, const Expr&);
const std::vector<std::pair<std::string, Function>>& function_table() {
  static const std::vector<std::pair<std::string, Function>> table = {
      {"ceil_div", ceil_div}, {"min", min}, {"max", max}, {"round_up", round_up}, {"le", le}};
  return table;
}

}  // namespace

const std::vector<std::string>& expr_functions() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : function_table()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Expr parse() {
    skip_space();
    if (pos_ == text_.size()) fail("empty expression");
    Expr e = expr();
    skip_space();
    if (pos_ != text_.size()) fail(fmt::format("unexpected '{}'", text_[pos_]));
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail(what, pos_); }
  [[noreturn]] void fail(const std::string& what, size_t column) const {
    throw Error(fmt::format("bad expression '{}': {} at column {}", excerpt(text_), what, column + 1));
  }
  [[noreturn]] void too_deep(size_t column) const {
    fail(fmt::format("nested deeper than {} levels", kMaxExprDepth), column);
  }
  // '(', unary '-' and a function call each nest a level: refused past the limit before the
  // parser recurses, so its stack stays bounded whatever the text.
  void enter(size_t column) {
    if (++nesting_ > kMaxExprDepth) too_deep(column);
  }
  void leave() { --nesting_; }
  // fn(a, b) for the operator or function at `column`; its errors (the tree's depth, folding)
  // point there.
  Expr combine(Function fn, const Expr& a, const Expr& b, size_t column) const {
    if (std::max(a.depth(), b.depth()) >= kMaxExprDepth) too_deep(column);
    try {
      return fn(a, b);
    } catch (const Error& e) {
      fail(e.message(), column);
    }
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c))
      fail(pos_ < text_.size() ? fmt::format("expected '{}' but found '{}'", c, text_[pos_])
                               : fmt::format("expected '{}' at the end", c));
  }
  // The operator at pos_ among `ops` (consumed), or nullptr.
  Function binary_operator(const std::vector<std::pair<char, Function>>& ops) {
    for (const auto& [c, fn] : ops) {
      if (accept(c)) return fn;
    }
    return nullptr;
  }
  Expr expr() {
    static const std::vector<std::pair<char, Function>> ops = {{'+', operator+ }, {'-', operator- } };
    Expr e = term();
    while (Function fn = binary_operator(ops)) {
      const size_t column = pos_ - 1;
      Expr rhs = term();
      e = combine(fn, e, rhs, column);
    }
    return e;
  }
  Expr term() {
    static const std::vector<std::pair<char, Function>> ops = {
        {'*', operator* }, {'/', operator/ }, {'%', operator% } };
    Expr e = unary();
    while (Function fn = binary_operator(ops)) {
      const size_t column = pos_ - 1;
      Expr rhs = unary();
      e = combine(fn, e, rhs, column);
    }
    return e;
  }
  Expr unary() {
    if (!accept('-')) return atom();
    const size_t column = pos_ - 1;
    enter(column);
    Expr e = combine(operator-, Expr(0), unary(), column);
    leave();
    return e;
  }
  Expr atom() {
    skip_space();
    if (pos_ == text_.size()) fail("expected a number, name or '(' at the end");
    const char c = text_[pos_];
    if (accept('(')) {
      enter(pos_ - 1);
      Expr e = expr();
      expect(')');
      leave();
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return name();
    fail(fmt::format("unexpected '{}'", c));
  }
  Expr number() {
    const size_t start = pos_;
    int64_t value = 0;
    for (; pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])); ++pos_) {
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, text_[pos_] - '0', &value)) {
        fail(fmt::format("number too large (above {})", INT64_MAX), start);
      }
    }
    return Expr(value);
  }
  // A dim or device symbol, or a function call.
  Expr name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_identifier_char(text_[pos_])) ++pos_;
    const std::string name = text_.substr(start, pos_ - start);
    for (const auto& [fn_name, fn] : function_table()) {
      if (name == fn_name) return call(fn, start);
    }
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      fail(fmt::format("unknown function '{}' (functions: {})", name, fmt::join(expr_functions(), ", ")), start);
    }
    return Expr::dim(name);
  }
  Expr call(Function fn, size_t start) {
    enter(start);
    expect('(');
    Expr a = expr();
    expect(',');
    Expr b = expr();
    expect(')');
    leave();
    return combine(fn, a, b, start);
  }

  const std::string& text_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace

Expr Expr::parse(const std::string& text) { return Parser(text).parse(); }

namespace {

// terms[0] op terms[1] op ... paired level by level, so the tree is log2(n) deep: a left-deep
// chain of a rank-300 shape's product would pass the nesting limit.
template <typename Op>
Expr balanced(std::vector<Expr> level, int64_t identity, Op op) {
  if (level.empty()) return Expr(identity);
  while (level.size() > 1) {
    std::vector<Expr> next;
    for (size_t i = 0; i < level.size(); i += 2)
      next.push_back(i + 1 < level.size() ? op(level[i], level[i + 1]) : level[i]);
    level = std::move(next);
  }
  return level[0];
}

}  // namespace

Expr product(const Shape& shape) {
  return balanced(shape, 1, [](const Expr& a, const Expr& b) { return a * b; });
}

Expr sum(const std::vector<Expr>& terms) {
  return balanced(terms, 0, [](const Expr& a, const Expr& b) { return a + b; });
}

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + shape[i].str();
  return out + "]";
}

Expr device_sms() { return Expr::dim(kSmsSymbol); }
Expr device_smem_per_block() { return Expr::dim(kSmemPerBlockSymbol); }
Expr device_l2_bytes() { return Expr::dim(kL2BytesSymbol); }

const std::vector<std::string>& device_symbols() {
  static const std::vector<std::string> names = {kSmsSymbol, kSmemPerBlockSymbol, kL2BytesSymbol};
  return names;
}

bool is_device_symbol(const std::string& name) {
  const std::vector<std::string>& names = device_symbols();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Bindings device_bindings(const DeviceFacts& facts) {
  return {{kSmsSymbol, facts.sms}, {kSmemPerBlockSymbol, facts.smem_per_block}, {kL2BytesSymbol, facts.l2_bytes}};
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string bindings_text(const Bindings& bindings) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : bindings) parts.push_back(fmt::format("{}={}", name, value));
  return parts.empty() ? std::string("no dims") : fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<int64_t> eval_shape(const Shape& shape, const Bindings& bindings) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const auto& d : shape) out.push_back(d.eval(bindings));
  return out;
}

}  // namespace teeny
