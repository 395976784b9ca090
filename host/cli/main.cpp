// kthost: trace Linux guest kernels with Intel PT from the hypervisor.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"

using kt::cli::command_table;

static void print_help() {
  std::printf("kthost - trace Linux guest kernels from the hypervisor\n\nusage: kthost COMMAND [options]\n\ncommands:\n");
  for (const auto& [name, cmd] : command_table()) std::printf("  %-12s %s\n", name.c_str(), cmd.summary.c_str());
  std::printf("\nRun 'kthost COMMAND --help' for a command's options.\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("kthost 0.1.0\n");
    return 0;
  }
  auto it = command_table().find(argv[1]);
  if (it == command_table().end()) {
    std::fprintf(stderr, "kthost: unknown command '%s' (see 'kthost --help')\n", argv[1]);
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  return it->second.run(args);
}
