// The bundle read back from disk: untrusted. The first byte picks the part:
// 0 manifest.json, 1 events.jsonl, 2 a whole bundle directory whose
// pt/cpu0.pt is the input (reader, PT packet validation, manifest sizes).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "kthost/bundle/bundle.h"
#include "kthost/common/io.h"
#include "kthost/decode/analysis.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto m = kt::parse_manifest(text, "manifest.json");
      if (m.ok()) {
        for (const auto& [name, info] : m->files) {
          // Every accepted name stays inside the bundle: relative, and no
          // empty, "." or ".." component ("text..kts" is a plain name).
          if (name.empty() || name[0] == '/') __builtin_trap();
          size_t start = 0;
          for (;;) {
            size_t slash = name.find('/', start);
            std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
            if (part.empty() || part == "." || part == "..") __builtin_trap();
            if (slash == std::string::npos) break;
            start = slash + 1;
          }
        }
        auto again = kt::parse_manifest(kt::manifest_to_json(*m), "again");
        if (!again.ok() || again->files.size() != m->files.size()) __builtin_trap();
      }
      break;
    }
    case 1: {
      auto e = kt::parse_events_jsonl(text, "events.jsonl");
      if (e.ok())
        for (const auto& ev : *e) {
          if (ev.old_bytes.size() > 4096 || ev.new_bytes.size() > 4096) __builtin_trap();
          // What was accepted reads back the same through the one writer.
          if (ev.kind == kt::BundleEvent::Kind::Other) continue;
          auto again = kt::parse_events_jsonl(kt::event_to_json(ev) + "\n", "again");
          if (!again.ok() || again->size() != 1) __builtin_trap();
          const auto& a = again->front();
          if (a.kind != ev.kind || a.addr != ev.addr || a.bpf_id != ev.bpf_id || a.bpf_tag != ev.bpf_tag ||
              a.name != ev.name || a.new_bytes != ev.new_bytes)
            __builtin_trap();
        }
      break;
    }
    case 2: {
      static std::string dir = [] {
        std::string d = "/tmp/kthost-fuzz-bundle-" + std::to_string(::getpid());
        std::filesystem::create_directories(d + "/pt");
        return d;
      }();
      kt::BundleManifest m;
      m.cpus = {0};
      m.flush_seq = 1;
      m.files["pt/cpu0.pt"] = {text.size(), std::nullopt};
      if (!kt::write_file_atomic(dir + "/pt/cpu0.pt", text)) return 0;
      if (!kt::write_file_atomic(dir + "/manifest.json", kt::manifest_to_json(m))) return 0;
      auto b = kt::read_bundle(dir, kt::analysis_read_options());
      if (b.ok() && b->pt.at(0).size() != text.size()) __builtin_trap();
      break;
    }
  }
  return 0;
}
