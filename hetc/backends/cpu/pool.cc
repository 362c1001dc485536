// hetc's CPU thread pool, linked into every CPU library hetc writes (hetc/backends/cpu/pool.py).
//
// TVM's generated code runs each parallel loop through the function pointer
// __TVMBackendParallelLaunch, which TVM points at its own pool when it loads the library;
// hetc_pool_install() (called through ctypes right after: hetc/runtime/standalone.py) points it
// here instead. Why: TVM's pool splits a loop statically, one chunk per thread, and the caller
// waits for every chunk. When another runtime's threads spin on the same cores (onnxruntime's
// pool spins after each call, as users leave it), a worker that is not scheduled holds the call
// for a whole scheduler time slice: a 0.07 ms transformer block took 33 ms alternating with
// onnxruntime on a 2-core Zen 5. Here the caller and the workers claim the loop's chunks from one
// atomic counter; a worker that has not started yet claims nothing and is not waited for (the
// caller runs its chunks), so a busy core costs at most what the caller would take alone.
//
// Workers spin for a bounded time after each loop (HETC_POOL_SPIN_US, default below) and then
// sleep on a futex; they are started at the first parallel loop, stopped and joined when the
// library is unloaded, and forgotten in a forked child (which then starts its own).
// A launch from inside a task, or while another thread's loop holds the pool, runs inline.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

extern "C" {
typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

// Defined by TVM's LLVM code generation in libraries with parallel loops (weak: absent otherwise).
extern void* __TVMBackendParallelLaunch __attribute__((weak));
extern void* __TVMBackendParallelBarrier __attribute__((weak));
// tvm_ffi's error slot is thread-local: a chunk that fails on a worker leaves its error there,
// and the pool moves it to the caller's (weak: resolved from libtvm_ffi when TVM loads us).
void TVMFFIErrorMoveFromRaised(void** result) __attribute__((weak));
void TVMFFIErrorSetRaised(void* error) __attribute__((weak));
int TVMFFIObjectDecRef(void* obj) __attribute__((weak));
}

namespace {

thread_local bool in_task = false;
thread_local bool worker = false;

using Clock = std::chrono::steady_clock;

constexpr uint64_t kIndexMask = 0xffffffffull;

struct Pool {
  // The current loop: the claim ticket is (epoch << 32) | next chunk index.
  alignas(64) std::atomic<uint64_t> ticket{0};
  alignas(64) std::atomic<int> done{0};
  std::atomic<FTVMParallelLambda> fn{nullptr};
  std::atomic<void*> cdata{nullptr};
  std::atomic<int> ntask{0};
  std::atomic<int> status{0};
  std::atomic<void*> error{nullptr};  // the first failed worker chunk's error object
  std::atomic<uint64_t> launches{0}, worker_chunks{0};  // counters for hetc_pool_stats
  alignas(64) std::atomic<uint32_t> wake{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::atomic_flag busy = ATOMIC_FLAG_INIT;

  int threads = 1;  // the caller included
  int grain = 1;    // chunks per thread of a loop whose launch leaves the count to the pool
  int64_t spin_ns = 200000;
  std::mutex lifecycle;
  std::vector<pthread_t> workers;

  ~Pool() { StopWorkers(); }

  void StopWorkers() {
    std::lock_guard<std::mutex> lock(lifecycle);
    stop.store(true);
    wake.fetch_add(1);
    wake.notify_all();
    for (pthread_t t : workers) pthread_join(t, nullptr);
    workers.clear();
    stop.store(false);
  }

  void StartWorkers() {
    std::lock_guard<std::mutex> lock(lifecycle);
    for (int i = static_cast<int>(workers.size()) + 1; i < threads; ++i) {
      pthread_t t;
      if (pthread_create(&t, nullptr, &Pool::WorkerMain, this) != 0) break;  // the caller copes alone
      workers.push_back(t);
    }
  }

  void Failed(int rc) {
    status.store(rc, std::memory_order_relaxed);
    if (!worker || TVMFFIErrorMoveFromRaised == nullptr) return;
    void* err = nullptr;
    TVMFFIErrorMoveFromRaised(&err);
    void* none = nullptr;
    if (err != nullptr && !error.compare_exchange_strong(none, err) && TVMFFIObjectDecRef != nullptr) {
      TVMFFIObjectDecRef(err);  // another chunk's error is already kept
    }
  }

  // Run chunks of the loop of `epoch` until none is left (or the loop was replaced).
  void Claim(uint32_t epoch) {
    // Read after `epoch` was seen published: this loop's count, or a later loop's (whose
    // ticket then has another epoch, so nothing is claimed with it).
    const int n = ntask.load(std::memory_order_relaxed);
    uint64_t t = ticket.load(std::memory_order_acquire);
    while ((t >> 32) == epoch && (t & kIndexMask) < static_cast<uint64_t>(n)) {
      if (!ticket.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      // The loop cannot finish (nor be replaced) before this claimed chunk is counted done.
      TVMParallelGroupEnv env{nullptr, n};
      int rc = fn.load(std::memory_order_relaxed)(static_cast<int>(t & kIndexMask), &env,
                                                  cdata.load(std::memory_order_relaxed));
      if (rc != 0) Failed(rc);
      if (worker) worker_chunks.fetch_add(1, std::memory_order_relaxed);
      done.fetch_add(1, std::memory_order_acq_rel);
      t = ticket.load(std::memory_order_acquire);
    }
  }

  static void* WorkerMain(void* arg) {
    static_cast<Pool*>(arg)->Work();
    return nullptr;
  }

  void Work() {
    in_task = worker = true;  // a launch from inside a chunk runs inline
    uint32_t seen = static_cast<uint32_t>(ticket.load() >> 32);
    for (;;) {
      // Spin a bounded time for the next loop, then sleep until one is published.
      auto until = Clock::now() + std::chrono::nanoseconds(spin_ns);
      uint32_t epoch;
      int polls = 0;
      while ((epoch = static_cast<uint32_t>(ticket.load(std::memory_order_acquire) >> 32)) == seen &&
             !stop.load(std::memory_order_relaxed)) {
        cpu_relax();
        if (++polls % 64 == 0 && Clock::now() > until) {
          sleepers.fetch_add(1);
          uint32_t w = wake.load();
          if (static_cast<uint32_t>(ticket.load() >> 32) == seen && !stop.load()) wake.wait(w);
          sleepers.fetch_sub(1);
          until = Clock::now() + std::chrono::nanoseconds(spin_ns);
        }
      }
      if (stop.load()) return;
      seen = epoch;
      Claim(epoch);
    }
  }
};

Pool pool;

int Launch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  if (pool.threads <= 1 || in_task || pool.busy.test_and_set(std::memory_order_acquire)) {
    TVMParallelGroupEnv env{nullptr, 1};  // nested, single-threaded, or another thread holds the pool
    return flambda(0, &env, cdata);
  }
  if (pool.workers.size() + 1 < static_cast<size_t>(pool.threads)) pool.StartWorkers();
  int n = num_task > 0 ? num_task : pool.threads * pool.grain;
  pool.fn.store(flambda, std::memory_order_relaxed);
  pool.cdata.store(cdata, std::memory_order_relaxed);
  pool.ntask.store(n, std::memory_order_relaxed);
  pool.status.store(0, std::memory_order_relaxed);
  pool.done.store(0, std::memory_order_relaxed);
  uint32_t epoch = static_cast<uint32_t>(pool.ticket.load() >> 32) + 1;
  pool.ticket.store(static_cast<uint64_t>(epoch) << 32);  // publishes the fields above
  pool.wake.fetch_add(1);
  if (pool.sleepers.load() > 0) pool.wake.notify_all();
  in_task = true;
  pool.Claim(epoch);
  in_task = false;
  // Chunks claimed by workers that are still running: spin briefly, then give up the core
  // (a preempted worker may be waiting for it).
  for (int polls = 0; pool.done.load(std::memory_order_acquire) < n; ++polls) {
    if (polls < 4096) cpu_relax(); else std::this_thread::yield();
  }
  int rc = pool.status.load(std::memory_order_relaxed);
  if (void* err = pool.error.exchange(nullptr)) {  // a worker's failure, raised in the caller's thread
    TVMFFIErrorSetRaised(err);
    TVMFFIObjectDecRef(err);
  }
  pool.launches.fetch_add(1, std::memory_order_relaxed);
  pool.busy.clear(std::memory_order_release);
  return rc;
}

void ForgetWorkersInChild() {
  // Only the forking thread exists in the child: the workers' handles name nothing there.
  pool.workers.clear();
  pool.sleepers.store(0);
  pool.busy.clear();
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return (end != nullptr && *end == '\0' && x >= 0) ? x : fallback;
}

}  // namespace

#if defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
// Linux hands AMX's tile state only to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); the first tile instruction of one that has not raises SIGILL. The
// int8-amx kernels (schedules/amx.py) use it, so every library asks when it is loaded, on CPUs
// with AMX-TILE (CPUID leaf 7, EDX bit 24). Asking again is harmless.
__attribute__((constructor)) static void RequestAmxTileData() {
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24))) syscall(SYS_arch_prctl, 0x1023, 18);
}
#endif

extern "C" {

// Point this library's parallel loops at the pool, sized to `threads` (the caller included).
// Returns 0, or 1 when the library cannot use it (a loop needs TVM's barrier) and keeps TVM's pool.
__attribute__((visibility("default"))) int hetc_pool_install(int threads) {
  if (&__TVMBackendParallelLaunch == nullptr) return 0;  // no parallel loop in this library
  if (&__TVMBackendParallelBarrier != nullptr) return 1;
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &ForgetWorkersInChild); });
  int wanted = threads > 0 ? threads : 1;
  pool.spin_ns = EnvInt("HETC_POOL_SPIN_US", pool.spin_ns / 1000) * 1000;
  pool.grain = static_cast<int>(std::max<int64_t>(1, EnvInt("HETC_POOL_GRAIN", pool.grain)));
  if (wanted < static_cast<int>(pool.workers.size()) + 1) pool.StopWorkers();
  pool.threads = wanted;
  __TVMBackendParallelLaunch = reinterpret_cast<void*>(&Launch);
  return 0;
}

// Parallel loops run by the pool so far, and chunks of them that workers ran (for tests).
__attribute__((visibility("default"))) void hetc_pool_stats(uint64_t* launches, uint64_t* worker_chunks) {
  *launches = pool.launches.load();
  *worker_chunks = pool.worker_chunks.load();
}

}  // extern "C"
