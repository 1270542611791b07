#include "cache.h"

#include "trace.h"
#include "xla_cpu/bf16_dots.h"
#include "xla_cpu/flags.h"
#include "xla_cpu/partitions.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

namespace torch_tpu::engine {

namespace {
constexpr char kMagic[8] = {'T', 'P', 'U', 'X', 'C', '0', '0', '1'};

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<char*>(&v), 8); }

bool get_u64(const std::string& in, size_t& pos, uint64_t& v) {
  if (pos + 8 > in.size()) return false;
  std::memcpy(&v, in.data() + pos, 8);
  pos += 8;
  return true;
}

// An exclusive flock(2) on the file at `path` (created if missing), held
// while the object lives; none (and no wait) where the file cannot be
// opened or locked. The kernel lets go of it when the holder exits, however.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666)) {
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

// Whether this process uses more than half of the kernel's memory-map limit
// (Linux; false where either is unknown). Executables differ in how many
// maps their code takes, so the entry bound alone cannot promise headroom.
bool under_map_pressure() {
  static const size_t limit = [] {
    size_t n = 0;
    std::ifstream f("/proc/sys/vm/max_map_count");
    return f >> n ? n : 0;
  }();
  if (limit == 0) return false;
  std::ifstream f("/proc/self/maps");
  if (!f) return false;
  size_t maps = std::count(std::istreambuf_iterator<char>(f), {}, '\n');
  return maps > limit / 2;
}

// Executables added between two looks at the memory maps (reading them costs about a
// millisecond; far fewer maps than the limit's half appear in between).
constexpr int64_t kMapCheckInterval = 64;
}  // namespace

uint64_t Cache::hash(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Cache::Cache(pjrt::Client& client, Metrics& metrics, std::string directory,
             size_t capacity)
    : client_(client),
      metrics_(metrics),
      directory_(std::move(directory)),
      capacity_(std::max<size_t>(capacity, 1)) {
  identity_ = client_.plugin()->path() + "\n" + client_.platform_name() + "\n" +
              client_.platform_version() + "\n";
  if (!directory_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec) directory_.clear();  // an unusable directory disables the disk tier
  }
}

namespace {
// The calling thread's overrides; `t_set`: it chose them (else the default).
thread_local Cache::OverridesPtr t_overrides;
thread_local bool t_set = false;
std::mutex g_default_mu;
Cache::OverridesPtr g_default;
std::atomic<bool> g_has_default{false};  // lets the common case skip the lock
const pjrt::CompileOverrides kNoOverrides;
}  // namespace

void Cache::set_thread_overrides(OverridesPtr overrides) {
  t_set = overrides != nullptr;
  if (overrides && overrides->empty()) overrides = nullptr;
  t_overrides = std::move(overrides);
}

void Cache::set_default_overrides(OverridesPtr overrides) {
  if (overrides && overrides->empty()) overrides = nullptr;
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_has_default = overrides != nullptr;
  g_default = std::move(overrides);
}

Cache::OverridesPtr Cache::thread_overrides() {
  if (t_set || !g_has_default) return t_overrides;
  std::lock_guard<std::mutex> lock(g_default_mu);
  return g_default;
}

hlo::Fingerprint Cache::with_overrides(const hlo::Fingerprint& key) {
  if (!t_set && !g_has_default) return key;
  OverridesPtr o = thread_overrides();
  if (!o) return key;
  uint64_t h = hash(o->text());
  return hlo::Fingerprint{key.a ^ (h * 0x9e3779b97f4a7c15ull), key.b ^ hash("options:" + o->text())};
}

std::string Cache::disk_program(const std::string& program, const OverridesPtr& overrides) {
  if (!overrides) return program;
  return "options\n" + overrides->text() + "\n" + program;
}

pjrt::ExecutablePtr Cache::lookup(const hlo::Fingerprint& key) {
  return lookup_exact(with_overrides(key));
}

pjrt::ExecutablePtr Cache::lookup_exact(const hlo::Fingerprint& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  recent_.splice(recent_.begin(), recent_, it->second.recent);
  ++stats_.hits;
  metrics_.count(Hot::kCacheHits);
  if (it->second.quick_program) note_hit(key, it->second);
  return it->second.exe;
}

pjrt::ExecutablePtr Cache::compile(const std::string& program, bool quick,
                                   const OverridesPtr& overrides) {
  const pjrt::CompileOverrides& given = overrides ? *overrides : kNoOverrides;
  if (!unpartitioned_small_) return xla_cpu::compile_checked(client_, program, quick, given);
  return xla_cpu::compile_checked(
      client_, program, quick,
      xla_cpu::unpartitioned_if_small(program, given, xla_cpu::disabled_passes()));
}

void Cache::note_hit(const hlo::Fingerprint& key, Entry& entry) {
  if (++entry.hits != kHotUses) return;
  background_.submit([this, key, program = entry.quick_program, overrides = entry.overrides] {
    upgrade(key, program, overrides);
  });
}

void Cache::compile_in_background(std::string program, CompileDone done) {
  hlo::Fingerprint key = text_key(program);
  compile_in_background(key, std::move(program), std::move(done));
}

void Cache::compile_in_background(const hlo::Fingerprint& key, std::string program,
                                  CompileDone done) {
  if (break_next_.exchange(false)) program = "module { this is not StableHLO }";
  background_.submit([this, key, program = std::move(program), done = std::move(done),
                      overrides = thread_overrides()] {
    set_thread_overrides(overrides);
    pjrt::ExecutablePtr exe;
    std::string error;
    try {
      exe = get(key, program);
    } catch (const std::exception& e) {
      error = e.what();
    }
    set_thread_overrides(nullptr);
    done(std::move(exe), error);
  });
}

void Cache::upgrade(const hlo::Fingerprint& key, const std::shared_ptr<const std::string>& program,
                    const OverridesPtr& overrides) {
  auto start = std::chrono::steady_clock::now();
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  pjrt::ExecutablePtr exe;
  try {
    exe = compile(*program, /*quick=*/false, overrides);
  } catch (const pjrt::Error&) {
    metrics_.count("tier_upgrade_failures");  // the quick executable stays
    return;
  }
  metrics_.time("background_compile", std::chrono::duration<double>(
                                          std::chrono::steady_clock::now() - start).count());
  if (traced) trace::compiled(key.a, "background upgrade", traced, program->size());
  std::string keyed = disk_program(*program, overrides);
  std::string path = path_of(keyed);
  if (!path.empty()) store(path, keyed, *exe, /*counted=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.quick_program != program) return;  // evicted or cleared
  it->second.exe = std::move(exe);
  it->second.quick_program.reset();
  metrics_.count("tier_upgrades");
}

void Cache::insert(const hlo::Fingerprint& key, pjrt::ExecutablePtr exe,
                   std::shared_ptr<const std::string> quick_program,
                   OverridesPtr overrides) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {  // another thread compiled it meanwhile
    it->second.exe = std::move(exe);
    it->second.quick_program = std::move(quick_program);
    it->second.overrides = std::move(overrides);
    recent_.splice(recent_.begin(), recent_, it->second.recent);
    return;
  }
  recent_.push_front(key);
  entries_.emplace(key, Entry{std::move(exe), recent_.begin(), std::move(quick_program),
                              std::move(overrides)});
  evict_to(capacity_);
  // Counted by executables added (compiled or loaded from disk).
  if ((stats_.misses + stats_.disk_hits) % kMapCheckInterval == 0 && under_map_pressure()) {
    metrics_.count("cache_map_pressure");
    evict_to(std::max<size_t>(entries_.size() / 2, 1));
  }
}

void Cache::evict_to(size_t size) {
  while (entries_.size() > size) {
    entries_.erase(recent_.back());
    recent_.pop_back();
    ++stats_.evictions;
    metrics_.count("cache_evictions");
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
}

void Cache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = std::max<size_t>(capacity, 1);
  evict_to(capacity_);
}

size_t Cache::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

hlo::Fingerprint Cache::text_key(const std::string& program) {
  return hlo::Fingerprint{hash(program), hash("text:" + program)};
}

pjrt::ExecutablePtr Cache::get(const std::string& program) { return get(text_key(program), program); }

pjrt::ExecutablePtr Cache::find(const hlo::Fingerprint& program_key, const std::string& program) {
  const hlo::Fingerprint key = with_overrides(program_key);
  if (pjrt::ExecutablePtr hit = lookup_exact(key)) return hit;
  const std::string keyed = disk_program(program, thread_overrides());
  std::string path = path_of(keyed);
  if (path.empty()) return nullptr;
  auto start = std::chrono::steady_clock::now();
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  pjrt::ExecutablePtr exe = load(path, keyed, /*caller=*/true);
  if (!exe) return nullptr;
  count_disk_hit(key, start, traced, program.size());
  std::lock_guard<std::mutex> lock(mu_);
  insert(key, exe, nullptr, nullptr);
  return exe;
}

void Cache::count_disk_hit(const hlo::Fingerprint& key, std::chrono::steady_clock::time_point start,
                           int64_t traced, size_t bytes) {
  metrics_.count("cache_disk_hits");
  metrics_.time("disk_load", std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start).count());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.disk_hits;
  if (traced) trace::compiled(key.a, "disk", traced, bytes);
}

pjrt::ExecutablePtr Cache::get(const hlo::Fingerprint& program_key, const std::string& program,
                               bool recompile, bool upgrade) {
  const hlo::Fingerprint key = with_overrides(program_key);
  if (pjrt::ExecutablePtr hit = lookup_exact(key)) return hit;
  const OverridesPtr overrides = thread_overrides();
  const std::string keyed = disk_program(program, overrides);
  std::string path = path_of(keyed);
  // A quick executable (from disk or compiled now) keeps its program for
  // the optimizing compile.
  std::shared_ptr<const std::string> quick;
  bool tiered = (tiering_ == Tiering::kAll || (tiering_ == Tiering::kRecompiles && recompile)) &&
                program.size() >= kTierMinBytes &&
                (!quick_allowed_ || quick_allowed_());
  auto from_disk = [&]() -> pjrt::ExecutablePtr {
    if (path.empty()) return nullptr;
    pjrt::ExecutablePtr exe = load(path, keyed, /*caller=*/true);
    if (!exe && tiered) {
      exe = load(quick_path_of(keyed), "quick\n" + keyed, /*caller=*/true);
      if (exe) quick = std::make_shared<const std::string>(program);
    }
    return exe;
  };
  auto load_start = std::chrono::steady_clock::now();
  int64_t traced = trace::on() ? trace::now_ns() : 0;
  pjrt::ExecutablePtr exe = from_disk();
  // Processes sharing the disk tier (the ranks of a job on one machine)
  // compile each program once: a miss takes the program's lock file, so
  // the others missing it meanwhile wait there and then load what the
  // first stored. Held until this compile is stored.
  std::optional<FileLock> compiling;
  if (!exe && !path.empty()) {
    auto wait_start = std::chrono::steady_clock::now();
    compiling.emplace(path + ".lock");
    exe = from_disk();
    if (exe)
      metrics_.time("compile_wait", std::chrono::duration<double>(
                                        std::chrono::steady_clock::now() - wait_start).count());
  }
  if (exe) {
    count_disk_hit(key, load_start, traced, program.size());
  } else {
    auto start = std::chrono::steady_clock::now();
    exe = compile(program, /*quick=*/tiered, overrides);
    if (tiered) quick = std::make_shared<const std::string>(program);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics_.count("compiles");
    if (tiered) metrics_.count("quick_compiles");
    metrics_.count("cache_misses");
    metrics_.time("compile", seconds);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.compile_seconds += seconds;
      ++stats_.misses;
    }
    if (!path.empty()) {
      if (quick)
        store(quick_path_of(keyed), "quick\n" + keyed, *exe);
      else
        store(path, keyed, *exe);
    }
    compiling.reset();
    if (traced) trace::compiled(key.a, tiered ? "compiled quick" : "compiled", traced, program.size());
    deliver_warnings();  // any the warm-up thread found
  }
  if (!upgrade) quick.reset();
  std::lock_guard<std::mutex> lock(mu_);
  insert(key, exe, std::move(quick), quick ? overrides : nullptr);
  return exe;
}

std::string Cache::quick_path_of(const std::string& program) const {
  return path_of("quick\n" + program);
}

std::string Cache::path_of(const std::string& program) const {
  if (directory_.empty()) return {};
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.xc",
                static_cast<unsigned long long>(hash(identity_ + program)));
  return directory_ + "/" + name;
}

pjrt::ExecutablePtr Cache::get_uncounted(const std::string& program) {
  std::string path = path_of(program);
  if (pjrt::ExecutablePtr exe = path.empty() ? nullptr : load(path, program, /*caller=*/false))
    return exe;
  pjrt::ExecutablePtr exe = compile(program, /*quick=*/false, nullptr);
  if (!path.empty()) store(path, program, *exe, /*counted=*/false);
  return exe;
}

pjrt::ExecutablePtr Cache::load(const std::string& path, const std::string& program,
                                bool caller) {
  if (!repair(path, caller)) return nullptr;
  std::ifstream f(path, std::ios::binary);
  if (!f) return nullptr;  // not stored yet
  std::stringstream ss;
  ss << f.rdbuf();
  std::string data = ss.str();
  // A damaged file is compiled again and replaced; it is warned about, as
  // damage here may mean damage elsewhere (a full disk, a failing one).
  auto damaged = [&](const char* why) -> pjrt::ExecutablePtr {
    warn(path, "cache_disk_damaged",
         "torch_tpu: the compile cache file " + path + " is damaged (" + why +
             "); the program is compiled again and the file replaced.",
         caller);
    return nullptr;
  };
  // Layout: magic, key length, key, executable length, executable, checksum.
  size_t pos = sizeof(kMagic);
  uint64_t key_size = 0, exe_size = 0, checksum = 0;
  if (data.size() < pos || std::memcmp(data.data(), kMagic, pos) != 0)
    return damaged(data.empty() ? "empty" : "not a torch_tpu cache file");
  if (!get_u64(data, pos, key_size) || pos + key_size > data.size()) return damaged("truncated");
  // Another program or plugin under the same name (a hash collision): not
  // damage; the newer one replaces it.
  if (data.compare(pos, key_size, identity_ + program) != 0) return nullptr;
  pos += key_size;
  if (!get_u64(data, pos, exe_size) || pos + exe_size > data.size()) return damaged("truncated");
  std::string exe_bytes = data.substr(pos, exe_size);
  pos += exe_size;
  size_t body = pos;
  if (!get_u64(data, pos, checksum) || pos != data.size()) return damaged("wrong length");
  if (hash(data.substr(0, body)) != checksum) return damaged("checksum mismatch");
  try {
    return client_.deserialize(exe_bytes);
  } catch (const pjrt::Error&) {
    return damaged("the plugin cannot load the executable in it");
  }
}

bool Cache::repair(const std::string& path, bool caller) {
  std::error_code ec;
  auto status = std::filesystem::symlink_status(path, ec);
  if (ec || !std::filesystem::exists(status) || std::filesystem::is_regular_file(status))
    return true;
  // Only this cache writes names like this one; what stands there instead
  // (a directory) would make every later store fail to rename onto it.
  std::string kind = std::filesystem::is_directory(status) ? "a directory" : "not a regular file";
  std::filesystem::remove_all(path, ec);
  if (ec) {
    warn(path, "cache_disk_unrepairable",
         "torch_tpu: the compile cache entry " + path + " is " + kind +
             " and cannot be removed (" + ec.message() +
             "); remove it by hand, or set TORCH_TPU_CACHE_DIR to another directory.",
         caller);
    return false;
  }
  warn(path, "cache_disk_repaired",
       "torch_tpu: the compile cache entry " + path + " was " + kind +
           "; removed it, and the program is compiled again and stored there.",
       caller);
  return true;
}

void Cache::warn(const std::string& path, const char* metric, const std::string& message,
                 bool caller) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!warned_.insert(path).second) return;
    pending_warnings_.push_back(message);
  }
  metrics_.count(metric);
  if (caller) deliver_warnings();
}

void Cache::deliver_warnings() {
  std::vector<std::string> out;
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!warn_ || pending_warnings_.empty()) return;
    out.swap(pending_warnings_);
    handler = warn_;
  }
  for (const std::string& m : out) handler(m);
}

void Cache::set_warning_handler(std::function<void(const std::string&)> handler) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    warn_ = std::move(handler);
  }
  deliver_warnings();
}

void Cache::store(const std::string& path, const std::string& program,
                  const pjrt::Executable& exe, bool counted) {
  std::string bytes;
  try {
    bytes = exe.serialize();
  } catch (const pjrt::Error&) {
    return;  // the plugin cannot serialize: memory tier only
  }
  if (bytes.empty()) return;
  std::string data(kMagic, sizeof(kMagic));
  std::string key = identity_ + program;
  put_u64(data, key.size());
  data += key;
  put_u64(data, bytes.size());
  data += bytes;
  put_u64(data, hash(data));
  // Write a private temporary file, then rename: readers see whole files only.
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return;
  }
  if (!counted) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.disk_bytes += static_cast<int64_t>(data.size());
}

CacheStats Cache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Cache::clear(bool disk) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  recent_.clear();
  stats_ = CacheStats{};
  if (disk && !directory_.empty()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(directory_, ec))
      if (e.path().extension() == ".xc" || e.path().extension() == ".lock")
        std::filesystem::remove_all(e.path(), ec);
  }
}

}  // namespace torch_tpu::engine
