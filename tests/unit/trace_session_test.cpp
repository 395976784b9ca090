// TraceSession as a whole, with fakes only for the guest: its RAM is a
// BufferMemory with page tables (fake_guest.h), and its helper is a test
// thread on the other end of a real unix socket speaking ktproto. The
// session, the channel, the reader thread, the saver, the guard responder and
// the bundle are the real ones.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "fake_guest.h"
#include "kthost/bundle/bundle.h"
#include "kthost/capture/pt_capture.h"
#include "kthost/common/fd.h"
#include "kthost/common/io.h"
#include "kthost/trace/trace_session.h"
#include "ktguard_uapi.h"
#include "kthost_shared.h"
#include "ktproto.h"

namespace kt {
namespace {

using namespace test;
using namespace std::chrono_literals;

// The guest's ktguest, played by the test: listens where QEMU's chardev
// would, sends frames, and reads what the host answers.
class FakeHelper {
 public:
  explicit FakeHelper(const std::string& path) : path_(path) {
    listen_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listen_.get(), 1), 0);
  }
  ~FakeHelper() { ::unlink(path_.c_str()); }
  void accept() { conn_.reset(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC)); }
  void close() { conn_.reset(); }

  template <typename Encode>
  void send(Encode encode) {
    std::vector<uint8_t> buf(KTP_MAX_FRAME);
    long n = encode(buf.data(), buf.size(), seq_++);
    ASSERT_GT(n, 0) << ktp_status_name(static_cast<int>(n));
    ASSERT_TRUE(write_all(conn_.get(), buf.data(), static_cast<size_t>(n), 2s));
  }
  void hello_and_state_dump(const std::vector<ktp_symbol>& more_symbols = {}) {
    ktp_hello h{};
    h.cpu_count = 1;
    h.clock = {0, 1u << 10, 10, 1};
    h.release = {"6.1.0-test", 10};
    seq_ = 0;
    send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_hello(b, c, s, &h); });
    ktp_state_begin begin{10, KTP_STATE_START, 1, 0, 0};
    send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_state_begin(b, c, s, &begin); });
    std::vector<ktp_symbol> sym{{kBase, 't', {"fake_func", 9}, {"fake", 4}}};
    sym.insert(sym.end(), more_symbols.begin(), more_symbols.end());
    ktp_state_symbols syms{static_cast<uint32_t>(sym.size()), sym.data()};
    send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_state_symbols(b, c, s, &syms); });
    uint32_t cpu0 = 0;
    ktp_cpus cpus{1, &cpu0};
    send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_state_cpus(b, c, s, &cpus); });
    ktp_state_end end{20};
    send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_state_end(b, c, s, &end); });
  }

  // The next frame of `type` the host sends, within `timeout`.
  std::optional<std::vector<uint8_t>> wait_for(uint8_t type, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      while (true) {
        ktp_frame f{};
        size_t consumed = 0;
        int st = ktp_decode_frame(in_.data(), in_.size(), &f, &consumed);
        if (st != KTP_OK) break;
        std::vector<uint8_t> frame(in_.begin(), in_.begin() + static_cast<long>(consumed));
        in_.erase(in_.begin(), in_.begin() + static_cast<long>(consumed));
        if (f.type == type) return frame;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{conn_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      uint8_t buf[4096];
      ssize_t n = ::recv(conn_.get(), buf, sizeof buf, 0);
      if (n <= 0) return std::nullopt;
      in_.insert(in_.end(), buf, buf + n);
    }
  }

 private:
  std::string path_;
  UniqueFd listen_, conn_;
  uint64_t seq_ = 0;
  std::vector<uint8_t> in_;
};

ktp_frame frame_of(const std::vector<uint8_t>& bytes) {
  ktp_frame f{};
  size_t consumed = 0;
  EXPECT_EQ(ktp_decode_frame(bytes.data(), bytes.size(), &f, &consumed), KTP_OK);
  return f;
}

class TraceSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kthost-session-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    helper_ = std::make_unique<FakeHelper>((dir_ / "kthost0.sock").string());
  }
  void TearDown() override {
    helper_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<TraceSession> open(const std::function<void(TraceOptions&)>& adjust = {}) {
    auto mem = std::make_unique<BufferMemory>(4u << 20);
    build_fake_guest(*mem);
    memory_ = mem.get();
    TraceParts parts;
    parts.memory = std::move(mem);
    parts.layout.paging = kFakePaging;
    parts.layout.text_start = kBase;
    parts.layout.ranges = {TextRange{kBase, kBase + 4096, TextKind::Module, "fake"}};
    parts.channel_path = (dir_ / "kthost0.sock").string();
    TraceTarget target;
    target.label = "the fake guest";
    TraceOptions o;
    o.out_dir = (dir_ / "bundle").string();
    o.pt = PtChoice::None;
    if (adjust) adjust(o);
    auto s = TraceSession::open(std::move(parts), target, o);
    EXPECT_TRUE(s) << s.error().message;
    if (!s) return nullptr;
    helper_->accept();
    return std::move(*s);
  }
  std::filesystem::path dir_;
  std::unique_ptr<FakeHelper> helper_;
  BufferMemory* memory_ = nullptr;
};

// The reader thread answers a hold while the main thread does not step at
// all (as if it were deep in a PT poll or a flush): ack word and GUARD_ACK
// come without a single step(). Then the bundle holds the guest's exact bytes.
TEST_F(TraceSessionTest, AHoldIsAnsweredWithoutTheMainThreadAndItsTextReachesTheBundle) {
  auto session = open();
  ASSERT_TRUE(session);
  ASSERT_TRUE(helper_->wait_for(KTP_HOST_HELLO, 2s));
  helper_->hello_and_state_dump();
  ASSERT_TRUE(session->wait_ready(5s)) << session->end_reason();
  auto ack_of_hello = helper_->wait_for(KTP_HELLO_ACK, 2s);
  ASSERT_TRUE(ack_of_hello);
  ktp_hello_ack hello_ack{};
  const ktp_frame hf = frame_of(*ack_of_hello);
  ASSERT_EQ(ktp_parse_hello_ack(&hf, &hello_ack), KTP_OK);
  EXPECT_TRUE(hello_ack.flags & KTP_ACK_GUARD_ENABLED);

  ktp_guard_notice n{30, 0, 9, kBase + 16, kBase + 80, 1, kAckWord};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_notice(b, c, s, &n); });
  auto ack = helper_->wait_for(KTP_GUARD_ACK, 3s);  // no step() meanwhile
  ASSERT_TRUE(ack) << "the hold was not answered while the main thread was busy";
  ktp_guard_ack a{};
  const ktp_frame af = frame_of(*ack);
  ASSERT_EQ(ktp_parse_guard_ack(&af, &a), KTP_OK);
  EXPECT_EQ(a.id, 9u);
  EXPECT_EQ(a.status, static_cast<uint32_t>(KTP_HOLD_SAVED));
  uint64_t word = 0;
  ASSERT_TRUE(memory_->read(kAckWord, &word, 8));
  EXPECT_EQ(word, 9u);

  for (int i = 0; i < 3; ++i) EXPECT_TRUE(session->step(50ms));
  EXPECT_EQ(session->progress().holds, 1u);
  auto sum = session->finish("test done");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(sum->holds.holds, 1u);
  EXPECT_EQ(sum->losses.total(), 0u);
  EXPECT_EQ(sum->end_reason, "test done");

  auto bundle = read_bundle((dir_ / "bundle").string());
  ASSERT_TRUE(bundle) << bundle.error().message;
  std::vector<const TextRecord*> guarded;
  for (const auto& r : bundle->text.records)
    if (r.source == TextSource::Guard) guarded.push_back(&r);
  ASSERT_EQ(guarded.size(), 1u);
  EXPECT_EQ(guarded[0]->id, 9u);
  EXPECT_EQ(guarded[0]->start, kBase + 16);
  ASSERT_EQ(guarded[0]->bytes.size(), 64u);
  for (size_t i = 0; i < 64; ++i)
    ASSERT_EQ(guarded[0]->bytes[i], static_cast<uint8_t>((16 + i) * 13 + 1)) << i;
  EXPECT_NE(bundle->kallsyms.find("fake_func"), std::string::npos);
  auto holds = read_file((dir_ / "bundle" / "holds.jsonl").string());
  ASSERT_TRUE(holds);
  EXPECT_NE(holds->find("\"id\":9"), std::string::npos) << *holds;
}

// ktguard's shared block in guest RAM: once a channel notice shows where it
// is, a hold that waits in its mirror is saved and its ack word stored with
// no notice through the channel at all; when that notice comes, it is only
// acked, and the hold is counted once.
// ktguard's shared block with 4 slots at `base`, as guard_chan.c writes it.
ktguard_shared_header write_guard_block(BufferMemory& memory, uint64_t base) {
  ktguard_shared_header h{};
  h.magic = KTGUARD_SHARED_MAGIC;
  h.version = KTGUARD_SHARED_VERSION;
  h.slots = 4;
  h.ack_offset = 64;
  h.notice_offset = 64 + 8 * 4;
  h.notice_size = KTGUARD_NOTICE_SIZE;
  h.seq = 1;
  memory.write(base, &h, sizeof h);
  return h;
}

TEST_F(TraceSessionTest, AHoldInKtguardsMirrorIsAnsweredBeforeItsNoticeArrives) {
  auto session = open();
  ASSERT_TRUE(session);
  ASSERT_TRUE(helper_->wait_for(KTP_HOST_HELLO, 2s));
  helper_->hello_and_state_dump();
  ASSERT_TRUE(session->wait_ready(5s)) << session->end_reason();
  constexpr uint64_t kBlock = 0x340000, kAck0 = kBlock + 64;
  const ktguard_shared_header h = write_guard_block(*memory_, kBlock);
  ktguard_notice waiting{10, kBase + 128, kBase + 256, 1, 0, 40, kAck0 + 8};  // slot 1
  memory_->write(kBlock + h.notice_offset + KTGUARD_NOTICE_SIZE, &waiting, sizeof waiting);
  // Hold 9 comes through the channel, as the first of a session does.
  ktp_guard_notice n{30, 0, 9, kBase + 16, kBase + 80, 1, kAck0};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_notice(b, c, s, &n); });
  ASSERT_TRUE(helper_->wait_for(KTP_GUARD_ACK, 3s));
  // Hold 10 only waits in the mirror: its word is stored anyway.
  uint64_t word = 0;
  for (int i = 0; i < 300 && word != 10; ++i) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(memory_->read(kAck0 + 8, &word, 8));
  }
  EXPECT_EQ(word, 10u) << "the mirrored hold was not answered";
  ktp_guard_notice late{41, 0, 10, kBase + 128, kBase + 256, 1, kAck0 + 8};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_notice(b, c, s, &late); });
  auto ack = helper_->wait_for(KTP_GUARD_ACK, 3s);
  ASSERT_TRUE(ack) << "the channel notice of a polled hold got no ack";
  ktp_guard_ack a{};
  const ktp_frame af = frame_of(*ack);
  ASSERT_EQ(ktp_parse_guard_ack(&af, &a), KTP_OK);
  EXPECT_EQ(a.id, 10u);
  EXPECT_EQ(a.status, static_cast<uint32_t>(KTP_HOLD_SAVED));
  for (int i = 0; i < 3; ++i) session->step(50ms);
  auto sum = session->finish("test done");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(sum->holds.holds, 2u);
  EXPECT_EQ(sum->holds.polled, 1u);
  auto bundle = read_bundle((dir_ / "bundle").string());
  ASSERT_TRUE(bundle) << bundle.error().message;
  size_t polled_copies = 0;
  for (const auto& r : bundle->text.records)
    if (r.source == TextSource::Guard && r.id == 10) {
      ++polled_copies;
      ASSERT_EQ(r.bytes.size(), 128u);
      EXPECT_EQ(r.bytes[0], static_cast<uint8_t>(128 * 13 + 1));
    }
  EXPECT_EQ(polled_copies, 1u);
}

// ktguard's pointer to its block (KTGUARD_SHARED_SYMBOL) is among the guest's
// symbols: the session finds the mirror from it, and the first hold of the
// session, which never comes through the channel, is answered by its word.
TEST_F(TraceSessionTest, TheFirstHoldIsAnsweredFromTheMirrorFoundByKtguardsSymbol) {
  auto session = open();
  ASSERT_TRUE(session);
  ASSERT_TRUE(helper_->wait_for(KTP_HOST_HELLO, 2s));
  constexpr uint64_t kBlock = 0x340000, kAck0 = kBlock + 64, kPointer = kBase + 0x800, kBlockVa = kBase + 0x1000;
  const ktguard_shared_header h = write_guard_block(*memory_, kBlock);
  memory_->write_u64(0x103000 + 8, kBlock | 1);  // the PTE that maps kBlockVa
  memory_->write_u64(kTextPhys + 0x800, kBlockVa);
  const char name[] = KTGUARD_SHARED_SYMBOL;
  helper_->hello_and_state_dump({{kPointer, 'B', {name, sizeof name - 1}, {"ktguard", 7}}});
  ktp_guard_state on{21, KTP_GUARD_ON, {"", 0}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_state(b, c, s, &on); });
  ASSERT_TRUE(session->wait_ready(5s)) << session->end_reason();
  for (int i = 0; i < 3; ++i) session->step(20ms);  // the guard state is taken up
  ktguard_notice waiting{1, kBase + 128, kBase + 256, 1, 0, 40, kAck0 + 16};  // slot 2
  memory_->write(kBlock + h.notice_offset + 2 * KTGUARD_NOTICE_SIZE, &waiting, sizeof waiting);
  memory_->write_u64(kBlock + offsetof(ktguard_shared_header, seq), 2);
  uint64_t word = 0;
  for (int i = 0; i < 300 && word != 1; ++i) {
    session->step(10ms);
    ASSERT_TRUE(memory_->read(kAck0 + 16, &word, 8));
  }
  EXPECT_EQ(word, 1u) << "the session's first hold was not answered from the mirror";
  auto sum = session->finish("test done");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(sum->holds.holds, 1u);
  EXPECT_EQ(sum->holds.polled, 1u);
}

// The session began on page tables that a process owned (vCPU 0's at the
// time). Once the guest's symbols are in it walks the kernel's own
// (init_top_pgt): a hold's range is still copied after the process's top
// table is gone.
TEST_F(TraceSessionTest, CopiesWalkTheKernelsOwnPageTablesOnceItsSymbolsAreIn) {
  auto session = open();
  ASSERT_TRUE(session);
  ASSERT_TRUE(helper_->wait_for(KTP_HOST_HELLO, 2s));
  constexpr uint64_t kOldRoot = 0x100000, kKernelRoot = 0x110000, kData = 0x120000;
  const uint64_t top = ((kBase >> 39) & 511) * 8;
  uint64_t entry = 0;
  ASSERT_TRUE(memory_->read(kOldRoot + top, &entry, 8));
  memory_->write_u64(kKernelRoot + top, entry);       // the kernel's top table maps the same
  memory_->write_u64(0x103000 + 8, kKernelRoot | 1);  // init_top_pgt at kBase + 0x1000
  memory_->write_u64(0x103000 + 16, kData | 1);       // kBase + 0x2000: data a hold frees
  for (uint64_t i = 0; i < 64; ++i) memory_->write_u64(kData + 8 * i, 0x1111111111111111ull * (i % 15 + 1));
  helper_->hello_and_state_dump({{kBase + 0x1000, 'D', {"init_top_pgt", 12}, {"", 0}}});
  ASSERT_TRUE(session->wait_ready(5s)) << session->end_reason();
  for (int i = 0; i < 3; ++i) session->step(20ms);
  memory_->write_u64(kOldRoot + top, 0);  // the process exits: its top table is cleared
  ktp_guard_notice n{30, 0, 9, kBase + 0x2000, kBase + 0x2040, 1, kAckWord};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_notice(b, c, s, &n); });
  auto ack = helper_->wait_for(KTP_GUARD_ACK, 3s);
  ASSERT_TRUE(ack);
  ktp_guard_ack a{};
  const ktp_frame af = frame_of(*ack);
  ASSERT_EQ(ktp_parse_guard_ack(&af, &a), KTP_OK);
  EXPECT_EQ(a.status, static_cast<uint32_t>(KTP_HOLD_SAVED)) << "the range was walked through the old tables";
  auto sum = session->finish("test done");
  ASSERT_TRUE(sum) << sum.error().message;
  auto bundle = read_bundle((dir_ / "bundle").string());
  ASSERT_TRUE(bundle) << bundle.error().message;
  bool found = false;
  for (const auto& r : bundle->text.records)
    if (r.source == TextSource::Guard && r.id == 9) {
      found = true;
      ASSERT_EQ(r.bytes.size(), 64u);
      EXPECT_EQ(r.bytes[0], 0x11);
      EXPECT_EQ(r.bytes[8], 0x22);
    }
  EXPECT_TRUE(found);
}

// A guest whose ktguard cannot be opened says so (GUARD_STATE absent): the
// session copies unloaded text best effort from then on, and the summary
// and the one-line summary say why.
TEST_F(TraceSessionTest, AGuestWithoutItsGuardGetsBestEffortCopiesAndSaysWhy) {
  auto session = open();
  ASSERT_TRUE(session);
  helper_->hello_and_state_dump();
  ASSERT_TRUE(session->wait_ready(5s));
  ktp_guard_state absent{25, KTP_GUARD_ABSENT, {"open /dev/ktguard: No such file", 31}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_state(b, c, s, &absent); });
  // A BPF image registered, then unregistered while its bytes are still there:
  // best effort copies it again on the way out.
  ktp_ksymbol reg{30, 0, kBase + 256, 128, 1, 0, {"bpf_prog_x", 10}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_ksymbol(b, c, s, &reg); });
  ktp_ksymbol unreg{31, 0, kBase + 256, 128, 1, 1, {"bpf_prog_x", 10}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_ksymbol(b, c, s, &unreg); });
  for (int i = 0; i < 10; ++i) session->step(50ms);
  auto sum = session->finish("test done");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(sum->guest_guard, "absent: open /dev/ktguard: No such file");
  EXPECT_NE(sum->one_line().find("guest guard absent"), std::string::npos) << sum->one_line();
  EXPECT_EQ(sum->saver.unregister_copies, 1u);
  auto bundle = read_bundle((dir_ / "bundle").string());
  ASSERT_TRUE(bundle) << bundle.error().message;
  size_t unregistered = 0;
  for (const auto& r : bundle->text.records)
    if (r.source == TextSource::Unregister && r.start == kBase + 256) {
      ++unregistered;
      EXPECT_EQ(r.kind, KTHOST_TEXT_KSYMBOL_BPF);
      ASSERT_EQ(r.bytes.size(), 128u);
      EXPECT_EQ(r.bytes[0], static_cast<uint8_t>(256 * 13 + 1));
    }
  EXPECT_EQ(unregistered, 1u);
}

// A kernel where ktguard could not hook bpf_prog_pack_free (GUARD_HOOKS says
// "none"): the guard is on, but BPF images are freed unheld, so the session
// copies BPF unloads best effort, while module unloads (held by the module
// notifier) still get no unregister copy. The summary names the path.
TEST_F(TraceSessionTest, APathTheGuardCannotHookIsCopiedBestEffortAndNamed) {
  auto session = open();
  ASSERT_TRUE(session);
  helper_->hello_and_state_dump();
  ASSERT_TRUE(session->wait_ready(5s));
  ktp_guard_state on{25, KTP_GUARD_ON, {"", 0}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_state(b, c, s, &on); });
  const std::string hooks =
      "bpf_prog_pack_free none\nbpf_dispatcher_change_prog ftrace\nmodule_memfree ftrace\n"
      "__free_insn_slot ftrace\nmodule_notifier notifier\n";
  ktp_guard_hooks hk{26, {hooks.data(), static_cast<uint16_t>(hooks.size())}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_guard_hooks(b, c, s, &hk); });
  ktp_ksymbol reg{30, 0, kBase + 256, 128, 1, 0, {"bpf_prog_x", 10}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_ksymbol(b, c, s, &reg); });
  ktp_ksymbol unreg{31, 0, kBase + 256, 128, 1, 1, {"bpf_prog_x", 10}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_ksymbol(b, c, s, &unreg); });
  // An out-of-line ksymbol (freed through module_memfree, which is hooked):
  // held, so no unregister copy.
  ktp_ksymbol ool_reg{32, 0, kBase + 512, 64, 2, 0, {"ftrace_tramp", 12}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_ksymbol(b, c, s, &ool_reg); });
  ktp_ksymbol ool_unreg{33, 0, kBase + 512, 64, 2, 1, {"ftrace_tramp", 12}};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_ksymbol(b, c, s, &ool_unreg); });
  for (int i = 0; i < 10; ++i) session->step(50ms);
  auto sum = session->finish("test done");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(sum->guest_guard, "on");
  ASSERT_EQ(sum->guard_unheld.size(), 1u) << nlohmann::json(sum->guard_unheld).dump();
  EXPECT_EQ(sum->guard_unheld[0].rfind("bpf_prog_pack_free (", 0), 0u) << sum->guard_unheld[0];
  EXPECT_NE(sum->one_line().find("unheld by the guest's guard"), std::string::npos) << sum->one_line();
  EXPECT_EQ(sum->to_json()["guard_unheld"].size(), 1u);
  EXPECT_EQ(sum->saver.unloads_seen, 2u);
  EXPECT_EQ(sum->saver.unregister_copies, 1u) << "only the unheld BPF unload is copied";
  auto bundle = read_bundle((dir_ / "bundle").string());
  ASSERT_TRUE(bundle) << bundle.error().message;
  size_t unregistered = 0;
  for (const auto& r : bundle->text.records)
    if (r.source == TextSource::Unregister) {
      ++unregistered;
      EXPECT_EQ(r.start, kBase + 256);
      EXPECT_EQ(r.kind, KTHOST_TEXT_KSYMBOL_BPF);
    }
  EXPECT_EQ(unregistered, 1u);
}

// GUARD_HOOKS text is the guest's: lines that are not "<function> <how>"
// are counted and skipped, and a path the guest omits counts as unheld.
TEST(GuardHooks, ParsesLinesAndCountsMalformedOnes) {
  auto g = parse_guard_hooks("bpf_prog_pack_free ftrace\nmodule_notifier notifier\n\nbad line here\n1abc none\n"
                             "x NONE\nno_how\n__free_insn_slot none");
  ASSERT_EQ(g.hooks.size(), 3u);
  EXPECT_EQ(g.hooks[0].function, "bpf_prog_pack_free");
  EXPECT_TRUE(g.hooks[0].held());
  EXPECT_TRUE(g.hooks[1].held());
  EXPECT_EQ(g.hooks[2].function, "__free_insn_slot");
  EXPECT_FALSE(g.hooks[2].held());
  EXPECT_EQ(g.malformed, 4u);
  EXPECT_TRUE(parse_guard_hooks("").hooks.empty());
}

// A guest that reports losses and then goes away: the session ends by
// itself, says why, and the summary carries the loss.
TEST_F(TraceSessionTest, LossesAreCountedAndAClosedChannelEndsTheSession) {
  auto session = open();
  ASSERT_TRUE(session);
  helper_->hello_and_state_dump();
  ASSERT_TRUE(session->wait_ready(5s));
  ktp_lost lost{40, 0, KTP_LOST_PERF_RING, 0, 5};
  helper_->send([&](uint8_t* b, size_t c, uint64_t s) { return ktp_encode_lost(b, c, s, &lost); });
  helper_->close();
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) ended = !session->step(50ms);
  ASSERT_TRUE(ended);
  EXPECT_TRUE(session->failed());
  EXPECT_NE(session->end_reason().find("channel"), std::string::npos) << session->end_reason();
  auto sum = session->finish("ignored: it ended by itself");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_EQ(sum->losses.perf_ring, 5u);
  EXPECT_EQ(sum->losses.total(), 5u);
  EXPECT_NE(sum->end_reason.find("channel"), std::string::npos);
}

// --min-free: the trace ends, as after --duration (not a failure), once the
// bundle's filesystem has less free than the floor; the reason names it and
// the real free space (statvfs of the bundle's directory, not a fake).
TEST_F(TraceSessionTest, ATraceEndsWhenTheBundlesFilesystemFallsUnderItsFreeFloor) {
  std::vector<std::string> notices;
  auto session = open([&](TraceOptions& o) {
    o.min_free_bytes = uint64_t{1} << 62;  // more than any disk has
    o.notice = [&](const std::string& n) { notices.push_back(n); };
  });
  ASSERT_TRUE(session);
  helper_->hello_and_state_dump();
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) ended = !session->step(50ms);
  ASSERT_TRUE(ended) << "still tracing after 5 s";
  EXPECT_FALSE(session->failed());
  EXPECT_NE(session->end_reason().find("free, under --min-free 4194304.0 TiB"), std::string::npos)
      << session->end_reason();
  EXPECT_NE(session->end_reason().find(dir_.string()), std::string::npos) << session->end_reason();
  auto sum = session->finish("duration");
  ASSERT_TRUE(sum) << sum.error().message;
  EXPECT_NE(sum->end_reason.find("--min-free"), std::string::npos) << sum->end_reason;
  ASSERT_FALSE(notices.empty());
  EXPECT_NE(notices.back().find("the trace ends here"), std::string::npos) << notices.back();
}

TEST_F(TraceSessionTest, AFreeFloorTheDiskMeetsDoesNotEndTheTrace) {
  auto session = open([](TraceOptions& o) { o.min_free_bytes = 1; });
  ASSERT_TRUE(session);
  helper_->hello_and_state_dump();
  const auto until = std::chrono::steady_clock::now() + 1500ms;  // past the first once-a-second check
  while (std::chrono::steady_clock::now() < until) ASSERT_TRUE(session->step(50ms)) << session->end_reason();
}

}  // namespace
}  // namespace kt
