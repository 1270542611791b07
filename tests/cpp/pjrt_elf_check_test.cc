// elf_damage: a shared library cut short is found before dlopen maps it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "../../csrc/pjrt/elf_check.h"

using torch_tpu::pjrt::elf_damage;

namespace {

std::string read_self() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  std::string path = ::testing::TempDir() + "elf_check_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  return path;
}

}  // namespace

TEST(ElfCheck, WholeLibraryIsIntact) {
  EXPECT_EQ(elf_damage("/proc/self/exe"), "");
}

TEST(ElfCheck, CutInsideTheSegmentsNamesSizeAndEnd) {
  std::string self = read_self();
  ASSERT_GT(self.size(), 8192u);
  std::string path = write_temp("half", self.substr(0, self.size() / 2));
  std::string why = elf_damage(path);
  EXPECT_NE(why.find("the file is " + std::to_string(self.size() / 2) + " bytes, but its "),
            std::string::npos)
      << why;
  std::remove(path.c_str());
}

TEST(ElfCheck, CutInsideTheHeaderIsTooShort) {
  std::string path = write_temp("head", read_self().substr(0, 20));
  EXPECT_EQ(elf_damage(path), "the file is 20 bytes, shorter than an ELF header");
  std::remove(path.c_str());
}

TEST(ElfCheck, OtherFilesAreNotElf) {
  std::string path = write_temp("text", "#!/bin/sh\necho not a library\n");
  EXPECT_EQ(elf_damage(path), "it is not an ELF file");
  std::remove(path.c_str());
  std::string tiny = write_temp("tiny", "x");
  EXPECT_EQ(elf_damage(tiny), "it is not an ELF file");
  std::remove(tiny.c_str());
}

TEST(ElfCheck, MissingFileIsLeftToDlopen) {
  EXPECT_EQ(elf_damage("/nonexistent/plugin.so"), "");
}
