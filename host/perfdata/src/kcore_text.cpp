// KcoreText: read and write the ELF core that holds the exported text.
#include "kcore_text.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kthost/common/fd.h"
#include "kthost/common/strings.h"
#include "kthost/snapshot/snapshot.h"

namespace kt {
namespace {

Status pwrite_all(int fd, const void* p, size_t len, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd, static_cast<const char*>(p) + done, len - done, static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("write " + path, errno);
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

}  // namespace

Status KcoreText::add_elf(const std::string& path) {
  KT_ASSIGN_OR_RETURN(auto segments, read_kcore_segments(path));
  for (const auto& seg : segments) add(seg.vaddr, seg.bytes, "kcore");
  return ok_status();
}

void KcoreText::add(uint64_t start, const std::vector<uint8_t>& bytes, const std::string& origin) {
  if (bytes.empty()) return;
  // The parts of [start, end) that no segment covers yet.
  uint64_t end = start + bytes.size();
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  for (const auto& s : segments_) {
    uint64_t a = std::max(start, s.start), z = std::min(end, s.start + s.bytes.size());
    if (a < z) covered.push_back({a, z});
  }
  std::sort(covered.begin(), covered.end());
  uint64_t covered_bytes = 0;
  for (const auto& [a, z] : covered) covered_bytes += z - a;
  if (covered_bytes > 0 && covered_bytes < bytes.size())
    overlaps_.push_back({start, end, origin});
  uint64_t at = start;
  auto add_part = [&](uint64_t a, uint64_t z) {
    if (a >= z) return;
    segments_.push_back({a, std::vector<uint8_t>(bytes.begin() + static_cast<long>(a - start),
                                                 bytes.begin() + static_cast<long>(z - start))});
  };
  for (const auto& [a, z] : covered) {
    add_part(at, a);
    at = std::max(at, z);
  }
  add_part(at, end);
  std::sort(segments_.begin(), segments_.end(), [](const Segment& a, const Segment& b) { return a.start < b.start; });
}

void KcoreText::cut(uint64_t start, uint64_t end) {
  std::vector<Segment> out;
  for (auto& s : segments_) {
    uint64_t s_end = s.start + s.bytes.size();
    if (end <= s.start || s_end <= start) {
      out.push_back(std::move(s));
      continue;
    }
    if (s.start < start)
      out.push_back({s.start, std::vector<uint8_t>(s.bytes.begin(), s.bytes.begin() + static_cast<long>(start - s.start))});
    if (end < s_end)
      out.push_back({end, std::vector<uint8_t>(s.bytes.begin() + static_cast<long>(end - s.start), s.bytes.end())});
  }
  segments_ = std::move(out);
}

uint64_t KcoreText::bytes() const {
  uint64_t n = 0;
  for (const auto& s : segments_) n += s.bytes.size();
  return n;
}

Status KcoreText::write(const std::string& path) const {
  std::vector<ElfSegment> segs;
  for (const auto& s : segments_) segs.push_back({s.start, 0, s.bytes.size(), true});
  std::vector<uint64_t> offsets;
  std::string header = build_kcore_header(segs, &offsets);
  std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return io_error("create " + tmp, errno);
  KT_TRY(pwrite_all(fd.get(), header.data(), header.size(), 0, tmp));
  for (size_t i = 0; i < segments_.size(); ++i)
    KT_TRY(pwrite_all(fd.get(), segments_[i].bytes.data(), segments_[i].bytes.size(), offsets[i], tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error("rename " + tmp, errno);
  return ok_status();
}

}  // namespace kt
