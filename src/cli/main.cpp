// SPDX-License-Identifier: Apache-2.0
// The `sluice` command-line tool: `sluice serve`, and the client commands mb, rb, put, get, ls
// and rm. `sluice --help` and `sluice COMMAND --help` say the rest (args.cpp).
#include "cli.hpp"

#include <variant>

int main(int argc, char** argv) {
  const sluice::cli::command_line command = sluice::cli::parse_command_line(argc, argv);
  if (const auto* code = std::get_if<int>(&command)) return *code;
  if (const auto* serve = std::get_if<sluice::cli::serve_options>(&command)) return sluice::cli::serve(*serve);
  return sluice::cli::run_client(std::get<sluice::cli::client_options>(command));
}
