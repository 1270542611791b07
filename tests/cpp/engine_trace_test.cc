// The engine's trace hooks (engine/trace.h) with a real client and cache:
// nothing reaches a sink unless one listens; a miss is a compile event with
// its tier (compiled, or disk from a second cache on the same directory);
// a launch after a miss says so, after none says "memory"; a launched
// program's completion sends its device span; a completion of a program
// launched under an earlier sink is dropped.
#include <filesystem>
#include <mutex>

#include "../../csrc/engine/cache.h"
#include "../../csrc/engine/trace.h"
#include "test_support.h"

namespace torch_tpu::engine {
namespace {

namespace fs = std::filesystem;
using trace::Kind;

struct Collect : trace::Sink {
  std::mutex mu;
  std::vector<trace::Event> events;
  void record(trace::Event e) override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
  std::vector<trace::Event> of(Kind kind) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<trace::Event> out;
    for (const auto& e : events)
      if (e.kind == kind) out.push_back(e);
    return out;
  }
};

// Listens for the test's duration; stops listening however it ends.
struct Listening {
  explicit Listening(trace::Sink* sink) { trace::listen(sink); }
  ~Listening() { trace::listen(nullptr); }
};

std::string arg(const trace::Event& e, const std::string& key) {
  for (const auto& [k, v] : e.args)
    if (k == key) return v;
  return "<none>";
}

// x * c for a distinct constant c: a distinct program per value.
std::string program(float c) {
  hlo::Builder b;
  hlo::Value x = b.parameter({hlo::ElementType::kF32, {3}});
  b.set_results({b.mul(x, b.full({hlo::ElementType::kF32, {3}}, c))});
  return b.module();
}

// Launches `exe` on [1, 2, 3] as Engine::run does, hooks included.
std::shared_ptr<pjrt::Event> launch(pjrt::Client& c, const pjrt::Executable& exe,
                                    const std::vector<OpSite>& ops) {
  auto x = testing::upload<float>(c, {1, 2, 3}, PJRT_Buffer_Type_F32, {3});
  int64_t t0 = trace::on() ? trace::now_ns() : 0;
  pjrt::ExecuteResult r = exe.execute({x->get()}, c.device(0));
  if (t0) trace::launched(&ops, /*Fused*/ 2, &exe, 0, t0, r.done, r.outputs);
  if (r.done) r.done->await();
  return r.done;
}

TEST(EngineTrace, NothingReachesASinkUnlessItListens) {
  TPU_REQUIRE_CLIENT(c);
  Collect sink;
  Metrics metrics;
  Cache cache(*c, metrics, "");
  EXPECT_FALSE(trace::on());
  auto exe = cache.get(program(11));
  launch(*c, *exe, {OpSite{"aten::mul.Tensor", nullptr}});
  EXPECT_TRUE(sink.events.empty());
  {
    Listening on(&sink);
    EXPECT_TRUE(trace::on());
  }
  EXPECT_FALSE(trace::on());
  EXPECT_TRUE(sink.events.empty());
}

TEST(EngineTrace, MissesLaunchesAndDeviceSpans) {
  TPU_REQUIRE_CLIENT(c);
  Collect sink;
  Metrics metrics;
  Cache cache(*c, metrics, "");
  Listening on(&sink);
  static const std::string site = "model.py:7";
  std::vector<OpSite> ops{{"aten::mul.Tensor", &site}, {"aten::add.Tensor", nullptr}};
  int64_t before = trace::now_ns();
  auto exe = cache.get(program(12));
  launch(*c, *exe, ops);
  EXPECT_TRUE(trace::await_completions(2000));
  auto hit = cache.get(program(12));
  launch(*c, *hit, ops);
  EXPECT_TRUE(trace::await_completions(2000));

  auto compiles = sink.of(Kind::kCompile);
  ASSERT_EQ(compiles.size(), 1u);  // the hit compiled nothing
  EXPECT_EQ(arg(compiles[0], "tier"), "compiled");
  EXPECT_EQ(arg(compiles[0], "program_bytes"), std::to_string(program(12).size()));
  EXPECT_LE(before, compiles[0].begin_ns);
  EXPECT_LE(compiles[0].begin_ns, compiles[0].end_ns);

  auto launches = sink.of(Kind::kLaunch);
  auto spans = sink.of(Kind::kProgram);
  ASSERT_EQ(launches.size(), 2u);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(arg(launches[0], "cache"), "compiled");
  EXPECT_EQ(arg(launches[1], "cache"), "memory");
  for (size_t i = 0; i < 2; ++i) {
    const trace::Event& l = launches[i];
    EXPECT_EQ(l.name, "tpu::launch");
    EXPECT_EQ(arg(l, "mode"), "Fused");
    EXPECT_EQ(arg(l, "ops"), "aten::mul.Tensor, aten::add.Tensor");
    EXPECT_EQ(arg(l, "num_ops"), "2");
    EXPECT_EQ(arg(l, "site"), site);
    EXPECT_GE(l.begin_ns, compiles[0].end_ns);
    // Its span: the same launch, named for the program, ending after it began.
    const trace::Event& s = spans[i];
    EXPECT_EQ(s.launch, l.launch);
    EXPECT_EQ(s.name, arg(l, "program"));
    EXPECT_EQ(s.name.rfind("Fused program ", 0), 0u) << s.name;
    EXPECT_NE(s.name.find("(2 ops)"), std::string::npos) << s.name;
    EXPECT_EQ(s.begin_ns, l.begin_ns);
    EXPECT_GE(s.end_ns, s.begin_ns);
  }
  EXPECT_EQ(spans[0].name, spans[1].name);  // the same ops, the same name
  EXPECT_EQ(launches[1].launch, launches[0].launch + 1);
}

TEST(EngineTrace, ADiskLoadIsItsOwnTier) {
  TPU_REQUIRE_CLIENT(c);
  char tmpl[] = "/tmp/tpu_trace_test_XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  Metrics metrics;
  Cache(*c, metrics, dir.string()).get(program(13));  // stored, not traced
  Collect sink;
  {
    Listening on(&sink);
    Cache reader(*c, metrics, dir.string());
    reader.get(program(13));
  }
  auto compiles = sink.of(Kind::kCompile);
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_EQ(arg(compiles[0], "tier"), "disk");
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Tiered compilation: the miss compiles quickly, the second hit queues the
// optimizing compile, which the background thread reports as its own tier.
TEST(EngineTrace, TieredCompilesShowBothTiers) {
  TPU_REQUIRE_CLIENT(c);
  hlo::Builder b;  // long enough to be tiered (Cache::kTierMinBytes)
  hlo::Value x = b.parameter({hlo::ElementType::kF32, {3}});
  for (int i = 0; i < 200; ++i) x = b.add(x, b.full({hlo::ElementType::kF32, {3}}, 0.5 + i));
  b.set_results({x});
  std::string text = b.module();
  ASSERT_GE(text.size(), Cache::kTierMinBytes);
  Collect sink;
  Metrics metrics;
  Cache cache(*c, metrics, "");
  cache.set_tiering(Cache::Tiering::kAll);
  {
    Listening on(&sink);
    cache.get(text);
    for (int i = 0; i < Cache::kHotUses; ++i) cache.get(text);
    cache.drain_background();
  }
  auto compiles = sink.of(Kind::kCompile);
  ASSERT_EQ(compiles.size(), 2u);
  EXPECT_EQ(arg(compiles[0], "tier"), "compiled quick");
  EXPECT_EQ(arg(compiles[1], "tier"), "background upgrade");
  EXPECT_EQ(arg(compiles[0], "key"), arg(compiles[1], "key"));
  EXPECT_EQ(metrics.snapshot()["tier_upgrades"], 1);
}

// A completion arriving after a new sink started listening does not reach
// it; the copy and synchronize hooks carry what they did.
TEST(EngineTrace, LateCompletionsAreDroppedAndCopiesCarryBytes) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache cache(*c, metrics, "");
  auto exe = cache.get(program(14));
  Collect first, second;
  auto x = testing::upload<float>(*c, {1, 2, 3}, PJRT_Buffer_Type_F32, {3});
  std::vector<OpSite> ops{{"aten::mul.Tensor", nullptr}};
  std::shared_ptr<pjrt::Event> done;
  {
    Listening on(&first);
    int64_t t0 = trace::now_ns();
    pjrt::ExecuteResult r = exe->execute({x->get()}, c->device(0));
    trace::launched(&ops, 0, exe.get(), 0, t0, r.done, r.outputs);
    trace::listen(&second);  // a new profile before the completion is seen
    done = r.done;
    if (done) done->await();
    EXPECT_TRUE(trace::await_completions(2000));
    trace::transfer(Kind::kToHost, 1, 12, trace::now_ns());
    trace::synchronized(trace::now_ns(), 3);
  }
  EXPECT_EQ(first.of(Kind::kLaunch).size(), 1u);
  EXPECT_EQ(arg(first.of(Kind::kLaunch)[0], "mode"), "Strict");
  EXPECT_EQ(first.of(Kind::kLaunch)[0].name, "tpu::launch");
  // The span belongs to the first profile: it reaches it only if the program
  // was done when its launch was traced (XLA:CPU may run it inline), and it
  // never lands in the profile that came after.
  EXPECT_LE(first.of(Kind::kProgram).size(), 1u);
  EXPECT_TRUE(second.of(Kind::kProgram).empty());
  auto copies = second.of(Kind::kToHost);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].bytes, 12);
  EXPECT_EQ(copies[0].device, 1);
  EXPECT_EQ(copies[0].name, "tpu::copy_to_host");
  EXPECT_EQ(arg(copies[0], "bytes"), "12");
  auto syncs = second.of(Kind::kSynchronize);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(arg(syncs[0], "programs_waited"), "3");
}

// A host read that waited for a traced program's output says when: the
// profiler bounds that program's device span by it (kineto_profiler.cc).
TEST(EngineTrace, AReadOfAnOutputBoundsItsProgram) {
  TPU_REQUIRE_CLIENT(c);
  Metrics metrics;
  Cache cache(*c, metrics, "");
  auto exe = cache.get(program(15));
  auto x = testing::upload<float>(*c, {1, 2, 3}, PJRT_Buffer_Type_F32, {3});
  std::vector<OpSite> ops{{"aten::mul.Tensor", nullptr}};
  Collect sink;
  {
    Listening on(&sink);
    int64_t t0 = trace::now_ns();
    pjrt::ExecuteResult r = exe->execute({x->get()}, c->device(0));
    ASSERT_EQ(r.outputs.size(), 1u);
    trace::launched(&ops, 0, exe.get(), 0, t0, r.done, r.outputs);
    if (r.done) r.done->await();
    trace::read_ready(x->get());             // an upload: no traced launch made it
    int64_t before = trace::now_ns();
    trace::read_ready(r.outputs[0]->get());  // the launch's output
    trace::read_ready(r.outputs[0]->get());  // read again: the first read said it
    EXPECT_TRUE(trace::await_completions(2000));
    auto launches = sink.of(Kind::kLaunch);
    auto ready = sink.of(Kind::kReady);
    ASSERT_EQ(launches.size(), 1u);
    ASSERT_EQ(ready.size(), r.done ? 1u : 0u);
    if (r.done) {
      EXPECT_EQ(ready[0].launch, launches[0].launch);
      EXPECT_GE(ready[0].end_ns, before);
    }
  }
}

}  // namespace
}  // namespace torch_tpu::engine
