// A look at a shared library's ELF headers before dlopen maps it. dlopen maps
// segments by the offsets the headers give; in a file cut short (an
// interrupted download or copy) those pages lie past its end, and the first
// touch of one kills the process with SIGBUS instead of failing the load.
#pragma once

#include <string>

namespace torch_tpu::pjrt {

// Empty when the 64-bit ELF file at `path` holds every byte its ELF header,
// program headers (with their segments) and section headers (with their
// sections' contents) point at; otherwise what is wrong, in a few words
// ("the file is N bytes, but its segment 3 ends at byte M"). Other ELF
// classes are left to dlopen.
std::string elf_damage(const std::string& path);

}  // namespace torch_tpu::pjrt
