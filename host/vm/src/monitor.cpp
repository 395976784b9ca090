#include "kthost/vm/monitor.h"

#include <cctype>

#include "kthost/common/strings.h"

namespace kt {

using nlohmann::json;

Result<std::string> Monitor::hmp(const std::string& command_line) {
  KT_ASSIGN_OR_RETURN(json ret, execute("human-monitor-command", {{"command-line", command_line}}));
  if (!ret.is_string()) return Error(ErrorCode::Protocol, "HMP " + command_line + ": reply is not a string");
  return ret.get<std::string>();
}

std::string qmp_error_text(const json& error) {
  auto field = [&](const char* key) -> std::string {
    if (!error.is_object()) return "?";
    auto it = error.find(key);
    return it != error.end() && it->is_string() ? sanitize_name(it->get<std::string>()) : "?";
  };
  return field("class") + ": " + field("desc");
}

static Result<uint64_t> register_field(const std::string& text, const char* name) {
  // Fields look like "CR3=0000000101338000"; the name must start a token.
  std::string key = std::string(name) + "=";
  size_t pos = 0;
  while ((pos = text.find(key, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == ' ' || text[pos - 1] == '\n') break;
    pos += key.size();
  }
  if (pos == std::string::npos)
    return Error(ErrorCode::InvalidInput, std::string("info registers: no ") + name + " field");
  size_t start = pos + key.size();
  size_t end = start;
  while (end < text.size() && std::isxdigit(static_cast<unsigned char>(text[end]))) ++end;
  auto v = parse_u64(std::string_view(text).substr(start, end - start), 16);
  if (!v) return Error(ErrorCode::InvalidInput, std::string("info registers: bad ") + name + " value");
  return *v;
}

Result<CpuRegisters> parse_info_registers(const std::string& text) {
  CpuRegisters regs;
  KT_ASSIGN_OR_RETURN(regs.rip, register_field(text, "RIP"));
  KT_ASSIGN_OR_RETURN(regs.cr0, register_field(text, "CR0"));
  KT_ASSIGN_OR_RETURN(regs.cr3, register_field(text, "CR3"));
  KT_ASSIGN_OR_RETURN(regs.cr4, register_field(text, "CR4"));
  KT_ASSIGN_OR_RETURN(regs.efer, register_field(text, "EFER"));
  KT_ASSIGN_OR_RETURN(uint64_t cpl, register_field(text, "CPL"));
  if (cpl > 3) return Error(ErrorCode::InvalidInput, "info registers: CPL " + std::to_string(cpl));
  regs.cpl = static_cast<int>(cpl);
  return regs;
}

Result<CpuRegisters> read_registers(Monitor& monitor, int cpu_index) {
  KT_TRY(monitor.hmp("cpu " + std::to_string(cpu_index)));
  KT_ASSIGN_OR_RETURN(std::string text, monitor.hmp("info registers"));
  return parse_info_registers(text);
}

Result<std::vector<VcpuThread>> query_vcpu_threads(Monitor& monitor) {
  KT_ASSIGN_OR_RETURN(json ret, monitor.execute("query-cpus-fast"));
  if (!ret.is_array()) return Error(ErrorCode::Protocol, "query-cpus-fast: reply is not an array");
  std::vector<VcpuThread> out;
  for (const auto& cpu : ret) {
    if (!cpu.is_object() || !cpu.contains("cpu-index") || !cpu.contains("thread-id") ||
        !cpu["cpu-index"].is_number_integer() || !cpu["thread-id"].is_number_integer())
      return Error(ErrorCode::Protocol, "query-cpus-fast: entry lacks cpu-index/thread-id");
    out.push_back({cpu["cpu-index"].get<int>(), cpu["thread-id"].get<int>()});
  }
  return out;
}

}  // namespace kt
