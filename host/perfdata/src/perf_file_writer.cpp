// PerfFileWriter and RecordBytes: perf.data's bytes.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kthost/perfdata/perf_data.h"

namespace kt::perf {

RecordBytes::RecordBytes(uint32_t type, uint16_t misc) {
  u32(type);
  u16(misc);
  u16(0);  // size, set by finish()
}
RecordBytes& RecordBytes::u16(uint16_t v) { return bytes(reinterpret_cast<const uint8_t*>(&v), 2); }
RecordBytes& RecordBytes::u32(uint32_t v) { return bytes(reinterpret_cast<const uint8_t*>(&v), 4); }
RecordBytes& RecordBytes::u64(uint64_t v) { return bytes(reinterpret_cast<const uint8_t*>(&v), 8); }
RecordBytes& RecordBytes::bytes(const uint8_t* p, size_t n) {
  b_.insert(b_.end(), p, p + n);
  return *this;
}
RecordBytes& RecordBytes::padded_string(const std::string& s) {
  bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  b_.push_back(0);
  return pad8();
}
RecordBytes& RecordBytes::pad8() {
  while (b_.size() % 8) b_.push_back(0);
  return *this;
}
Result<std::vector<uint8_t>> RecordBytes::finish() {
  pad8();
  if (b_.size() > UINT16_MAX)
    return Error(ErrorCode::LimitExceeded, "a perf record of " + std::to_string(b_.size()) + " bytes (perf's limit is 65535)");
  uint16_t size = static_cast<uint16_t>(b_.size());
  std::memcpy(b_.data() + 6, &size, 2);
  return std::move(b_);
}

void append_sample_id(RecordBytes& r, const SampleId& s) {
  r.u32(s.pid).u32(s.tid);  // PERF_SAMPLE_TID
  r.u64(s.time);            // PERF_SAMPLE_TIME
  r.u32(s.cpu).u32(0);      // PERF_SAMPLE_CPU
  r.u64(s.id);              // PERF_SAMPLE_IDENTIFIER, always last
}

std::vector<uint8_t> header_string(const std::string& s) {
  uint32_t len = static_cast<uint32_t>((s.size() + 1 + kNameAlign - 1) / kNameAlign * kNameAlign);
  std::vector<uint8_t> out(4 + len, 0);
  std::memcpy(out.data(), &len, 4);
  std::memcpy(out.data() + 4, s.data(), s.size());
  return out;
}

Result<PerfFileWriter> PerfFileWriter::create(const std::string& path, std::vector<EventAttr> attrs) {
  PerfFileWriter w;
  w.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return io_error("create " + path, errno);
  w.path_ = path;
  w.attrs_ = std::move(attrs);
  // Header, then each attr's ids, then the attrs: the data starts after them.
  uint64_t off = kFileHeaderSize;
  for (const auto& a : w.attrs_) off += a.ids.size() * 8;
  off += w.attrs_.size() * (kAttrSize + 16);
  w.data_offset_ = off;
  return w;
}

PerfFileWriter::PerfFileWriter(PerfFileWriter&& o) noexcept { *this = std::move(o); }
PerfFileWriter& PerfFileWriter::operator=(PerfFileWriter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
    path_ = std::move(o.path_);
    attrs_ = std::move(o.attrs_);
    data_offset_ = o.data_offset_;
    data_size_ = o.data_size_;
    auxtrace_index_ = std::move(o.auxtrace_index_);
    features_ = std::move(o.features_);
  }
  return *this;
}
PerfFileWriter::~PerfFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status PerfFileWriter::write_at(uint64_t off, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::pwrite(fd_, c, n, static_cast<off_t>(off));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return io_error("write " + path_, errno);
    c += k;
    off += static_cast<uint64_t>(k);
    n -= static_cast<size_t>(k);
  }
  return ok_status();
}

Result<uint64_t> PerfFileWriter::add(const std::vector<uint8_t>& record) {
  uint64_t at = data_offset_ + data_size_;
  KT_TRY(write_at(at, record.data(), record.size()));
  data_size_ += record.size();
  return at;
}

Status PerfFileWriter::add_auxtrace(const uint8_t* data, uint64_t size, uint64_t offset, uint64_t reference,
                                    uint32_t idx, uint32_t tid, uint32_t cpu) {
  uint64_t padded = (size + 7) / 8 * 8;
  RecordBytes r(kRecordAuxtrace, 0);
  r.u64(padded).u64(offset).u64(reference).u32(idx).u32(tid).u32(cpu).u32(0);
  KT_ASSIGN_OR_RETURN(auto header, r.finish());
  KT_ASSIGN_OR_RETURN(uint64_t at, add(header));
  // The data follows its record and is not counted in header.size.
  KT_TRY(write_at(at + header.size(), data, size));
  static const uint8_t zeros[8] = {};
  KT_TRY(write_at(at + header.size() + size, zeros, padded - size));
  data_size_ += padded;
  auxtrace_index_.push_back({at, header.size()});  // perf checks the size against header.size
  return ok_status();
}

void PerfFileWriter::set_feature(Feature f, std::vector<uint8_t> contents) {
  for (auto& [bit, c] : features_)
    if (bit == f) {
      c = std::move(contents);
      return;
    }
  features_.push_back({f, std::move(contents)});
}
void PerfFileWriter::set_string_feature(Feature f, const std::string& s) { set_feature(f, header_string(s)); }
void PerfFileWriter::set_nr_cpus(uint32_t available, uint32_t online) {
  std::vector<uint8_t> c(8);
  std::memcpy(c.data(), &available, 4);  // perf reads nr_cpus_avail first
  std::memcpy(c.data() + 4, &online, 4);
  set_feature(kFeatNrCpus, std::move(c));
}
void PerfFileWriter::set_cmdline(const std::vector<std::string>& args) {
  std::vector<uint8_t> c(4);
  uint32_t n = static_cast<uint32_t>(args.size());
  std::memcpy(c.data(), &n, 4);
  for (const auto& a : args) {
    auto s = header_string(a);
    c.insert(c.end(), s.begin(), s.end());
  }
  set_feature(kFeatCmdline, std::move(c));
}

namespace {
void put(std::vector<uint8_t>& v, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  v.insert(v.end(), b, b + n);
}
std::vector<uint8_t> attr_bytes(const perf_event_attr& a) {
  perf_event_attr copy = a;
  copy.size = kAttrSize;
  std::vector<uint8_t> v(kAttrSize, 0);
  std::memcpy(v.data(), &copy, std::min<size_t>(sizeof copy, kAttrSize));
  return v;
}
}  // namespace

Status PerfFileWriter::close() {
  if (fd_ < 0) return Error(ErrorCode::InvalidArgument, path_ + ": already closed");
  // EVENT_DESC: u32 nr, u32 attr size, then per event: attr, u32 nr_ids, name, ids.
  {
    std::vector<uint8_t> c;
    uint32_t nr = static_cast<uint32_t>(attrs_.size()), size = kAttrSize;
    put(c, &nr, 4);
    put(c, &size, 4);
    for (const auto& a : attrs_) {
      auto ab = attr_bytes(a.attr);
      c.insert(c.end(), ab.begin(), ab.end());
      uint32_t n = static_cast<uint32_t>(a.ids.size());
      put(c, &n, 4);
      auto s = header_string(a.name);
      c.insert(c.end(), s.begin(), s.end());
      put(c, a.ids.data(), a.ids.size() * 8);
    }
    set_feature(kFeatEventDesc, std::move(c));
  }
  // AUXTRACE: u64 count, then {file offset, header.size} of every PERF_RECORD_AUXTRACE.
  if (!auxtrace_index_.empty()) {
    std::vector<uint8_t> c;
    uint64_t n = auxtrace_index_.size();
    put(c, &n, 8);
    for (const auto& [off, size] : auxtrace_index_) {
      put(c, &off, 8);
      put(c, &size, 8);
    }
    set_feature(kFeatAuxtrace, std::move(c));
  }
  std::sort(features_.begin(), features_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t table = data_offset_ + data_size_;
  uint64_t at = table + features_.size() * 16;
  std::vector<uint8_t> sections, contents;
  uint64_t bits[4] = {};
  for (const auto& [bit, c] : features_) {
    uint64_t off = at + contents.size(), size = c.size();
    put(sections, &off, 8);
    put(sections, &size, 8);
    contents.insert(contents.end(), c.begin(), c.end());
    bits[bit / 64] |= uint64_t{1} << (bit % 64);
  }
  KT_TRY(write_at(table, sections.data(), sections.size()));
  KT_TRY(write_at(at, contents.data(), contents.size()));

  // Ids, attrs (each with the section of its ids), header.
  uint64_t off = kFileHeaderSize;
  std::vector<uint8_t> ids_and_attrs;
  std::vector<std::pair<uint64_t, uint64_t>> id_sections;
  for (const auto& a : attrs_) {
    id_sections.push_back({off + ids_and_attrs.size(), a.ids.size() * 8});
    put(ids_and_attrs, a.ids.data(), a.ids.size() * 8);
  }
  uint64_t attrs_off = off + ids_and_attrs.size();
  for (size_t i = 0; i < attrs_.size(); ++i) {
    auto ab = attr_bytes(attrs_[i].attr);
    ids_and_attrs.insert(ids_and_attrs.end(), ab.begin(), ab.end());
    put(ids_and_attrs, &id_sections[i].first, 8);
    put(ids_and_attrs, &id_sections[i].second, 8);
  }
  KT_TRY(write_at(off, ids_and_attrs.data(), ids_and_attrs.size()));
  std::vector<uint8_t> h;
  put(h, kMagic, 8);
  uint64_t header_size = kFileHeaderSize, attr_size = kAttrSize + 16;
  uint64_t attrs_size = attrs_.size() * attr_size, zero = 0;
  put(h, &header_size, 8);
  put(h, &attr_size, 8);
  put(h, &attrs_off, 8);
  put(h, &attrs_size, 8);
  put(h, &data_offset_, 8);
  put(h, &data_size_, 8);
  put(h, &zero, 8);  // event_types: unused
  put(h, &zero, 8);
  put(h, bits, sizeof bits);
  KT_TRY(write_at(0, h.data(), h.size()));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return io_error("close " + path_, errno);
  return ok_status();
}

}  // namespace kt::perf
