// perf.data, as perf 6.1 reads it: the format, defined once.
//
// Facts from tools/perf/Documentation/perf.data-file-format.txt and
// include/uapi/linux/perf_event.h (the kernel's records and perf_event_attr,
// taken from <linux/perf_event.h>). Native (little) endian throughout.
//
//   file header (104 bytes): "PERFILE2", u64 header size, u64 attr_size
//     (perf_event_attr + its ids section), sections attrs, data, event_types,
//     a 256-bit feature bitmap
//   the ids of each attr (u64 arrays), the attrs, the data (records)
//   after the data: one {offset, size} per feature bit set, in bit order,
//   then the features' contents
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kthost/common/result.h"

namespace kt::perf {

inline constexpr char kMagic[8] = {'P', 'E', 'R', 'F', 'I', 'L', 'E', '2'};
inline constexpr uint64_t kFileHeaderSize = 104;
inline constexpr uint32_t kAttrSize = PERF_ATTR_SIZE_VER7;  // 128, perf 6.1's struct
inline constexpr size_t kNameAlign = 64;                     // strings in features

// Feature bits (the HEADER_* enum of perf's header.h).
enum Feature : unsigned {
  kFeatBuildId = 2,
  kFeatHostname = 3,
  kFeatOsRelease = 4,
  kFeatVersion = 5,
  kFeatArch = 6,
  kFeatNrCpus = 7,
  kFeatCpuDesc = 8,
  kFeatCpuId = 9,
  kFeatCmdline = 11,
  kFeatEventDesc = 12,
  kFeatAuxtrace = 18,
  kFeatBpfProgInfo = 25,
};

// Records perf itself writes (PERF_RECORD_USER_TYPE_START and on).
enum UserRecord : uint32_t {
  kRecordFinishedRound = 68,
  kRecordAuxtraceInfo = 70,
  kRecordAuxtrace = 71,
};

// PERF_RECORD_AUXTRACE_INFO's type for Intel PT, and its private words
// (tools/perf/util/intel-pt.h), in order.
inline constexpr uint32_t kAuxtraceIntelPt = 1;
enum IntelPtPriv : unsigned {
  kPtPmuType,
  kPtTimeShift,
  kPtTimeMult,
  kPtTimeZero,
  kPtCapUserTimeZero,
  kPtTscBit,
  kPtNoRetCompBit,
  kPtHaveSchedSwitch,
  kPtSnapshotMode,
  kPtPerCpuMmaps,
  kPtMtcBit,
  kPtMtcFreqBits,
  kPtTscCtcN,
  kPtTscCtcD,
  kPtCycBit,
  kPtMaxNonTurboRatio,
  kPtFilterStrLen,
  kPtPrivWords,
};

// Records are built in a byte buffer: fields appended little-endian, strings
// zero-padded to 8 bytes as perf pads them.
class RecordBytes {
 public:
  RecordBytes(uint32_t type, uint16_t misc);
  RecordBytes& u16(uint16_t v);
  RecordBytes& u32(uint32_t v);
  RecordBytes& u64(uint64_t v);
  RecordBytes& bytes(const uint8_t* p, size_t n);
  RecordBytes& padded_string(const std::string& s);  // NUL-terminated, padded to 8
  RecordBytes& pad8();
  // Sets header.size; errors when the record exceeds 64 KiB (header.size is a u16).
  Result<std::vector<uint8_t>> finish();

 private:
  std::vector<uint8_t> b_;
};

// The sample_id trailer of non-sample records (attr.sample_id_all) for the
// sample_type the writer uses: TID | TIME | CPU | IDENTIFIER.
inline constexpr uint64_t kSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                                        PERF_SAMPLE_IDENTIFIER;
struct SampleId {
  uint32_t pid = 0, tid = 0;
  uint64_t time = 0;
  uint32_t cpu = 0;
  uint64_t id = 0;
};
void append_sample_id(RecordBytes& r, const SampleId& s);

// One event (attr) and its ids, as written in the attrs section and in the
// EVENT_DESC feature.
struct EventAttr {
  perf_event_attr attr{};
  std::vector<uint64_t> ids;
  std::string name;
};

// Writes a perf.data file: open, add records in order, close. The file is
// written as it goes; close() writes the features and then the header.
class PerfFileWriter {
 public:
  static Result<PerfFileWriter> create(const std::string& path, std::vector<EventAttr> attrs);
  PerfFileWriter(PerfFileWriter&&) noexcept;
  PerfFileWriter& operator=(PerfFileWriter&&) noexcept;
  ~PerfFileWriter();

  // Appends one record (with its header); returns its file offset.
  Result<uint64_t> add(const std::vector<uint8_t>& record);
  // Appends a PERF_RECORD_AUXTRACE and its data (zero-padded to 8 bytes), and
  // indexes it for the AUXTRACE feature.
  Status add_auxtrace(const uint8_t* data, uint64_t size, uint64_t offset, uint64_t reference, uint32_t idx,
                      uint32_t tid, uint32_t cpu);
  void set_string_feature(Feature f, const std::string& s);
  void set_nr_cpus(uint32_t available, uint32_t online);
  void set_cmdline(const std::vector<std::string>& args);
  void set_feature(Feature f, std::vector<uint8_t> contents);
  Status close();
  uint64_t data_bytes() const { return data_size_; }

 private:
  PerfFileWriter() = default;
  Status write_at(uint64_t off, const void* p, size_t n);
  int fd_ = -1;
  std::string path_;
  std::vector<EventAttr> attrs_;
  uint64_t data_offset_ = 0, data_size_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> auxtrace_index_;  // file offset, size
  std::vector<std::pair<unsigned, std::vector<uint8_t>>> features_;
};

// A perf_header_string: u32 length (padded to 64), the string, zeros.
std::vector<uint8_t> header_string(const std::string& s);

}  // namespace kt::perf
