// manifest.json and events.jsonl: the bundle's two JSON formats.
#include <nlohmann/json.hpp>

#include "kthost/bundle/bundle.h"
#include "kthost/common/strings.h"

namespace kt {

uint64_t BundleClock::to_pt(uint64_t perf_time) const {
  if (identity) return perf_time;
  if (time_mult == 0) return 0;
  // Inverse of perf's tsc -> time (time = time_zero + (tsc * mult) >> shift),
  // split so that nothing overflows. time_zero is often "negative" (near
  // 2^64): the subtraction wraps, as in perf's own arithmetic.
  uint64_t t = perf_time - time_zero;
  uint64_t quot = t / time_mult, rem = t % time_mult;
  return (quot << time_shift) + (rem << time_shift) / time_mult + static_cast<uint64_t>(pt_offset);
}

std::string manifest_to_json(const BundleManifest& m) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, info] : m.files) {
    nlohmann::json f = {{"size", info.size}};
    if (info.crc32c) f["crc32c"] = *info.crc32c;
    files[name] = f;
  }
  nlohmann::json clock = {{"pt", "tsc"}, {"sideband", "perf_ns"}};
  if (m.clock.identity)
    clock["perf_to_tsc"] = "identity";
  else if (m.clock.time_mult == 0)
    clock["perf_to_tsc"] = "unknown";  // the trace ended before the guest sent its clock
  else
    clock["perf_to_tsc"] = {{"time_zero", m.clock.time_zero},
                            {"time_mult", m.clock.time_mult},
                            {"time_shift", m.clock.time_shift},
                            {"pt_offset", m.clock.pt_offset}};
  if (!m.clock.identity && m.clock.time_mult != 0 && m.clock.estimated)
    clock["perf_to_tsc"]["source"] = "host_arrival";  // absent: the guest's own TSC parameters
  nlohmann::json j = {{"format", "kthost-bundle"}, {"version", m.version},  {"writer", m.writer},
                      {"clock", clock},            {"cpus", m.cpus},        {"flush_seq", m.flush_seq},
                      {"complete", m.complete},    {"files", files}};
  return j.dump(2) + "\n";
}

namespace {

Error bad(const std::string& name, const std::string& what) {
  return Error(ErrorCode::InvalidInput, name + ": " + what);
}

bool safe_relative_path(const std::string& p) {
  if (p.empty() || p.size() > 255 || p[0] == '/') return false;
  for (auto part : split(p, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  for (char c : p)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/')) return false;
  return true;
}

template <typename T>
std::optional<T> get_uint(const nlohmann::json& j, const char* key, uint64_t max) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
  uint64_t v = it->get<uint64_t>();
  if (v > max) return std::nullopt;
  return static_cast<T>(v);
}

}  // namespace

Result<BundleManifest> parse_manifest(const std::string& text, const std::string& name) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return bad(name, "not valid JSON");
  if (!j.is_object()) return bad(name, "not a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || *format != "kthost-bundle")
    return bad(name, "format is not \"kthost-bundle\"");
  BundleManifest m;
  auto version = get_uint<int>(j, "version", 1000);
  if (!version) return bad(name, "missing or bad \"version\"");
  if (*version != kBundleVersion)
    return Error(ErrorCode::Unsupported, name + ": bundle version " + std::to_string(*version) + ", this kthost reads " +
                                             std::to_string(kBundleVersion));
  m.version = *version;
  if (auto w = j.find("writer"); w != j.end() && w->is_string()) m.writer = sanitize_name(w->get<std::string>());
  auto clock = j.find("clock");
  if (clock == j.end() || !clock->is_object()) return bad(name, "missing \"clock\"");
  auto p2t = clock->find("perf_to_tsc");
  if (p2t == clock->end()) return bad(name, "clock: missing \"perf_to_tsc\"");
  if (p2t->is_string() && *p2t == "identity") {
    m.clock.identity = true;
  } else if (p2t->is_string() && *p2t == "unknown") {
    m.clock = {false, 0, 0, 0, 0};  // to_pt() gives 0: sideband times cannot be placed
  } else if (p2t->is_object()) {
    auto tz = get_uint<uint64_t>(*p2t, "time_zero", UINT64_MAX);
    auto tm = get_uint<uint32_t>(*p2t, "time_mult", UINT32_MAX);
    auto ts = get_uint<uint16_t>(*p2t, "time_shift", 63);
    if (!tz || !tm || !ts || *tm == 0) return bad(name, "clock: bad perf_to_tsc parameters");
    m.clock = {false, *tz, *tm, *ts, 0};
    if (auto off = p2t->find("pt_offset"); off != p2t->end()) {
      if (!off->is_number_integer()) return bad(name, "clock: bad \"pt_offset\"");
      m.clock.pt_offset = off->get<int64_t>();
    }
    if (auto src = p2t->find("source"); src != p2t->end()) {
      if (!src->is_string() || (*src != "host_arrival" && *src != "guest"))
        return bad(name, "clock: bad \"source\" (want \"guest\" or \"host_arrival\")");
      m.clock.estimated = *src == "host_arrival";
    }
  } else {
    return bad(name, "clock: bad \"perf_to_tsc\"");
  }
  auto cpus = j.find("cpus");
  if (cpus == j.end() || !cpus->is_array() || cpus->size() > 4096) return bad(name, "missing or bad \"cpus\"");
  for (const auto& c : *cpus) {
    if (!c.is_number_unsigned() || c.get<uint64_t>() > 65535) return bad(name, "bad CPU number in \"cpus\"");
    m.cpus.push_back(c.get<uint32_t>());
  }
  auto seq = get_uint<uint64_t>(j, "flush_seq", UINT64_MAX);
  if (!seq) return bad(name, "missing or bad \"flush_seq\"");
  m.flush_seq = *seq;
  if (auto c = j.find("complete"); c != j.end() && c->is_boolean()) m.complete = c->get<bool>();
  auto files = j.find("files");
  if (files == j.end() || !files->is_object() || files->size() > 10000) return bad(name, "missing or bad \"files\"");
  for (const auto& [path, info] : files->items()) {
    if (!safe_relative_path(path)) return bad(name, "file name \"" + sanitize_name(path) + "\" leaves the bundle");
    if (!info.is_object()) return bad(name, "files." + path + ": not an object");
    auto size = get_uint<uint64_t>(info, "size", uint64_t{1} << 48);
    if (!size) return bad(name, "files." + path + ": missing or bad \"size\"");
    BundleFileInfo fi{*size, std::nullopt};
    if (info.contains("crc32c")) {
      auto crc = get_uint<uint32_t>(info, "crc32c", UINT32_MAX);
      if (!crc) return bad(name, "files." + path + ": bad \"crc32c\"");
      fi.crc32c = *crc;
    }
    m.files[path] = fi;
  }
  for (uint32_t cpu : m.cpus)
    if (!m.files.count("pt/cpu" + std::to_string(cpu) + ".pt"))
      return bad(name, "CPU " + std::to_string(cpu) + " has no pt/cpu" + std::to_string(cpu) + ".pt in \"files\"");
  return m;
}

namespace {

std::optional<uint64_t> hex_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (!it->is_string()) return std::nullopt;
  return parse_u64(it->get<std::string>(), 0);
}

Result<BundleEvent> parse_event(const nlohmann::json& j) {
  auto fail = [](const std::string& what) { return Error(ErrorCode::InvalidInput, what); };
  if (!j.is_object()) return fail("not a JSON object");
  auto kind = j.find("kind");
  if (kind == j.end() || !kind->is_string()) return fail("missing \"kind\"");
  BundleEvent e;
  e.kind_name = sanitize_name(kind->get<std::string>(), 64);
  auto time = j.find("time");
  if (time == j.end() || !time->is_number_unsigned()) return fail("missing or bad \"time\"");
  e.time = time->get<uint64_t>();
  if (auto c = j.find("cpu"); c != j.end()) {
    if (!c->is_number_unsigned() || c->get<uint64_t>() > 65535) return fail("bad \"cpu\"");
    e.cpu = c->get<uint32_t>();
  }
  auto name = [&]() -> Result<std::string> {
    auto n = j.find("name");
    if (n == j.end() || !n->is_string()) return fail("missing \"name\"");
    return sanitize_name(n->get<std::string>(), 512);
  };
  if (e.kind_name == "ksymbol") {
    auto addr = hex_field(j, "addr");
    auto len = j.find("len");
    auto unreg = j.find("unregister");
    if (!addr || len == j.end() || !len->is_number_unsigned() || unreg == j.end() || !unreg->is_boolean())
      return fail("ksymbol: missing addr, len or unregister");
    e.addr = *addr;
    e.len = len->get<uint64_t>();
    if (e.len > (uint64_t{1} << 32)) return fail("ksymbol: len too large");
    e.kind = unreg->get<bool>() ? BundleEvent::Kind::KsymbolUnregister : BundleEvent::Kind::KsymbolRegister;
    if (auto t = j.find("ksym_type"); t != j.end() && t->is_number_unsigned())
      e.ksym_type = static_cast<uint16_t>(t->get<uint64_t>() & 0xffff);
    KT_ASSIGN_OR_RETURN(e.name, name());
  } else if (e.kind_name == "text_poke") {
    auto addr = hex_field(j, "addr");
    auto o = j.find("old"), n = j.find("new");
    if (!addr || o == j.end() || n == j.end() || !o->is_string() || !n->is_string())
      return fail("text_poke: missing addr, old or new");
    auto ob = parse_hex_bytes(o->get<std::string>()), nb = parse_hex_bytes(n->get<std::string>());
    if (!ob || !nb || ob->size() > 4096 || nb->size() > 4096) return fail("text_poke: bad old/new bytes");
    e.kind = BundleEvent::Kind::TextPoke;
    e.addr = *addr;
    e.old_bytes = std::move(*ob);
    e.new_bytes = std::move(*nb);
  } else if (e.kind_name == "module_load" || e.kind_name == "module_unload") {
    auto addr = hex_field(j, "text_addr");
    auto size = j.find("text_size");
    if (!addr || size == j.end() || !size->is_number_unsigned()) return fail("module: missing text_addr or text_size");
    e.kind = e.kind_name == "module_load" ? BundleEvent::Kind::ModuleLoad : BundleEvent::Kind::ModuleUnload;
    e.addr = *addr;
    e.len = size->get<uint64_t>();
    if (e.len > (uint64_t{1} << 32)) return fail("module: text_size too large");
    KT_ASSIGN_OR_RETURN(e.name, name());
  } else if (e.kind_name == "bpf") {
    auto id = j.find("id"), load = j.find("load"), tag = j.find("tag");
    if (id == j.end() || !id->is_number_unsigned() || id->get<uint64_t>() > UINT32_MAX || load == j.end() ||
        !load->is_boolean() || tag == j.end() || !tag->is_string())
      return fail("bpf: missing or bad id, load or tag");
    auto bytes = parse_hex_bytes(tag->get<std::string>());
    if (!bytes || bytes->size() != e.bpf_tag.size()) return fail("bpf: the tag is not 16 hex digits");
    e.kind = load->get<bool>() ? BundleEvent::Kind::BpfLoad : BundleEvent::Kind::BpfUnload;
    e.bpf_id = id->get<uint32_t>();
    std::copy(bytes->begin(), bytes->end(), e.bpf_tag.begin());
  } else if (e.kind_name == "task_switches") {
    auto list = j.find("switches");
    if (list == j.end() || !list->is_array()) return fail("task_switches: missing \"switches\"");
    if (list->size() > BundleEvent::kMaxTaskSwitchesPerEvent)
      return fail("task_switches: " + std::to_string(list->size()) + " switches, more than the " +
                  std::to_string(BundleEvent::kMaxTaskSwitchesPerEvent) + " one frame can carry");
    if (e.cpu == UINT32_MAX) return fail("task_switches: missing \"cpu\"");
    e.kind = BundleEvent::Kind::TaskSwitches;
    e.switches.reserve(list->size());
    for (const auto& sw : *list) {
      if (!sw.is_array() || sw.size() != 2 || !sw[0].is_number_unsigned() || !sw[1].is_number_unsigned() ||
          sw[1].get<uint64_t>() > UINT32_MAX)
        return fail("task_switches: switch " + std::to_string(e.switches.size()) + " is not [time, tid]");
      e.switches.emplace_back(sw[0].get<uint64_t>(), sw[1].get<uint32_t>());
    }
  } else if (e.kind_name == "lost") {
    auto count = j.find("count");
    if (count == j.end() || !count->is_number_unsigned()) return fail("lost: missing count");
    e.kind = BundleEvent::Kind::Lost;
    e.count = count->get<uint64_t>();
    if (auto k = j.find("lost_kind"); k != j.end() && k->is_string()) e.lost_kind = sanitize_name(k->get<std::string>(), 64);
  }
  return e;
}

}  // namespace

Result<std::vector<BundleEvent>> parse_events_jsonl(const std::string& text, const std::string& name) {
  std::vector<BundleEvent> events;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ++line_no;
    if (nl == std::string::npos)
      return bad(name, "line " + std::to_string(line_no) + " at offset " + std::to_string(pos) +
                           ": no newline (line cut short)");
    std::string_view line(text.data() + pos, nl - pos);
    if (!line.empty()) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      auto ev = j.is_discarded() ? Result<BundleEvent>(Error(ErrorCode::InvalidInput, "not valid JSON")) : parse_event(j);
      if (!ev)
        return bad(name, "line " + std::to_string(line_no) + " at offset " + std::to_string(pos) + ": " +
                             ev.error().message);
      events.push_back(std::move(*ev));
    }
    pos = nl + 1;
  }
  return events;
}

std::string event_to_json(const BundleEvent& e) {
  nlohmann::json j = {{"kind", e.kind_name}, {"time", e.time}};
  if (e.cpu != UINT32_MAX) j["cpu"] = e.cpu;
  switch (e.kind) {
    case BundleEvent::Kind::KsymbolRegister:
    case BundleEvent::Kind::KsymbolUnregister:
      j["kind"] = "ksymbol";
      j["addr"] = hex(e.addr);
      j["len"] = e.len;
      j["ksym_type"] = e.ksym_type;
      j["unregister"] = e.kind == BundleEvent::Kind::KsymbolUnregister;
      j["name"] = e.name;
      break;
    case BundleEvent::Kind::TextPoke:
      j["kind"] = "text_poke";
      j["addr"] = hex(e.addr);
      j["old"] = hex_bytes(e.old_bytes.data(), e.old_bytes.size());
      j["new"] = hex_bytes(e.new_bytes.data(), e.new_bytes.size());
      break;
    case BundleEvent::Kind::ModuleLoad:
    case BundleEvent::Kind::ModuleUnload:
      j["kind"] = e.kind == BundleEvent::Kind::ModuleLoad ? "module_load" : "module_unload";
      j["name"] = e.name;
      j["text_addr"] = hex(e.addr);
      j["text_size"] = e.len;
      break;
    case BundleEvent::Kind::Lost:
      j["kind"] = "lost";
      j["count"] = e.count;
      j["lost_kind"] = e.lost_kind;
      break;
    case BundleEvent::Kind::BpfLoad:
    case BundleEvent::Kind::BpfUnload:
      j["kind"] = "bpf";
      j["load"] = e.kind == BundleEvent::Kind::BpfLoad;
      j["id"] = e.bpf_id;
      j["tag"] = hex_bytes(e.bpf_tag.data(), e.bpf_tag.size());
      break;
    case BundleEvent::Kind::TaskSwitches: {
      j["kind"] = "task_switches";
      auto& list = j["switches"] = nlohmann::json::array();
      for (const auto& [t, tid] : e.switches) list.push_back({t, tid});
      break;
    }
    case BundleEvent::Kind::Other: break;
  }
  return j.dump();
}

}  // namespace kt
