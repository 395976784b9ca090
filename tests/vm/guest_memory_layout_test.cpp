// Guest-physical address mapping: a 4 GiB q35 guest whose RAM continues above
// 4 GiB (memfd backing), and a pc guest without shared RAM (process memory).
#include <cstring>
#include <nlohmann/json.hpp>

#include "guest_checks.h"

namespace kt::test {
namespace {

// The guest fills pages with "KTHOSTPG" + index + nonce and tells us their
// page frame numbers; the host must find exactly those headers there.
void check_pattern_pages(TestVm& vm, const GuestMemory& mem, uint64_t* above_4g) {
  auto out = vm.check("ktprobe phys-pattern --pages 8192 --hold 600 > /tmp/pattern.json 2>&1 & "
                      "for i in $(seq 600); do [ \"$(tail -c 2 /tmp/pattern.json)\" = '}' ] && break; sleep 0.1; done; "
                      "cat /tmp/pattern.json",
                      std::chrono::seconds(120));
  ASSERT_TRUE(out) << out.error().message;
  auto doc = nlohmann::json::parse(std::string(trim(*out)), nullptr, false);
  ASSERT_TRUE(doc.is_object()) << out->substr(0, 300) << " ... " << out->substr(out->size() > 300 ? out->size() - 300 : 0);
  auto nonce = parse_u64(doc["nonce"].get<std::string>(), 0);
  ASSERT_TRUE(nonce);
  size_t checked = 0;
  for (const auto& page : doc["pages"]) {
    uint64_t index = page[0].get<uint64_t>(), pfn = page[1].get<uint64_t>();
    ASSERT_NE(pfn, 0u) << "page " << index << " has no PFN (pagemap needs root)";
    uint8_t header[24];
    auto st = mem.read(pfn << 12, header, sizeof header);
    ASSERT_TRUE(st) << st.error().message;
    uint64_t got_index, got_nonce;
    std::memcpy(&got_index, header + 8, 8);
    std::memcpy(&got_nonce, header + 16, 8);
    ASSERT_EQ(std::memcmp(header, "KTHOSTPG", 8), 0) << "gpa " << hex(pfn << 12) << " via " << mem.backend_name();
    ASSERT_EQ(got_index, index);
    ASSERT_EQ(got_nonce, *nonce);
    if ((pfn << 12) >= (4ull << 30)) ++*above_4g;
    ++checked;
  }
  EXPECT_EQ(checked, 8192u);
  ASSERT_TRUE(vm.check("killall ktprobe; true"));
}

TEST(HighMemory, PagesAbove4GiBMapCorrectlyInBothBackends) {
  auto vm = TestVm::start(VmOptions{.name = "high", .mem = "4G", .ram_backend = "memfd"});
  ASSERT_TRUE(vm) << vm.error().message;
  auto map = discover_phys_map((*vm)->qmp(), (*vm)->description());
  ASSERT_TRUE(map) << map.error().message;
  ASSERT_EQ(map->regions().size(), 2u);
  EXPECT_EQ(map->regions()[1].gpa, 4ull << 30);
  EXPECT_EQ(map->regions()[0].size + map->regions()[1].size, 4ull << 30);
  for (auto choice : {BackendChoice::Mmap, BackendChoice::Process}) {
    auto mem = open_guest_memory((*vm)->qmp(), (*vm)->description(), choice);
    ASSERT_TRUE(mem) << mem.error().message;
    uint64_t above = 0;
    check_pattern_pages(**vm, **mem, &above);
    EXPECT_GT(above, 0u) << "no pattern page landed above 4 GiB, so the test proved nothing about the split";
    std::printf("[          ] %s: %lu of 8192 pattern pages above 4 GiB matched\n", (*mem)->backend_name().c_str(),
                static_cast<unsigned long>(above));
    // Kernel text too, wherever physical KASLR put it.
    GuestSymbols symbols = guest_symbols(**vm);
    auto layout = layout_for(**vm, **mem, symbols);
    ASSERT_TRUE(layout) << layout.error().message;
    uint64_t fn = symbol(symbols, "__x64_sys_getpid");
    auto bytes = host_read(**mem, *layout, fn, 64);
    ASSERT_TRUE(bytes) << bytes.error().message;
    EXPECT_EQ(hex_bytes(bytes->data(), bytes->size()), guest_kcore_hex(**vm, fn, 64));
  }
}

TEST(NoSharedRam, ProcessMemoryIsChosenAndReadsKernelText) {
  auto vm = TestVm::start(VmOptions{.name = "noshare", .ram_backend = "none", .machine = "pc"});
  ASSERT_TRUE(vm) << vm.error().message;
  auto mem = open_guest_memory((*vm)->qmp(), (*vm)->description(), BackendChoice::Auto);
  ASSERT_TRUE(mem) << mem.error().message;
  EXPECT_EQ((*mem)->backend_name(), "process");
  auto mmap = open_guest_memory((*vm)->qmp(), (*vm)->description(), BackendChoice::Mmap);
  ASSERT_FALSE(mmap);
  EXPECT_NE(mmap.error().message.find("no shared RAM"), std::string::npos);
  GuestSymbols symbols = guest_symbols(**vm);
  auto layout = layout_for(**vm, **mem, symbols);
  ASSERT_TRUE(layout) << layout.error().message;
  uint64_t start = symbol(symbols, "_stext"), end = symbol(symbols, "_etext");
  auto bytes = host_read(**mem, *layout, start, end - start);
  ASSERT_TRUE(bytes) << bytes.error().message;
  EXPECT_EQ(Sha256::hex_digest(bytes->data(), bytes->size()), guest_kcore_sha256(**vm, start, end - start));
  // The monitor's xp agrees too (the slow baseline backend).
  auto xp = open_guest_memory((*vm)->qmp(), (*vm)->description(), BackendChoice::Monitor);
  ASSERT_TRUE(xp);
  auto via_xp = host_read(**xp, *layout, start, 4096);
  ASSERT_TRUE(via_xp) << via_xp.error().message;
  EXPECT_TRUE(std::equal(via_xp->begin(), via_xp->end(), bytes->begin()));
}

}  // namespace
}  // namespace kt::test
