// The budget check: what a domain uses now against the Budgets. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kthost/agent/agent_config.h"

namespace kt {

enum class BudgetKind { TotalDisk, DomainDisk, PtRate, Memory };
const char* budget_kind_name(BudgetKind kind);  // "total_disk", "domain_disk", "pt_rate", "memory"

struct BudgetUse {
  uint64_t total_disk_bytes = 0, domain_disk_bytes = 0, agent_memory_bytes = 0;
  double pt_bytes_per_second = 0;
};

struct BudgetBreach {
  BudgetKind kind;
  std::string why;  // "domain disk 1.0 GiB reached its budget of 1.0 GiB"
};

// Apparent bytes of every regular file under `dir` (0 when it is missing):
// what the disk budgets count.
uint64_t directory_bytes(const std::string& dir);

// The first budget `use` has reached, in the order total disk, domain disk,
// memory, PT rate; nullopt when none.
std::optional<BudgetBreach> check_budgets(const Budgets& budgets, const BudgetUse& use);

// Whether tracing may start again after `breach`: disk use fell below 90% of
// its budget (someone removed bundles or raised it), memory below 90%, and a
// PT-rate stop after its cool-down (`seconds_since` the stop).
bool budget_allows_resume(const Budgets& budgets, const BudgetBreach& breach, const BudgetUse& use,
                          double seconds_since);

}  // namespace kt
