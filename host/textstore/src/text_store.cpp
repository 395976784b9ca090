#include "kthost/textstore/text_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kthost/common/io.h"
#include "kthost/common/crc32c.h"
#include "kthost_shared.h"

namespace kt {
namespace {

constexpr uint8_t kFileMagic[8] = {'K', 'T', 'T', 'E', 'X', 'T', 0, 1};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kRecordMagic = 0x5254544B;  // "KTTR"
constexpr size_t kFlushAt = 1u << 20;

void put16(std::vector<uint8_t>& v, uint16_t x) {
  for (int i = 0; i < 2; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put64(std::vector<uint8_t>& v, uint64_t x) {
  for (int i = 0; i < 8; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
uint64_t get(const uint8_t* p, int n) {
  uint64_t x = 0;
  for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(p[i]) << (8 * i);
  return x;
}

Error bad(const std::string& name, uint64_t offset, const std::string& what) {
  return Error(ErrorCode::InvalidInput, name + ": offset " + std::to_string(offset) + ": " + what);
}

}  // namespace

uint16_t text_kind_of(TextSource source, uint16_t stored) {
  // Bundles written before kthost_shared.h stored a load's PERF_RECORD_KSYMBOL
  // type (1 BPF, 2 OOL) or 16 for a module, numbers that also mean guard kinds.
  if (source == TextSource::Load || source == TextSource::Unregister) {
    if (stored == 1) return KTHOST_TEXT_KSYMBOL_BPF;
    if (stored == 2) return KTHOST_TEXT_KSYMBOL_OOL;
    if (stored == 16) return KTHOST_TEXT_MODULE;
  }
  return stored;
}

const char* text_source_name(TextSource s) {
  switch (s) {
    case TextSource::Snapshot: return "snapshot";
    case TextSource::Guard: return "guard";
    case TextSource::Unregister: return "unregister";
    case TextSource::Load: return "load";
  }
  return "unknown";
}

std::vector<uint8_t> encode_text_record(const TextRecord& r) {
  std::vector<uint8_t> v;
  size_t total = kTextRecordFixedSize + r.name.size() + r.bytes.size() + 4;
  v.reserve(total);
  put32(v, kRecordMagic);
  put32(v, static_cast<uint32_t>(total));
  put64(v, r.time);
  put64(v, r.start);
  put32(v, static_cast<uint32_t>(r.bytes.size()));
  put16(v, static_cast<uint16_t>(r.source));
  put16(v, r.kind);
  put64(v, r.id);
  put16(v, static_cast<uint16_t>(r.name.size()));
  put16(v, 0);
  v.insert(v.end(), r.name.begin(), r.name.end());
  v.insert(v.end(), r.bytes.begin(), r.bytes.end());
  put32(v, crc32c(0, v.data(), v.size()));
  return v;
}

Result<TextStoreWriter> TextStoreWriter::create(const std::string& path) {
  TextStoreWriter w;
  w.path_ = path;
  w.fd_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!w.fd_.valid()) return io_error("create " + path, errno);
  w.buf_.assign(kFileMagic, kFileMagic + 8);
  put32(w.buf_, kVersion);
  put32(w.buf_, 0);
  KT_TRY(w.flush());
  return w;
}

TextStoreWriter::~TextStoreWriter() {
  if (fd_.valid()) (void)flush();
}

Status TextStoreWriter::append(const TextRecord& r) {
  if (r.bytes.size() > kTextStoreMaxData)
    return Error(ErrorCode::InvalidArgument, "text record of " + std::to_string(r.bytes.size()) +
                                                 " bytes is over the limit of " + std::to_string(kTextStoreMaxData));
  if (r.name.size() > kTextStoreMaxName)
    return Error(ErrorCode::InvalidArgument, "text record name of " + std::to_string(r.name.size()) + " bytes");
  auto rec = encode_text_record(r);
  buf_.insert(buf_.end(), rec.begin(), rec.end());
  records_++;
  text_bytes_ += r.bytes.size();
  if (buf_.size() >= kFlushAt) return flush();
  return {};
}

Status TextStoreWriter::flush() {
  if (buf_.empty()) return {};
  if (auto st = write_all(fd_.get(), buf_.data(), buf_.size(), std::chrono::seconds(30)); !st)
    return st.error().with_context("writing " + path_);
  buf_.clear();
  return {};
}

Result<TextStoreContents> parse_text_store(const uint8_t* data, size_t len, const std::string& name,
                                           uint64_t max_total_text) {
  if (len < kTextStoreHeaderSize) return bad(name, 0, "shorter than the 16-byte header");
  if (std::memcmp(data, kFileMagic, 8) != 0) return bad(name, 0, "not a kthost text store (bad magic)");
  uint32_t version = static_cast<uint32_t>(get(data + 8, 4));
  if (version != kVersion)
    return bad(name, 8, "text store version " + std::to_string(version) + ", this kthost reads version 1");
  TextStoreContents out;
  size_t off = kTextStoreHeaderSize;
  uint64_t total_text = 0;
  while (off < len) {
    size_t left = len - off;
    const uint8_t* p = data + off;
    if (left < 8) {
      out.ignored_tail = left;
      break;
    }
    if (get(p, 4) != kRecordMagic) return bad(name, off, "no record magic");
    uint64_t record_len = get(p + 4, 4);
    if (left < kTextRecordFixedSize) {
      out.ignored_tail = left;
      break;
    }
    uint64_t data_len = get(p + 24, 4), name_len = get(p + 40, 2);
    if (data_len > kTextStoreMaxData) return bad(name, off, "text length " + std::to_string(data_len) + " over the limit");
    if (name_len > kTextStoreMaxName) return bad(name, off, "name length " + std::to_string(name_len) + " over the limit");
    if (record_len != kTextRecordFixedSize + name_len + data_len + 4)
      return bad(name, off, "record length " + std::to_string(record_len) + " does not match its fields");
    if (left < record_len) {
      out.ignored_tail = left;
      break;
    }
    if (get(p + 42, 2) != 0) return bad(name, off + 42, "reserved field is not zero");
    uint32_t crc = static_cast<uint32_t>(get(p + record_len - 4, 4));
    if (crc32c(0, p, record_len - 4) != crc) return bad(name, off, "record checksum mismatch");
    uint16_t source = static_cast<uint16_t>(get(p + 28, 2));
    if (source < 1 || source > 4) return bad(name, off, "unknown text source " + std::to_string(source));
    total_text += data_len;
    if (total_text > max_total_text)
      return Error(ErrorCode::LimitExceeded, name + ": more than " + std::to_string(max_total_text) + " bytes of text");
    TextRecord r;
    r.time = get(p + 8, 8);
    r.start = get(p + 16, 8);
    r.source = static_cast<TextSource>(source);
    r.kind = text_kind_of(r.source, static_cast<uint16_t>(get(p + 30, 2)));
    r.id = get(p + 32, 8);
    r.name.assign(reinterpret_cast<const char*>(p + kTextRecordFixedSize), name_len);
    const uint8_t* d = p + kTextRecordFixedSize + name_len;
    r.bytes.assign(d, d + data_len);
    out.records.push_back(std::move(r));
    off += record_len;
  }
  out.valid_bytes = off;
  return out;
}

Result<TextStoreContents> read_text_store(const std::string& path, uint64_t max_total_text) {
  KT_ASSIGN_OR_RETURN(std::string bytes, read_file(path, size_t{16} << 30));
  return parse_text_store(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, max_total_text);
}

}  // namespace kt
