// The text store file: every copy of guest kernel text that kthost took, in
// the order it took them, each with the guest time it stands for.
//
// One append-only file (text.kts in a trace directory). Layout, all integers
// little-endian:
//
//   file header (16 bytes): magic "KTTEXT\0\1", u32 version (1), u32 zero
//   records, back to back:
//     u32 magic 0x5254544B ("KTTR")   u32 record_len (the whole record)
//     u64 time (guest perf clock ns)  u64 start (guest virtual address)
//     u32 data_len   u16 source   u16 kind   u64 id   u16 name_len  u16 zero
//     name_len bytes of name, data_len bytes of text
//     u32 CRC-32C of everything from the record's magic up to here
//
// A writer that dies leaves at most one partial record at the end: the reader
// stops there and says how many bytes it ignored. Anything else that does not
// check out (magic, lengths over their bounds, CRC) is an error naming the
// file and the offset of the bad record.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kthost/common/fd.h"
#include "kthost/common/result.h"

namespace kt {

enum class TextSource : uint16_t {
  Snapshot = 1,    // read at the start of a trace
  Guard = 2,       // saved while ktguard held the free (exact)
  Unregister = 3,  // best effort: read after the guest announced an unload (may be too late)
  Load = 4,        // read when the guest announced new text (ksymbol register, module load)
};
const char* text_source_name(TextSource s);
// A record's kind as read from disk: older bundles' load records used numbers
// that now mean guard kinds, and are mapped to kthost_shared.h's.
uint16_t text_kind_of(TextSource source, uint16_t stored);

struct TextRecord {
  uint64_t time = 0;   // guest perf clock, ns; 0 when unknown
  uint64_t start = 0;  // guest virtual address of bytes[0]
  TextSource source = TextSource::Snapshot;
  uint16_t kind = 0;   // enum kthost_text_kind (kthost_shared.h); 0 for snapshot text
  uint64_t id = 0;     // Guard: notice id; otherwise 0
  std::string name;    // symbol or module name, may be empty
  std::vector<uint8_t> bytes;
};

inline constexpr uint32_t kTextStoreMaxData = 64u << 20;  // one record's text
inline constexpr uint32_t kTextStoreMaxName = 1024;
inline constexpr size_t kTextStoreHeaderSize = 16;
inline constexpr size_t kTextRecordFixedSize = 44;  // before name and data

// Appends records; buffers up to 1 MiB, written out by flush() (and by
// append() when the buffer is full). Not thread-safe.
class TextStoreWriter {
 public:
  // Creates (truncates) the file and writes its header.
  static Result<TextStoreWriter> create(const std::string& path);
  TextStoreWriter(TextStoreWriter&&) = default;
  TextStoreWriter& operator=(TextStoreWriter&&) = default;
  ~TextStoreWriter();

  // Errors: InvalidArgument when the data or name is over its bound; Io.
  Status append(const TextRecord& r);
  // Writes the buffer to the file (a crash after this loses nothing).
  Status flush();
  uint64_t records() const { return records_; }
  uint64_t text_bytes() const { return text_bytes_; }
  const std::string& path() const { return path_; }

 private:
  TextStoreWriter() = default;
  UniqueFd fd_;
  std::string path_;
  std::vector<uint8_t> buf_;
  uint64_t records_ = 0, text_bytes_ = 0;
};

struct TextStoreContents {
  std::vector<TextRecord> records;
  uint64_t valid_bytes = 0;    // file bytes up to the end of the last whole record
  uint64_t ignored_tail = 0;   // bytes of a partial last record (a writer cut short)
};

// Encodes one record (exposed for tests and fuzzing).
std::vector<uint8_t> encode_text_record(const TextRecord& r);
// Parses a whole store held in memory; `name` is used in error messages.
// Errors: InvalidInput (bad header, magic, lengths, CRC; the message names
// `name` and the offset), LimitExceeded (more than max_total_text bytes of text).
Result<TextStoreContents> parse_text_store(const uint8_t* data, size_t len, const std::string& name,
                                           uint64_t max_total_text = uint64_t{8} << 30);
// Reads and parses a store file.
Result<TextStoreContents> read_text_store(const std::string& path, uint64_t max_total_text = uint64_t{8} << 30);

}  // namespace kt
