// VersionedImage and ImageCursor (see image.h).
#include "kthost/decode/image.h"

#include <intel-pt.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "kthost/common/io.h"
#include "kthost/common/strings.h"

namespace kt {
namespace {
constexpr uint64_t kSmallMapping = 64 * 1024;  // pokes copy the whole mapping up to this size
constexpr uint64_t kPage = 4096;
constexpr size_t kMaxVersions = 60000;
}  // namespace

VersionedImage::VersionedImage() = default;

VersionedImage::~VersionedImage() {
  if (iscache_) pt_iscache_free(iscache_);
  if (memfd_ >= 0) ::close(memfd_);
}

void VersionedImage::add_mapping(uint64_t start, std::vector<uint8_t> bytes, uint64_t begin, uint64_t end,
                                 std::string origin) {
  if (bytes.empty() || begin >= end || start + bytes.size() < start) return;
  mappings_.push_back({start, std::move(bytes), begin, end, std::move(origin)});
}

void VersionedImage::add_poke(uint64_t addr, std::vector<uint8_t> old_bytes, std::vector<uint8_t> new_bytes,
                              uint64_t time) {
  pokes_.push_back({addr, std::move(old_bytes), std::move(new_bytes), time});
}

uint32_t VersionedImage::add_version(uint64_t start, const uint8_t* bytes, uint64_t size, uint64_t begin,
                                     uint64_t end, uint32_t mapping, bool overlay, const std::string& origin) {
  TextVersion v;
  v.start = start;
  v.size = size;
  v.begin = begin;
  v.end = end;
  v.mapping = mapping;
  v.overlay = overlay;
  v.origin = origin;
  v.data_offset = (data_.size() + kPage - 1) & ~(kPage - 1);
  data_.resize(v.data_offset + size);
  std::memcpy(data_.data() + v.data_offset, bytes, size);
  versions_.push_back(std::move(v));
  return static_cast<uint32_t>(versions_.size() - 1);
}

void VersionedImage::apply_pokes(uint64_t quantum) {
  std::vector<uint32_t> latest(mappings_.size());  // the newest whole version of each mapping
  for (uint32_t i = 0; i < mappings_.size(); ++i) {
    const auto& m = mappings_[i];
    latest[i] = add_version(m.start, m.bytes.data(), m.bytes.size(), m.begin, m.end, i, false, m.origin);
  }
  std::map<uint32_t, std::vector<uint8_t>> current;          // mapping -> bytes with pokes so far
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> pages;   // (mapping, page) -> newest overlay
  for (const auto& p : pokes_) {
    int best = -1;
    for (uint32_t i = 0; i < mappings_.size(); ++i) {
      const auto& m = mappings_[i];
      if (p.addr >= m.start && p.addr - m.start < m.bytes.size() && m.begin <= p.time && p.time < m.end &&
          (best < 0 || m.begin >= mappings_[best].begin))
        best = static_cast<int>(i);
    }
    if (best < 0 || p.new_bytes.empty()) {
      stats_.pokes_unmapped++;
      continue;
    }
    const auto& m = mappings_[best];
    auto [it, fresh] = current.try_emplace(best);
    if (fresh) it->second = m.bytes;
    auto& cur = it->second;
    uint64_t off = p.addr - m.start;
    uint64_t n = std::min<uint64_t>(p.new_bytes.size(), cur.size() - off);
    if (!p.old_bytes.empty() &&
        (off + p.old_bytes.size() > cur.size() || std::memcmp(cur.data() + off, p.old_bytes.data(), p.old_bytes.size()) != 0))
      stats_.pokes_old_mismatch++;
    std::memcpy(cur.data() + off, p.new_bytes.data(), n);
    uint64_t t = std::max(p.time, m.begin);
    // The newest version of this text began within the quantum: it takes the poke.
    auto merge = [&](TextVersion& v, const uint8_t* bytes) {
      if (t != v.begin && (quantum == 0 || t - v.begin >= quantum)) return false;
      std::memcpy(data_.data() + v.data_offset, bytes, v.size);
      return true;
    };
    if (cur.size() <= kSmallMapping) {
      if (merge(versions_[latest[best]], cur.data())) continue;
      versions_[latest[best]].end = t;
      latest[best] = add_version(m.start, cur.data(), cur.size(), t, m.end, best, false, "poke");
      continue;
    }
    for (uint64_t page = (p.addr & ~(kPage - 1)); page < p.addr + n; page += kPage) {
      uint64_t lo = std::max(page, m.start), hi = std::min(page + kPage, m.start + cur.size());
      auto key = std::make_pair(static_cast<uint32_t>(best), page);
      auto old = pages.find(key);
      if (old != pages.end()) {
        if (merge(versions_[old->second], cur.data() + (lo - m.start))) continue;
        versions_[old->second].end = t;
      }
      pages[key] = add_version(lo, cur.data() + (lo - m.start), hi - lo, t, m.end, best, true, "poke");
    }
  }
}

Status VersionedImage::finalize(uint64_t max_bytes) {
  std::stable_sort(mappings_.begin(), mappings_.end(),
                   [](const Mapping& a, const Mapping& b) { return a.begin < b.begin; });
  std::stable_sort(pokes_.begin(), pokes_.end(), [](const Poke& a, const Poke& b) { return a.time < b.time; });
  stats_.mappings = mappings_.size();
  stats_.pokes = pokes_.size();
  uint64_t total = 0;
  for (const auto& m : mappings_) total += m.bytes.size();
  if (total > max_bytes) return Error(ErrorCode::LimitExceeded, "text image over " + human_bytes(max_bytes));
  data_.reserve(total + mappings_.size() * kPage);
  // libipt's section cache holds at most 65535 sections: when the pokes need
  // more versions, pokes to the same text within a time quantum share one
  // (the quantum grows until they fit, and the report shows it).
  for (uint64_t quantum = 0;; quantum = quantum ? quantum * 4 : 1024) {
    versions_.clear();
    data_.clear();
    stats_.pokes_unmapped = stats_.pokes_old_mismatch = 0;
    apply_pokes(quantum);
    if (versions_.size() <= kMaxVersions) {
      stats_.poke_quantum = quantum;
      break;
    }
    if (quantum > (uint64_t{1} << 40))
      return Error(ErrorCode::LimitExceeded, std::to_string(versions_.size()) + " text versions do not fit libipt's cache");
  }
  stats_.versions = versions_.size();
  stats_.bytes = data_.size();
  if (data_.size() > max_bytes) return Error(ErrorCode::LimitExceeded, "text image over " + human_bytes(max_bytes));

  by_begin_.resize(versions_.size());
  for (uint32_t i = 0; i < by_begin_.size(); ++i) by_begin_[i] = i;
  std::stable_sort(by_begin_.begin(), by_begin_.end(), [&](uint32_t a, uint32_t b) {
    if (versions_[a].begin != versions_[b].begin) return versions_[a].begin < versions_[b].begin;
    return versions_[a].overlay < versions_[b].overlay;  // a whole mapping first, then pages over it
  });

  memfd_ = ::memfd_create("kthost-text", MFD_CLOEXEC);
  if (memfd_ < 0) return io_error("memfd_create", errno);
  size_t done = 0;
  while (done < data_.size()) {
    ssize_t w = ::write(memfd_, data_.data() + done, data_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return io_error("write memfd", errno);
    done += static_cast<size_t>(w);
  }
  std::vector<int> isids;
  KT_ASSIGN_OR_RETURN(iscache_, fill_iscache(isids));
  for (uint32_t i = 0; i < versions_.size(); ++i) {
    const int isid = versions_[i].isid = isids[i];
    if (static_cast<size_t>(isid) >= isid_to_version_.size()) isid_to_version_.resize(isid + 1, -1);
    isid_to_version_[isid] = static_cast<int>(i);
  }
  mappings_.clear();
  pokes_.clear();
  return ok_status();
}

// Every version as a section of a new cache, in version order; `isids` gets
// the isid libipt gave each.
Result<pt_image_section_cache*> VersionedImage::fill_iscache(std::vector<int>& isids) const {
  pt_image_section_cache* cache = pt_iscache_alloc("kthost");
  if (!cache) return Error(ErrorCode::LimitExceeded, "pt_iscache_alloc failed");
  pt_iscache_set_limit(cache, uint64_t{16} << 30);
  std::string path = "/proc/self/fd/" + std::to_string(memfd_);
  isids.clear();
  for (const auto& v : versions_) {
    int isid = pt_iscache_add_file(cache, path.c_str(), v.data_offset, v.size, v.start);
    if (isid < 0) {
      pt_iscache_free(cache);
      return Error(ErrorCode::InvalidInput,
                   "libipt refused text version at " + hex(v.start) + ": " + pt_errstr(pt_errcode(isid)));
    }
    isids.push_back(isid);
  }
  return cache;
}

Result<pt_image_section_cache*> VersionedImage::make_thread_iscache() const {
  std::vector<int> isids;
  KT_ASSIGN_OR_RETURN(auto cache, fill_iscache(isids));
  for (size_t i = 0; i < versions_.size(); ++i)
    if (isids[i] != versions_[i].isid) {
      pt_iscache_free(cache);
      return Error(ErrorCode::Unsupported, "libipt numbered the text version at " + hex(versions_[i].start) +
                                            " differently in a second section cache");
    }
  return cache;
}

int VersionedImage::version_of_isid(int isid) const {
  if (isid <= 0 || static_cast<size_t>(isid) >= isid_to_version_.size()) return -1;
  return isid_to_version_[isid];
}

size_t VersionedImage::read(uint64_t addr, uint64_t time, uint8_t* out, size_t len) const {
  // The newest version (by begin, overlays after wholes) that covers addr and began by `time`.
  const TextVersion* best = nullptr;
  for (uint32_t idx : by_begin_) {
    const auto& v = versions_[idx];
    if (v.begin > time) break;
    if (addr >= v.start && addr - v.start < v.size && (v.end > time || !best)) best = &v;
  }
  if (!best) return 0;
  size_t n = std::min<uint64_t>(len, best->size - (addr - best->start));
  std::memcpy(out, data(*best) + (addr - best->start), n);
  return n;
}

ImageCursor::ImageCursor(const VersionedImage& image, pt_image_section_cache* iscache)
    : vi_(image), iscache_(iscache ? iscache : image.iscache()) {}

ImageCursor::~ImageCursor() {
  if (image_) pt_image_free(image_);
}

uint64_t ImageCursor::shifted(uint64_t t) const {
  if (t == 0 || t == kTimeForever || shift_ == 0) return t;
  if (shift_ < 0) return t > static_cast<uint64_t>(-shift_) ? t - static_cast<uint64_t>(-shift_) : 1;
  uint64_t s = static_cast<uint64_t>(shift_);
  return t > kTimeForever - s ? kTimeForever - 1 : t + s;
}

Status ImageCursor::seek(uint64_t time, int64_t shift) {
  if (built_ && shift == shift_ && time >= time_) {
    advance(time);
    return ok_status();
  }
  if (built_ && shift == shift_) {
    // Back in time, but if no added version began after `time`, the image
    // is already right (the common case: chunks of other CPUs interleave).
    const auto& order = vi_.by_begin();
    auto first_after = std::partition_point(order.begin(), order.end(), [&](uint32_t v) {
      return shifted(vi_.versions()[v].begin) <= time;
    });
    if (static_cast<size_t>(first_after - order.begin()) == next_) {
      time_ = time;
      return ok_status();
    }
  }
  if (image_) pt_image_free(image_);
  image_ = pt_image_alloc("kthost");
  if (!image_) return Error(ErrorCode::LimitExceeded, "pt_image_alloc failed");
  shift_ = shift;
  built_ = true;
  rebuilds_++;
  const auto& order = vi_.by_begin();
  const auto& versions = vi_.versions();
  // Skip versions that a successor of the same range replaced before `time`;
  // keep those that ended without one (stale text stays readable).
  std::vector<char> replaced(versions.size(), 0);
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> newest;
  next_ = 0;
  for (; next_ < order.size() && shifted(versions[order[next_]].begin) <= time; ++next_) {
    const auto& v = versions[order[next_]];
    auto [it, fresh] = newest.try_emplace({v.start, v.size}, order[next_]);
    if (!fresh) {
      replaced[it->second] = 1;
      it->second = order[next_];
    }
  }
  for (size_t i = 0; i < next_; ++i)
    if (!replaced[order[i]]) pt_image_add_cached(image_, iscache_, versions[order[i]].isid, nullptr);
  time_ = time;
  return ok_status();
}

size_t ImageCursor::advance(uint64_t time) {
  const auto& order = vi_.by_begin();
  const auto& versions = vi_.versions();
  size_t added = 0;
  while (next_ < order.size() && shifted(versions[order[next_]].begin) <= time) {
    pt_image_add_cached(image_, iscache_, versions[order[next_]].isid, nullptr);
    ++next_;
    ++added;
  }
  if (time > time_) time_ = time;
  return added;
}

uint64_t ImageCursor::next_change() const {
  const auto& order = vi_.by_begin();
  if (next_ >= order.size()) return kTimeForever;
  return shifted(vi_.versions()[order[next_]].begin);
}

}  // namespace kt
