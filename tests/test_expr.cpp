// Symbolic dim expressions: parsing, printing, simplification, evaluation and errors,
// against hand-worked values.
#include <cstdint>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/expr.h"

namespace teeny {
namespace {

std::string printed(const std::string& text) { return Expr::parse(text).str(); }

std::string parse_error(const std::string& text) {
  try {
    Expr::parse(text);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

std::string eval_error(const std::string& text, const Bindings& bindings) {
  try {
    Expr::parse(text).eval(bindings);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(Expr, ParsesLiteralsNamesAndFunctions) {
  EXPECT_EQ(Expr::parse("784").const_value(), 784);
  Expr b = Expr::parse("B");
  EXPECT_EQ(b.kind(), Expr::Kind::kDim);
  EXPECT_EQ(b.dim_name(), "B");
  EXPECT_EQ(Expr::parse("ceil_div(B, 128)").kind(), Expr::Kind::kCeilDiv);
  EXPECT_EQ(Expr::parse("round_up(S, 16)").kind(), Expr::Kind::kRoundUp);
  EXPECT_EQ(Expr::parse("min(B, S)").kind(), Expr::Kind::kMin);
  EXPECT_EQ(Expr::parse("max(B, S)").kind(), Expr::Kind::kMax);
  EXPECT_EQ(Expr::parse("  B   *  4 ").kind(), Expr::Kind::kMul);
}

TEST(Expr, PrintsWithMinimalParentheses) {
  EXPECT_EQ(printed("B*4"), "B*4");
  EXPECT_EQ(printed("B + 1"), "B + 1");
  EXPECT_EQ(printed("B-1"), "B - 1");
  EXPECT_EQ(printed("(B+1)*2"), "(B + 1)*2");
  EXPECT_EQ(printed("B*(S+1)"), "B*(S + 1)");
  EXPECT_EQ(printed("B + S*4"), "B + S*4");
  EXPECT_EQ(printed("(B*S)"), "B*S");
  EXPECT_EQ(printed("B/S/2"), "B/S/2");
  EXPECT_EQ(printed("B/(S/2)"), "B/(S/2)");
  EXPECT_EQ(printed("B - (S - 1)"), "B - (S - 1)");
  EXPECT_EQ(printed("B % 3"), "B%3");
  EXPECT_EQ(printed("ceil_div(B*S,128)"), "ceil_div(B*S, 128)");
  EXPECT_EQ(printed("round_up(max(B, S), 8)"), "round_up(max(B, S), 8)");
}

TEST(Expr, PrintedFormParsesBackToTheSameExpression) {
  for (const char* text : {"B*4", "(B + 1)*(S - 2)", "ceil_div(B*S, 128)", "B/(S/2)", "min(B, S) + max(B, 3)%7",
                           "round_up(B*3 + 1, 16) - S", "B - (S - 1)", "-B"}) {
    Expr e = Expr::parse(text);
    EXPECT_EQ(Expr::parse(e.str()), e) << text << " printed as " << e.str();
  }
}

TEST(Expr, FoldsConstantsWithFloorSemantics) {
  EXPECT_EQ(Expr::parse("2*3+4").const_value(), 10);
  EXPECT_EQ(Expr::parse("7/2").const_value(), 3);
  EXPECT_EQ(Expr::parse("-7/2").const_value(), -4);  // floor, as Python's //
  EXPECT_EQ(Expr::parse("-7%2").const_value(), 1);   // sign of the divisor, as Python's %
  EXPECT_EQ(Expr::parse("ceil_div(7, 2)").const_value(), 4);
  EXPECT_EQ(Expr::parse("ceil_div(8, 2)").const_value(), 4);
  EXPECT_EQ(Expr::parse("round_up(10, 4)").const_value(), 12);
  EXPECT_EQ(Expr::parse("round_up(12, 4)").const_value(), 12);
  EXPECT_EQ(Expr::parse("min(3, 5) + max(3, 5)").const_value(), 8);
  EXPECT_EQ(Expr::parse("(1 + 2)*(3 + 4)").const_value(), 21);
  EXPECT_EQ(Expr::parse("10 - 2 - 3").const_value(), 5);  // left-associative
  EXPECT_EQ(Expr::parse("64/4/2").const_value(), 8);
}

TEST(Expr, SimplifiesTrivialForms) {
  EXPECT_EQ(printed("B*1"), "B");
  EXPECT_EQ(printed("B+0"), "B");
  EXPECT_EQ(printed("B/1"), "B");
  EXPECT_EQ(Expr::parse("B*0").const_value(), 0);
  EXPECT_EQ(Expr::parse("B%1").const_value(), 0);
  EXPECT_EQ(Expr::parse("B-B").const_value(), 0);
  EXPECT_EQ(printed("(B*4)/4"), "B");
  EXPECT_EQ(printed("B*2*3"), "B*6");
  EXPECT_EQ(printed("B+1+2"), "B + 3");
  EXPECT_EQ(printed("B+2-2"), "B");
  EXPECT_EQ(printed("4*B"), "B*4");  // constants go right
  EXPECT_EQ(printed("min(B, B)"), "B");
  EXPECT_EQ(printed("round_up(B*8, 8)"), "B*8");
  // Structural equality after simplification: shapes built two ways compare equal.
  EXPECT_EQ(Expr::parse("4*B"), Expr::dim("B") * 4);
  EXPECT_EQ(Expr::parse("B + 2 - 2"), Expr::dim("B"));
  EXPECT_NE(Expr::parse("B*4"), Expr::parse("B*5"));
  EXPECT_NE(Expr::parse("B/S"), Expr::parse("S/B"));
}

TEST(Expr, EvaluatesUnderBindings) {
  Bindings b{{"B", 3}, {"S", 100}};
  EXPECT_EQ(Expr::parse("ceil_div(B*S, 128)").eval(b), 3);  // 300 / 128 = 2.34 -> 3
  EXPECT_EQ(Expr::parse("round_up(S, 16)").eval(b), 112);
  EXPECT_EQ(Expr::parse("S % 7").eval(b), 2);
  EXPECT_EQ(Expr::parse("(B - 20)/3").eval(b), -6);  // -17/3 floors to -6
  EXPECT_EQ(Expr::parse("min(B, S)*max(B, S)").eval(b), 300);
  EXPECT_EQ(Expr::parse("B*S + S/B").eval(b), 333);
  EXPECT_EQ(Expr::parse("-B").eval(b), -3);
}

TEST(Expr, SubstitutesAndListsDims) {
  Expr e = Expr::parse("B*S + 1");
  EXPECT_EQ(e.substitute({{"B", 2}}).str(), "S*2 + 1");
  EXPECT_EQ(e.substitute({{"B", 2}, {"S", 5}}).const_value(), 11);
  EXPECT_EQ(Expr::parse("max(S, B) + B*T").dims(), (std::vector<std::string>{"B", "S", "T"}));
  EXPECT_TRUE(Expr::parse("3*4").dims().empty());
}

TEST(Expr, ShapeHelpers) {
  Shape shape{Expr::dim("B"), Expr(784)};
  EXPECT_EQ(shape_str(shape), "[B, 784]");
  EXPECT_EQ(product(shape).str(), "B*784");
  EXPECT_EQ(product({}).const_value(), 1);
  EXPECT_EQ(eval_shape(shape, {{"B", 2}}), (std::vector<int64_t>{2, 784}));
}

TEST(Expr, LeIsOneWhereAtMost) {
  const Expr guard = Expr::parse("le(B*S, 16)");
  EXPECT_EQ(guard.str(), "le(B*S, 16)");
  EXPECT_EQ(guard.eval({{"B", 2}, {"S", 8}}), 1);
  EXPECT_EQ(guard.eval({{"B", 1}, {"S", 17}}), 0);
  EXPECT_EQ(le(Expr(17), Expr::dim("M")).eval({{"M", 16}}), 0);
  EXPECT_EQ(le(Expr(17), Expr::dim("M")).eval({{"M", 17}}), 1);
  EXPECT_EQ(le(Expr(3), Expr(4)), Expr(1));  // folds
}

TEST(Expr, ParseErrorsNameTheColumn) {
  EXPECT_EQ(parse_error("B*"), "bad expression 'B*': expected a number, name or '(' at the end at column 3");
  EXPECT_EQ(parse_error("(B+1"), "bad expression '(B+1': expected ')' at the end at column 5");
  EXPECT_EQ(parse_error("B $"), "bad expression 'B $': unexpected '$' at column 3");
  EXPECT_EQ(parse_error(""), "bad expression '': empty expression at column 1");
  EXPECT_EQ(parse_error("foo(1, 2)"),
            "bad expression 'foo(1, 2)': unknown function 'foo' (functions: ceil_div, min, max, "
            "round_up, le) at column 1");
  EXPECT_EQ(parse_error("min(B)"), "bad expression 'min(B)': expected ',' but found ')' at column 6");
  EXPECT_EQ(parse_error("B 4"), "bad expression 'B 4': unexpected '4' at column 3");
}

TEST(Expr, EvalErrors) {
  EXPECT_EQ(eval_error("B + S", {{"B", 1}}), "dim 'S' is not bound");
  EXPECT_EQ(eval_error("B/S", {{"B", 1}, {"S", 0}}), "division by zero evaluating 'B/S'");
  EXPECT_EQ(eval_error("ceil_div(B, S)", {{"B", 1}, {"S", 0}}), "division by zero evaluating 'ceil_div(B, S)'");
}

// The nesting limit: a hostile expression ~100k levels deep (or a 100k-term chain) is refused at
// the first level past kMaxExprDepth, with the text cut, instead of overflowing the stack.
TEST(Expr, NestingDeeperThanTheLimitIsRefused) {
  const std::string parens = std::string(100000, '(') + "B" + std::string(100000, ')');
  EXPECT_EQ(parse_error(parens),
            "bad expression '" + std::string(60, '(') + "...': nested deeper than 256 levels at column 257");
  std::string negations;
  for (int i = 0; i < 100000; ++i) negations += "-(";
  EXPECT_EQ(parse_error(negations + "B"),
            "bad expression '" + negations.substr(0, 60) + "...': nested deeper than 256 levels at column 257");
  EXPECT_EQ(parse_error(std::string(100000, '-') + "B"),
            "bad expression '" + std::string(60, '-') + "...': nested deeper than 256 levels at column 257");
  std::string chain = "B";
  for (int i = 0; i < 50000; ++i) chain += "+S+B";
  EXPECT_EQ(parse_error(chain),
            "bad expression '" + chain.substr(0, 60) + "...': nested deeper than 256 levels at column 512");
  const std::string call = "max(B, " + std::string(300, '(') + "S" + std::string(300, ')') + ")";
  EXPECT_EQ(parse_error(call),
            "bad expression '" + call.substr(0, 60) + "...': nested deeper than 256 levels at column 263");
  // 256 levels parse, and a chain of like terms folds rather than nests.
  EXPECT_EQ(Expr::parse(std::string(255, '(') + "B" + std::string(255, ')')), Expr::dim("B"));
  std::string like = "B";
  for (int i = 1; i < 100000; ++i) like += "+B";
  EXPECT_EQ(printed(like), "B*100000");
}

TEST(Expr, TreesBuiltInCodeAreBoundedToo) {
  Expr deep = Expr::dim("B");
  for (int i = 1; i < kMaxExprDepth; ++i) deep = deep * Expr::dim("S");
  EXPECT_EQ(deep.depth(), kMaxExprDepth);
  try {
    deep* Expr::dim("S");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "expression nested deeper than 256 levels: '" + deep.str().substr(0, 60) + "...'");
  }
  // Shared subtrees: squaring doubles the tree a walk visits, one level at a time.
  Expr square = Expr::dim("B") + Expr::dim("S");
  try {
    for (int i = 0; i < 30; ++i) square = square * square;
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "expression of more than 4194304 terms");
  }
  // A sum of many terms stays shallow.
  std::vector<Expr> terms;
  Bindings values;
  for (int i = 0; i < 10000; ++i) {
    terms.push_back(Expr::dim("D" + std::to_string(i)));
    values["D" + std::to_string(i)] = i;
  }
  const Expr total = sum(terms);
  EXPECT_LE(total.depth(), 15);
  EXPECT_EQ(total.eval(values), 10000 * 9999 / 2);
  EXPECT_EQ(sum({}).const_value(), 0);
  // So does the product of a high-rank shape (its elements), which a left-deep chain would not.
  const Expr elements = product(Shape(300, Expr::dim("B")));
  EXPECT_LE(elements.depth(), 15);
  EXPECT_EQ(elements.eval({{"B", 1}}), 1);
  EXPECT_EQ(product(Shape{Expr::dim("B"), Expr(3), Expr::dim("S")}).eval({{"B", 2}, {"S", 5}}), 30);
  EXPECT_EQ(product({}).const_value(), 1);
}

TEST(Expr, FoldingThatOverflowsIsAnError) {
  EXPECT_EQ(parse_error("4294967296*4294967296"),
            "bad expression '4294967296*4294967296': integer overflow in '4294967296*4294967296' at column 11");
  EXPECT_EQ(parse_error("B*4294967296*4294967296"),
            "bad expression 'B*4294967296*4294967296': integer overflow in 'B*4294967296*4294967296' at column 13");
  EXPECT_EQ(parse_error("B + 9223372036854775807 + 1"),
            "bad expression 'B + 9223372036854775807 + 1': integer overflow in 'B + 9223372036854775807 + 1' "
            "at column 25");
  EXPECT_EQ(parse_error("B*4611686018427387904 + B*4611686018427387904"),
            "bad expression 'B*4611686018427387904 + B*4611686018427387904': integer overflow in "
            "'B*4611686018427387904 + B*4611686018427387904' at column 23");
  EXPECT_EQ(parse_error("B - (-9223372036854775807 - 1)"),
            "bad expression 'B - (-9223372036854775807 - 1)': integer overflow in 'B - (-9223372036854775807 - 1)' "
            "at column 3");
  EXPECT_EQ(parse_error("-(-9223372036854775807 - 1)"),
            "bad expression '-(-9223372036854775807 - 1)': integer overflow in '0 - (-9223372036854775807 - 1)' "
            "at column 1");
  // INT64_MIN / -1 traps in C++: an error, as is ceil_div; the remainder is 0.
  EXPECT_EQ(parse_error("(-9223372036854775807 - 1)/-1"),
            "bad expression '(-9223372036854775807 - 1)/-1': integer overflow in '(-9223372036854775807 - 1)/-1' "
            "at column 27");
  EXPECT_EQ(parse_error("ceil_div(-9223372036854775807 - 1, -1)"),
            "bad expression 'ceil_div(-9223372036854775807 - 1, -1)': integer overflow in "
            "'ceil_div((-9223372036854775807 - 1), -1)' at column 1");
  EXPECT_EQ(Expr::parse("(-9223372036854775807 - 1)%-1").const_value(), 0);
  EXPECT_EQ(parse_error("round_up(9223372036854775807, 2)"),
            "bad expression 'round_up(9223372036854775807, 2)': integer overflow in "
            "'round_up(9223372036854775807, 2)' at column 1");
  EXPECT_EQ(parse_error("B/0"), "bad expression 'B/0': division by zero in 'B/0' at column 2");
  EXPECT_EQ(parse_error("9223372036854775808"),
            "bad expression '9223372036854775808': number too large (above 9223372036854775807) at column 1");
}

TEST(Expr, LargestNumbersParseAndPrintBack) {
  EXPECT_EQ(Expr::parse("9223372036854775807").const_value(), INT64_MAX);
  const Expr min = Expr::parse("-9223372036854775807 - 1");
  EXPECT_EQ(min.const_value(), INT64_MIN);
  EXPECT_EQ(min.str(), "(-9223372036854775807 - 1)");
  EXPECT_EQ(Expr::parse(min.str()), min);
  EXPECT_EQ(Expr::parse((Expr::dim("B") + min).str()), Expr::dim("B") + min);
}

TEST(Expr, EvaluationThatOverflowsIsAnError) {
  const Bindings big{{"B", int64_t{1} << 32}, {"S", int64_t{1} << 32}};
  EXPECT_EQ(eval_error("B*S", big),
            "integer overflow evaluating 'B*S': 4294967296*4294967296 is out of the 64-bit range");
  EXPECT_EQ(eval_error("B*S*2 + 1", {{"B", 1}, {"S", INT64_MAX}}),
            "integer overflow evaluating 'B*S*2': 9223372036854775807*2 is out of the 64-bit range");
  const Bindings min{{"B", INT64_MIN}, {"S", -1}};
  EXPECT_EQ(eval_error("B/S", min),
            "integer overflow evaluating 'B/S': (-9223372036854775807 - 1)/-1 is out of the 64-bit range");
  EXPECT_EQ(eval_error("ceil_div(B, S)", min),
            "integer overflow evaluating 'ceil_div(B, S)': ceil_div((-9223372036854775807 - 1), -1) is out of the "
            "64-bit range");
  EXPECT_EQ(Expr::parse("B%S").eval(min), 0);
  EXPECT_EQ(eval_error("round_up(B, S)", {{"B", INT64_MAX}, {"S", 2}}),
            "integer overflow evaluating 'round_up(B, S)': round_up(9223372036854775807, 2) is out of the 64-bit "
            "range");
  EXPECT_EQ(eval_error("B - S", {{"B", INT64_MIN}, {"S", 1}}),
            "integer overflow evaluating 'B - S': (-9223372036854775807 - 1) - 1 is out of the 64-bit range");
}

TEST(Expr, LikeTermsOfASumFold) {
  EXPECT_EQ(printed("B + B"), "B*2");
  EXPECT_EQ(printed("B*3 + B*4"), "B*7");
  EXPECT_EQ(printed("B + S + (B + S)"), "(B + S)*2");
}

}  // namespace
}  // namespace teeny
