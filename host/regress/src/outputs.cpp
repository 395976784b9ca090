// What a CI job keeps from a comparison: JSON for machines, Markdown for the
// merge request, JUnit XML for the CI system's test view.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "kthost/common/strings.h"
#include "kthost/regress/regress.h"

namespace kt {
namespace {

nlohmann::json spread_json(const Spread& s) {
  return {{"mean", s.mean}, {"min", s.min}, {"max", s.max}, {"present", s.present}};
}

nlohmann::json deltas_json(const std::vector<FunctionDelta>& ds) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : ds)
    out.push_back({{"name", d.name},
                   {"kind", change_kind_name(d.kind)},
                   {"base", spread_json(d.base)},
                   {"new", spread_json(d.next)},
                   {"margin", d.margin},
                   {"margin_used", d.margin_used()},
                   {"factor", d.base.mean > 0 ? nlohmann::json(d.factor()) : nlohmann::json(nullptr)}});
  return out;
}

nlohmann::json set_json(const RunSetStats& s) {
  return {{"runs", s.runs},
          {"insns", spread_json(s.total)},
          {"functions", s.self.size()},
          {"decode_errors", s.decode_errors},
          {"decode_error_kinds", s.error_kinds},
          {"losses", s.losses},
          {"loss_kinds", s.loss_kinds},
          {"stacks", s.have_stacks},
          {"runs_health", [&s] {
             nlohmann::json a = nlohmann::json::array();
             for (const auto& h : s.health)
               a.push_back({{"name", h.name}, {"insns", h.insns}, {"decode_errors", h.decode_errors},
                            {"losses", h.losses}});
             return a;
           }()}};
}

// Exact counts in full, with thousands separators; means keep one decimal.
std::string num(double v) {
  char buf[64];
  const bool whole = std::fabs(v - std::round(v)) < 0.05;
  std::snprintf(buf, sizeof buf, whole ? "%.0f" : "%.1f", std::fabs(v));
  std::string digits = buf, out;
  const size_t dot = digits.find('.');
  const std::string head = digits.substr(0, dot), tail = dot == std::string::npos ? "" : digits.substr(dot);
  for (size_t i = 0; i < head.size(); ++i) {
    if (i && (head.size() - i) % 3 == 0) out += ',';
    out += head[i];
  }
  return (v < 0 ? "-" : "") + out + tail;
}

std::string range(const Spread& s) { return num(s.mean) + " (" + num(s.min) + "–" + num(s.max) + ")"; }

std::string factor_text(const FunctionDelta& d) {
  if (d.base.mean <= 0) return "new";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", d.factor());
  return buf;
}

// Markdown table cells must not break the table.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return "`" + out + "`";
}

void table(std::string& out, const std::vector<FunctionDelta>& ds, size_t top, bool wanted(ChangeKind)) {
  size_t shown = 0, all = 0;
  for (const auto& d : ds) all += wanted(d.kind) ? 1 : 0;
  if (!all) {
    out += "None.\n\n";
    return;
  }
  out += "| function | base mean (min–max) | new mean (min–max) | change | margin |\n|---|---:|---:|---:|---:|\n";
  for (const auto& d : ds) {
    if (!wanted(d.kind) || shown == top) continue;
    ++shown;
    out += "| " + cell(d.name) + " | " + range(d.base) + " | " + range(d.next) + " | " + factor_text(d) + " | " +
           num(d.margin) + " |\n";
  }
  if (all > shown) out += "\n… and " + std::to_string(all - shown) + " more (see regression.json).\n";
  out += "\n";
}

std::string xml(const std::string& s) { return xml_escape(s, true); }

}  // namespace

std::string regression_json(const RegressionResult& r) {
  nlohmann::json j = {
      {"format", "kthost-regression"},
      {"version", 1},
      {"verdict", r.exit_status() == 2 ? "error" : (r.regressed() ? "regression" : "no regression")},
      {"exit_status", r.exit_status()},
      {"model",
       {{"threshold_pct", r.model.threshold_pct},
        {"spread_factor", r.model.spread_factor},
        {"min_share_ppm", r.model.min_share_ppm},
        {"min_insns", r.model.min_insns}}},
      {"limits", {{"max_errors_per_million", r.limits.max_errors_per_million}, {"max_losses", r.limits.max_losses}}},
      {"base", set_json(r.base)},
      {"new", set_json(r.next)},
      {"functions_compared", r.functions_compared},
      {"run_problems", r.run_problems},
      {"self", deltas_json(r.self)},
      {"inclusive", deltas_json(r.inclusive)},
      {"nearest", deltas_json(r.nearest)},
  };
  return j.dump(2) + "\n";
}

std::string regression_markdown(const RegressionResult& r, const std::string& base_label,
                                const std::string& next_label, size_t top) {
  std::string out = "# kthost regression report\n\n";
  const int status = r.exit_status();
  out += "**Verdict: " +
         std::string(status == 2 ? "error (a run is over the error or loss limits)"
                                 : r.regressed() ? "regression" : "no regression") +
         "** — base `" + base_label + "` (" + std::to_string(r.base.runs) + " runs) against new `" + next_label +
         "` (" + std::to_string(r.next.runs) + " runs); " + std::to_string(r.functions_compared) +
         " functions compared.\n\n";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "A function counts as changed when its mean moved by more than %.1f%% of the base mean, %.1f times "
                "the larger spread (max − min) of the two sets, %.0f per million of all base instructions and %" PRIu64
                " instructions.\n\n",
                r.model.threshold_pct, r.model.spread_factor, r.model.min_share_ppm, r.model.min_insns);
  out += buf;
  out += "## Regressions (own instructions grew, or newly executed)\n\n";
  table(out, r.self, top, [](ChangeKind k) { return k == ChangeKind::Grew || k == ChangeKind::New; });
  out += "## Improvements (own instructions shrank, or no longer executed)\n\n";
  table(out, r.self, top, [](ChangeKind k) { return k == ChangeKind::Shrank || k == ChangeKind::Vanished; });
  if (!r.nearest.empty()) {
    out += "Closest to its margin without being flagged:";
    const size_t shown = std::min<size_t>(r.nearest.size(), 3);
    for (size_t i = 0; i < shown; ++i) {
      const FunctionDelta& d = r.nearest[i];
      std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * d.margin_used());
      out += std::string(i ? ";" : "") + " " + cell(d.name) + " " + change_kind_name(d.kind) + " " +
             num(d.base.mean) + " → " + num(d.next.mean) + " (" + buf + " of its margin, " + num(d.margin) + ")";
    }
    out += ".\n\n";
  }
  out += "## Inclusive changes (the function and everything it called)\n\n";
  if (r.base.have_stacks && r.next.have_stacks)
    table(out, r.inclusive, top, [](ChangeKind) { return true; });
  else
    out += "Not compared: a run had no call stacks.\n\n";
  out += "## Coverage\n\n";
  size_t only_base = 0, only_next = 0;
  for (const auto& [k, s] : r.base.self)
    if (!r.next.self.count(k)) ++only_base;
  for (const auto& [k, s] : r.next.self)
    if (!r.base.self.count(k)) ++only_next;
  out += "| | base | new |\n|---|---:|---:|\n";
  out += "| functions executed (any run) | " + std::to_string(r.base.self.size()) + " | " +
         std::to_string(r.next.self.size()) + " |\n";
  out += "| executed on one side only | " + std::to_string(only_base) + " | " + std::to_string(only_next) + " |\n";
  out += "| instructions per run, mean (min–max) | " + range(r.base.total) + " | " + range(r.next.total) + " |\n\n";
  out += "## Runs: decode errors and losses\n\n";
  auto kinds = [](const std::map<std::string, uint64_t>& m) {
    std::string s;
    for (const auto& [k, n] : m)
      if (n) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(n);
    return s.empty() ? std::string("none") : s;
  };
  out += "| | base | new |\n|---|---|---|\n";
  out += "| decode errors | " + kinds(r.base.error_kinds) + " | " + kinds(r.next.error_kinds) + " |\n";
  out += "| losses | " + kinds(r.base.loss_kinds) + " | " + kinds(r.next.loss_kinds) + " |\n\n";
  out += "| run | instructions | decode errors | losses |\n|---|---:|---:|---:|\n";
  for (const auto* side : {&r.base, &r.next})
    for (const auto& h : side->health)
      out += "| " + std::string(side == &r.base ? "base " : "new ") + cell(h.name) + " | " + num(static_cast<double>(h.insns)) +
             " | " + std::to_string(h.decode_errors) + " | " + std::to_string(h.losses) + " |\n";
  out += "\n";
  if (!r.run_problems.empty()) {
    out += "Over the limits:\n\n";
    for (const auto& p : r.run_problems) out += "- " + p + "\n";
    out += "\n";
  }
  return out;
}

std::string regression_junit(const RegressionResult& r, const std::vector<std::string>& watch) {
  struct Case {
    std::string name, failure, error, out;
  };
  std::vector<Case> runs, functions;
  {
    Case c{"runs within the decode-error and loss limits", "", "", ""};
    for (const auto& p : r.run_problems) c.error += p + "\n";
    runs.push_back(c);
  }
  std::set<std::string> listed;
  for (const auto& d : r.self) {
    Case c{d.name + " (own instructions)", "", "", ""};
    std::string line = std::string(change_kind_name(d.kind)) + " " + factor_text(d) + ": base " + range(d.base) +
                       ", new " + range(d.next) + ", margin " + num(d.margin);
    if (d.kind == ChangeKind::Grew || d.kind == ChangeKind::New) c.failure = line;
    else c.out = line;
    functions.push_back(c);
    listed.insert(normalize_function_name(d.name));
  }
  for (const auto& w : watch) {
    const std::string name = normalize_function_name(w);
    if (listed.count(name)) continue;
    Case c{name + " (own instructions)", "", "", ""};
    auto b = r.base.self.find(name), n = r.next.self.find(name);
    c.out = "within the noise: base " + (b == r.base.self.end() ? std::string("not executed") : range(b->second)) +
            ", new " + (n == r.next.self.end() ? std::string("not executed") : range(n->second));
    functions.push_back(c);
  }
  auto suite = [](const std::string& name, const std::vector<Case>& cases) {
    size_t failures = 0, errors = 0;
    for (const auto& c : cases) {
      failures += c.failure.empty() ? 0 : 1;
      errors += c.error.empty() ? 0 : 1;
    }
    std::string s = "  <testsuite name=\"" + xml(name) + "\" tests=\"" + std::to_string(cases.size()) +
                    "\" failures=\"" + std::to_string(failures) + "\" errors=\"" + std::to_string(errors) +
                    "\" skipped=\"0\">\n";
    for (const auto& c : cases) {
      s += "    <testcase classname=\"kthost." + xml(name) + "\" name=\"" + xml(c.name) + "\"";
      if (c.failure.empty() && c.error.empty() && c.out.empty()) {
        s += "/>\n";
        continue;
      }
      s += ">\n";
      if (!c.failure.empty())
        s += "      <failure type=\"regression\" message=\"" + xml(c.failure) + "\">" + xml(c.failure) + "</failure>\n";
      if (!c.error.empty()) s += "      <error type=\"limits\" message=\"" + xml(c.error) + "\">" + xml(c.error) + "</error>\n";
      if (!c.out.empty()) s += "      <system-out>" + xml(c.out) + "</system-out>\n";
      s += "    </testcase>\n";
    }
    return std::make_tuple(s + "  </testsuite>\n", cases.size(), failures, errors);
  };
  auto [runs_xml, runs_n, runs_f, runs_e] = suite("runs", runs);
  auto [fn_xml, fn_n, fn_f, fn_e] = suite("functions", functions);
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kthost regression\" tests=\"" +
         std::to_string(runs_n + fn_n) + "\" failures=\"" + std::to_string(runs_f + fn_f) + "\" errors=\"" +
         std::to_string(runs_e + fn_e) + "\">\n" + runs_xml + fn_xml + "</testsuites>\n";
}

}  // namespace kt
