// pjrt::Error's out-of-memory reading and pjrt::raise with and without the
// torch layer's handler. No plugin needed.
#include <gtest/gtest.h>

#include <stdexcept>

#include "../../csrc/pjrt/api.h"

using torch_tpu::pjrt::Error;

namespace {
struct Raised : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void throw_raised(const std::string& message) { throw Raised(message); }
}  // namespace

TEST(PjrtOutOfMemory, OutOfMemoryByCodeOrAllocatorMessage) {
  EXPECT_TRUE(Error("f failed (RESOURCE_EXHAUSTED): x", PJRT_Error_Code_RESOURCE_EXHAUSTED)
                  .out_of_memory());
  // XLA:CPU reports a failed allocation of temporaries under INTERNAL.
  EXPECT_TRUE(Error("PJRT_Event_Await failed (INTERNAL): Error preparing computation: Out of "
                    "memory allocating 68719476736 bytes.",
                    PJRT_Error_Code_INTERNAL)
                  .out_of_memory());
  EXPECT_FALSE(Error("f failed (INVALID_ARGUMENT): shapes", PJRT_Error_Code_INVALID_ARGUMENT)
                   .out_of_memory());
}

TEST(PjrtOutOfMemory, RaiseUsesTheHandlerForOutOfMemoryOnly) {
  EXPECT_THROW(torch_tpu::pjrt::raise("no memory", PJRT_Error_Code_RESOURCE_EXHAUSTED), Error);
  torch_tpu::pjrt::set_out_of_memory_handler(&throw_raised);
  EXPECT_THROW(torch_tpu::pjrt::raise("no memory", PJRT_Error_Code_RESOURCE_EXHAUSTED), Raised);
  try {
    torch_tpu::pjrt::raise("bad shape", PJRT_Error_Code_INVALID_ARGUMENT);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), PJRT_Error_Code_INVALID_ARGUMENT);
    EXPECT_STREQ(e.what(), "bad shape");
  }
  torch_tpu::pjrt::set_out_of_memory_handler(nullptr);
}
