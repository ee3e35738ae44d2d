// teeny's entry point: registers the subcommands, runs the chosen one, and is the only place
// that catches teeny::Error (rendered to stderr; exit code from the error).
#include <iostream>
#include <new>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"
#include "ops/ops.h"

namespace teeny::cli {

const Registry& registry() {
  static const Registry built = [] {
    Registry r;
    ops::register_all(r);
    return r;
  }();
  return built;
}

}  // namespace teeny::cli

int main(int argc, char** argv) {
  CLI::App app{"teeny: compile YAML model graphs to CUDA PTX, run and profile them", "teeny"};
  app.set_version_flag("--version", TEENY_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  // One line per subcommand (cli/<name>.cpp).
  teeny::cli::add_check_command(app);
  teeny::cli::add_ops_command(app);
  teeny::cli::add_compile_command(app);
  teeny::cli::add_inspect_command(app);
  teeny::cli::add_run_command(app);
  teeny::cli::add_profile_command(app);
  teeny::cli::add_compare_command(app);
  teeny::cli::add_tune_command(app);
  teeny::cli::add_train_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error is exit code 1.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << teeny::cli::usage_error(app, e).render();
    return static_cast<int>(teeny::ExitCode::kInvalidInput);
  } catch (const teeny::Error& e) {
    std::cout.flush();
    std::cerr << e.render();
    return static_cast<int>(e.code());
  } catch (const std::bad_alloc&) {
    // Sizes every check let through can still be more than this machine holds.
    std::cout.flush();
    std::cerr << "teeny: error: out of host memory\n";
    return static_cast<int>(teeny::ExitCode::kInvalidInput);
  } catch (const std::exception& e) {
    // A bug, not bad input: still a message and an exit code rather than an abort.
    std::cerr << "teeny: internal error: " << e.what() << "\n";
    return static_cast<int>(teeny::ExitCode::kInvalidInput);
  }
  return 0;
}
