// libipt reads past the end of a PT buffer that ends inside a PSB pattern
// (fuzz_decode_pt found it: a SEGV in pt_pkt_sync_forward). kthost hands
// libipt only streams with kPtStreamSlack zero bytes after their end; these
// tests check that the slack is enough, with a guard page right after it, and
// that every PtStream, copied or mapped from a bundle's file, has it.
#include <gtest/gtest.h>
#include <intel-pt.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "kthost/bundle/bundle.h"
#include "kthost/decode/decoder.h"

namespace kt {
namespace {

// The input fuzz_decode_pt crashed on: PSB patterns run up to the end.
std::vector<uint8_t> stream_ending_in_psb_pattern() {
  std::vector<uint8_t> v;
  for (int i = 0; i < 8; ++i) v.insert(v.end(), {0x02, 0x82});
  const uint8_t middle[] = {0x2f, 0x01, 0x00, 0x00, 0x00, 0x00, 0x02, 0x23, 0x99, 0x01, 0x23, 0x99, 0x01, 0xd1,
                            0x00, 0x00, 0x00, 0x81, 0xff, 0xff, 0xff, 0xff, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x0f, 0x00, 0x23, 0xd1, 0x00, 0x00, 0x00, 0x81, 0xff, 0xff, 0xff, 0xff, 0x0c,
                            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x23, 0x99};
  v.insert(v.end(), std::begin(middle), std::end(middle));
  for (int i = 0; i < 6; ++i) v.insert(v.end(), {0x02, 0x82});
  return v;
}

// Runs libipt's packet decoder over `bytes` placed so that `slack` bytes
// later an unmapped page begins, in a child process. True when it finished.
bool packet_walk_survives(const std::vector<uint8_t>& bytes, size_t slack) {
  pid_t pid = fork();
  if (pid == 0) {
    long page = sysconf(_SC_PAGESIZE);
    auto* area = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (area == MAP_FAILED || mprotect(area + page, page, PROT_NONE) != 0) _exit(2);
    uint8_t* begin = area + page - slack - bytes.size();
    std::memcpy(begin, bytes.data(), bytes.size());
    std::memset(begin + bytes.size(), 0, slack);
    pt_config config;
    pt_config_init(&config);
    config.begin = begin;
    config.end = begin + bytes.size();
    pt_packet_decoder* dec = pt_pkt_alloc_decoder(&config);
    if (!dec) _exit(3);
    while (pt_pkt_sync_forward(dec) >= 0) {
      pt_packet packet;
      while (pt_pkt_next(dec, &packet, sizeof packet) >= 0) {
      }
    }
    pt_pkt_free_decoder(dec);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(PtStreamSlack, IsEnoughForLibiptOnEveryCutOfAPsbPattern) {
  auto full = stream_ending_in_psb_pattern();
  bool some_cut_needs_slack = false;
  // Every length: the pattern ends at every alignment against the guard page.
  for (size_t len = 1; len <= full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(len));
    EXPECT_TRUE(packet_walk_survives(cut, kPtStreamSlack)) << "a stream of " << len << " bytes";
    if (!packet_walk_survives(cut, 0)) some_cut_needs_slack = true;
  }
  // Not asserted: a libipt that stops reading past the end needs no slack.
  std::printf("libipt reads past the end of some of these streams: %s\n", some_cut_needs_slack ? "yes" : "no");
}

// A file of `file_bytes` bytes (the stream, then 0xff) in a fresh temporary
// directory; the stream is mapped as its first stream.size() bytes.
class MappedFile {
 public:
  MappedFile(const std::vector<uint8_t>& stream, size_t file_bytes) {
    char name[] = "/tmp/kthost-ptstream-XXXXXX";
    fd_ = mkstemp(name);
    path_ = name;
    std::vector<uint8_t> bytes(file_bytes, 0xff);
    std::copy(stream.begin(), stream.end(), bytes.begin());
    if (fd_ >= 0 && write(fd_, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) fd_ = -1;
  }
  ~MappedFile() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  Result<PtStream> map(size_t size) const { return PtStream::map_file(fd_, path_, size); }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

bool slack_is_zero(const PtStream& s) {
  const std::vector<uint8_t> zeros(kPtStreamSlack, 0);
  return std::memcmp(s.data() + s.size(), zeros.data(), kPtStreamSlack) == 0;
}

TEST(PtStreamSlack, AStreamInMemoryIsACopyWithZeroSlack) {
  std::vector<uint8_t> tight = stream_ending_in_psb_pattern();
  tight.shrink_to_fit();
  PtStream s(tight);
  EXPECT_FALSE(s.mapped());
  ASSERT_EQ(s.size(), tight.size());
  EXPECT_TRUE(std::equal(s.begin(), s.end(), tight.begin()));
  EXPECT_TRUE(slack_is_zero(s));
}

// The last partial page is copied, so the slack is zero even where the file
// goes on past the manifest's size; at every alignment against a page.
TEST(PtStreamSlack, AMappedStreamHasZeroSlackWhereverItEnds) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const std::vector<uint8_t> pattern = stream_ending_in_psb_pattern();
  for (size_t size : {size_t{1}, page - 1, page, page + 1, 2 * page - kPtStreamSlack, 3 * page}) {
    std::vector<uint8_t> stream(size);
    for (size_t i = 0; i < size; ++i) stream[i] = static_cast<uint8_t>(i * 7 + 1);
    MappedFile file(stream, size + page);  // 0xff after the stream
    auto s = file.map(size);
    ASSERT_TRUE(s) << s.error().message;
    EXPECT_TRUE(s->mapped() || size < page) << size;
    ASSERT_EQ(s->size(), size);
    EXPECT_TRUE(std::equal(s->begin(), s->end(), stream.begin())) << size;
    EXPECT_TRUE(slack_is_zero(*s)) << "a stream of " << size << " bytes";
  }
}

// A mapped stream that ends exactly at a page boundary inside a PSB pattern:
// libipt's read past the end lands in the zero slack.
TEST(PtStreamSlack, LibiptWalksAMappedStreamEndingAtAPageBoundary) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> pattern = stream_ending_in_psb_pattern();
  std::vector<uint8_t> stream(page - pattern.size(), 0);  // PAD packets, then the pattern
  stream.insert(stream.end(), pattern.begin(), pattern.end());
  MappedFile file(stream, page);
  auto s = file.map(page);
  ASSERT_TRUE(s) << s.error().message;
  auto pieces = split_at_psb(0, *s);
  auto copied = split_at_psb(0, PtStream(stream));
  ASSERT_EQ(pieces.size(), copied.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].begin, copied[i].begin);
    EXPECT_EQ(pieces[i].end, copied[i].end);
  }
}

long resident_pages() {
  long size = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident;
}

// release() drops a mapping's pages from the process's resident memory, and
// what is read again afterwards is still the file's bytes.
TEST(PtStreamSlack, ReleaseDropsAMappedStreamsPages) {
  const size_t bytes = size_t{32} << 20;
  std::vector<uint8_t> stream(bytes);
  for (size_t i = 0; i < bytes; i += 4096) stream[i] = static_cast<uint8_t>(i >> 12);
  MappedFile file(stream, bytes);
  stream = {};
  auto s = file.map(bytes);
  ASSERT_TRUE(s) << s.error().message;
  const long before = resident_pages();
  unsigned sum = 0;
  for (size_t i = 0; i < bytes; i += 4096) sum += (*s)[i];
  const long touched = resident_pages();
  s->release(0, bytes);
  const long released = resident_pages();
  EXPECT_GT(touched - before, static_cast<long>(bytes / 4096) * 9 / 10);
  EXPECT_LT(released - before, 64) << "pages still resident after release()";
  unsigned again = 0;
  for (size_t i = 0; i < bytes; i += 4096) again += (*s)[i];
  EXPECT_EQ(again, sum);
}

// A mapped file cut short by someone else while it is read: the read of a
// lost page ends the process with status 2 and an error naming the file and
// the offset, not with a crash.
TEST(PtStreamSlackDeathTest, AFileCutShortWhileMappedIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const size_t bytes = size_t{16} << 12;
  MappedFile file(std::vector<uint8_t>(bytes, 7), bytes);
  auto s = file.map(bytes);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EXIT(
      {
        if (ftruncate(file.fd(), 4096) != 0) _exit(3);
        volatile uint8_t v = (*s)[8 * 4096 + 5];
        (void)v;
        _exit(0);
      },
      testing::ExitedWithCode(2), "kthost-ptstream-.*: the file was cut short .*offset 32773 is gone");
  // A fault outside any mapped stream still goes to the earlier handler.
  EXPECT_DEATH(raise(SIGBUS), "");
}

}  // namespace
}  // namespace kt
