// Symbolic integer expressions over the graph's dims (B, S, ...) and the device symbols.
//
// Grammar (strings in specs and manifests):
//   expr  := term (('+' | '-') term)*
//   term  := unary (('*' | '/' | '%') unary)*         '/' is floor division
//   unary := '-' unary | atom
//   atom  := INT | NAME | '(' expr ')' | FUNC '(' expr ',' expr ')'
//   FUNC  := ceil_div | min | max | round_up | le      le(a, b): 1 where a <= b, else 0
// Expressions are immutable and cheap to copy (shared nodes). They are simplified on
// construction (constant folding, x+0, x*1, x*0, x/1, x+x*c, ...), so equal-by-construction
// shapes compare equal with `==` (structural equality after simplification).
//
// Arithmetic is checked: a fold or an evaluation whose result does not fit in 64 bits is an
// error, as is a division by zero. Every tree is at most kMaxExprDepth levels deep and holds at
// most kMaxExprTerms nodes (shared subtrees counted each time), so no walk over it (eval, str,
// ==, substitute) can overflow the stack or run away.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace teeny {

using Bindings = std::map<std::string, int64_t>;

inline constexpr int kMaxExprDepth = 256;            // levels, a leaf is 1; the parser's nesting too
inline constexpr uint32_t kMaxExprTerms = 1u << 22;  // nodes of the tree, shared ones counted each time

class Expr {
 public:
  enum class Kind { kConst, kDim, kAdd, kSub, kMul, kFloorDiv, kMod, kCeilDiv, kMin, kMax, kRoundUp, kLe };

  Expr();                                                 // the constant 0
  Expr(int64_t value);                                    // NOLINT: implicit from integers is the point
  Expr(int value) : Expr(static_cast<int64_t>(value)) {}  // NOLINT
  static Expr dim(const std::string& name);
  // Parses the grammar above. Throws teeny::Error naming the column on bad input, a nesting
  // deeper than kMaxExprDepth, a division by zero or an overflow while folding constants.
  static Expr parse(const std::string& text);

  Kind kind() const;
  bool is_const() const { return kind() == Kind::kConst; }
  std::optional<int64_t> const_value() const;  // set iff is_const()
  const std::string& dim_name() const;         // kDim only
  const Expr& lhs() const;                     // binary kinds only
  const Expr& rhs() const;
  int depth() const;       // 1 for a leaf
  uint32_t terms() const;  // nodes, shared ones counted each time

  // Evaluates under `bindings`. Throws teeny::Error for an unbound dim or device symbol,
  // division by zero, or a result that does not fit in 64 bits.
  int64_t eval(const Bindings& bindings) const;
  // Substitutes bound dims and re-simplifies (used by compile --bind).
  Expr substitute(const Bindings& bindings) const;
  // The names used (dims and device symbols), sorted and unique.
  std::vector<std::string> dims() const;
  // Readable, re-parsable form with minimal parentheses: "B*4", "ceil_div(B*S, 128)".
  std::string str() const;
  void append_str(std::string& out) const;  // str() at the end of `out`

  friend bool operator==(const Expr& a, const Expr& b);
  friend bool operator!=(const Expr& a, const Expr& b) { return !(a == b); }

 private:
  struct Node;
  explicit Expr(std::shared_ptr<const Node> node);
  // The node of a constant: shared for small ones (a default Expr is 0), made for the others.
  static std::shared_ptr<const Node> constant(int64_t value);
  static Expr make(Kind kind, Expr lhs, Expr rhs);  // simplifies; throws on overflow or depth
  static Expr node(Kind kind, Expr lhs, Expr rhs);  // as given; throws past the depth or size limit
  static std::string written(Kind kind, const Expr& lhs, const Expr& rhs);  // as given, for errors
  std::shared_ptr<const Node> node_;

  friend Expr operator+(const Expr& a, const Expr& b);
  friend Expr operator-(const Expr& a, const Expr& b);
  friend Expr operator*(const Expr& a, const Expr& b);
  friend Expr operator/(const Expr& a, const Expr& b);  // floor division
  friend Expr operator%(const Expr& a, const Expr& b);
  friend Expr ceil_div(const Expr& a, const Expr& b);
  friend Expr min(const Expr& a, const Expr& b);
  friend Expr max(const Expr& a, const Expr& b);
  friend Expr round_up(const Expr& a, const Expr& b);
  friend Expr le(const Expr& a, const Expr& b);
};

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator%(const Expr& a, const Expr& b);
Expr ceil_div(const Expr& a, const Expr& b);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);
Expr round_up(const Expr& a, const Expr& b);
Expr le(const Expr& a, const Expr& b);             // 1 where a <= b, else 0 (a launch's `when`)
const std::vector<std::string>& expr_functions();  // the FUNC names of the grammar

using Shape = std::vector<Expr>;

// ---- device symbols ---------------------------------------------------------------------------
// Facts of the GPU a bundle runs on, bound by `run` and `profile` from the driver's attributes
// like dims are bound from --bind, so that a grid or split count that depends on the GPU is an
// expression (`min(ceil_div(n, 256), SMS*8)`) and a bundle compiled for an arch fills every GPU
// of that arch. Spec dims may not take these names.
inline constexpr const char* kSmsSymbol = "SMS";                      // multiprocessors
inline constexpr const char* kSmemPerBlockSymbol = "SMEM_PER_BLOCK";  // max opt-in shared memory a block, bytes
inline constexpr const char* kL2BytesSymbol = "L2_BYTES";             // L2 cache, bytes

Expr device_sms();
Expr device_smem_per_block();
Expr device_l2_bytes();
const std::vector<std::string>& device_symbols();  // the three names above, in that order
bool is_device_symbol(const std::string& name);

struct DeviceFacts {
  int64_t sms = 0;
  int64_t smem_per_block = 0;  // bytes
  int64_t l2_bytes = 0;
  friend bool operator==(const DeviceFacts& a, const DeviceFacts& b) {
    return a.sms == b.sms && a.smem_per_block == b.smem_per_block && a.l2_bytes == b.l2_bytes;
  }
};
Bindings device_bindings(const DeviceFacts& facts);  // {SMS: ..., SMEM_PER_BLOCK: ..., L2_BYTES: ...}

Expr product(const Shape& shape);                           // 1 for a scalar shape; balanced, as sum
Expr sum(const std::vector<Expr>& terms);                   // 0 for none; balanced, so depth grows as log2
std::string shape_str(const Shape& shape);                  // "[B, 784]"
std::string shape_text(const std::vector<int64_t>& shape);  // "[64, 784]"
std::string bindings_text(const Bindings& bindings);        // "B=64, S=128", or "no dims"
std::vector<int64_t> eval_shape(const Shape& shape, const Bindings& bindings);

}  // namespace teeny
