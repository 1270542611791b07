#include "elf_check.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace torch_tpu::pjrt {

namespace {

// Reads exactly `size` bytes at `offset`, or returns false.
bool read_at(int fd, uint64_t offset, void* dst, size_t size) {
  auto* out = static_cast<char*>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (n <= 0) return false;
    out += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return true;
}

// offset + count * entry, or UINT64_MAX when that overflows.
uint64_t end_of(uint64_t offset, uint64_t count, uint64_t entry) {
  if (entry != 0 && count > (UINT64_MAX - offset) / entry) return UINT64_MAX;
  return offset + count * entry;
}

std::string past_end(uint64_t size, const std::string& what, uint64_t end) {
  return "the file is " + std::to_string(size) + " bytes, but its " + what + " ends at byte " +
         std::to_string(end);
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string elf_damage(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return {};  // unreadable: dlopen says why
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  Elf64_Ehdr eh;
  size_t head = static_cast<size_t>(std::min<uint64_t>(size, SELFMAG));
  if (!read_at(f.fd, 0, eh.e_ident, head) || std::memcmp(eh.e_ident, ELFMAG, head) != 0)
    return "it is not an ELF file";
  if (size < EI_NIDENT || !read_at(f.fd, 0, eh.e_ident, EI_NIDENT))
    return "the file is " + std::to_string(size) + " bytes, shorter than an ELF header";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return {};
  if (size < sizeof(eh) || !read_at(f.fd, 0, &eh, sizeof(eh)))
    return "the file is " + std::to_string(size) + " bytes, shorter than an ELF header";

  if (eh.e_phnum > 0) {
    if (eh.e_phentsize < sizeof(Elf64_Phdr)) return "its program header size is invalid";
    uint64_t end = end_of(eh.e_phoff, eh.e_phnum, eh.e_phentsize);
    if (end > size) return past_end(size, "program header table", end);
    for (uint64_t i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph;
      if (!read_at(f.fd, eh.e_phoff + i * eh.e_phentsize, &ph, sizeof(ph)))
        return "its program header " + std::to_string(i) + " cannot be read";
      uint64_t seg_end = end_of(ph.p_offset, 1, ph.p_filesz);
      if (ph.p_filesz > 0 && seg_end > size)
        return past_end(size, "segment " + std::to_string(i), seg_end);
    }
  }
  if (eh.e_shnum > 0 && eh.e_shoff != 0) {
    if (eh.e_shentsize < sizeof(Elf64_Shdr)) return "its section header size is invalid";
    uint64_t end = end_of(eh.e_shoff, eh.e_shnum, eh.e_shentsize);
    if (end > size) return past_end(size, "section header table", end);
    std::vector<char> table(eh.e_shnum * static_cast<size_t>(eh.e_shentsize));
    if (!read_at(f.fd, eh.e_shoff, table.data(), table.size()))
      return "its section headers cannot be read";
    for (uint64_t i = 0; i < eh.e_shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, table.data() + i * eh.e_shentsize, sizeof(sh));
      if (sh.sh_type == SHT_NOBITS || sh.sh_size == 0) continue;
      uint64_t sec_end = end_of(sh.sh_offset, 1, sh.sh_size);
      if (sec_end > size) return past_end(size, "section " + std::to_string(i), sec_end);
    }
  }
  return {};
}

}  // namespace torch_tpu::pjrt
