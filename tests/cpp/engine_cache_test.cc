// The compile cache with a real client: the memory tier, the disk tier across
// Cache instances, and damaged cache files.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "../../csrc/engine/cache.h"
#include "test_support.h"

namespace torch_tpu::engine {
namespace {

namespace fs = std::filesystem;
using hlo::Builder;
using hlo::ElementType;
using hlo::Value;

// A fresh temporary directory, removed with the object.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/tpu_cache_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<fs::path> files(const std::string& ext = ".xc") const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ext) out.push_back(e.path());
    return out;
  }
};

// x + c for a distinct constant c: a distinct program text per value.
std::string program(float c) {
  Builder b;
  Value x = b.parameter({ElementType::kF32, {2}});
  b.set_results({b.add(x, b.full({ElementType::kF32, {2}}, c))});
  return b.module();
}

// Runs a cached `program(c)` executable on [1, 2] and returns the result.
std::vector<float> execute(pjrt::Client& client, const pjrt::Executable& exe) {
  auto x = testing::upload<float>(client, {1, 2}, PJRT_Buffer_Type_F32, {2});
  pjrt::ExecuteResult r = exe.execute({x->get()}, client.device(0));
  if (r.done) r.done->await();
  return testing::download<float>(*r.outputs[0]);
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const fs::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}

TEST(EngineCache, MissThenHitInMemory) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache cache(*c, metrics, "");
  auto first = cache.get(program(1));
  auto second = cache.get(program(1));
  auto other = cache.get(program(2));
  EXPECT_EQ(first.get(), second.get());
  EXPECT_NE(first.get(), other.get());
  CacheStats s = cache.stats();
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.disk_hits, 0);
  EXPECT_EQ(s.entries, 2);
  EXPECT_GT(s.compile_seconds, 0);
  EXPECT_EQ(metrics.snapshot()["compiles"], 2);
  EXPECT_EQ(metrics.snapshot()["cache_hits"], 1);
  EXPECT_EQ(execute(*c, *second), (std::vector<float>{2, 3}));
  cache.clear(false);
  EXPECT_EQ(cache.stats().entries, 0);
  cache.get(program(1));
  EXPECT_EQ(cache.stats().misses, 1);
}

TEST(EngineCache, DiskRoundTripAcrossInstances) {
  TPU_REQUIRE_CLIENT(c);
  TempDir dir;
  Metrics metrics;
  {
    Cache writer(*c, metrics, dir.path.string());
    EXPECT_EQ(writer.directory(), dir.path.string());
    writer.get(program(3));
    EXPECT_EQ(writer.stats().misses, 1);
    EXPECT_GT(writer.stats().disk_bytes, 0);
  }
  ASSERT_EQ(dir.files().size(), 1u);
  EXPECT_TRUE(dir.files(".tmp").empty());
  Cache reader(*c, metrics, dir.path.string());
  auto exe = reader.get(program(3));
  CacheStats s = reader.stats();
  EXPECT_EQ(s.disk_hits, 1);
  EXPECT_EQ(s.misses, 0);
  EXPECT_EQ(execute(*c, *exe), (std::vector<float>{4, 5}));
  // A different program is not served by that file.
  reader.get(program(4));
  EXPECT_EQ(reader.stats().misses, 1);
  EXPECT_EQ(dir.files().size(), 2u);
  reader.clear(true);
  EXPECT_TRUE(dir.files().empty());
}

// find() serves either tier and never compiles; a program compiled in the
// background under a builder fingerprint is found by lookup() of that key
// (how Fused Eager's asynchronous compiles hand a program to the next flush).
TEST(EngineCache, FindNeverCompilesAndBackgroundCompilesKeepTheirKey) {
  TPU_REQUIRE_CLIENT(c);
  TempDir dir;
  Metrics metrics;
  Cache cache(*c, metrics, dir.path.string());
  const hlo::Fingerprint key{0x1234, 0x5678};
  EXPECT_EQ(cache.find(key, program(5)), nullptr);
  EXPECT_EQ(cache.stats().misses, 0);
  std::promise<std::string> done;
  cache.compile_in_background(key, program(5), [&](pjrt::ExecutablePtr exe, const std::string& error) {
    done.set_value(exe ? "" : error);
  });
  EXPECT_EQ(done.get_future().get(), "");
  auto exe = cache.lookup(key);
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(execute(*c, *exe), (std::vector<float>{6, 7}));
  // Another instance finds it on disk, without compiling.
  Cache other(*c, metrics, dir.path.string());
  auto loaded = other.find(key, program(5));
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(other.stats().disk_hits, 1);
  EXPECT_EQ(other.stats().misses, 0);
  EXPECT_EQ(other.lookup(key).get(), loaded.get());
  // A broken compile reaches the callback with the compiler's error.
  std::promise<std::string> failed;
  cache.break_next_background_compile();
  cache.compile_in_background(hlo::Fingerprint{1, 2}, program(6),
                              [&](pjrt::ExecutablePtr exe, const std::string& error) {
    failed.set_value(exe ? "" : error);
  });
  EXPECT_FALSE(failed.get_future().get().empty());
  EXPECT_EQ(cache.lookup(hlo::Fingerprint{1, 2}), nullptr);
}

// Two caches on one directory (as the ranks of a job on one machine) that
// miss the same program at the same time compile it once: the second waits
// on the program's lock file and loads what the first stored.
TEST(EngineCache, ConcurrentMissesOnOneDirectoryCompileOnce) {
  TPU_REQUIRE_CLIENT(c);
  TempDir dir;
  Metrics metrics;
  Cache a(*c, metrics, dir.path.string()), b(*c, metrics, dir.path.string());
  std::atomic<int> ready{0};
  pjrt::ExecutablePtr from_a, from_b;
  auto run = [&](Cache& cache, pjrt::ExecutablePtr& out) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    out = cache.get(program(9));
  };
  std::thread ta(run, std::ref(a), std::ref(from_a)), tb(run, std::ref(b), std::ref(from_b));
  ta.join();
  tb.join();
  EXPECT_EQ(a.stats().misses + b.stats().misses, 1);
  EXPECT_EQ(a.stats().disk_hits + b.stats().disk_hits, 1);
  EXPECT_EQ(metrics.snapshot()["compiles"], 1);
  EXPECT_EQ(execute(*c, *from_a), (std::vector<float>{10, 11}));
  EXPECT_EQ(execute(*c, *from_b), (std::vector<float>{10, 11}));
  EXPECT_EQ(dir.files().size(), 1u);
  EXPECT_EQ(dir.files(".lock").size(), 1u);
  a.clear(true);  // the lock files go too
  EXPECT_TRUE(dir.files().empty());
  EXPECT_TRUE(dir.files(".lock").empty());
}

// Damages the one cache file of program(c) with `damage`, then checks that a
// new Cache recompiles, runs correctly, and rewrites a loadable file.
void check_recovers_from(pjrt::Client& client, float c,
                         const std::function<std::string(std::string)>& damage) {
  TempDir dir;
  Metrics metrics;
  Cache(client, metrics, dir.path.string()).get(program(c));
  ASSERT_EQ(dir.files().size(), 1u);
  fs::path file = dir.files()[0];
  write_file(file, damage(read_file(file)));

  Cache recovering(client, metrics, dir.path.string());
  auto exe = recovering.get(program(c));
  EXPECT_EQ(recovering.stats().disk_hits, 0);
  EXPECT_EQ(recovering.stats().misses, 1);
  EXPECT_EQ(execute(client, *exe), (std::vector<float>{1 + c, 2 + c}));

  Cache after(client, metrics, dir.path.string());
  after.get(program(c));
  EXPECT_EQ(after.stats().disk_hits, 1) << "the damaged file was not replaced";
}

TEST(EngineCache, TruncatedFileIsReplaced) {
  TPU_REQUIRE_CLIENT(c);
  check_recovers_from(*c, 5, [](std::string s) { return s.substr(0, s.size() / 2); });
  check_recovers_from(*c, 6, [](std::string s) { return s.substr(0, 3); });
  check_recovers_from(*c, 7, [](std::string) { return std::string(); });
}

TEST(EngineCache, GarbageFileIsReplaced) {
  TPU_REQUIRE_CLIENT(c);
  check_recovers_from(*c, 8, [](std::string s) { return std::string(s.size(), 'x'); });
  // A flipped byte inside the executable: the checksum no longer matches.
  check_recovers_from(*c, 9, [](std::string s) {
    s[s.size() - 20] ^= 0x5a;
    return s;
  });
}

TEST(EngineCache, UnusableDirectoryDisablesDiskTier) {
  TPU_REQUIRE_CLIENT(c);
  TempDir dir;
  fs::path file = dir.path / "plain_file";
  write_file(file, "x");
  Metrics metrics;
  Cache cache(*c, metrics, (file / "sub").string());
  EXPECT_EQ(cache.directory(), "");
  EXPECT_NO_THROW(cache.get(program(10)));
}

TEST(EngineCache, UncountedGetUsesDiskButNotStatsOrMemory) {
  TPU_REQUIRE_CLIENT(c);
  TempDir dir;
  Metrics metrics;
  {
    Cache cache(*c, metrics, dir.path.string());
    auto exe = cache.get_uncounted(program(7));
    EXPECT_EQ(execute(*c, *exe), (std::vector<float>{8, 9}));
    CacheStats s = cache.stats();
    EXPECT_EQ(s.misses + s.hits + s.disk_hits + s.entries + s.disk_bytes, 0);
    EXPECT_EQ(dir.files().size(), 1u);  // stored for the next process
  }
  EXPECT_TRUE(metrics.snapshot().empty());
  Cache next(*c, metrics, dir.path.string());
  EXPECT_EQ(execute(*c, *next.get_uncounted(program(7))), (std::vector<float>{8, 9}));
  next.get(program(7));  // a counted lookup of the same program reads that file
  EXPECT_EQ(next.stats().disk_hits, 1);
  EXPECT_EQ(next.stats().misses, 0);
}

TEST(EngineCache, HashIsStableAndSpreads) {
  EXPECT_EQ(Cache::hash(program(1)), Cache::hash(program(1)));
  EXPECT_NE(Cache::hash(program(1)), Cache::hash(program(2)));
  EXPECT_NE(Cache::hash("a"), Cache::hash("b"));
}

// cache.h documents FNV-1a 64, but cache.cc's offset basis 1469598103934665603
// lacks the last digit of 14695981039346656037 (0xcbf29ce484222325).
TEST(EngineCache, HashIsFnv1a64) {
  EXPECT_EQ(Cache::hash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Cache::hash("a"), 0xaf63dc4c8601ec8cull);
}

TEST(EngineMetrics, CountsTimesAndReports) {
  Metrics m;
  m.count("compiles");
  m.count("compiles", 2);
  m.time("compile", 0.5);
  m.time("compile", 0.25);
  auto s = m.snapshot();
  EXPECT_EQ(s["compiles"], 3);
  EXPECT_EQ(s["compile_s"], 0.75);
  EXPECT_EQ(m.report(), "compile_s: 0.75\ncompiles: 3\n");
  m.reset();
  EXPECT_TRUE(m.snapshot().empty());
}

}  // namespace
}  // namespace torch_tpu::engine
