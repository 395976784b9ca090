#include "kcore_image.h"

#include <elf.h>
#include <intel-pt.h>

#include <cstring>
#include <fstream>
#include <vector>

namespace ktpt {

int add_kcore_segments(pt_image* image, const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open " + path;
    return -1;
  }
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  Elf64_Ehdr eh;
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    error = path + ": not an ELF64 file";
    return -1;
  }
  if (eh.e_phoff > file_size || eh.e_phnum * sizeof(Elf64_Phdr) > file_size - eh.e_phoff) {
    error = path + ": program headers outside the file";
    return -1;
  }
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  in.seekg(static_cast<std::streamoff>(eh.e_phoff));
  in.read(reinterpret_cast<char*>(phdrs.data()), static_cast<std::streamsize>(phdrs.size() * sizeof(Elf64_Phdr)));
  if (!in) {
    error = path + ": short read of program headers";
    return -1;
  }
  int added = 0;
  for (const Elf64_Phdr& ph : phdrs) {
    if (ph.p_type != PT_LOAD || ph.p_filesz == 0) continue;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset) {
      error = path + ": a PT_LOAD lies outside the file";
      return -1;
    }
    const int status = pt_image_add_file(image, path.c_str(), ph.p_offset, ph.p_filesz, nullptr, ph.p_vaddr);
    if (status < 0) {
      error = path + ": pt_image_add_file: " + pt_errstr(pt_errcode(status));
      return -1;
    }
    ++added;
  }
  return added;
}

}  // namespace ktpt
