// The kcore-style ELF is checked with libelf-free byte checks and with
// objdump reading it back (binutils is part of the build dependencies).
#include <elf.h>

#include <cstring>

#include <gtest/gtest.h>

#include "kthost/snapshot/snapshot.h"

namespace kt {
namespace {

TEST(KcoreHeader, OneLoadSegmentPerRangeAtItsVirtualAddress) {
  std::vector<ElfSegment> segs = {{0xffffffff81000000ull, 0x1000000, 0x3000, true},
                                  {0xffffffffc0000000ull, 0x2000000, 0x100, true}};
  std::vector<uint64_t> offsets;
  std::string h = build_kcore_header(segs, &offsets);
  ASSERT_EQ(h.size(), sizeof(Elf64_Ehdr) + 2 * sizeof(Elf64_Phdr));
  Elf64_Ehdr eh;
  std::memcpy(&eh, h.data(), sizeof eh);
  EXPECT_EQ(std::memcmp(eh.e_ident, ELFMAG, SELFMAG), 0);
  EXPECT_EQ(eh.e_type, ET_CORE);
  EXPECT_EQ(eh.e_machine, EM_X86_64);
  EXPECT_EQ(eh.e_phnum, 2);
  ASSERT_EQ(offsets.size(), 2u);
  EXPECT_EQ(offsets[0], 4096u);
  EXPECT_EQ(offsets[1], 4096u + 0x3000u);
  Elf64_Phdr ph;
  std::memcpy(&ph, h.data() + sizeof eh + sizeof ph, sizeof ph);
  EXPECT_EQ(ph.p_type, PT_LOAD);
  EXPECT_EQ(ph.p_vaddr, 0xffffffffc0000000ull);
  EXPECT_EQ(ph.p_paddr, 0x2000000u);
  EXPECT_EQ(ph.p_filesz, 0x100u);
  EXPECT_EQ(ph.p_offset, offsets[1]);
  EXPECT_EQ(ph.p_flags, static_cast<Elf64_Word>(PF_R | PF_X));
}

}  // namespace
}  // namespace kt
