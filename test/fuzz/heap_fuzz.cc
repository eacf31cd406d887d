// test/fuzz/heap_fuzz.cc — libFuzzer harness for the core (built with clang, ASan and
// UBSan by `tools/uslab test fuzz`): each input is a sequence of operations — malloc,
// calloc, aligned allocation, realloc, free, bulk allocation and free, object caches,
// deferred frees inside and outside read-side sections, trim — over a table of live
// blocks. Every block carries a pattern derived from its slot; the harness checks the
// pattern whenever a block is touched again, the usable size, the alignment, calloc's
// zeroes and realloc's preserved prefix, and at the end of each input frees
// everything and checks that no deferred free is left pending. A broken invariant
// aborts (libFuzzer keeps the input); memory errors are ASan's. In a fault-injection
// build (core/platform/fault.h), an input that starts with "F!" then picks a system
// call, an error and a rate: that call fails so while the operations run (an
// allocation may then fail; nothing else may change), and makes its calls again for
// the final frees and checks.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/core.h"
#if USLAB_FAULT_INJECTION
#include "core/platform/fault.h"
#endif

using namespace uslab;

namespace {

constexpr unsigned kSlots = 64;
constexpr unsigned kCaches = 3;

struct Block {
  unsigned char* p;
  size_t size;  // bytes the pattern covers
  ObjCache* cache;
};

Block slots[kSlots];
ObjCache* caches[kCaches];
const size_t kCacheSizes[kCaches] = {24, 200, 3000};

[[noreturn]] void fail(const char* what, unsigned slot) {
  fprintf(stderr, "heap_fuzz: %s (slot %u)\n", what, slot);
  abort();
}

unsigned char pattern(unsigned slot, size_t i) { return static_cast<unsigned char>(slot * 131 + i * 7 + 1); }

void fill(unsigned slot) {
  Block& b = slots[slot];
  // Ends and a stride in between: enough to see corruption, cheap for big blocks.
  for (size_t i = 0; i < b.size; i += (i < 64 || b.size - i < 64) ? 1 : 4093) b.p[i] = pattern(slot, i);
}

void verify(unsigned slot, size_t upto) {
  Block& b = slots[slot];
  size_t n = upto < b.size ? upto : b.size;
  for (size_t i = 0; i < n; i += (i < 64 || b.size - i < 64) ? 1 : 4093)
    if (b.p[i] != pattern(slot, i)) fail("block contents changed", slot);
}

void release(unsigned slot, bool deferred) {
  Block& b = slots[slot];
  if (!b.p) return;
  verify(slot, b.size);
  if (deferred)
    heap::free_deferred(b.p);
  else if (b.cache)
    heap::cache_free(b.cache, b.p);
  else
    heap::free(b.p);
  b = Block{};
}

void adopt(unsigned slot, void* p, size_t size, ObjCache* cache, size_t align) {
  if (!p) return;  // a failed allocation (huge sizes): fine, nothing to check
  if (reinterpret_cast<uintptr_t>(p) % align) fail("misaligned block", slot);
  if (heap::usable_size(p) < size) fail("usable size below the request", slot);
  release(slot, false);
  slots[slot] = Block{static_cast<unsigned char*>(p), size, cache};
  fill(slot);
}

struct Reader {
  const uint8_t* d;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    n--;
    return *d++;
  }
  size_t size() {
    // Mostly small, sometimes page-sized or large, rarely huge.
    uint8_t k = byte();
    size_t v = byte() | size_t{byte()} << 8;
    switch (k >> 6) {
      case 0: return v % 256;
      case 1: return v % 4096;
      case 2: return v % 65536;
      default: return (k & 1) ? v << 6 : v << 8;  // up to 4 or 16 MiB
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (unsigned c = 0; c < kCaches; c++)
    if (!caches[c]) {
      char name[16];
      snprintf(name, sizeof name, "fuzz%u", c);
      caches[c] = heap::cache_create(name, kCacheSizes[c], c == 2 ? 64 : 0, 0, nullptr);
    }
  Reader in{data, size};
#if USLAB_FAULT_INJECTION
  static const char* const kFaultCalls[] = {"mmap",    "munmap",     "mremap", "madvise",
                                            "mprotect", "membarrier", "getrandom", "openat"};
  static const long kFaultErrors[] = {ENOMEM, EAGAIN, EINVAL, EPERM};
  const bool faults = in.n >= 5 && in.d[0] == 'F' && in.d[1] == '!';
  if (faults) {
    in.byte(), in.byte();
    const char* call = kFaultCalls[in.byte() % 8];
    long error = kFaultErrors[in.byte() % 4];
    os::fault::set_rule(call, error, 1 + in.byte() * 4u, size);
  }
#endif
  int sections = 0;
  while (in.n) {
    uint8_t op = in.byte();
    unsigned slot = in.byte() % kSlots;
    switch (op % 13) {
      case 0:
      case 1: {
        size_t s = in.size();
        adopt(slot, heap::alloc(s), s, nullptr, s >= 16 ? 16 : 8);
        break;
      }
      case 2: {
        size_t n = in.byte() % 16 + 1, s = in.size() % 8192;
        unsigned char* p = static_cast<unsigned char*>(heap::alloc_zeroed(n * s));
        for (size_t i = 0; p && i < n * s; i++)
          if (p[i]) fail("calloc memory not zero", slot);
        adopt(slot, p, n * s, nullptr, 8);
        break;
      }
      case 3: {
        size_t align = size_t{1} << (in.byte() % 22), s = in.size();
        adopt(slot, heap::alloc_aligned(s, align), s, nullptr, align);
        break;
      }
      case 4: {
        Block& b = slots[slot];
        if (!b.p || b.cache) break;
        size_t s = in.size();
        if (s == 0) s = 1;
        verify(slot, b.size);
        void* q = heap::realloc(b.p, s);
        if (!q) break;  // the old block stays
        b.p = static_cast<unsigned char*>(q);
        verify(slot, s);  // the common prefix moved along
        b.size = s;
        fill(slot);
        break;
      }
      case 5:
      case 6:
        release(slot, false);
        break;
      case 7: {
        unsigned c = in.byte() % kCaches;
        if (caches[c]) adopt(slot, heap::cache_alloc(caches[c]), kCacheSizes[c], caches[c], c == 2 ? 64 : 8);
        break;
      }
      case 8: {
        // Bulk: allocate into consecutive slots, or free a run of them in one call.
        unsigned n = in.byte() % 16 + 1;
        if (in.byte() & 1) {
          void* out[16];
          size_t s = in.size() % 4096;
          if (heap::alloc_bulk(s ? s : 1, n, out) == n)
            for (unsigned i = 0; i < n; i++) adopt((slot + i) % kSlots, out[i], s ? s : 1, nullptr, 8);
        } else {
          void* ptrs[16];
          unsigned k = 0;
          for (unsigned i = 0; i < n; i++) {
            Block& b = slots[(slot + i) % kSlots];
            if (!b.p || b.cache) continue;
            verify((slot + i) % kSlots, b.size);
            ptrs[k++] = b.p;
            b = Block{};
          }
          heap::free_bulk(k, ptrs);
        }
        break;
      }
      case 9:
        release(slot, true);
        break;
      case 10:
        if (sections < 4) {
          heap::read_lock();
          sections++;
        }
        break;
      case 11:
        if (sections > 0) {
          heap::read_unlock();
          sections--;
        }
        break;
      case 12:
        if (in.byte() % 8 == 0) heap::trim();
        break;
    }
  }
  while (sections-- > 0) heap::read_unlock();
#if USLAB_FAULT_INJECTION
  if (faults) os::fault::set_rule(nullptr, 0, 0, 0);
#endif
  for (unsigned s = 0; s < kSlots; s++) release(s, s % 3 == 0);
  heap::deferred_barrier();
  if (heap::deferred_stats().objects_pending != 0) fail("deferred frees left pending", 0);
  return 0;
}
