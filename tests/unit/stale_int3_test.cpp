// The software PT plugin's watch for a vCPU stuck on a stale INT3
// translation (pt-plugin/stale_int3.h), on hand-made block sequences.
#include <gtest/gtest.h>

#include "plugin_blocks.h"
#include "stale_int3.h"

namespace {

using ktpt::Block;
using ktpt::EndKind;
using ktpt::StaleInt3Watch;
using ktpt::testing::kblock;

constexpr uint64_t kSite = 0xffffffff81852461;

// The plugin's order: a lone INT3 is watched before the block is noted.
bool run_block(StaleInt3Watch& w, const Block& b, bool lone_int3) {
  const bool stuck = lone_int3 && w.on_lone_int3(b.start);
  w.on_block(b.end == EndKind::Iret);
  return stuck;
}

// One round of the kernel's retry: the INT3, its handler, and the IRET back.
// Returns true when the watch said "stuck" during the round.
bool retry_round(StaleInt3Watch& w, uint64_t site) {
  const Block int3 = kblock(site, 1, EndKind::SoftInt);
  const Block handler = kblock(0xffffffff81844fb0, 5, EndKind::Cond);
  const Block iret = kblock(0xffffffff81a01220, 1, EndKind::Iret);
  bool stuck = run_block(w, int3, true);
  stuck |= run_block(w, handler, false);
  stuck |= run_block(w, iret, false);
  return stuck;
}

TEST(StaleInt3Watch, AnInt3ReturnedToByItsIretThresholdTimesInARowIsStuck) {
  StaleInt3Watch w(100);
  for (int i = 1; i < 100; ++i) ASSERT_FALSE(retry_round(w, kSite)) << "round " << i;
  EXPECT_TRUE(retry_round(w, kSite));
  EXPECT_EQ(w.stuck_at(), kSite);
  // The count starts again: the next report comes after as many rounds.
  for (int i = 1; i < 100; ++i) ASSERT_FALSE(retry_round(w, kSite)) << "round " << i;
  EXPECT_TRUE(retry_round(w, kSite));
}

TEST(StaleInt3Watch, AnInt3ThatTheHandlerMovesPastIsNeverStuck) {
  // A live breakpoint or text_poke_bp site: the handler emulates or steps
  // and returns past it, so the next block after the IRET is elsewhere.
  StaleInt3Watch w(10);
  const Block int3 = kblock(kSite, 1, EndKind::SoftInt);
  const Block iret = kblock(0xffffffff81a01220, 1, EndKind::Iret);
  const Block after = kblock(kSite + 5, 3, EndKind::Return);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_FALSE(run_block(w, int3, true));
    ASSERT_FALSE(run_block(w, iret, false));
    ASSERT_FALSE(run_block(w, after, false));
  }
}

TEST(StaleInt3Watch, AnotherInt3UserCodeOrABlockNotAfterAnIretStartsTheCountAgain) {
  StaleInt3Watch w(10);
  for (int i = 0; i < 9; ++i) ASSERT_FALSE(retry_round(w, kSite));
  ASSERT_FALSE(retry_round(w, kSite + 0x100));  // another site
  for (int i = 0; i < 9; ++i) ASSERT_FALSE(retry_round(w, kSite));
  run_block(w, Block{}, false);  // user code (the plugin's user block: not kernel, no end)
  for (int i = 0; i < 9; ++i) ASSERT_FALSE(retry_round(w, kSite));
  // Reached by a plain branch rather than an IRET: not the retry.
  ASSERT_FALSE(run_block(w, kblock(kSite - 0x10, 2, EndKind::DirectJmp, kSite), false));
  for (int i = 0; i < 9; ++i) ASSERT_FALSE(retry_round(w, kSite));
  EXPECT_TRUE(retry_round(w, kSite));
}

TEST(StaleInt3Watch, OnlyABlockOfOneInt3ByteIsALoneInt3) {
  const uint8_t int3[] = {0xcc}, jmp[] = {0xe9, 0x09, 0x03, 0x00, 0x00}, int_n[] = {0xcd, 0x03};
  EXPECT_TRUE(ktpt::is_lone_int3(int3, 1, 1));
  EXPECT_FALSE(ktpt::is_lone_int3(int3, 1, 2));  // an INT3 after other instructions: not where a retry lands
  EXPECT_FALSE(ktpt::is_lone_int3(jmp, 5, 1));
  EXPECT_FALSE(ktpt::is_lone_int3(int_n, 2, 1));
  EXPECT_FALSE(ktpt::is_lone_int3(nullptr, 1, 1));
}

}  // namespace
