// read_bundle: validates a bundle directory against its manifest.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "kthost/bundle/bundle.h"
#include "kthost/common/io.h"
#include "kthost/common/strings.h"
#include "kthost/common/crc32c.h"

namespace kt {
namespace {

Error bad(const std::string& file, uint64_t offset, const std::string& what) {
  return Error(ErrorCode::InvalidInput, file + ": at offset " + std::to_string(offset) + ": " + what);
}

// Opens a listed file whose committed prefix [0, info.size) is at most `max`
// bytes; counts what lies beyond the prefix.
Result<UniqueFd> open_prefix(const std::string& dir, const std::string& name, const BundleFileInfo& info,
                             uint64_t max, uint64_t* ignored) {
  std::string path = dir + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return Error(ErrorCode::InvalidInput, name + ": listed in manifest.json but missing");
    return io_error("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("stat " + path, errno);
  uint64_t actual = static_cast<uint64_t>(st.st_size);
  if (actual < info.size)
    return bad(name, actual, "file ends here, but manifest.json says it has " + std::to_string(info.size) +
                                 " bytes (truncated)");
  if (info.size > max)
    return Error(ErrorCode::LimitExceeded, name + ": " + std::to_string(info.size) + " bytes is over the limit");
  *ignored += actual - info.size;
  return fd;
}

Status check_crc_of(const std::string& name, const BundleFileInfo& info, uint32_t crc) {
  if (!info.crc32c || crc == *info.crc32c) return ok_status();
  return bad(name, 0, "CRC-32C of bytes [0, " + std::to_string(info.size) + ") is " + hex(crc) +
                          ", manifest.json says " + hex(*info.crc32c) + " (corrupt)");
}

// Reads the committed prefix of a listed file.
Result<std::vector<uint8_t>> read_prefix(const std::string& dir, const std::string& name, const BundleFileInfo& info,
                                         uint64_t max, bool check_crc, uint64_t* ignored) {
  KT_ASSIGN_OR_RETURN(UniqueFd fd, open_prefix(dir, name, info, max, ignored));
  std::string path = dir + "/" + name;
  std::vector<uint8_t> data(info.size);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pread(fd.get(), data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("read " + path, errno);
    if (n == 0) return bad(name, done, "file shrank while being read");
    done += static_cast<size_t>(n);
  }
  if (check_crc) KT_TRY(check_crc_of(name, info, crc32c(0, data.data(), data.size())));
  return data;
}

// Maps the committed prefix of a PT file; its CRC is taken a few MiB at a
// time, each released after, so checking a stream never holds all of it.
Result<PtStream> map_pt_prefix(const std::string& dir, const std::string& name, const BundleFileInfo& info,
                               uint64_t max, bool check_crc, uint64_t* ignored) {
  KT_ASSIGN_OR_RETURN(UniqueFd fd, open_prefix(dir, name, info, max, ignored));
  KT_ASSIGN_OR_RETURN(PtStream pt, PtStream::map_file(fd.get(), dir + "/" + name, info.size));
  if (check_crc && info.crc32c) {
    uint32_t crc = 0;
    PtReleaser behind(pt);
    for (uint64_t at = 0; at < pt.size();) {
      const uint64_t n = std::min<uint64_t>(pt.size() - at, uint64_t{1} << 20);
      crc = crc32c(crc, pt.data() + at, n);
      at += n;
      behind.reached(at);
    }
    KT_TRY(check_crc_of(name, info, crc));
  }
  return pt;
}

// A file's error, named with the bundle's directory.
Error named(Error e, const std::string& dir, const std::string& name) {
  if (e.message.rfind(name, 0) == 0) e.message = dir + "/" + e.message;
  return e;
}

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

}  // namespace

Result<Bundle> read_bundle(const std::string& dir, const BundleReadOptions& options) {
  Bundle b;
  b.dir = dir;
  auto manifest_text = read_file(dir + "/manifest.json", kBundleMaxManifest);
  if (!manifest_text) {
    if (manifest_text.error().code == ErrorCode::Io && ::access((dir + "/manifest.json").c_str(), F_OK) != 0)
      return Error(ErrorCode::InvalidInput, dir + " is not a bundle: it has no manifest.json");
    return manifest_text.take_error();
  }
  KT_ASSIGN_OR_RETURN(b.manifest, parse_manifest(*manifest_text, dir + "/manifest.json"));
  uint64_t pt_total = 0;
  for (const auto& [name, info] : b.manifest.files) {
    if (starts_with(name, "pt/")) pt_total += info.size;
    if (pt_total > options.max_pt_bytes)
      return Error(ErrorCode::LimitExceeded, dir + ": PT streams are over " + human_bytes(options.max_pt_bytes));
    std::string label = dir + "/" + name;
    if (name == "kcore") {
      // Checked by whoever maps it (the decoder's image loader); only its size here.
      struct stat st {};
      if (::stat(label.c_str(), &st) != 0) return Error(ErrorCode::InvalidInput, label + ": listed but missing");
      if (static_cast<uint64_t>(st.st_size) < info.size)
        return bad(label, static_cast<uint64_t>(st.st_size), "kcore ends here, manifest.json says " +
                                                                 std::to_string(info.size) + " bytes (truncated)");
      b.kcore_path = label;
      continue;
    }
    uint64_t ignored = 0;
    if (starts_with(name, "pt/")) {
      std::optional<uint64_t> cpu;
      if (name.size() >= 10 && starts_with(name, "pt/cpu") && name.compare(name.size() - 3, 3, ".pt") == 0)
        cpu = parse_u64(name.substr(6, name.size() - 9), 10);
      if (!cpu || *cpu > 65535)
        return Error(ErrorCode::InvalidInput, label + ": a PT file must be named pt/cpuN.pt");
      auto pt = map_pt_prefix(dir, name, info, options.max_pt_bytes, options.check_crc, &ignored);
      if (!pt) return named(pt.take_error(), dir, name);
      b.ignored_bytes += ignored;
      if (options.check_pt) KT_TRY(options.check_pt(label, *pt));
      b.pt[static_cast<uint32_t>(*cpu)] = std::move(*pt);
      continue;
    }
    auto data = read_prefix(dir, name, info, name == "text.kts" ? (uint64_t{32} << 30) : options.max_pt_bytes,
                            options.check_crc, &ignored);
    if (!data) return named(data.take_error(), dir, name);
    b.ignored_bytes += ignored;
    if (name == "events.jsonl") {
      KT_ASSIGN_OR_RETURN(b.events, parse_events_jsonl(as_string(*data), label));
    } else if (name == "text.kts") {
      auto text = parse_text_store(data->data(), data->size(), label);
      if (!text) return text.take_error();
      if (text->ignored_tail != 0)
        return bad(label, text->valid_bytes, "a partial record inside the flushed part (corrupt)");
      b.text = std::move(*text);
    } else if (name == "kallsyms") {
      b.kallsyms = as_string(*data);
    } else if (name == "modules") {
      b.modules = as_string(*data);
    } else if (name == "losses.json") {
      nlohmann::json j = nlohmann::json::parse(as_string(*data), nullptr, false);
      if (j.is_discarded() || !j.is_object()) return bad(label, 0, "not a JSON object");
      for (const auto& [k, v] : j.items()) {
        if (!v.is_number_unsigned()) return bad(label, 0, "loss \"" + sanitize_name(k) + "\" is not a count");
        b.losses[sanitize_name(k, 64)] = v.get<uint64_t>();
      }
    }
  }
  for (uint32_t cpu : b.manifest.cpus)
    b.pt.try_emplace(cpu);
  return b;
}

}  // namespace kt
