// The kthost command table and the one option parser all commands share.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kthost/common/result.h"

namespace kt::cli {

// Declarative options: each command lists what it takes, then parses once.
class Options {
 public:
  // --name VALUE / --name=VALUE
  void value(const std::string& name, const std::string& metavar, const std::string& help);
  // --name (boolean)
  void flag(const std::string& name, const std::string& help);
  // Everything after "--" is kept as rest().
  void allow_rest(const std::string& metavar, const std::string& help);
  void positional(const std::string& metavar, const std::string& help, bool required = true);

  Status parse(const std::vector<std::string>& args);
  std::string usage(const std::string& command) const;

  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  bool has(const std::string& name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::vector<std::string>& rest() const { return rest_; }

 private:
  struct Spec {
    std::string name, metavar, help;
    bool takes_value = false;
  };
  std::vector<Spec> specs_;
  std::vector<std::pair<std::string, bool>> positional_specs_;  // metavar, required
  std::vector<std::string> positional_help_;
  std::optional<std::pair<std::string, std::string>> rest_spec_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
  std::vector<std::string> rest_;
};

struct Command {
  std::string name;
  std::string summary;
  // Returns the process exit status.
  std::function<int(const std::vector<std::string>& args)> run;
};

std::map<std::string, Command>& command_table();

struct CommandRegistration {
  explicit CommandRegistration(Command command);
};

// Prints "kthost NAME: message" to stderr and returns 1 (for `return fail(...)`).
int fail(const std::string& command, const Error& error);

// Adds --help, parses `args`, and handles the two early exits every command
// shares: --help (usage, status 0) and a bad command line (usage and the
// error, status 2). Returns nullopt when the command should go on.
std::optional<int> parse_command_line(Options& options, const std::string& command,
                                      const std::vector<std::string>& args);

}  // namespace kt::cli
