#include "core/registry.h"

#include <fmt/format.h>

namespace teeny {

void Registry::add(OpDef def) {
  if (index_.count(def.name)) throw Error(fmt::format("op '{}' is registered twice", def.name));
  if (!def.infer) throw Error(fmt::format("op '{}' has no shape rule", def.name));
  if (def.update ? !def.update_reference : !def.reference)
    throw Error(fmt::format("op '{}' has no host reference", def.name));
  index_[def.name] = ops_.size();
  ops_.push_back(std::move(def));
}

const OpDef* Registry::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &ops_[it->second];
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, index] : index_) out.push_back(name);
  return out;
}

void Registry::add_pass(GraphPass pass) {
  for (const auto& existing : passes_)
    if (existing.name == pass.name) throw Error(fmt::format("graph pass '{}' is registered twice", pass.name));
  passes_.push_back(std::move(pass));
}

void Registry::add_kernel_header(KernelHeader header) {
  for (const KernelHeader& existing : kernel_headers_)
    if (existing.name == header.name) throw Error(fmt::format("kernel header '{}' is registered twice", header.name));
  kernel_headers_.push_back(std::move(header));
}

}  // namespace teeny
