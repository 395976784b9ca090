// Parsers of QEMU monitor text, against output captured from QEMU 7.2.
#include <gtest/gtest.h>

#include "kthost/common/io.h"
#include "kthost/introspect/backends.h"
#include "kthost/vm/monitor.h"

namespace kt {
namespace {

std::string data(const std::string& name) {
  auto text = read_file(std::string(KT_TEST_DATA_DIR) + "/" + name);
  EXPECT_TRUE(text) << name;
  return text ? *text : std::string();
}

TEST(InfoRegisters, ParsesCapturedLa57Guest) {
  auto regs = parse_info_registers(data("info-registers-la57.txt"));
  ASSERT_TRUE(regs) << regs.error().message;
  EXPECT_EQ(regs->cr3, 0x101338000ull);
  EXPECT_EQ(regs->cr4, 0x751ef0ull);
  EXPECT_EQ(regs->cr0, 0x80050033ull);
  EXPECT_EQ(regs->rip, 0xffffffffb8e592ebull);
  EXPECT_EQ(regs->efer, 0xd01ull);
  EXPECT_EQ(regs->cpl, 0);
}

TEST(InfoRegisters, MissingOrBadFieldsAreErrors) {
  EXPECT_FALSE(parse_info_registers(""));
  EXPECT_FALSE(parse_info_registers("RIP=1 CR0=1 CR3=zz CR4=1 EFER=1 CPL=0"));
  auto r = parse_info_registers("RIP=1 CR0=1 CR4=1 EFER=1 CPL=0");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("CR3"), std::string::npos);
  EXPECT_FALSE(parse_info_registers("RIP=1 CR0=1 CR3=1 CR4=1 EFER=1 CPL=7"));
  // "XCR3=" must not be taken for CR3.
  EXPECT_FALSE(parse_info_registers("RIP=1 CR0=1 XCR3=5 CR4=1 EFER=1 CPL=0"));
}

TEST(Mtree, Q35With4GiBContinuesAbove4GiB) {
  std::string name;
  auto map = parse_mtree_ram(data("mtree-q35-4g.txt"), &name);
  ASSERT_TRUE(map) << map.error().message;
  EXPECT_EQ(name, "ram0");
  ASSERT_EQ(map->regions().size(), 2u);
  EXPECT_EQ(map->regions()[0].gpa, 0u);
  EXPECT_EQ(map->regions()[0].size, 0x80000000ull);
  EXPECT_EQ(map->regions()[0].backing_offset, 0u);
  EXPECT_EQ(map->regions()[1].gpa, 0x100000000ull);
  EXPECT_EQ(map->regions()[1].size, 0x80000000ull);
  EXPECT_EQ(map->regions()[1].backing_offset, 0x80000000ull);
  // It agrees with QEMU's documented default split for q35.
  auto below = PhysMap::below_4g_for("q35", 4ull << 30);
  ASSERT_TRUE(below);
  auto expected = PhysMap::split_at(4ull << 30, *below);
  ASSERT_EQ(expected.regions().size(), 2u);
  EXPECT_EQ(expected.regions()[1].backing_offset, map->regions()[1].backing_offset);
  EXPECT_EQ(map->to_offset(0x100001000ull, 8), 0x80001000ull);
}

TEST(Mtree, PcWithoutBackendSkipsTheLegacyHole) {
  std::string name;
  auto map = parse_mtree_ram(data("mtree-pc-512m.txt"), &name);
  ASSERT_TRUE(map) << map.error().message;
  EXPECT_EQ(name, "pc.ram");
  ASSERT_EQ(map->regions().size(), 2u);
  EXPECT_EQ(map->regions()[0].size, 0xa0000ull);
  EXPECT_EQ(map->regions()[1].gpa, 0x100000ull);
  EXPECT_EQ(map->regions()[1].size, 0x20000000ull - 0x100000ull);
  EXPECT_EQ(map->regions()[1].backing_offset, 0x100000ull);
  EXPECT_FALSE(map->contains(0xb0000, 16));
}

TEST(Mtree, GarbageIsAnError) {
  EXPECT_FALSE(parse_mtree_ram(""));
  EXPECT_FALSE(parse_mtree_ram("FlatView #0\n  zzzz-0000 (prio 0, ram): x\n"));
  auto r = parse_mtree_ram("FlatView #0\n  0000000000000000-000000000000ffff (prio 0, ram): tiny\n");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("1 MiB"), std::string::npos);
}

TEST(Gpa2hva, ParsesAnswerAndRejectsOthers) {
  auto hva = parse_gpa2hva("Host virtual address for 0x1000 (ram0) is 0x7fb35c000000\r\n");
  ASSERT_TRUE(hva);
  EXPECT_EQ(*hva, 0x7fb35c000000ull);
  EXPECT_FALSE(parse_gpa2hva("No memory is mapped at address 0x1000000000\r\n"));
  EXPECT_FALSE(parse_gpa2hva("Host virtual address for 0x1000 (ram0) is 0xzz\r\n"));
}

// QMP's "error" member comes from QEMU and is checked, not trusted.
TEST(QmpErrorText, ReadsClassAndDescAndToleratesAnyShape) {
  using nlohmann::json;
  EXPECT_EQ(qmp_error_text(json{{"class", "GenericError"}, {"desc", "no such device"}}),
            "GenericError: no such device");
  EXPECT_EQ(qmp_error_text(json{{"class", 7}, {"desc", json::array()}}), "?: ?");
  EXPECT_EQ(qmp_error_text(json("a string")), "?: ?");
  EXPECT_EQ(qmp_error_text(json{{"class", "C"}, {"desc", "bell\x07"}}), "C: bell?");
}

TEST(BackendChoice, ParsesNames) {
  EXPECT_EQ(*parse_backend_choice("mmap"), BackendChoice::Mmap);
  EXPECT_EQ(*parse_backend_choice("process"), BackendChoice::Process);
  EXPECT_EQ(*parse_backend_choice("xp"), BackendChoice::Monitor);
  EXPECT_FALSE(parse_backend_choice("dma"));
}

}  // namespace
}  // namespace kt
