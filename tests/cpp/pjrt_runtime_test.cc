// The PJRT runtime on the CPU plugin: loading, devices, host transfers,
// compile/execute, serialization, and errors that say what went wrong.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "test_support.h"

namespace torch_tpu::pjrt {
namespace {

using hlo::Builder;
using hlo::ElementType;
using hlo::Value;
using testing::download;
using testing::run;
using testing::upload;

PJRT_Device* device_of(const Client& c, const Buffer& b) {
  auto a = PJRT_ARGS(PJRT_Buffer_Device);
  a.buffer = b.get();
  PJRT_CALL(c.plugin()->api(), PJRT_Buffer_Device, a);
  return a.device;
}

TEST(PjrtPlugin, LoadsOncePerPathAndReportsVersion) {
  TPU_REQUIRE_CLIENT(client);
  auto first = Plugin::load(testing::plugin_path());
  auto second = Plugin::load(testing::plugin_path());
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(first->major_version(), PJRT_API_MAJOR);
  EXPECT_EQ(first->path(), testing::plugin_path());
  EXPECT_NO_THROW(first->attributes());
}

TEST(PjrtPlugin, MissingPathSaysWhatToInstall) {
  for (const std::string path : {std::string("/nonexistent/xla_cpu_pjrt.so"), std::string()}) {
    try {
      Plugin::load(path);
      FAIL() << "expected pjrt::Error for '" << path << "'";
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("pip install xla-cpu-pjrt"), std::string::npos) << what;
      EXPECT_NE(what.find("TORCH_TPU_PJRT_PLUGIN"), std::string::npos) << what;
    }
  }
}

TEST(PjrtPlugin, NonPluginLibraryIsRejected) {
  Dl_info info;
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&::abort), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  std::string libc = info.dli_fname;
  try {
    Plugin::load(libc);
    FAIL() << "expected pjrt::Error for " << libc;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("GetPjrtApi"), std::string::npos) << what;
    EXPECT_NE(what.find(libc), std::string::npos) << what;
  }
}

TEST(PjrtPlugin, NonLibraryFileIsRejected) {
  char path[] = "/tmp/tpu_pjrt_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "not an ELF file", 15), 15);
  close(fd);
  EXPECT_THROW(Plugin::load(path), Error);
  unlink(path);
}

TEST(PjrtClient, TwoCpuDevices) {
  TPU_REQUIRE_CLIENT(c);
  EXPECT_EQ(c->device_count(), 2);
  EXPECT_EQ(c->platform_name(), "cpu");
  EXPECT_FALSE(c->platform_version().empty());
  EXPECT_NE(c->device(0), c->device(1));
  EXPECT_EQ(c->device_info(1).id, 1);
  EXPECT_FALSE(c->device_info(0).kind.empty());
  try {
    c->device(2);
    FAIL() << "expected pjrt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c->device(-1), Error);
}

// Uploads `data`, checks type, shape and placement, downloads it again.
template <typename T>
void round_trip(Client& c, const std::vector<T>& data, PJRT_Buffer_Type type,
                std::vector<int64_t> dims, int device) {
  BufferPtr b = upload(c, data, type, dims, device);
  EXPECT_EQ(b->element_type(), type);
  EXPECT_EQ(b->dims(), dims);
  EXPECT_EQ(device_of(c, *b), c.device(device));
  b->await_ready();
  EXPECT_EQ(download<T>(*b), data);
}

TEST(PjrtBuffer, RoundTripsEveryDtype) {
  TPU_REQUIRE_CLIENT(c);
  round_trip<float>(*c, {1.5f, -2.f, 3.25f, 0.f, -0.f, 1e30f}, PJRT_Buffer_Type_F32, {2, 3}, 0);
  round_trip<double>(*c, {1e300, -1.0 / 3}, PJRT_Buffer_Type_F64, {2}, 1);
  round_trip<int64_t>(*c, {INT64_MIN, -1, INT64_MAX}, PJRT_Buffer_Type_S64, {3}, 0);
  round_trip<int32_t>(*c, {-7, 8, 9, 10}, PJRT_Buffer_Type_S32, {2, 2}, 1);
  round_trip<int16_t>(*c, {-32768, 32767}, PJRT_Buffer_Type_S16, {2}, 0);
  round_trip<int8_t>(*c, {-128, 127, 0}, PJRT_Buffer_Type_S8, {3}, 0);
  round_trip<uint8_t>(*c, {0, 255, 17}, PJRT_Buffer_Type_U8, {3, 1}, 1);
  round_trip<uint8_t>(*c, {1, 0, 1}, PJRT_Buffer_Type_PRED, {3}, 0);
  round_trip<uint16_t>(*c, {0x3F80, 0xC020, 0x7FC0}, PJRT_Buffer_Type_BF16, {3}, 0);
  round_trip<uint16_t>(*c, {0x3C00, 0x7BFF}, PJRT_Buffer_Type_F16, {2}, 1);
  round_trip<float>(*c, {42.f}, PJRT_Buffer_Type_F32, {}, 0);  // scalar
  round_trip<float>(*c, {}, PJRT_Buffer_Type_F32, {0, 3}, 0);  // empty
}

TEST(PjrtBuffer, AsyncUploadsAndDownloadsIssuedBeforeAnyWait) {
  TPU_REQUIRE_CLIENT(c);
  // Many arrays, every copy issued before any is awaited; the host memory
  // stays untouched until each upload's host-done event has fired.
  constexpr int kArrays = 8;
  std::vector<std::vector<float>> host(kArrays), back(kArrays);
  std::vector<Client::Upload> ups;
  for (int i = 0; i < kArrays; ++i) {
    host[i].resize(70000 + 1000 * i);  // large enough for XLA:CPU's thread pool
    for (size_t j = 0; j < host[i].size(); ++j) host[i][j] = static_cast<float>(i * 1000003 + j);
    ups.push_back(c->buffer_from_host_async(host[i].data(), PJRT_Buffer_Type_F32,
                                            {static_cast<int64_t>(host[i].size())}, i % 2));
    ASSERT_NE(ups.back().buffer, nullptr);
  }
  for (auto& up : ups)
    if (up.host_done) up.host_done->await();
  std::vector<std::shared_ptr<Event>> done;
  for (int i = 0; i < kArrays; ++i) {
    back[i].assign(host[i].size(), -1.f);
    done.push_back(ups[i].buffer->to_host_async(back[i].data(), back[i].size() * sizeof(float)));
  }
  for (auto& d : done)
    if (d) d->await();
  for (int i = 0; i < kArrays; ++i) {
    EXPECT_EQ(device_of(*c, *ups[i].buffer), c->device(i % 2));
    EXPECT_EQ(back[i], host[i]) << "array " << i;
  }
}

TEST(PjrtBuffer, ElementSizes) {
  EXPECT_EQ(element_size(PJRT_Buffer_Type_PRED), 1u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_BF16), 2u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_S32), 4u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_C64), 8u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_C128), 16u);
  EXPECT_EQ(element_size(PJRT_Buffer_Type_INVALID), 0u);
}

// x * y + x over f32[4].
Builder fma_program() {
  Builder b;
  Value x = b.parameter({ElementType::kF32, {4}});
  Value y = b.parameter({ElementType::kF32, {4}});
  b.set_results({b.add(b.mul(x, y), x)});
  return b;
}

TEST(PjrtExecutable, CompileAndRunOnSecondDevice) {
  TPU_REQUIRE_CLIENT(c);
  Builder b = fma_program();
  auto x = upload<float>(*c, {1, 2, 3, 4}, PJRT_Buffer_Type_F32, {4}, 1);
  auto y = upload<float>(*c, {10, 20, 30, -1}, PJRT_Buffer_Type_F32, {4}, 1);
  auto out = run(*c, b, {x, y}, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(device_of(*c, *out[0]), c->device(1));
  EXPECT_EQ(download<float>(*out[0]), (std::vector<float>{11, 42, 93, 0}));
}

TEST(PjrtExecutable, MultipleOutputsAndIntegerOps) {
  TPU_REQUIRE_CLIENT(c);
  Builder b;
  Value x = b.parameter({ElementType::kI32, {3}});
  Value two = b.broadcast_in_dim(b.constant_int(ElementType::kI32, -2), {3}, {});
  b.set_results({b.mul(x, two), b.compare(hlo::Compare::kGT, x, two)});
  auto out = run(*c, b, {upload<int32_t>(*c, {-5, -2, 4}, PJRT_Buffer_Type_S32, {3})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(download<int32_t>(*out[0]), (std::vector<int32_t>{10, 4, -8}));
  EXPECT_EQ(download<uint8_t>(*out[1]), (std::vector<uint8_t>{0, 0, 1}));
}

TEST(PjrtExecutable, SerializeAndDeserialize) {
  TPU_REQUIRE_CLIENT(c);
  ExecutablePtr exe = c->compile(fma_program().module());
  EXPECT_EQ(exe->num_outputs(), 1u);
  std::string bytes = exe->serialize();
  ASSERT_FALSE(bytes.empty()) << "the CPU plugin serializes executables";
  ExecutablePtr loaded = c->deserialize(bytes);
  EXPECT_EQ(loaded->num_outputs(), 1u);
  auto x = upload<float>(*c, {1, 2, 3, 4}, PJRT_Buffer_Type_F32, {4}, 0);
  ExecuteResult r = loaded->execute({x->get(), x->get()}, c->device(0));
  if (r.done) r.done->await();
  EXPECT_EQ(download<float>(*r.outputs[0]), (std::vector<float>{2, 6, 12, 20}));
}

TEST(PjrtErrors, BadProgramCarriesPluginMessage) {
  TPU_REQUIRE_CLIENT(c);
  try {
    c->compile("module { this is not mlir");
    FAIL() << "expected pjrt::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("PJRT_Client_Compile failed"), std::string::npos) << what;
    EXPECT_GT(what.size(), std::string("PJRT_Client_Compile failed (X): ").size() + 5) << what;
    EXPECT_NE(e.code(), 0);
  }
  // Well-formed text whose types do not verify: the verifier's message comes back.
  std::string bad = fma_program().module();
  bad.replace(bad.find("-> tensor<4xf32>\n"), 16, "-> tensor<5xf32>");
  try {
    c->compile(bad);
    FAIL() << "expected pjrt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PJRT_Client_Compile"), std::string::npos) << e.what();
  }
  // The client still works afterwards.
  EXPECT_NO_THROW(c->compile(fma_program().module()));
}

TEST(PjrtErrors, GarbageExecutableBytes) {
  TPU_REQUIRE_CLIENT(c);
  EXPECT_THROW(c->deserialize("definitely not an executable"), Error);
}

TEST(PjrtErrors, BufferOnMissingDevice) {
  TPU_REQUIRE_CLIENT(c);
  float x = 1;
  EXPECT_THROW(c->buffer_from_host(&x, PJRT_Buffer_Type_F32, {}, 5), Error);
}

TEST(PjrtCompileOptions, EncodesOneReplicaPortable) {
  std::string o = default_compile_options();
  // field 3 (build options, length-delimited), then field 4 = 1.
  ASSERT_GE(o.size(), 4u);
  EXPECT_EQ(static_cast<uint8_t>(o[0]), (3u << 3) | 2u);
  EXPECT_EQ(static_cast<uint8_t>(o[1]), o.size() - 4);
  EXPECT_EQ(o.substr(o.size() - 2), std::string("\x20\x01", 2));
}

TEST(PjrtCompileOptions, OverridesHaveACanonicalTextAndEncoding) {
  CompileOverrides o;
  EXPECT_TRUE(o.empty());
  EXPECT_EQ(o.text(), "");
  EXPECT_EQ(o.encode(), "");
  o.set("xla_optimization_level", std::string("O1"));
  o.set("xla_backend_optimization_level", int64_t{0});
  // Sorted by name, with each value's type.
  EXPECT_EQ(o.text(), "xla_backend_optimization_level=i:0\nxla_optimization_level=s:O1\n");
  std::string e = o.encode();
  // One env_option_overrides entry (field 7), then the build options (field
  // 3) holding optimization_level (24) = EFFORT_O1 (19).
  EXPECT_EQ(static_cast<uint8_t>(e[0]), (7u << 3) | 2u);
  EXPECT_EQ(e.substr(e.size() - 5), std::string("\x1a\x03\xc0\x01\x13", 5));
  EXPECT_THROW(o.set("xla_memory_fitting_level", std::string("O4")), std::invalid_argument);
  EXPECT_THROW(o.set("", true), std::invalid_argument);
}

TEST(PjrtCompileOptions, CompilesUnderOverridesAndRejectsUnknownNames) {
  TPU_REQUIRE_CLIENT(c);
  CompileOverrides o;
  o.set("xla_optimization_level", std::string("O1"));
  EXPECT_NO_THROW(c->compile(fma_program().module(), false, o));
  CompileOverrides bad;
  bad.set("xla_not_an_option_anywhere", true);
  EXPECT_THROW(c->compile(fma_program().module(), false, bad), Error);
}

}  // namespace
}  // namespace torch_tpu::pjrt
