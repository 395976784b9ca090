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

#include <array>
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

// PERF_RECORD_BPF_EVENT (after the ksymbols of the program's functions):
// u16 type, u16 flags, u32 id, u8 tag[8], then the sample_id trailer.
inline constexpr uint16_t kBpfEventProgLoad = 1;    // PERF_BPF_EVENT_PROG_LOAD
inline constexpr uint16_t kBpfEventProgUnload = 2;  // PERF_BPF_EVENT_PROG_UNLOAD

// One BPF program as the BPF_PROG_INFO feature holds it. The feature is
// u32 count, then per program perf's "bpil" (bpf_prog_info linear):
//   u32 info_len, u32 data_len, u64 arrays (bit i: array i is in data),
//   struct bpf_prog_info (info_len bytes; <linux/bpf.h>) whose array fields
//   hold offsets into data, then data (data_len bytes).
// Arrays, in perf's order: 0 JITED_INSNS, 1 XLATED_INSNS, 2 MAP_IDS,
// 3 JITED_KSYMS, 4 JITED_FUNC_LENS, 5 FUNC_INFO, 6 LINE_INFO,
// 7 JITED_LINE_INFO, 8 PROG_TAGS. Each array in data starts 8-aligned.
// perf reads a program's text from JITED_INSNS (from its start, whatever the
// function), so only single-function programs are written this way.
inline constexpr unsigned kBpilJitedInsns = 0, kBpilJitedKsyms = 3, kBpilJitedFuncLens = 4, kBpilProgTags = 8;
struct BpfProgInfo {
  uint32_t id = 0, type = 0;
  std::array<uint8_t, 8> tag{};
  std::string name;       // the program's own name (at most 15 characters are kept)
  uint64_t load_time = 0;  // ns since boot
  uint64_t addr = 0;       // its one function's start
  std::vector<uint8_t> jited;
};
// The feature's contents for these programs.
std::vector<uint8_t> encode_bpf_prog_info(const std::vector<BpfProgInfo>& progs);
// How many bytes of struct bpf_prog_info are written: the fields up to
// run_time_ns, in every kernel since 5.1; perf zeroes the rest.
extern const uint32_t kBpfProgInfoLen;

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
