#include "ops/grad_util.h"

namespace teeny::ops {

nlohmann::json shape_attr(const Shape& shape) {
  nlohmann::json dims = nlohmann::json::array();
  for (const Expr& dim : shape) dims.push_back(dim.str());
  return dims;
}

std::string sum_to(GradBuilder& g, const std::string& grad, const std::string& tensor) {
  const Shape& target = g.type(tensor).shape;
  const Shape& shape = g.type(grad).shape;
  if (shape == target) return grad;
  // A bias-like operand (the last dim alone): grad.sum_rows splits the rows over the whole GPU.
  if (shape.size() >= 2 && target.size() == 1 && target[0] == shape.back()) return g.add("grad.sum_rows", {grad});
  return g.add("grad.sum_to", {grad}, {{"shape", shape_attr(target)}});
}

std::string activation_grad(GradBuilder& g, const std::string& activation) {
  const std::string& saved = activation_grad_reads_output(activation) ? g.output() : g.input(0);
  return g.add("grad.activation", {g.grad_output(), saved}, {{"activation", activation}});
}

}  // namespace teeny::ops
