#include "kthost/agent/budget.h"

#include <filesystem>
#include <system_error>

#include "kthost/common/strings.h"

namespace kt {
namespace {

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / double(1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / double(1ull << 20));
  return buf;
}

std::string reached(const char* what, uint64_t use, uint64_t budget, const char* unit = "") {
  return std::string(what) + " " + size_text(use) + unit + " reached its budget of " + size_text(budget) + unit;
}

}  // namespace

uint64_t directory_bytes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  uint64_t total = 0;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) {
      auto n = it->file_size(fec);
      if (!fec) total += n;
    }
  }
  return total;
}

const char* budget_kind_name(BudgetKind kind) {
  switch (kind) {
    case BudgetKind::TotalDisk: return "total_disk";
    case BudgetKind::DomainDisk: return "domain_disk";
    case BudgetKind::PtRate: return "pt_rate";
    case BudgetKind::Memory: return "memory";
  }
  return "?";
}

std::optional<BudgetBreach> check_budgets(const Budgets& b, const BudgetUse& u) {
  if (b.total_disk_bytes && u.total_disk_bytes >= b.total_disk_bytes)
    return BudgetBreach{BudgetKind::TotalDisk, reached("all bundles", u.total_disk_bytes, b.total_disk_bytes)};
  if (b.domain_disk_bytes && u.domain_disk_bytes >= b.domain_disk_bytes)
    return BudgetBreach{BudgetKind::DomainDisk, reached("this domain's bundles", u.domain_disk_bytes, b.domain_disk_bytes)};
  if (b.memory_bytes && u.agent_memory_bytes >= b.memory_bytes)
    return BudgetBreach{BudgetKind::Memory, reached("the agent's memory", u.agent_memory_bytes, b.memory_bytes)};
  if (b.pt_bytes_per_second && u.pt_bytes_per_second >= static_cast<double>(b.pt_bytes_per_second))
    return BudgetBreach{BudgetKind::PtRate, reached("PT at", static_cast<uint64_t>(u.pt_bytes_per_second), b.pt_bytes_per_second, "/s")};
  return std::nullopt;
}

bool budget_allows_resume(const Budgets& b, const BudgetBreach& breach, const BudgetUse& u, double seconds_since) {
  auto below = [](uint64_t use, uint64_t budget) { return budget == 0 || use < budget / 10 * 9; };
  switch (breach.kind) {
    case BudgetKind::TotalDisk: return below(u.total_disk_bytes, b.total_disk_bytes);
    case BudgetKind::DomainDisk: return below(u.domain_disk_bytes, b.domain_disk_bytes);
    case BudgetKind::Memory: return below(u.agent_memory_bytes, b.memory_bytes);
    case BudgetKind::PtRate: return seconds_since >= b.pt_cooldown_seconds;
  }
  return false;
}

}  // namespace kt
