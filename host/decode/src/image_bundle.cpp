// VersionedImage::from_bundle: which saved text stands for which time.
#include <algorithm>

#include "kthost/common/strings.h"
#include "kthost/decode/image.h"
#include "kthost/snapshot/snapshot.h"

namespace kt {
namespace {

// Every executable PT_LOAD of an ELF64 core (kthost snapshot's kcore).
Status add_kcore(VersionedImage& image, const std::string& path) {
  KT_ASSIGN_OR_RETURN(auto segments, read_kcore_segments(path));
  for (auto& seg : segments) image.add_mapping(seg.vaddr, std::move(seg.bytes), 0, kTimeForever, "kcore");
  return ok_status();
}

// How far before its event a load copy is trusted (see load_begin).
constexpr uint64_t kLoadSlackNs = 5'000'000;

}  // namespace

Result<std::unique_ptr<VersionedImage>> VersionedImage::from_bundle(const Bundle& bundle) {
  auto image = std::make_unique<VersionedImage>();
  const BundleClock& clock = bundle.manifest.clock;
  if (!bundle.kcore_path.empty()) KT_TRY(add_kcore(*image, bundle.kcore_path));

  // Where text starts and stops, by address: register/load events begin a
  // life, unregister/unload events and saved-before-free copies end it.
  struct Mark {
    uint64_t time;
    bool begins;
  };
  std::map<uint64_t, std::vector<Mark>> marks;
  for (const auto& e : bundle.events) {
    uint64_t t = clock.to_pt(e.time);
    switch (e.kind) {
      case BundleEvent::Kind::KsymbolRegister:
      case BundleEvent::Kind::ModuleLoad: marks[e.addr].push_back({t, true}); break;
      case BundleEvent::Kind::KsymbolUnregister:
      case BundleEvent::Kind::ModuleUnload: marks[e.addr].push_back({t, false}); break;
      default: break;
    }
  }
  for (const auto& r : bundle.text.records)
    if (r.source == TextSource::Guard || r.source == TextSource::Unregister)
      marks[r.start].push_back({clock.to_pt(r.time), false});
  for (auto& [addr, list] : marks)
    std::sort(list.begin(), list.end(), [](const Mark& a, const Mark& b) { return a.time < b.time; });
  auto next_end = [&](uint64_t addr, uint64_t after) {
    auto it = marks.find(addr);
    if (it == marks.end()) return kTimeForever;
    for (const auto& m : it->second)
      if (!m.begins && m.time > after) return m.time;
    return kTimeForever;
  };
  auto last_begin = [&](uint64_t addr, uint64_t before) {
    uint64_t b = 0;
    auto it = marks.find(addr);
    if (it != marks.end())
      for (const auto& m : it->second)
        if (m.time < before && (m.begins || m.time > b)) b = m.time;
    return b;
  };

  // Copies taken while the text was live come first; a copy saved before a
  // free stands in only where none of them covers its start at that time.
  struct Live {
    uint64_t start, begin, end;
  };
  std::vector<Live> live;
  // A load's time and PT time can disagree by the clock alignment's error
  // (under TCG, the channel latency in the guest-to-host TSC offset), and new
  // text runs at once. So a load copy is valid from a little before its
  // event, but never before the end of anything that overlapped it.
  struct End {
    uint64_t start, end, time;
  };
  std::vector<End> ends;
  for (const auto& r : bundle.text.records)
    if (r.source == TextSource::Guard || r.source == TextSource::Unregister)
      ends.push_back({r.start, r.start + r.bytes.size(), clock.to_pt(r.time)});
  for (const auto& e : bundle.events)
    if (e.kind == BundleEvent::Kind::KsymbolUnregister || e.kind == BundleEvent::Kind::ModuleUnload)
      ends.push_back({e.addr, e.addr + e.len, clock.to_pt(e.time)});
  const uint64_t slack = clock.identity ? 0 : clock.to_pt(kLoadSlackNs + clock.time_zero) - clock.to_pt(clock.time_zero);
  auto load_begin = [&](const TextRecord& r) {
    uint64_t t = clock.to_pt(r.time);
    uint64_t begin = t > slack ? t - slack : 0;
    for (const auto& e : ends)
      if (e.start < r.start + r.bytes.size() && r.start < e.end && e.time <= t && e.time > begin) begin = e.time;
    return begin;
  };
  for (const auto& r : bundle.text.records) {
    if (r.source != TextSource::Snapshot && r.source != TextSource::Load) continue;
    uint64_t begin = r.source == TextSource::Snapshot ? 0 : load_begin(r);
    uint64_t end = next_end(r.start, begin);
    live.push_back({r.start, begin, end});
    image->add_mapping(r.start, r.bytes, begin, end, r.source == TextSource::Snapshot ? "snapshot" : "load");
  }
  for (const auto& r : bundle.text.records) {
    if (r.source != TextSource::Guard && r.source != TextSource::Unregister) continue;
    uint64_t end = clock.to_pt(r.time);
    bool covered = std::any_of(live.begin(), live.end(), [&](const Live& l) {
      return l.start == r.start && l.begin < end && l.end >= end;
    });
    if (covered) continue;
    image->add_mapping(r.start, r.bytes, last_begin(r.start, end), end,
                       r.source == TextSource::Guard ? "guard" : "unregister");
  }
  for (const auto& e : bundle.events)
    if (e.kind == BundleEvent::Kind::TextPoke) image->add_poke(e.addr, e.old_bytes, e.new_bytes, clock.to_pt(e.time));
  KT_TRY(image->finalize());
  return image;
}

}  // namespace kt
