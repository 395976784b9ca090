// Terminal and JSON reports (see report.h).
#include "kthost/decode/report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kthost/common/strings.h"
#include "kthost/decode/observer.h"

namespace kt {

std::string function_key(const FunctionInfo& f) {
  if (f.module.empty() || f.module == "kernel") return f.name;
  return f.name + " [" + f.module + "]";
}

ProfileSummary summarize(const Profile& profile, const Symbolizer& symbols) {
  ProfileSummary s;
  s.insns = profile.insns;
  s.blocks_covered = profile.blocks_seen.size();
  for (const auto& [id, c] : profile.functions) {
    const auto& f = symbols.function(id);
    auto& fs = s.functions[function_key(f)];
    fs.module = f.module;
    fs.insns += c.insns;
    fs.calls += c.calls;
  }
  for (const auto& [id, ip] : profile.blocks_seen) s.functions[function_key(symbols.function(id))].blocks++;
  for (const auto& [k, v] : profile.error_counts) s.errors[decode_error_kind_name(k)] += v;
  return s;
}

namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

double pct(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0; }

std::vector<std::pair<uint32_t, uint64_t>> ranked(const std::map<uint32_t, uint64_t>& counts) {
  std::vector<std::pair<uint32_t, uint64_t>> v(counts.begin(), counts.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

struct ModuleCoverage {
  uint64_t functions = 0, blocks = 0, insns = 0;
  std::vector<std::string> names;
};
std::map<std::string, ModuleCoverage> coverage_by_module(const Profile& p, const Symbolizer& symbols) {
  std::map<std::string, ModuleCoverage> m;
  for (const auto& [id, c] : p.functions) {
    if (!c.insns) continue;
    const auto& f = symbols.function(id);
    auto& mc = m[f.module];
    mc.functions++;
    mc.insns += c.insns;
    mc.names.push_back(f.name);
  }
  for (const auto& [id, ip] : p.blocks_seen) m[symbols.function(id).module].blocks++;
  for (auto& [k, v] : m) std::sort(v.names.begin(), v.names.end());
  return m;
}

std::string errors_line(const Profile& p) {
  auto get = [&](DecodeErrorKind k) {
    auto it = p.error_counts.find(k);
    return it == p.error_counts.end() ? uint64_t{0} : it->second;
  };
  std::string line = fmt("decode errors: %" PRIu64 " no-text, %" PRIu64 " desync, %" PRIu64 " overflow, %" PRIu64 " other",
                         get(DecodeErrorKind::NoText), get(DecodeErrorKind::Desync), get(DecodeErrorKind::Overflow),
                         get(DecodeErrorKind::Other));
  if (p.skipped_bytes > 0)
    line += fmt("; %" PRIu64 " bytes of PT (%.2f%%) not decoded after them", p.skipped_bytes,
                p.bytes ? 100.0 * static_cast<double>(p.skipped_bytes) / static_cast<double>(p.bytes) : 0.0);
  if (p.loop_insns_dropped > 0)
    line += fmt("; %" PRIu64 " instructions of a loop no packet confirmed not counted", p.loop_insns_dropped);
  return line;
}

std::string stack_edges_line(const Profile& p, const Symbolizer& symbols) {
  const StackEdgeCheck& e = p.stack_edges;
  std::string line = fmt("stack steps: %" PRIu64 " caller->callee steps, %" PRIu64 " onto interrupt entries or entry code, %" PRIu64
                         " unchecked (no text), %" PRIu64 " through a call whose ftrace site is on (a redirect), %" PRIu64
                         " with no call site in the caller's text",
                         e.steps, e.interrupts, e.unchecked, e.ftrace_redirects, e.failed);
  if (e.failed) {
    line += fmt(" (%" PRIu64 " instructions; e.g.", e.failed_insns);
    for (size_t i = 0; i < e.examples.size() && i < 3; ++i)
      line += " " + function_key(symbols.function(e.examples[i].first)) + "->" +
              function_key(symbols.function(e.examples[i].second));
    line += ")";
  }
  return line;
}

std::string task_switches_line(const Profile& p) {
  const TaskSwitchStats& t = p.task_switches;
  if (t.logged == 0)
    return fmt("task switches: %" PRIu64 " in the trace; the guest logged none, so each switched-in stack starts on "
               "[base unknown]",
               t.seen);
  std::string line = fmt("task switches: %" PRIu64 " in the trace, %" PRIu64 " matched to the guest's log of %" PRIu64
                         " (%.1f%%), %" PRIu64 " resumed the task's own stack; the rest start on [base unknown]",
                         t.seen, t.matched, t.logged, pct(t.matched, t.seen), t.resumed);
  if (t.after_loss)
    line += fmt(" (%" PRIu64 " matched near a lost switch record: not resumed)", t.after_loss);
  if (t.at_piece_edge)
    line += fmt("; %" PRIu64 " more returned out of the switch as a piece ended (the next piece starts on [base unknown])",
                t.at_piece_edge);
  return line;
}

}  // namespace

std::string format_report_text(const Profile& p, const Symbolizer& symbols, const ReportOptions& o) {
  std::string out;
  out += fmt("%" PRIu64 " instructions in %" PRIu64 " blocks, %" PRIu64 " pieces, %.2f s on %u threads\n", p.insns,
             p.blocks, p.pieces, p.seconds, p.threads);
  for (const auto& [cpu, n] : p.cpu_insns) out += fmt("  cpu%u: %" PRIu64 " instructions (%.1f%%)\n", cpu, n, pct(n, p.insns));
  out += errors_line(p) + "\n";
  out += stack_edges_line(p, symbols) + "\n";
  out += task_switches_line(p) + "\n";
  out += format_observer_line(observer_share(p, symbols)) + "\n";
  for (const auto& e : p.errors)
    out += fmt("  %s cpu%u offset %" PRIu64 " ip %s time %" PRIu64 ": %s\n", decode_error_kind_name(e.kind), e.cpu,
               e.offset, hex(e.ip).c_str(), e.time, e.detail.c_str());
  if (p.alignment_retries)
    out += fmt("alignment: %" PRIu64 " pieces retried with candidate text versions, %" PRIu64 " fixed\n",
               p.alignment_retries, p.alignment_fixed);

  std::map<uint32_t, uint64_t> counts;
  uint64_t total = p.insns;
  if (o.cpu) {
    auto it = p.cpu_functions.find(*o.cpu);
    if (it != p.cpu_functions.end()) counts = it->second;
    total = p.cpu_insns.count(*o.cpu) ? p.cpu_insns.at(*o.cpu) : 0;
    out += fmt("\nfunctions on cpu%u\n", *o.cpu);
  } else {
    for (const auto& [id, c] : p.functions) counts[id] = c.insns;
    out += "\nfunctions\n";
  }
  std::vector<uint32_t> cpus;
  for (const auto& [cpu, n] : p.cpu_insns) cpus.push_back(cpu);
  std::string head = fmt("%14s %10s %7s", "instructions", "calls", "share");
  if (!o.cpu && cpus.size() > 1)
    for (uint32_t c : cpus) head += fmt(" %12s", ("cpu" + std::to_string(c)).c_str());
  out += head + "  function\n";
  size_t shown = 0;
  for (const auto& [id, n] : ranked(counts)) {
    if (shown++ >= o.top) break;
    const auto& f = symbols.function(id);
    uint64_t calls = p.functions.count(id) ? p.functions.at(id).calls : 0;
    std::string line = fmt("%14" PRIu64 " %10" PRIu64 " %6.2f%%", n, calls, pct(n, total));
    if (!o.cpu && cpus.size() > 1)
      for (uint32_t c : cpus) {
        auto it = p.cpu_functions.find(c);
        uint64_t v = 0;
        if (it != p.cpu_functions.end() && it->second.count(id)) v = it->second.at(id);
        line += fmt(" %12" PRIu64, v);
      }
    line += "  " + function_key(f);
    if (auto src = symbols.source_line(f.start)) line += "  (" + *src + ")";
    out += line + "\n";
  }
  if (o.callgraph) {
    out += "\ncall graph (caller -> callee: calls)\n";
    std::vector<std::pair<std::pair<uint32_t, uint32_t>, uint64_t>> edges(p.edges.begin(), p.edges.end());
    std::stable_sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    size_t n = 0;
    for (const auto& [e, c] : edges) {
      if (n++ >= o.top * 4) break;
      out += fmt("%10" PRIu64 "  %s -> %s\n", c, function_key(symbols.function(e.first)).c_str(),
                 function_key(symbols.function(e.second)).c_str());
    }
  }
  if (o.coverage) out += "\n" + coverage_section(p, symbols, o);
  return out;
}

std::string coverage_section(const Profile& p, const Symbolizer& symbols, const ReportOptions& o) {
  std::string out = "coverage (functions and blocks executed, by module)\n";
  for (const auto& [mod, mc] : coverage_by_module(p, symbols)) {
    if (!o.coverage_module.empty() && mod != o.coverage_module) continue;
    out += fmt("  %-24s %8" PRIu64 " functions %10" PRIu64 " blocks %14" PRIu64 " instructions\n", mod.c_str(),
               mc.functions, mc.blocks, mc.insns);
    if (!o.coverage_module.empty())
      for (const auto& name : mc.names) out += "    " + name + "\n";
  }
  return out;
}

std::string coverage_json(const Profile& p, const Symbolizer& symbols, const ReportOptions& o) {
  nlohmann::json cov = nlohmann::json::object();
  for (const auto& [mod, mc] : coverage_by_module(p, symbols)) {
    if (!o.coverage_module.empty() && mod != o.coverage_module) continue;
    cov[mod] = {{"functions", mc.functions}, {"blocks", mc.blocks}, {"insns", mc.insns}, {"names", mc.names}};
  }
  return cov.dump();
}

std::string format_report_json(const Profile& p, const Symbolizer& symbols, const ReportOptions& o,
                               const std::map<std::string, uint64_t>& losses) {
  nlohmann::json j;
  j["format"] = "kthost-report";
  j["version"] = 1;
  j["insns"] = p.insns;
  j["blocks"] = p.blocks;
  j["pieces"] = p.pieces;
  j["threads"] = p.threads;
  j["seconds"] = p.seconds;
  j["cpus"] = nlohmann::json::object();
  for (const auto& [cpu, n] : p.cpu_insns) j["cpus"][std::to_string(cpu)] = n;
  nlohmann::json errors = nlohmann::json::object();
  for (auto k : {DecodeErrorKind::NoText, DecodeErrorKind::Desync, DecodeErrorKind::Overflow, DecodeErrorKind::Other})
    errors[decode_error_kind_name(k)] = p.error_counts.count(k) ? p.error_counts.at(k) : 0;
  nlohmann::json examples = nlohmann::json::array();
  for (const auto& e : p.errors)
    examples.push_back({{"kind", decode_error_kind_name(e.kind)}, {"cpu", e.cpu}, {"offset", e.offset},
                        {"ip", hex(e.ip)}, {"time", e.time}, {"detail", e.detail}});
  errors["examples"] = examples;
  errors["skipped_bytes"] = p.skipped_bytes;
  errors["loop_insns_dropped"] = p.loop_insns_dropped;
  j["errors"] = errors;
  j["alignment"] = {{"retries", p.alignment_retries}, {"fixed", p.alignment_fixed}};
  j["losses"] = losses;
  const auto& stale = symbols.stale_symbols();
  j["symbols"] = {{"stale_module_symbols_dropped", stale.dropped},
                  {"modules_without_symbols", stale.modules_without_symbols}};
  nlohmann::json edge_examples = nlohmann::json::array();
  for (const auto& [a, b] : p.stack_edges.examples)
    edge_examples.push_back({function_key(symbols.function(a)), function_key(symbols.function(b))});
  j["task_switches"] = {{"logged", p.task_switches.logged},   {"seen", p.task_switches.seen},
                        {"matched", p.task_switches.matched}, {"resumed", p.task_switches.resumed},
                        {"after_loss", p.task_switches.after_loss},
                        {"at_piece_edge", p.task_switches.at_piece_edge},
                        {"clock_offset", p.task_switches.clock_offset}};
  j["stack_edges"] = {{"steps", p.stack_edges.steps},        {"interrupts", p.stack_edges.interrupts},
                      {"unchecked", p.stack_edges.unchecked}, {"ftrace_redirects", p.stack_edges.ftrace_redirects},
                      {"failed", p.stack_edges.failed},
                      {"failed_insns", p.stack_edges.failed_insns}, {"examples", edge_examples}};
  ObserverShare obs = observer_share(p, symbols);
  j["observer"] = {{"insns", obs.insns}, {"percent", obs.percent()}, {"parts", obs.parts}};
  ProfileSummary s = summarize(p, symbols);
  j["coverage_summary"] = {{"functions", s.functions.size()}, {"blocks", s.blocks_covered}};
  nlohmann::json fns = nlohmann::json::array();
  std::map<uint32_t, uint64_t> counts;
  for (const auto& [id, c] : p.functions) counts[id] = c.insns;
  for (const auto& [id, n] : ranked(counts)) {
    const auto& f = symbols.function(id);
    nlohmann::json fj = {{"name", f.name}, {"module", f.module}, {"key", function_key(f)}, {"start", hex(f.start)},
                         {"insns", n}, {"calls", p.functions.at(id).calls}, {"share", pct(n, p.insns)}};
    nlohmann::json per = nlohmann::json::object();
    for (const auto& [cpu, m] : p.cpu_functions)
      if (m.count(id)) per[std::to_string(cpu)] = m.at(id);
    fj["cpus"] = per;
    fj["blocks"] = s.functions[function_key(f)].blocks;
    if (auto line = symbols.source_line(f.start)) fj["source"] = *line;
    fns.push_back(std::move(fj));
  }
  j["functions"] = fns;
  if (o.callgraph) {
    nlohmann::json edges = nlohmann::json::array();
    for (const auto& [e, c] : p.edges)
      edges.push_back({{"caller", function_key(symbols.function(e.first))},
                       {"callee", function_key(symbols.function(e.second))}, {"calls", c}});
    j["callgraph"] = edges;
  }
  if (o.coverage) j["coverage"] = nlohmann::json::parse(coverage_json(p, symbols, o));
  return j.dump(2) + "\n";
}

// Frame names keep to what folded files can hold: ';' separates frames and
// a space ends the stack, so "name [module]" becomes "name_[module]".
FoldedStacks folded_stacks_of(const Profile& p, const Symbolizer& symbols) {
  FoldedStacks out;
  for (const auto& [path, n] : p.stacks) {
    std::string key;
    for (uint32_t f : path) {
      if (!key.empty()) key += ';';
      std::string name = function_key(symbols.function(f));
      std::replace(name.begin(), name.end(), ';', ':');
      std::replace(name.begin(), name.end(), ' ', '_');
      key += name;
    }
    if (!key.empty()) out.add(key, n);
  }
  return out;
}

std::string folded_stacks(const Profile& p, const Symbolizer& symbols) {
  return format_folded(folded_stacks_of(p, symbols));
}

std::string format_trace(const std::vector<TraceLine>& lines, const Symbolizer& symbols) {
  std::string out;
  for (const auto& l : lines) {
    std::string sym;
    if (l.ip) {
      uint32_t id = symbols.lookup(l.ip, l.time);
      const auto& f = symbols.function(id);
      sym = id == Symbolizer::kUnknown ? "[unknown]" : fmt("%s+0x%" PRIx64, function_key(f).c_str(), l.ip - f.start);
    }
    std::string bytes;
    for (unsigned i = 0; i < l.size; ++i) bytes += fmt("%02x ", l.raw[i]);
    out += fmt("[%03u] %16" PRIu64 "  %-12s %18s  %-40s %s\n", l.cpu, l.time, l.kind.c_str(), hex(l.ip).c_str(),
               sym.c_str(), bytes.c_str());
  }
  return out;
}

}  // namespace kt
