// read_kcore_segments: the PT_LOADs of an ELF64 core file, bounds-checked.
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kthost/common/fd.h"
#include "kthost/snapshot/snapshot.h"

namespace kt {
namespace {

Status pread_exact(int fd, void* out, size_t len, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, static_cast<char*>(out) + done, len - done, static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("read " + path, errno);
    if (n == 0)
      return Error(ErrorCode::InvalidInput, path + ": at offset " + std::to_string(off + done) + ": file ends early");
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

}  // namespace

Result<std::vector<KcoreSegment>> read_kcore_segments(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return io_error("open " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("stat " + path, errno);
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  Elf64_Ehdr eh{};
  KT_TRY(pread_exact(fd.get(), &eh, sizeof eh, 0, path));
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return Error(ErrorCode::InvalidInput, path + ": at offset 0: not an ELF64 file");
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 4096 || eh.e_phoff > file_size)
    return Error(ErrorCode::InvalidInput, path + ": at offset 32: bad program header table");
  std::vector<KcoreSegment> out;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    uint64_t at = eh.e_phoff + uint64_t{i} * sizeof ph;
    KT_TRY(pread_exact(fd.get(), &ph, sizeof ph, at, path));
    if (ph.p_type != PT_LOAD || ph.p_filesz == 0) continue;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset || ph.p_filesz > (uint64_t{1} << 32))
      return Error(ErrorCode::InvalidInput, path + ": at offset " + std::to_string(at) + ": segment " +
                                                std::to_string(i) + " lies outside the file");
    KcoreSegment s;
    s.vaddr = ph.p_vaddr;
    s.bytes.resize(ph.p_filesz);
    KT_TRY(pread_exact(fd.get(), s.bytes.data(), s.bytes.size(), ph.p_offset, path));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kt
