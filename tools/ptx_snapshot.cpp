// teeny_ptx_snapshot OUT_DIR: compiles every graphs/*.yaml and every op's conformance cases
// as `teeny compile` does by default (sm_90, fusion on, no --bind) and writes each launch's
// PTX to OUT_DIR/<graph>/<node>.<launch>.ptx, with OUT_DIR/index.tsv listing them.
// Graph ids are graphs/<stem> and conformance/<op>/<case index>: files are keyed by graph,
// node and launch, which survive kernel renames, so scripts/ptx-compare.py can check that
// two versions of the code emit the same instruction streams (see scripts/ptx-diff.sh).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "core/compile.h"
#include "core/error.h"
#include "core/graph.h"
#include "ops/ops.h"

namespace fs = std::filesystem;

namespace teeny {
namespace {

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) throw Error(fmt::format("cannot write '{}'", path.string()));
}

struct Snapshot {
  std::string index = "graph\tnode\tlaunch\tkernel\tfile\n";
  int graphs = 0, launches = 0;
};

// Compiles `graph` and writes its launches' PTX under out/id.
void snapshot_graph(const Graph& graph, const Registry& registry, const std::string& id, const fs::path& out,
                    Snapshot& snapshot) {
  CompileOptions options;
  // The kernel cache is keyed by the entry's source text: a stale entry could hide a change
  // made in an included header, so every kernel is compiled afresh.
  options.use_cache = false;
  const Bundle bundle = compile_graph(graph, registry, options);
  for (const BundleLaunch& launch : bundle.launches) {
    const BundleKernel& kernel = bundle.kernels.at(launch.kernel);
    const std::string file = fmt::format("{}/{}.{}.ptx", id, launch.node, launch.index);
    write_text(out / file, kernel.ptx);
    snapshot.index += fmt::format("{}\t{}\t{}\t{}\t{}\n", id, launch.node, launch.index, kernel.name, file);
  }
  ++snapshot.graphs;
  snapshot.launches += static_cast<int>(bundle.launches.size());
}

Snapshot snapshot_all(const Registry& registry, const fs::path& out) {
  Snapshot snapshot;
  std::vector<fs::path> specs;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(TEENY_SOURCE_DIR) / "graphs"))
    if (entry.path().extension() == ".yaml") specs.push_back(entry.path());
  std::sort(specs.begin(), specs.end());
  for (const fs::path& spec : specs)
    snapshot_graph(load_graph(spec.string(), registry), registry, "graphs/" + spec.stem().string(), out, snapshot);

  for (const OpDef& op : registry.ops()) {
    if (!op.conformance_cases) continue;
    const std::vector<ConformanceCase> cases = op.conformance_cases();
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string id = fmt::format("conformance/{}/{}", op.name, i);
      snapshot_graph(parse_graph(cases[i].graph, id, registry), registry, id, out, snapshot);
    }
  }
  return snapshot;
}

// Writes the snapshot next to `out` and renames it into place, so a failed run leaves any
// earlier snapshot whole.
void write_snapshot(fs::path out) {
  out = fs::absolute(out).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/"
  Registry registry;
  ops::register_all(registry);
  const fs::path temp = out.string() + ".partial";
  fs::remove_all(temp);
  Snapshot snapshot;
  try {
    snapshot = snapshot_all(registry, temp);
    write_text(temp / "index.tsv", snapshot.index);
  } catch (...) {
    fs::remove_all(temp);
    throw;
  }
  fs::remove_all(out);
  fs::rename(temp, out);
  std::cout << fmt::format("{} graphs, {} launches -> {}\n", snapshot.graphs, snapshot.launches, out.string());
}

}  // namespace
}  // namespace teeny

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: teeny_ptx_snapshot OUT_DIR\n";
    return 1;
  }
  try {
    teeny::write_snapshot(argv[1]);
  } catch (const teeny::Error& e) {
    std::cerr << e.render();
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "teeny_ptx_snapshot: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
