#include "kthost/pt/config.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "kthost/common/strings.h"

namespace kt {
namespace {

// The attr words being filled, addressed by a format field's word.
struct ConfigWords {
  uint64_t config = 0, config1 = 0, config2 = 0;
  uint64_t& at(ConfigWord word) {
    switch (word) {
      case ConfigWord::Config1: return config1;
      case ConfigWord::Config2: return config2;
      case ConfigWord::Config: break;
    }
    return config;
  }
};

class AttrBuilder {
 public:
  explicit AttrBuilder(const PtPmu& pmu) : pmu_(pmu) {}

  Status set(const std::string& field_name, uint64_t value, const std::string& why) {
    const PmuFormatField* field = pmu_.format(field_name);
    if (!field)
      return Error(ErrorCode::Unsupported, "intel_pt PMU at " + pmu_.dir + " has no format/" + field_name +
                                               " (needed for " + why + "); the kernel is too old for it");
    auto placed = field->place(value, words_.at(field->word));
    if (!placed) return placed.error().with_context(why);
    return ok_status();
  }

  Status need_cap(const std::string& cap, const std::string& why) const {
    if (pmu_.cap(cap) != 0) return ok_status();
    return Error(ErrorCode::Unsupported,
                 why + " needs the " + cap + " capability, which this CPU lacks (" + pmu_.dir + "/caps/" + cap + ")");
  }

  // Value n must have bit n set in the bitmap caps file.
  Status need_in_bitmap(const std::string& cap, unsigned value, const std::string& what) const {
    uint32_t bitmap = pmu_.cap(cap);
    if (value < 32 && (bitmap >> value) & 1) return ok_status();
    return Error(ErrorCode::InvalidArgument, what + "=" + std::to_string(value) + " is not supported: caps/" + cap +
                                                 " is " + bitmap_text(bitmap));
  }

  const ConfigWords& words() const { return words_; }

 private:
  static std::string bitmap_text(uint32_t bitmap) {
    std::string allowed;
    for (unsigned i = 0; i < 32; ++i)
      if ((bitmap >> i) & 1) allowed += (allowed.empty() ? "" : ",") + std::to_string(i);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%x", bitmap);
    return std::string(hex) + " (allowed: " + (allowed.empty() ? "none" : allowed) + ")";
  }

  const PtPmu& pmu_;
  ConfigWords words_;
};

bool power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

Status validate_ring_sizes(const PtConfig& config, uint64_t page_size) {
  for (auto [name, bytes] : {std::pair<const char*, uint64_t>{"aux_bytes", config.aux_bytes},
                             std::pair<const char*, uint64_t>{"data_bytes", config.data_bytes}}) {
    if (!power_of_two(bytes) || bytes < page_size)
      return Error(ErrorCode::InvalidArgument, std::string(name) + "=" + std::to_string(bytes) +
                                                   ": must be a power of two of at least one page (" +
                                                   std::to_string(page_size) + " bytes)");
  }
  return ok_status();
}

Result<perf_event_attr> build_intel_pt_attr(const PtPmu& pmu, const PtConfig& config) {
  AttrBuilder b(pmu);

  // Bit 0 ("pt", the kernel's passthrough bit) makes the kernel honour our
  // branch bit; without it the kernel forces BranchEn on and rejects the
  // branch bit. Kernels before that bit existed always trace branches.
  if (pmu.format("pt")) {
    KT_TRY(b.set("pt", 1, "branch_en passthrough"));
    if (config.branch_en) KT_TRY(b.set("branch", 1, "branch_en"));
  } else if (!config.branch_en) {
    return Error(ErrorCode::Unsupported,
                 "branch_en=off needs format/pt (the passthrough bit), which " + pmu.dir + " lacks");
  }

  if (config.tsc) KT_TRY(b.set("tsc", 1, "tsc"));
  if (config.noretcomp) KT_TRY(b.set("noretcomp", 1, "noretcomp"));

  if (config.mtc) {
    KT_TRY(b.need_cap("mtc", "mtc"));
    KT_TRY(b.need_in_bitmap("mtc_periods", config.mtc_period, "mtc_period"));
    KT_TRY(b.set("mtc", 1, "mtc"));
    KT_TRY(b.set("mtc_period", config.mtc_period, "mtc_period"));
  }

  if (config.cyc) {
    KT_TRY(b.need_cap("psb_cyc", "cyc"));
    if (config.cyc_threshold != 0)
      KT_TRY(b.need_in_bitmap("cycle_thresholds", config.cyc_threshold, "cyc_threshold"));
    KT_TRY(b.set("cyc", 1, "cyc"));
    if (config.cyc_threshold != 0) KT_TRY(b.set("cyc_thresh", config.cyc_threshold, "cyc_threshold"));
  } else if (config.cyc_threshold != 0) {
    return Error(ErrorCode::InvalidArgument, "cyc_threshold is set but cyc is off");
  }

  unsigned psb = 0;
  if (config.psb_period) {
    psb = *config.psb_period;
    if (psb != 0) {
      KT_TRY(b.need_cap("psb_cyc", "psb_period"));
      KT_TRY(b.need_in_bitmap("psb_periods", psb, "psb_period"));
    }
  } else if (pmu.cap("psb_cyc") && ((pmu.cap("psb_periods") >> kPsbPeriod4KiB) & 1)) {
    psb = kPsbPeriod4KiB;
  }
  if (psb != 0) KT_TRY(b.set("psb_period", psb, "psb_period"));

  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = pmu.type;
  attr.config = b.words().config;
  attr.config1 = b.words().config1;
  attr.config2 = b.words().config2;
  attr.disabled = 1;  // enabled once both rings are mapped
  attr.exclude_user = config.kernel_only ? 1 : 0;
  attr.exclude_kernel = 0;
  // In system mode (kvm_intel pt_mode=0) the host's trace runs on through
  // VM entry; excluding the guest would drop exactly what we want.
  attr.exclude_guest = 0;
  attr.exclude_hv = 0;
  attr.sample_id_all = 0;
  return attr;
}

Result<PtConfig> parse_pt_config(const PtConfigWords& words) {
  // nullopt for absent or "off"; else 0..15.
  auto number = [](const std::optional<std::string>& v, const char* name) -> Result<std::optional<unsigned>> {
    if (!v || *v == "off") return std::optional<unsigned>();
    auto n = parse_u64(*v);
    if (!n || *n > 15) return Error(ErrorCode::InvalidArgument, std::string("--") + name + " takes 0..15, not '" + *v + "'");
    return std::optional<unsigned>(static_cast<unsigned>(*n));
  };
  KT_ASSIGN_OR_RETURN(auto psb, number(words.psb, "pt-psb"));
  KT_ASSIGN_OR_RETURN(auto mtc, number(words.mtc, "pt-mtc"));
  KT_ASSIGN_OR_RETURN(auto cyc, number(words.cyc, "pt-cyc"));
  PtConfig c;
  c.psb_period = psb;
  if (words.mtc) {
    c.mtc = mtc.has_value();
    if (mtc) c.mtc_period = *mtc;
  }
  if (cyc) {
    c.cyc = true;
    c.cyc_threshold = *cyc;
  }
  c.tsc = !words.no_tsc;
  return c;
}

}  // namespace kt
