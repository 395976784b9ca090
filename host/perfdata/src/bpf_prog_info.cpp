// The BPF_PROG_INFO feature (see perf_data.h): perf's bpil layout around the
// kernel's own struct bpf_prog_info.
#include <linux/bpf.h>

#include <cstddef>
#include <cstring>

#include "kthost/perfdata/perf_data.h"

namespace kt::perf {

const uint32_t kBpfProgInfoLen = offsetof(bpf_prog_info, run_time_ns);

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void pad8(std::vector<uint8_t>& v) { v.resize((v.size() + 7) & ~size_t{7}, 0); }

}  // namespace

std::vector<uint8_t> encode_bpf_prog_info(const std::vector<BpfProgInfo>& progs) {
  std::vector<uint8_t> out;
  put_u32(out, static_cast<uint32_t>(progs.size()));
  for (const auto& p : progs) {
    // data: the JIT image, its one ksym address, its one function length,
    // its one function tag (perf prints a program only when the three agree).
    std::vector<uint8_t> data(p.jited);
    pad8(data);
    uint64_t ksyms_off = data.size();
    put_u64(data, p.addr);
    uint64_t lens_off = data.size();
    put_u32(data, static_cast<uint32_t>(p.jited.size()));
    pad8(data);
    uint64_t tags_off = data.size();
    data.insert(data.end(), p.tag.begin(), p.tag.end());

    bpf_prog_info info;
    std::memset(&info, 0, sizeof info);
    info.type = p.type;
    info.id = p.id;
    std::memcpy(info.tag, p.tag.data(), sizeof info.tag);
    info.jited_prog_len = static_cast<uint32_t>(p.jited.size());
    info.jited_prog_insns = 0;
    info.load_time = p.load_time;
    std::strncpy(info.name, p.name.c_str(), sizeof info.name - 1);
    info.nr_jited_ksyms = 1;
    info.jited_ksyms = ksyms_off;
    info.nr_jited_func_lens = 1;
    info.jited_func_lens = lens_off;
    info.nr_prog_tags = 1;
    info.prog_tags = tags_off;

    put_u32(out, kBpfProgInfoLen);
    put_u32(out, static_cast<uint32_t>(data.size()));
    put_u64(out, (uint64_t{1} << kBpilJitedInsns) | (uint64_t{1} << kBpilJitedKsyms) |
                     (uint64_t{1} << kBpilJitedFuncLens) | (uint64_t{1} << kBpilProgTags));
    const auto* raw = reinterpret_cast<const uint8_t*>(&info);
    out.insert(out.end(), raw, raw + kBpfProgInfoLen);
    out.insert(out.end(), data.begin(), data.end());
  }
  return out;
}

}  // namespace kt::perf
