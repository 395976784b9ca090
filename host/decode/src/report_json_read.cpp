// `kthost report --json` read back (kthost diff takes it in place of a bundle).
// The file is untrusted: every field is type-checked.
#include <nlohmann/json.hpp>

#include "kthost/decode/report.h"

namespace kt {

Result<ProfileSummary> parse_report_json(const std::string& text, const std::string& name,
                                         std::map<std::string, uint64_t>* losses) {
  auto bad = [&](const std::string& what) { return Error(ErrorCode::InvalidInput, name + ": " + what); };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not valid JSON");
  // Every field is type-checked before it is read: nlohmann's value() throws
  // on a field of the wrong type (fuzz_folded found "format": {...}).
  if (!j.contains("format") || !j["format"].is_string() || j["format"].get<std::string>() != "kthost-report")
    return bad("not a kthost report (format)");
  ProfileSummary s;
  if (!j.contains("insns") || !j["insns"].is_number_unsigned()) return bad("missing \"insns\"");
  s.insns = j["insns"].get<uint64_t>();
  auto cov = j.find("coverage_summary");
  if (cov == j.end() || !cov->is_object() || !cov->contains("blocks") || !(*cov)["blocks"].is_number_unsigned())
    return bad("missing \"coverage_summary\"");
  s.blocks_covered = (*cov)["blocks"].get<uint64_t>();
  if (auto e = j.find("errors"); e != j.end()) {
    if (!e->is_object()) return bad("\"errors\" is not an object");
    for (const auto& [kind, n] : e->items()) {
      if (!n.is_number_unsigned()) continue;
      if (kind == "loop_insns_dropped") continue;  // told with the "other" error that dropped them
      if (kind != "skipped_bytes") s.errors[kind] = n.get<uint64_t>();
      else if (losses && n.get<uint64_t>() > 0) (*losses)["pt_bytes_not_decoded"] = n.get<uint64_t>();  // a loss
    }
  }
  if (auto l = j.find("losses"); l != j.end() && losses) {
    if (!l->is_object()) return bad("\"losses\" is not an object");
    for (const auto& [kind, n] : l->items())
      if (n.is_number_unsigned() && n.get<uint64_t>() > 0) (*losses)[kind] = n.get<uint64_t>();
  }
  auto fns = j.find("functions");
  if (fns == j.end() || !fns->is_array()) return bad("missing \"functions\"");
  size_t i = 0;
  for (const auto& f : *fns) {
    if (!f.is_object() || !f.contains("key") || !f["key"].is_string() || !f.contains("insns") ||
        !f["insns"].is_number_unsigned())
      return bad("functions[" + std::to_string(i) + "]: missing key or insns");
    auto& fs = s.functions[f["key"].get<std::string>()];
    fs.insns += f["insns"].get<uint64_t>();
    if (f.contains("calls") && f["calls"].is_number_unsigned()) fs.calls += f["calls"].get<uint64_t>();
    if (f.contains("module") && f["module"].is_string()) fs.module = f["module"].get<std::string>();
    if (f.contains("blocks") && f["blocks"].is_number_unsigned()) fs.blocks += f["blocks"].get<uint64_t>();
    ++i;
  }
  return s;
}

}  // namespace kt
