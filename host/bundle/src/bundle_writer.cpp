// BundleWriter: appends to the bundle's streams and commits them with the
// manifest (see bundle.h for the crash-safety argument).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "kthost/bundle/bundle.h"
#include "kthost/common/io.h"
#include "kthost/common/crc32c.h"

namespace kt {

struct BundleWriter::Stream {
  UniqueFd fd;
  std::string path;
  std::vector<uint8_t> buf;
  uint64_t written = 0;  // bytes in the file
  uint32_t crc = 0;      // of everything appended
};

namespace {
constexpr size_t kStreamBuffer = 1u << 20;

Status write_fully(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write " + path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}
}  // namespace

Result<std::unique_ptr<BundleWriter>> BundleWriter::create(const std::string& dir, const std::vector<uint32_t>& cpus,
                                                           const BundleClock& clock) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + dir, errno);
  if (::mkdir((dir + "/pt").c_str(), 0755) != 0 && errno != EEXIST) return io_error("mkdir " + dir + "/pt", errno);
  std::unique_ptr<BundleWriter> w(new BundleWriter());
  w->dir_ = dir;
  w->manifest_.writer = "kthost 0.1.0";
  w->manifest_.clock = clock;
  w->manifest_.cpus = cpus;
  for (uint32_t cpu : cpus) KT_TRY(w->stream("pt/cpu" + std::to_string(cpu) + ".pt"));
  KT_TRY(w->stream("events.jsonl"));
  auto text = TextStoreWriter::create(dir + "/text.kts");
  if (!text) return text.take_error();
  w->text_ = std::make_unique<TextStoreWriter>(std::move(*text));
  KT_TRY(w->flush());
  return w;
}

BundleWriter::~BundleWriter() = default;

Result<BundleWriter::Stream*> BundleWriter::stream(const std::string& name) {
  auto it = streams_.find(name);
  if (it != streams_.end()) return it->second.get();
  auto s = std::make_unique<Stream>();
  s->path = dir_ + "/" + name;
  int fd = ::open(s->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("create " + s->path, errno);
  s->fd.reset(fd);
  Stream* raw = s.get();
  streams_[name] = std::move(s);
  return raw;
}

Status BundleWriter::append_pt(uint32_t cpu, const void* data, size_t len) {
  auto it = streams_.find("pt/cpu" + std::to_string(cpu) + ".pt");
  if (it == streams_.end())
    return Error(ErrorCode::InvalidArgument, "CPU " + std::to_string(cpu) + " is not in the bundle's CPU list");
  Stream& s = *it->second;
  const auto* p = static_cast<const uint8_t*>(data);
  s.crc = crc32c(s.crc, p, len);
  s.buf.insert(s.buf.end(), p, p + len);
  if (s.buf.size() >= kStreamBuffer) {
    KT_TRY(write_fully(s.fd.get(), s.buf.data(), s.buf.size(), s.path));
    s.written += s.buf.size();
    s.buf.clear();
  }
  return ok_status();
}

Status BundleWriter::append_event_json(const std::string& line) {
  if (line.find('\n') != std::string::npos)
    return Error(ErrorCode::InvalidArgument, "an event line must not contain a newline");
  Stream& s = *streams_.at("events.jsonl");
  s.crc = crc32c(s.crc, line.data(), line.size());
  s.crc = crc32c(s.crc, "\n", 1);
  s.buf.insert(s.buf.end(), line.begin(), line.end());
  s.buf.push_back('\n');
  if (s.buf.size() >= kStreamBuffer) {
    KT_TRY(write_fully(s.fd.get(), s.buf.data(), s.buf.size(), s.path));
    s.written += s.buf.size();
    s.buf.clear();
  }
  return ok_status();
}

Status BundleWriter::append_text(const TextRecord& record) { return text_->append(record); }

Status BundleWriter::write_whole_file(const std::string& name, const std::string& data) {
  if (name != "kallsyms" && name != "modules" && name != "kcore")
    return Error(ErrorCode::InvalidArgument, "whole files are kallsyms, modules and kcore, not " + name);
  KT_TRY(write_file_atomic(dir_ + "/" + name, data));
  manifest_.files[name] = {data.size(), crc32c(0, data.data(), data.size())};
  return ok_status();
}

Status BundleWriter::flush() {
  for (auto& [name, s] : streams_) {
    if (!s->buf.empty()) {
      KT_TRY(write_fully(s->fd.get(), s->buf.data(), s->buf.size(), s->path));
      s->written += s->buf.size();
      s->buf.clear();
    }
    if (::fdatasync(s->fd.get()) != 0 && errno != EINVAL) return io_error("fdatasync " + s->path, errno);
    manifest_.files[name] = {s->written, s->crc};
  }
  KT_TRY(text_->flush());
  struct stat st {};
  if (::stat(text_->path().c_str(), &st) != 0) return io_error("stat " + text_->path(), errno);
  // The text store checks itself record by record (CRC-32C each): size only.
  manifest_.files["text.kts"] = {static_cast<uint64_t>(st.st_size), std::nullopt};
  nlohmann::json losses = nlohmann::json::object();
  for (const auto& [k, v] : losses_) losses[k] = v;
  std::string losses_text = losses.dump(2) + "\n";
  KT_TRY(write_file_atomic(dir_ + "/losses.json", losses_text));
  manifest_.files["losses.json"] = {losses_text.size(), crc32c(0, losses_text.data(), losses_text.size())};
  manifest_.flush_seq++;
  // Last: the manifest commits everything above.
  return write_file_atomic(dir_ + "/manifest.json", manifest_to_json(manifest_));
}

Status BundleWriter::close() {
  manifest_.complete = true;
  return flush();
}

}  // namespace kt
