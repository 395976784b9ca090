// The perf.data writer against the bytes perf's documentation specifies
// (tools/perf/Documentation/perf.data-file-format.txt, perf_event.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "kthost/common/io.h"
#include "kthost/perfdata/perf_data.h"

namespace kt::perf {
namespace {

template <typename T>
T at(const std::string& s, size_t off) {
  T v{};
  std::memcpy(&v, s.data() + off, sizeof v);
  return v;
}

std::string temp_path(const char* name) { return std::string("/tmp/kthost-perfdata-") + std::to_string(getpid()) + name; }

TEST(PerfData, HeaderStringIsPaddedTo64WithItsLengthFirst) {
  auto s = header_string("x86_64");
  ASSERT_EQ(s.size(), 4u + 64u);
  EXPECT_EQ(at<uint32_t>(std::string(s.begin(), s.end()), 0), 64u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.data()) + 4), "x86_64");
  EXPECT_EQ(header_string(std::string(63, 'a')).size(), 4u + 64u);   // 63 + NUL fits
  EXPECT_EQ(header_string(std::string(64, 'a')).size(), 4u + 128u);  // 64 + NUL does not
}

TEST(PerfData, RecordHeaderHasTypeMiscAndThePaddedSize) {
  RecordBytes r(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL);
  r.u32(1).u32(2).u64(3).u64(4).u64(5).padded_string("[kernel.kallsyms]_text");
  auto b = r.finish();
  ASSERT_TRUE(b.ok());
  std::string s(b->begin(), b->end());
  EXPECT_EQ(at<uint32_t>(s, 0), uint32_t{PERF_RECORD_MMAP});
  EXPECT_EQ(at<uint16_t>(s, 4), uint16_t{PERF_RECORD_MISC_KERNEL});
  EXPECT_EQ(at<uint16_t>(s, 6), s.size());
  EXPECT_EQ(s.size() % 8, 0u);
  EXPECT_EQ(s.size(), 8u + 8 + 24 + 24);  // header, pid/tid, start/len/pgoff, 23 bytes of name padded to 24
  EXPECT_EQ(std::string(s.data() + 40), "[kernel.kallsyms]_text");
}

TEST(PerfData, RecordOver64KiBIsAnErrorNotATruncatedSize) {
  RecordBytes r(PERF_RECORD_TEXT_POKE, PERF_RECORD_MISC_KERNEL);
  std::vector<uint8_t> big(70000);
  r.bytes(big.data(), big.size());
  auto b = r.finish();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("65535"), std::string::npos);
}

TEST(PerfData, SampleIdTrailerFollowsSampleTypeOrderWithIdentifierLast) {
  RecordBytes r(PERF_RECORD_KSYMBOL, 0);
  append_sample_id(r, {7, 8, 0x1122334455667788ull, 3, 42});
  std::string s;
  auto b = r.finish();
  s.assign(b->begin(), b->end());
  ASSERT_EQ(s.size(), 8u + 32u);
  EXPECT_EQ(at<uint32_t>(s, 8), 7u);   // pid
  EXPECT_EQ(at<uint32_t>(s, 12), 8u);  // tid
  EXPECT_EQ(at<uint64_t>(s, 16), 0x1122334455667788ull);
  EXPECT_EQ(at<uint32_t>(s, 24), 3u);  // cpu, then a reserved u32
  EXPECT_EQ(at<uint64_t>(s, s.size() - 8), 42u);
}

TEST(PerfData, FileHasHeaderIdsAttrsDataAndFeatureSections) {
  std::string path = temp_path("-file.data");
  EventAttr a;
  a.attr.type = 8;
  a.attr.config = 0xc00;
  a.attr.sample_type = kSampleType;
  a.ids = {1, 2};
  a.name = "intel_pt//k";
  auto w = PerfFileWriter::create(path, {a});
  ASSERT_TRUE(w.ok()) << w.error().message;
  RecordBytes fin(kRecordFinishedRound, 0);
  ASSERT_TRUE(w->add(fin.finish().value()).ok());
  const uint8_t trace[5] = {1, 2, 3, 4, 5};
  ASSERT_TRUE(w->add_auxtrace(trace, 5, 0, 99, 1, UINT32_MAX, 1).ok());
  w->set_string_feature(kFeatArch, "x86_64");
  w->set_nr_cpus(2, 2);
  ASSERT_TRUE(w->close().ok());
  auto f = read_file(path);
  ASSERT_TRUE(f.ok());
  const std::string& s = *f;
  ::unlink(path.c_str());

  EXPECT_EQ(s.substr(0, 8), "PERFILE2");
  EXPECT_EQ(at<uint64_t>(s, 8), 104u);
  EXPECT_EQ(at<uint64_t>(s, 16), uint64_t{kAttrSize} + 16);  // attr + its ids section
  uint64_t attrs_off = at<uint64_t>(s, 24), attrs_size = at<uint64_t>(s, 32);
  uint64_t data_off = at<uint64_t>(s, 40), data_size = at<uint64_t>(s, 48);
  EXPECT_EQ(attrs_size, uint64_t{kAttrSize} + 16);
  EXPECT_EQ(attrs_off + attrs_size, data_off);
  // The attr: its type, size and config, then the section of its ids.
  EXPECT_EQ(at<uint32_t>(s, attrs_off), 8u);
  EXPECT_EQ(at<uint32_t>(s, attrs_off + 4), kAttrSize);
  EXPECT_EQ(at<uint64_t>(s, attrs_off + 8), 0xc00u);
  uint64_t ids_off = at<uint64_t>(s, attrs_off + kAttrSize), ids_size = at<uint64_t>(s, attrs_off + kAttrSize + 8);
  EXPECT_EQ(ids_size, 16u);
  EXPECT_EQ(at<uint64_t>(s, ids_off), 1u);
  EXPECT_EQ(at<uint64_t>(s, ids_off + 8), 2u);
  // Data: FINISHED_ROUND, then AUXTRACE (48-byte record) and 5 bytes padded to 8.
  EXPECT_EQ(data_size, 8u + 48u + 8u);
  EXPECT_EQ(at<uint32_t>(s, data_off), uint32_t{kRecordFinishedRound});
  uint64_t aux = data_off + 8;
  EXPECT_EQ(at<uint32_t>(s, aux), uint32_t{kRecordAuxtrace});
  EXPECT_EQ(at<uint16_t>(s, aux + 6), 48u);
  EXPECT_EQ(at<uint64_t>(s, aux + 8), 8u);    // size, padded
  EXPECT_EQ(at<uint64_t>(s, aux + 24), 99u);  // reference
  EXPECT_EQ(at<uint32_t>(s, aux + 32), 1u);   // idx
  EXPECT_EQ(at<uint32_t>(s, aux + 40), 1u);   // cpu
  EXPECT_EQ(s.substr(aux + 48, 8), std::string("\1\2\3\4\5\0\0\0", 8));
  // Feature bitmap and the sections after the data, in bit order.
  uint64_t bits = at<uint64_t>(s, 72);
  std::vector<unsigned> feats;
  for (unsigned i = 0; i < 64; ++i)
    if (bits >> i & 1) feats.push_back(i);
  EXPECT_EQ(feats, (std::vector<unsigned>{kFeatArch, kFeatNrCpus, kFeatEventDesc, kFeatAuxtrace}));
  uint64_t table = data_off + data_size;
  auto section = [&](size_t i) { return std::make_pair(at<uint64_t>(s, table + 16 * i), at<uint64_t>(s, table + 16 * i + 8)); };
  auto [arch_off, arch_size] = section(0);
  EXPECT_EQ(arch_size, 68u);
  EXPECT_EQ(std::string(s.data() + arch_off + 4), "x86_64");
  auto [cpus_off, cpus_size] = section(1);
  EXPECT_EQ(cpus_size, 8u);
  EXPECT_EQ(at<uint32_t>(s, cpus_off), 2u);
  auto [desc_off, desc_size] = section(2);
  EXPECT_EQ(at<uint32_t>(s, desc_off), 1u);         // one event
  EXPECT_EQ(at<uint32_t>(s, desc_off + 4), kAttrSize);
  EXPECT_EQ(at<uint32_t>(s, desc_off + 8 + kAttrSize), 2u);  // its ids
  EXPECT_EQ(std::string(s.data() + desc_off + 8 + kAttrSize + 8), "intel_pt//k");
  EXPECT_EQ(desc_size, 8u + kAttrSize + 4 + 68 + 16);
  // AUXTRACE index: one entry, the record's offset and header.size.
  auto [idx_off, idx_size] = section(3);
  EXPECT_EQ(idx_size, 24u);
  EXPECT_EQ(at<uint64_t>(s, idx_off), 1u);
  EXPECT_EQ(at<uint64_t>(s, idx_off + 8), aux);
  EXPECT_EQ(at<uint64_t>(s, idx_off + 16), 48u);
  EXPECT_EQ(idx_off + idx_size, s.size());
}

// struct bpf_prog_info offsets from include/uapi/linux/bpf.h (written out
// here, not taken from the header the writer uses).
TEST(PerfData, BpfProgInfoIsPerfsBpilWithArraysAsOffsetsIntoData) {
  BpfProgInfo p;
  p.id = 42;
  p.tag = {1, 2, 3, 4, 5, 6, 7, 8};
  p.name = "a_rather_long_program_name";
  p.load_time = 99;
  p.addr = 0xffffffffc0001234ull;
  p.jited = {0x55, 0x48, 0x89, 0xe5, 0xc3};  // 5 bytes: data pads them to 8
  auto v = encode_bpf_prog_info({p});
  std::string s(v.begin(), v.end());
  ASSERT_GE(s.size(), 4u + 16u);
  EXPECT_EQ(at<uint32_t>(s, 0), 1u);  // count
  uint32_t info_len = at<uint32_t>(s, 4), data_len = at<uint32_t>(s, 8);
  EXPECT_EQ(info_len, 192u);  // up to run_time_ns
  EXPECT_EQ(at<uint64_t>(s, 12), (1u << 0) | (1u << 3) | (1u << 4) | (1u << 8));  // jited insns, ksyms, func lens, tags
  const size_t info = 20, data = info + info_len;
  ASSERT_EQ(s.size(), data + data_len);
  EXPECT_EQ(data_len, 8u + 8u + 8u + 8u);
  EXPECT_EQ(at<uint32_t>(s, info + 4), 42u);                         // id
  EXPECT_EQ(s.substr(info + 8, 8), std::string("\1\2\3\4\5\6\7\10", 8));  // tag
  EXPECT_EQ(at<uint32_t>(s, info + 16), 5u);                         // jited_prog_len
  EXPECT_EQ(at<uint64_t>(s, info + 24), 0u);                         // jited_prog_insns: offset 0
  EXPECT_EQ(at<uint64_t>(s, info + 40), 99u);                        // load_time
  EXPECT_EQ(std::string(s.data() + info + 64), "a_rather_long_p");   // name: 15 characters and a NUL
  EXPECT_EQ(at<uint32_t>(s, info + 104), 1u);                        // nr_jited_ksyms
  EXPECT_EQ(at<uint32_t>(s, info + 108), 1u);                        // nr_jited_func_lens
  uint64_t ksyms = at<uint64_t>(s, info + 112), lens = at<uint64_t>(s, info + 120);
  EXPECT_EQ(at<uint32_t>(s, info + 180), 1u);                        // nr_prog_tags
  uint64_t tags = at<uint64_t>(s, info + 184);
  EXPECT_EQ(ksyms, 8u);
  EXPECT_EQ(lens, 16u);
  EXPECT_EQ(tags, 24u);
  EXPECT_EQ(s.substr(data, 5), std::string("\x55\x48\x89\xe5\xc3", 5));
  EXPECT_EQ(at<uint64_t>(s, data + ksyms), p.addr);
  EXPECT_EQ(at<uint32_t>(s, data + lens), 5u);
  EXPECT_EQ(s.substr(data + tags, 8), s.substr(info + 8, 8));
  EXPECT_EQ(encode_bpf_prog_info({}), std::vector<uint8_t>(4, 0));  // no programs: count 0
}

}  // namespace
}  // namespace kt::perf
