// core/alloc/sampler.cc — the sampling schedule (sampler.h): exponential draws, the
// hit-counter legs, the large allocations' byte countdown. Locking: see sampler.h;
// everything here is the caller's stream or the calling thread's.
#include "core/alloc/sampler.h"

#include <cstring>

#include "core/platform/platform.h"

namespace uslab {

bool g_sampling = false;
uint64_t g_sample_bytes = 512 << 10;
uint32_t g_sample_epoch = 0;

namespace {

constinit Mutex g_client_lock;
USLAB_LOCK_ONE(kSampler, g_client_lock);
struct Client {
  const SampleHooks* hooks;
  uint64_t mean;  // 0: not sampling
};
Client g_clients[static_cast<unsigned>(SampleClient::kCount)] = {};

void* dispatch_small(unsigned cls, Request r) {
  const Client& c = g_clients[static_cast<unsigned>(sample_pick())];
  const SampleHooks* h = __atomic_load_n(&c.hooks, __ATOMIC_ACQUIRE);
  return h && __atomic_load_n(&c.mean, __ATOMIC_RELAXED) ? h->small(cls, r) : nullptr;
}
constexpr SampleHooks kDispatch = {dispatch_small};

}  // namespace

const SampleHooks* g_sample_hooks = &kDispatch;

namespace {

__thread uint64_t t_rng __attribute__((tls_model("initial-exec")));
// Bytes left before the next large allocation sample; 0: not drawn yet.
__thread uint64_t t_large_left __attribute__((tls_model("initial-exec")));

constexpr double kLn2 = 0.6931471805599453;
constexpr uint64_t kMaxCount = uint64_t{1} << 40;
constexpr uint64_t kLeg = 65536 / kHitStep;  // pops from one carry to the next

// A uniform double in (0, 1] (xorshift64*, seeded per thread).
double uniform() {
  uint64_t x = t_rng;
  if (x == 0) x = os::random_u64() | 1;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t_rng = x;
  uint64_t r = x * 0x2545F4914F6CDD1DULL;
  return static_cast<double>((r >> 11) + 1) * 0x1.0p-53;
}

// Natural logarithm of x > 0 (libm is not ours to call): x = m 2^e with m in
// [0.707, 1.414), ln m = 2 atanh((m - 1) / (m + 1)) by its series (error < 1e-9).
double ln(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  b = (b & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);
  double m;
  memcpy(&m, &b, sizeof m);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e++;
  }
  double t = (m - 1) / (m + 1), t2 = t * t;
  double s =
      t * (2 + t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * (2.0 / 11))))));
  return s + e * kLn2;
}

// 1 - exp(-y) for y ≥ 0, accurate in relative terms also for tiny y (an 8-byte
// object at a 512 KiB mean: y = 1.5e-5).
double one_minus_exp_neg(double y) {
  if (y < 1e-2) return y * (1 - y / 2 * (1 - y / 3 * (1 - y / 4 * (1 - y / 5))));
  if (y > 700) return 1;
  int k = static_cast<int>(y * (1 / kLn2));
  double r = y - k * kLn2;  // exp(-y) = 2^-k exp(-r), r in [0, ln 2)
  // exp(-r) by its Taylor series to r^13 (error < 1e-13), Horner's rule with the
  // reciprocals precomputed: a division per term showed in a sampling-heavy loop.
  static constexpr double kInv[] = {1.0,      1.0 / 2,  1.0 / 3, 1.0 / 4, 1.0 / 5,
                                    1.0 / 6,  1.0 / 7,  1.0 / 8, 1.0 / 9, 1.0 / 10,
                                    1.0 / 11, 1.0 / 12, 1.0 / 13};
  double sum = 1;
  for (int i = 12; i >= 0; i--) sum = 1 - r * kInv[i] * sum;
  uint64_t bits = static_cast<uint64_t>(1023 - k) << 52;  // 2^-k, k < 1010
  double scale;
  memcpy(&scale, &bits, sizeof scale);
  return 1 - sum * scale;
}

double draw_exponential() { return -ln(uniform()) * static_cast<double>(g_sample_bytes); }

}  // namespace

double sample_probability(size_t size, uint64_t mean) {
  return one_minus_exp_neg(static_cast<double>(size) / static_cast<double>(mean));
}

// In the start-up window: guard::init calls it from the library's constructor.
USLAB_STARTUP_TEXT bool sample_set_client(SampleClient which, const SampleHooks* hooks,
                                          uint64_t mean_bytes) {
  LockGuard g(g_client_lock);
  Client& c = g_clients[static_cast<unsigned>(which)];
  if (hooks) __atomic_store_n(&c.hooks, hooks, __ATOMIC_RELEASE);
  __atomic_store_n(&c.mean, hooks || c.hooks ? mean_bytes : 0, __ATOMIC_RELAXED);
  double rate = 0;
  for (const Client& k : g_clients)
    if (k.mean) rate += 1 / static_cast<double>(k.mean);
  const bool was = g_sampling, on = rate > 0;
  uint64_t mean = on ? static_cast<uint64_t>(1 / rate) : g_sample_bytes;
  if (mean == 0) mean = 1;
  const bool arm = on && (!was || mean != g_sample_bytes);
  if (arm) {  // the epoch: a stream armed before re-arms at its next carry
    __atomic_store_n(&g_sample_bytes, mean, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_sample_epoch, 1, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&g_sampling, on, __ATOMIC_RELAXED);
  return arm;
}

uint64_t sample_client_bytes(SampleClient which) {
  return __atomic_load_n(&g_clients[static_cast<unsigned>(which)].mean, __ATOMIC_RELAXED);
}

double sample_share(SampleClient which) {
  const uint64_t prof = sample_client_bytes(SampleClient::kProfiler);
  const uint64_t guard = sample_client_bytes(SampleClient::kGuard);
  // Rates 1/prof and 1/guard: the profiler's share is guard / (prof + guard).
  const double p =
      !guard ? 1 : !prof ? 0 : static_cast<double>(guard) / (static_cast<double>(prof) + guard);
  return which == SampleClient::kProfiler ? p : 1 - p;
}

SampleClient sample_pick() {
  const double p = sample_share(SampleClient::kProfiler);
  return p >= 1 || (p > 0 && uniform() <= p) ? SampleClient::kProfiler : SampleClient::kGuard;
}

uint64_t sample_draw_count(size_t size) {
  double n = draw_exponential() / static_cast<double>(size ? size : 1);
  if (!(n < static_cast<double>(kMaxCount))) return kMaxCount;
  uint64_t k = static_cast<uint64_t>(n);
  return k + 1;  // the allocation whose bytes hold the sample point
}

uint64_t sample_draw_bytes() {
  double x = draw_exponential();
  return x < 1 ? 1 : x > 0x1.0p62 ? uint64_t{1} << 62 : static_cast<uint64_t>(x);
}

namespace {

// The counter value that carries after min(*left, max) more pops; *left keeps the rest.
uint16_t leg(uint64_t* left, uint64_t max = kLeg) {
  uint64_t k = *left < max ? *left : max;
  *left -= k;
  return static_cast<uint16_t>(65536 - k * kHitStep);  // kLeg pops: 0, a whole lap
}

}  // namespace

// A class with no size yet (an object cache not created): armed at its first pop,
// whose counter carries. A whole lap first (counter 0) left a new cache's first 4096
// allocations on each CPU out of every sample.
constexpr uint64_t kUnarmed = ~uint64_t{0};

uint16_t sample_arm(uint64_t* left, unsigned cls) {
  if (class_size(cls) == 0) {
    *left = kUnarmed;
    return static_cast<uint16_t>(65536 - kHitStep);
  }
  *left = sample_draw_count(class_size(cls));
  return leg(left);
}

bool sample_on_carry(uint64_t* left, unsigned cls, bool retry, uint16_t* counter) {
  if (*left == kUnarmed && !retry && class_size(cls) != 0) {
    // Armed at a miss, the class's first allocation on this stream: one of the draw's
    // (a new cache's first allocation is sampled as often as any other).
    *left = sample_draw_count(class_size(cls)) - 1;
    const bool now = *left == 0;
    *counter = now ? sample_arm(left, cls) : leg(left);
    return now;
  }
  const bool sampled = *left == 0;
  if (*left == kUnarmed || sampled) {
    if (sampled || !retry || class_size(cls) == 0) {
      *counter = sample_arm(left, cls);
      return sampled;
    }
    *left = sample_draw_count(class_size(cls));  // armed at a carry that pops again
  }
  if (!retry) {
    *counter = leg(left);
    return false;
  }
  // The carrying allocation pops again through the fast path, which adds its step
  // once more: the counter starts a step lower, and the leg is a pop shorter than a
  // whole lap, which would carry at that retry and take the next leg with no
  // allocation (a stream would sample after its count modulo 4096 pops).
  *counter = static_cast<uint16_t>(leg(left, kLeg - 1) - kHitStep);
  return false;
}

bool sample_large(size_t bytes) {
  uint64_t left = t_large_left;
  if (left == 0) left = sample_draw_bytes();
  if (bytes < left) {
    t_large_left = left - bytes;
    return false;
  }
  t_large_left = sample_draw_bytes();
  return true;
}

size_t sample_large_run(size_t bytes, size_t n) {
  if (n == 0) return 0;
  uint64_t left = t_large_left;
  if (left == 0) left = sample_draw_bytes();
  uint64_t total;  // a product, not a division: this runs on every bulk allocation
  if (!__builtin_mul_overflow(uint64_t{n}, uint64_t{bytes}, &total) && total < left) {
    t_large_left = left - total;
    return n;
  }
  // Object k is the first whose bytes reach what is left after the k before it.
  t_large_left = sample_draw_bytes();
  return static_cast<size_t>((left - 1) / bytes);
}

}  // namespace uslab
