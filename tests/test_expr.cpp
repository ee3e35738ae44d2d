// Symbolic dim expressions: parsing, printing, simplification, evaluation and errors,
// against hand-worked values.
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

}  // namespace
}  // namespace teeny
