#include "command.h"

#include <cstdio>

namespace kt::cli {

void Options::value(const std::string& name, const std::string& metavar, const std::string& help) {
  specs_.push_back({name, metavar, help, true});
}
void Options::flag(const std::string& name, const std::string& help) {
  specs_.push_back({name, "", help, false});
}
void Options::allow_rest(const std::string& metavar, const std::string& help) {
  rest_spec_ = {metavar, help};
}
void Options::positional(const std::string& metavar, const std::string& help, bool required) {
  positional_specs_.push_back({metavar, required});
  positional_help_.push_back(help);
}

Status Options::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (!rest_spec_) return Error(ErrorCode::InvalidArgument, "unexpected '--'");
      rest_.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (arg.size() > 2 && arg[0] == '-' && arg[1] == '-') {
      std::string name = arg.substr(2);
      std::optional<std::string> inline_value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      const Spec* spec = nullptr;
      for (const auto& s : specs_)
        if (s.name == name) spec = &s;
      if (!spec) return Error(ErrorCode::InvalidArgument, "unknown option --" + name);
      if (spec->takes_value) {
        if (inline_value) {
          values_[name] = *inline_value;
        } else {
          if (i + 1 >= args.size())
            return Error(ErrorCode::InvalidArgument, "--" + name + " needs a value (" + spec->metavar + ")");
          values_[name] = args[++i];
        }
      } else {
        if (inline_value) return Error(ErrorCode::InvalidArgument, "--" + name + " takes no value");
        values_[name] = "1";
      }
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-' && arg != "-")
      return Error(ErrorCode::InvalidArgument, "unknown option " + arg);
    if (positionals_.size() >= positional_specs_.size())
      return Error(ErrorCode::InvalidArgument, "unexpected argument '" + arg + "'");
    positionals_.push_back(arg);
  }
  for (size_t i = positionals_.size(); i < positional_specs_.size(); ++i)
    if (positional_specs_[i].second)
      return Error(ErrorCode::InvalidArgument, "missing " + positional_specs_[i].first);
  return {};
}

std::string Options::usage(const std::string& command) const {
  std::string out = "usage: kthost " + command;
  for (const auto& s : specs_) out += " [--" + s.name + (s.takes_value ? " " + s.metavar : "") + "]";
  for (const auto& p : positional_specs_) out += p.second ? " " + p.first : " [" + p.first + "]";
  if (rest_spec_) out += " [-- " + rest_spec_->first + "]";
  out += "\n";
  for (const auto& s : specs_) {
    std::string left = "  --" + s.name + (s.takes_value ? " " + s.metavar : "");
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + s.help + "\n";
  }
  for (size_t i = 0; i < positional_specs_.size(); ++i) {
    std::string left = "  " + positional_specs_[i].first;
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + positional_help_[i] + "\n";
  }
  if (rest_spec_) {
    std::string left = "  -- " + rest_spec_->first;
    if (left.size() < 28) left.resize(28, ' ');
    out += left + " " + rest_spec_->second + "\n";
  }
  return out;
}

std::optional<std::string> Options::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}
std::string Options::get_or(const std::string& name, const std::string& fallback) const {
  auto v = get(name);
  return v ? *v : fallback;
}
bool Options::has(const std::string& name) const { return values_.count(name) != 0; }

std::map<std::string, Command>& command_table() {
  static std::map<std::string, Command> table;
  return table;
}

CommandRegistration::CommandRegistration(Command command) {
  std::string name = command.name;
  command_table().emplace(name, std::move(command));
}

std::optional<int> parse_command_line(Options& options, const std::string& command,
                                      const std::vector<std::string>& args) {
  options.flag("help", "show this help");
  if (auto st = options.parse(args); !st) {
    std::fprintf(stderr, "%s", options.usage(command).c_str());
    fail(command, st.error());
    return 2;
  }
  if (options.has("help")) {
    std::printf("%s", options.usage(command).c_str());
    return 0;
  }
  return std::nullopt;
}

int fail(const std::string& command, const Error& error) {
  std::fprintf(stderr, "kthost %s: %s\n", command.c_str(), error.message.c_str());
  return 1;
}

}  // namespace kt::cli
