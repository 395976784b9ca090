// A guest for unit tests of the trace: one page of text at kBase, mapped by
// 4-level page tables in a BufferMemory, and a word for guard acks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "kthost/introspect/guest_memory.h"
#include "kthost/introspect/page_walker.h"
#include "kthost/sideband/events.h"

namespace kt {
namespace test {

constexpr uint64_t kBase = 0xffffffffc0000000ull;
constexpr uint64_t kTextPhys = 0x200000;
constexpr uint64_t kAckWord = 0x300000;
constexpr PagingConfig kFakePaging{PagingMode::Level4, 0x100000, 52};

// The text byte at kBase + i is (i * 13 + 1) & 0xff.
inline void build_fake_guest(BufferMemory& mem) {
  auto idx = [](uint64_t va, int shift) { return (va >> shift) & 511; };
  mem.write_u64(0x100000 + idx(kBase, 39) * 8, 0x101000 | 3);
  mem.write_u64(0x101000 + idx(kBase, 30) * 8, 0x102000 | 3);
  mem.write_u64(0x102000 + idx(kBase, 21) * 8, 0x103000 | 3);
  mem.write_u64(0x103000 + idx(kBase, 12) * 8, kTextPhys | 1);
  for (uint64_t i = 0; i < 4096; ++i) {
    uint8_t b = static_cast<uint8_t>(i * 13 + 1);
    mem.write(kTextPhys + i, &b, 1);
  }
}

struct FakeGuest {
  BufferMemory mem{4u << 20};
  PagingConfig cfg = kFakePaging;
  FakeGuest() { build_fake_guest(mem); }
};

inline SidebandEvent event(uint64_t time, EventBody body) {
  SidebandEvent ev;
  ev.time = time;
  ev.cpu = 0;
  ev.body = std::move(body);
  return ev;
}

inline std::string temp_path(const char* stem) {
  std::string p = std::string("/tmp/kthost-") + stem + "-XXXXXX";
  int fd = ::mkstemp(p.data());
  EXPECT_GE(fd, 0);
  ::close(fd);
  return p;
}

}  // namespace test
}  // namespace kt
