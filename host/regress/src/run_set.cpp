// Function names matched across kernels, and the counts of a set of runs.
#include <algorithm>
#include <cctype>
#include <set>

#include "kthost/regress/regress.h"

namespace kt {
namespace {

// Drops one trailing ".constprop.N", ".isra.N" or ".cold" from `name`.
bool drop_suffix(std::string& name) {
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".cold") == 0) {
    name.resize(name.size() - 5);
    return true;
  }
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == name.size() || digits == 0 || name[digits - 1] != '.') return false;
  for (const char* s : {".constprop", ".isra"}) {
    const size_t n = std::char_traits<char>::length(s);
    if (digits - 1 >= n && name.compare(digits - 1 - n, n, s) == 0 && digits - 1 > n) {
      name.resize(digits - 1 - n);
      return true;
    }
  }
  return false;
}

void add_spread(std::map<std::string, std::vector<double>>& into, const std::string& key, size_t run, size_t runs,
                double v) {
  auto& values = into[key];
  values.resize(runs, 0.0);
  values[run] += v;
}

Spread spread_of(std::vector<double> values, size_t runs) {
  values.resize(runs, 0.0);
  Spread s;
  if (values.empty()) return s;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double v : values) {
    sum += v;
    if (v > 0) ++s.present;
  }
  s.mean = sum / static_cast<double>(values.size());
  return s;
}

std::map<std::string, Spread> spreads(const std::map<std::string, std::vector<double>>& values, size_t runs) {
  std::map<std::string, Spread> out;
  for (const auto& [k, v] : values) out[k] = spread_of(v, runs);
  return out;
}

}  // namespace

std::string normalize_function_name(const std::string& key) {
  // "name [module]" or "name_[module]" (folded): the module part stays.
  size_t split = key.find(" [");
  if (split == std::string::npos) split = key.find("_[");
  std::string name = split == std::string::npos ? key : key.substr(0, split);
  // One spelling for both: the report's "name [module]".
  const std::string module = split == std::string::npos ? "" : " " + key.substr(split + 1);
  while (drop_suffix(name)) {
  }
  return name + module;
}

FoldedStacks normalize_stacks(const FoldedStacks& stacks) {
  FoldedStacks out;
  for (const auto& [stack, n] : stacks.stacks) {
    std::string key;
    size_t start = 0;
    while (start <= stack.size()) {
      size_t end = stack.find(';', start);
      if (end == std::string::npos) end = stack.size();
      if (!key.empty()) key += ';';
      key += normalize_function_name(stack.substr(start, end - start));
      start = end + 1;
    }
    out.add(key, n);
  }
  return out;
}

RunSetStats summarize_runs(const std::vector<TracedRun>& runs) {
  RunSetStats s;
  s.runs = static_cast<uint32_t>(runs.size());
  s.have_stacks = !runs.empty();
  std::map<std::string, std::vector<double>> self, calls, inclusive;
  std::vector<double> totals;
  for (size_t i = 0; i < runs.size(); ++i) {
    const TracedRun& r = runs[i];
    totals.push_back(static_cast<double>(r.summary.insns));
    for (const auto& [key, f] : r.summary.functions) {
      const std::string name = normalize_function_name(key);
      add_spread(self, name, i, runs.size(), static_cast<double>(f.insns));
      add_spread(calls, name, i, runs.size(), static_cast<double>(f.calls));
    }
    RunHealth h{r.name, r.summary.insns, 0, 0};
    for (const auto& [kind, n] : r.summary.errors) {
      s.error_kinds[kind] += n;
      h.decode_errors += n;
    }
    for (const auto& [kind, n] : r.losses) {
      s.loss_kinds[kind] += n;
      h.losses += n;
    }
    s.decode_errors += h.decode_errors;
    s.losses += h.losses;
    s.health.push_back(std::move(h));
    if (r.stacks.stacks.empty()) s.have_stacks = false;
    const FoldedStacks normal = normalize_stacks(r.stacks);
    for (const auto& [stack, n] : normal.stacks) {
      s.stacks.add(stack, n);
      // Inclusive: each function once per stack, however often it recurs.
      std::set<std::string> seen;
      size_t start = 0;
      while (start <= stack.size()) {
        size_t end = stack.find(';', start);
        if (end == std::string::npos) end = stack.size();
        std::string frame = stack.substr(start, end - start);
        if (seen.insert(frame).second) add_spread(inclusive, frame, i, runs.size(), static_cast<double>(n));
        start = end + 1;
      }
    }
  }
  s.total = spread_of(totals, runs.size());
  s.self = spreads(self, runs.size());
  s.calls = spreads(calls, runs.size());
  if (s.have_stacks) s.inclusive = spreads(inclusive, runs.size());
  return s;
}

}  // namespace kt
