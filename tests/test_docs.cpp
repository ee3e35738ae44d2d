// docs/ops.md, the op catalogue users read, against the registry as `teeny ops --format json`
// prints it, so the two cannot drift: every registered op has a section, every section names a
// registered op, and each section's `- inputs:`, `- attrs:`, `- params:` and `- dtypes:` lines
// list exactly what its ops declare, in order, in `teeny ops`'s notation (attrs `name=default`,
// `name?` optional, bare required; inputs `name?` optional, `name...` repeating).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/teeny_command.h"

namespace teeny {
namespace {

const char* const kListKeys[] = {"inputs", "attrs", "params", "dtypes"};

// One `### ...` section of docs/ops.md: the ops its heading names and its list lines, each as
// the backquoted items on it ("none" or no items: an empty list).
struct DocSection {
  std::vector<std::string> ops;
  std::map<std::string, std::vector<std::string>> lists;  // "attrs" -> {"out_features", ...}
  std::vector<std::string> problems;
};

std::vector<std::string> backquoted(const std::string& text) {
  std::vector<std::string> items;
  for (size_t open = text.find('`'); open != std::string::npos; open = text.find('`', open)) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    items.push_back(text.substr(open + 1, close - open - 1));
    open = close + 1;
  }
  return items;
}

std::vector<DocSection> parse_op_doc(const std::string& text) {
  std::vector<DocSection> sections;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#", 0) == 0) {
      if (line.rfind("### ", 0) == 0)
        sections.push_back({backquoted(line), {}, {}});
      else if (!sections.empty())
        sections.push_back({});  // a higher heading ends the section
      continue;
    }
    if (sections.empty() || sections.back().ops.empty()) continue;
    for (const char* key : kListKeys) {
      const std::string prefix = std::string("- ") + key + ":";
      if (line.rfind(prefix, 0) != 0) continue;
      DocSection& section = sections.back();
      if (section.lists.count(key)) section.problems.push_back(std::string("two '") + prefix + "' lines");
      section.lists[key] = backquoted(line);
    }
  }
  return sections;
}

// An op's lists as the doc must spell them, from its `teeny ops --format json` entry.
std::map<std::string, std::vector<std::string>> expected_lists(const nlohmann::json& op) {
  std::map<std::string, std::vector<std::string>> lists{{"inputs", {}}, {"attrs", {}}};
  const nlohmann::json& inputs = op.at("inputs");
  const size_t optional = op.value("optional_inputs", 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = inputs[i].at("name").get<std::string>();
    if (op.at("variadic").get<bool>() && i + 1 == inputs.size()) name += "...";
    if (i + optional >= inputs.size()) name += "?";
    lists["inputs"].push_back(name);
  }
  for (const nlohmann::json& attr : op.at("attrs")) {
    std::string name = attr.at("name").get<std::string>();
    if (attr.contains("default")) {
      const nlohmann::json& value = attr.at("default");
      name += "=" + (value.is_string() ? value.get<std::string>() : value.dump());
    } else if (!attr.at("required").get<bool>()) {
      name += "?";
    }
    lists["attrs"].push_back(name);
  }
  lists["params"] = op.at("params").get<std::vector<std::string>>();
  lists["dtypes"] = op.at("dtypes").get<std::vector<std::string>>();
  return lists;
}

std::string list_text(const std::vector<std::string>& items) {
  if (items.empty()) return "none";
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "`" : ", `") + item + "`";
  return out;
}

class OpsDoc : public ::testing::Test {
 protected:
  void SetUp() override {
    const testing::Command ops = testing::run_teeny("ops --format json");
    ASSERT_EQ(ops.exit_code, 0) << ops.err;
    for (const nlohmann::json& op : nlohmann::json::parse(ops.out)) registered_[op.at("name")] = op;
    ASSERT_GT(registered_.size(), 30u);
    std::ifstream in(std::string(TEENY_SOURCE_DIR) + "/docs/ops.md");
    ASSERT_TRUE(in) << "cannot read docs/ops.md";
    std::stringstream text;
    text << in.rdbuf();
    sections_ = parse_op_doc(text.str());
  }

  std::map<std::string, nlohmann::json> registered_;
  std::vector<DocSection> sections_;
};

TEST_F(OpsDoc, EveryRegisteredOpHasOneSectionAndEverySectionIsRegistered) {
  std::map<std::string, int> documented;
  for (const DocSection& section : sections_) {
    for (const std::string& op : section.ops) {
      ++documented[op];
      EXPECT_TRUE(registered_.count(op)) << "docs/ops.md has a section for '" << op
                                         << "', which `teeny ops` does not list";
    }
  }
  for (const auto& [name, op] : registered_) {
    EXPECT_EQ(documented[name], 1) << "docs/ops.md needs exactly one '### `" << name << "`' section (or a "
                                   << "heading that names it among others); found " << documented[name];
  }
}

TEST_F(OpsDoc, EachSectionListsItsOpsInputsAttrsParamsAndDtypes) {
  for (const DocSection& section : sections_) {
    for (const std::string& problem : section.problems)
      ADD_FAILURE() << "docs/ops.md, section of " << list_text(section.ops) << ": " << problem;
    for (const std::string& name : section.ops) {
      if (!registered_.count(name)) continue;  // reported by the test above
      const auto expected = expected_lists(registered_.at(name));
      for (const char* key : kListKeys) {
        const auto found = section.lists.find(key);
        if (found == section.lists.end()) {
          ADD_FAILURE() << "docs/ops.md, section of " << list_text(section.ops) << ": no '- " << key << ":' line; op '"
                        << name << "' needs '- " << key << ": " << list_text(expected.at(key)) << "'";
        } else if (found->second != expected.at(key)) {
          ADD_FAILURE() << "docs/ops.md, section of " << list_text(section.ops) << ": '- " << key << ": "
                        << list_text(found->second) << "' but op '" << name << "' has '- " << key << ": "
                        << list_text(expected.at(key)) << "' (prose on these lines goes without backquotes)";
        }
      }
    }
  }
}

// The parser itself, on a small doc, so a broken parser cannot pass the checks above vacuously.
TEST(OpsDocParser, ReadsHeadingsAndListLinesAndEndsSectionsAtHigherHeadings) {
  const std::vector<DocSection> sections = parse_op_doc(
      "# ops\n"
      "- attrs: `ignored` (before any section)\n"
      "### `relu`, `silu`\n"
      "text with `code`\n"
      "- inputs: `x` [..., in]\n"
      "- attrs: none\n"
      "## Dense\n"
      "- params: `ignored`\n"
      "### `linear`\n"
      "- attrs: `out_features`, `bias=true`, `in_features?` (int; must equal the last dim)\n"
      "- attrs: `again`\n");
  ASSERT_EQ(sections.size(), 3u);
  EXPECT_EQ(sections[0].ops, (std::vector<std::string>{"relu", "silu"}));
  EXPECT_EQ(sections[0].lists.at("inputs"), std::vector<std::string>{"x"});
  EXPECT_TRUE(sections[0].lists.at("attrs").empty());
  EXPECT_EQ(sections[0].lists.count("params"), 0u);
  EXPECT_TRUE(sections[1].ops.empty());
  EXPECT_TRUE(sections[1].lists.empty());
  EXPECT_EQ(sections[2].ops, std::vector<std::string>{"linear"});
  EXPECT_EQ(sections[2].lists.at("attrs"), std::vector<std::string>{"again"});
  EXPECT_EQ(sections[2].problems, std::vector<std::string>{"two '- attrs:' lines"});
}

TEST(OpsDocParser, SpellsAnOpsListsAsTeenyOpsDoes) {
  const nlohmann::json op = nlohmann::json::parse(R"({
    "name": "x", "variadic": false, "optional_inputs": 1,
    "inputs": [{"name": "x"}, {"name": "residual"}],
    "attrs": [{"name": "n", "required": true}, {"name": "eps", "required": false, "default": 1e-05},
              {"name": "mode", "required": false, "default": "none"}, {"name": "scale", "required": false}],
    "params": ["weight"], "dtypes": ["f32", "bf16"]})");
  const auto lists = expected_lists(op);
  EXPECT_EQ(lists.at("inputs"), (std::vector<std::string>{"x", "residual?"}));
  EXPECT_EQ(lists.at("attrs"), (std::vector<std::string>{"n", "eps=1e-05", "mode=none", "scale?"}));
  EXPECT_EQ(list_text(lists.at("params")), "`weight`");
  EXPECT_EQ(list_text({}), "none");
}

}  // namespace
}  // namespace teeny
