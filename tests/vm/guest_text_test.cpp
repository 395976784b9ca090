// The bytes kthost reads from guest RAM equal the bytes the guest reports:
// core kernel text (guest /proc/kcore), a module's text, and a BPF JIT image
// (BPF_OBJ_GET_INFO_BY_FD jited_prog_insns), through both memory backends.
#include <nlohmann/json.hpp>

#include "guest_checks.h"
#include "kthost/common/io.h"

namespace kt::test {
namespace {

class GuestText : public ::testing::TestWithParam<BackendChoice> {
 protected:
  static void SetUpTestSuite() {
    auto vm = TestVm::start(VmOptions{.name = "text", .ram_backend = "file"});
    ASSERT_TRUE(vm) << vm.error().message;
    vm_ = std::move(*vm);
  }
  static void TearDownTestSuite() { vm_.reset(); }
  void SetUp() override { ASSERT_NE(vm_, nullptr) << "the guest did not boot"; }

  std::unique_ptr<GuestMemory> memory() {
    auto mem = open_guest_memory(vm_->qmp(), vm_->description(), GetParam());
    EXPECT_TRUE(mem) << mem.error().message;
    if (!mem) return nullptr;
    EXPECT_EQ((*mem)->backend_name(), GetParam() == BackendChoice::Mmap ? "mmap" : "process");
    return std::move(*mem);
  }
  static inline std::unique_ptr<TestVm> vm_;
};

TEST_P(GuestText, ExecReturnsStatusAndOutput) {
  auto r = vm_->exec("echo hello; echo err >&2; exit 3");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 3);
  EXPECT_EQ(r->output, "hello\nerr\n");
}

TEST_P(GuestText, LayoutFromPageTablesMatchesGuestSymbols) {
  auto mem = memory();
  ASSERT_TRUE(mem);
  GuestSymbols symbols = guest_symbols(*vm_);
  auto layout = layout_for(*vm_, *mem, symbols);
  ASSERT_TRUE(layout) << layout.error().message;
  uint64_t text = symbol(symbols, "_text");
  EXPECT_EQ(layout->text_start, text) << "KASLR base from the page tables differs from the guest's _text";
  EXPECT_EQ(layout->kaslr_offset, text - kDefaultTextBase);
  EXPECT_LE(symbol(symbols, "_etext"), layout->text_end);
  EXPECT_GT(symbol(symbols, "_etext") + 2 * 1024 * 1024, layout->text_end);
  auto release = vm_->check("uname -r");
  ASSERT_TRUE(release);
  EXPECT_EQ(layout->release, std::string(trim(*release)));
  // The host finds the banner without symbols too.
  auto bare = layout_for(*vm_, *mem, GuestSymbols{});
  ASSERT_TRUE(bare) << bare.error().message;
  EXPECT_EQ(bare->release, layout->release);
  EXPECT_EQ(bare->text_start, layout->text_start);
  // -cpu max gives LA57: 5-level paging.
  EXPECT_EQ(layout->paging.mode, PagingMode::Level5);
}

TEST_P(GuestText, CoreKernelTextEqualsGuestKcore) {
  auto mem = memory();
  ASSERT_TRUE(mem);
  GuestSymbols symbols = guest_symbols(*vm_);
  auto layout = layout_for(*vm_, *mem, symbols);
  ASSERT_TRUE(layout) << layout.error().message;
  uint64_t start = symbol(symbols, "_stext"), end = symbol(symbols, "_etext");
  ASSERT_LT(start, end);
  auto bytes = host_read(*mem, *layout, start, end - start);
  ASSERT_TRUE(bytes) << bytes.error().message;
  EXPECT_EQ(Sha256::hex_digest(bytes->data(), bytes->size()), guest_kcore_sha256(*vm_, start, end - start))
      << "core text [_stext, _etext) = " << hex(start) << ".." << hex(end);
  // A readable diff for one well-known function.
  uint64_t fn = symbol(symbols, "__x64_sys_getpid");
  auto small = host_read(*mem, *layout, fn, 64);
  ASSERT_TRUE(small);
  EXPECT_EQ(hex_bytes(small->data(), small->size()), guest_kcore_hex(*vm_, fn, 64));
}

TEST_P(GuestText, ModuleTextEqualsGuestKcore) {
  auto mem = memory();
  ASSERT_TRUE(mem);
  ASSERT_TRUE(vm_->check("lsmod | grep -q '^dummy ' || insmod /lib/kthost-test/dummy.ko"));
  auto text_addr = vm_->check("cat /sys/module/dummy/sections/.text");
  ASSERT_TRUE(text_addr) << text_addr.error().message;
  auto addr = parse_u64(trim(*text_addr), 0);
  ASSERT_TRUE(addr) << *text_addr;
  GuestSymbols symbols = guest_symbols(*vm_);
  auto layout = layout_for(*vm_, *mem, symbols);
  ASSERT_TRUE(layout) << layout.error().message;
  const TextRange* range = nullptr;
  for (const auto& r : layout->ranges)
    if (r.kind == TextKind::Module && r.name == "dummy") range = &r;
  ASSERT_NE(range, nullptr) << "no executable range labelled dummy";
  EXPECT_EQ(range->start, *addr) << "the module's executable range must start at its .text";
  auto bytes = host_read(*mem, *layout, range->start, range->size());
  ASSERT_TRUE(bytes) << bytes.error().message;
  EXPECT_EQ(Sha256::hex_digest(bytes->data(), bytes->size()), guest_kcore_sha256(*vm_, range->start, range->size()));
  EXPECT_EQ(hex_bytes(bytes->data(), 64), guest_kcore_hex(*vm_, range->start, 64));
}

TEST_P(GuestText, BpfJitImageEqualsJitedProgInsns) {
  auto mem = memory();
  ASSERT_TRUE(mem);
  // Keep the program loaded while the host reads it.
  ASSERT_TRUE(vm_->check("ktprobe bpf-load --insns 24 --name kt_text --hold 600 > /tmp/bpf.json 2>&1 & "
                         "for i in $(seq 100); do [ \"$(tail -c 2 /tmp/bpf.json)\" = '}' ] && break; sleep 0.1; done; cat /tmp/bpf.json"));
  auto text = vm_->check("cat /tmp/bpf.json");
  ASSERT_TRUE(text);
  auto info = nlohmann::json::parse(std::string(trim(*text)), nullptr, false);
  ASSERT_TRUE(info.is_object()) << *text;
  auto addr = parse_u64(info["jited_addr"].get<std::string>(), 0);
  ASSERT_TRUE(addr);
  std::string jited = info["jited_insns"].get<std::string>();
  uint64_t len = info["jited_len"].get<uint64_t>();
  ASSERT_EQ(jited.size(), 2 * len);
  ASSERT_GT(len, 16u);
  GuestSymbols symbols = guest_symbols(*vm_);
  auto layout = layout_for(*vm_, *mem, symbols);
  ASSERT_TRUE(layout) << layout.error().message;
  auto bytes = host_read(*mem, *layout, *addr, len);
  ASSERT_TRUE(bytes) << bytes.error().message;
  EXPECT_EQ(hex_bytes(bytes->data(), bytes->size()), jited);
  bool in_bpf_range = false;
  for (const auto& r : layout->ranges)
    if (r.kind == TextKind::Bpf && r.start <= *addr && *addr + len <= r.end) in_bpf_range = true;
  EXPECT_TRUE(in_bpf_range) << "the JIT image at " << hex(*addr) << " is not inside a range labelled bpf";
  ASSERT_TRUE(vm_->check("killall ktprobe; true"));
}

// objdump on the snapshot ELF shows the same instructions at a known kernel
// symbol as objdump on the bytes the guest's /proc/kcore holds there.
std::vector<std::string> instructions(const std::string& objdump_output) {
  std::vector<std::string> out;
  for (auto line : split(objdump_output, '\n')) {
    // "ffffffff81000000:\t48 89 e5             \tmov    %rsp,%rbp"
    auto parts = split(line, '\t');
    if (parts.size() < 3 || parts[0].empty() || parts[0].back() != ':') continue;
    out.push_back(std::string(trim(parts[0])) + " " + std::string(trim(parts[2])));
  }
  return out;
}

TEST_P(GuestText, SnapshotElfDisassemblesLikeGuestKcore) {
  vm_->release_channels();
  std::string dir = vm_->state_dir() + "/snapshot-" + (GetParam() == BackendChoice::Mmap ? "mmap" : "process");
  auto r = run_command(kthost_binary() + " snapshot --vm " + vm_->vm_json() + " -o " + dir + " --backend " +
                       (GetParam() == BackendChoice::Mmap ? "mmap" : "process"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("kernel release"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("KASLR base"), std::string::npos) << r.output;
  auto layout_json = read_file(dir + "/layout.json");
  ASSERT_TRUE(layout_json) << layout_json.error().message;
  auto kallsyms = read_file(dir + "/kallsyms", 256u << 20);
  ASSERT_TRUE(kallsyms);
  EXPECT_GT(kallsyms->size(), 1000000u) << "the snapshot's kallsyms should be the guest's full /proc/kallsyms";
  GuestSymbols symbols = guest_symbols(*vm_);
  for (const char* name : {"__x64_sys_getpid", "schedule", "do_sys_openat2"}) {
    uint64_t addr = symbol(symbols, name);
    std::string range = " --start-address=" + hex(addr) + " --stop-address=" + hex(addr + 64) + " ";
    auto host = run_command("objdump -d" + range + dir + "/kcore");
    ASSERT_EQ(host.status, 0) << host.output;
    std::string raw_hex = guest_kcore_hex(*vm_, addr, 64);
    auto raw = parse_hex_bytes(raw_hex);
    ASSERT_TRUE(raw);
    std::string raw_path = dir + "/guest-" + name + ".bin";
    ASSERT_TRUE(write_file_atomic(raw_path, std::string(raw->begin(), raw->end())));
    auto guest = run_command("objdump -D -b binary -mi386:x86-64 --adjust-vma=" + hex(addr) + range + raw_path);
    ASSERT_EQ(guest.status, 0) << guest.output;
    auto host_insns = instructions(host.output), guest_insns = instructions(guest.output);
    EXPECT_GE(host_insns.size(), 5u) << name << ":\n" << host.output;
    EXPECT_EQ(host_insns, guest_insns) << name << "\nsnapshot:\n" << host.output << "\nguest kcore:\n" << guest.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GuestText, ::testing::Values(BackendChoice::Mmap, BackendChoice::Process),
                         [](const auto& param_info) { return param_info.param == BackendChoice::Mmap ? "mmap" : "process"; });

}  // namespace
}  // namespace kt::test
