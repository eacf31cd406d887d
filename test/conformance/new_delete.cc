// test/conformance/new_delete.cc — every replaceable operator new/delete through the
// preloaded libuslab.so: each resolves to uslab, aligned forms align, failure calls
// the new-handler then throws std::bad_alloc (nothrow forms return nullptr), and a
// sized delete frees, and given the wrong size does not corrupt the heap.
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "test/common/check.h"

namespace {

int handler_calls = 0;
void handler() {
  handler_calls++;
  std::set_new_handler(nullptr);  // next failure throws
}

template <typename F>
bool throws_bad_alloc(F f) {
  try {
    f();
  } catch (const std::bad_alloc&) {
    return true;
  }
  return false;
}

struct alignas(64) Line {
  char b[64];
};
struct alignas(4096) Page {
  char b[100];
};

}  // namespace

int main() {
  require_uslab();
  using std::align_val_t;
  using std::nothrow_t;
  // Each of the 20 forms, by address: they must all be uslab's.
  void* fns[] = {
      reinterpret_cast<void*>(static_cast<void* (*)(size_t)>(&operator new)),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t)>(&operator new[])),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t, const nothrow_t&) noexcept>(&operator new)),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t, const nothrow_t&) noexcept>(&operator new[])),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t, align_val_t)>(&operator new)),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t, align_val_t)>(&operator new[])),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t, align_val_t, const nothrow_t&) noexcept>(&operator new)),
      reinterpret_cast<void*>(static_cast<void* (*)(size_t, align_val_t, const nothrow_t&) noexcept>(&operator new[])),
      reinterpret_cast<void*>(static_cast<void (*)(void*) noexcept>(&operator delete)),
      reinterpret_cast<void*>(static_cast<void (*)(void*) noexcept>(&operator delete[])),
      reinterpret_cast<void*>(static_cast<void (*)(void*, size_t) noexcept>(&operator delete)),
      reinterpret_cast<void*>(static_cast<void (*)(void*, size_t) noexcept>(&operator delete[])),
      reinterpret_cast<void*>(static_cast<void (*)(void*, const nothrow_t&) noexcept>(&operator delete)),
      reinterpret_cast<void*>(static_cast<void (*)(void*, const nothrow_t&) noexcept>(&operator delete[])),
      reinterpret_cast<void*>(static_cast<void (*)(void*, align_val_t) noexcept>(&operator delete)),
      reinterpret_cast<void*>(static_cast<void (*)(void*, align_val_t) noexcept>(&operator delete[])),
      reinterpret_cast<void*>(static_cast<void (*)(void*, size_t, align_val_t) noexcept>(&operator delete)),
      reinterpret_cast<void*>(static_cast<void (*)(void*, size_t, align_val_t) noexcept>(&operator delete[])),
      reinterpret_cast<void*>(static_cast<void (*)(void*, align_val_t, const nothrow_t&) noexcept>(&operator delete)),
      reinterpret_cast<void*>(static_cast<void (*)(void*, align_val_t, const nothrow_t&) noexcept>(&operator delete[])),
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    bool ok = symbol_is_uslab(fns[i]);
    if (!ok) fprintf(stderr, "  operator form %zu is not uslab's\n", i);
    CHECK(ok);
  }

  // Plain, array, aligned (over-aligned types go through align_val_t).
  int* i = new int(5);
  CHECK(*i == 5);
  delete i;
  int* arr = new int[1000]();
  CHECK(arr[999] == 0);
  delete[] arr;
  Line* l = new Line;
  CHECK(reinterpret_cast<uintptr_t>(l) % 64 == 0);
  delete l;
  Page* pg = new Page[3];
  CHECK(reinterpret_cast<uintptr_t>(pg) % 4096 == 0);
  delete[] pg;
  for (size_t a = 1; a <= (size_t{1} << 20); a <<= 1) {
    void* p = operator new(100, align_val_t(a));
    CHECK(reinterpret_cast<uintptr_t>(p) % a == 0);
    operator delete(p, 100, align_val_t(a));
    void* q = operator new[](a * 3, align_val_t(a), std::nothrow);
    CHECK(q && reinterpret_cast<uintptr_t>(q) % a == 0);
    operator delete[](q, align_val_t(a), std::nothrow);
  }

  // Failure: std::bad_alloc from the throwing forms, nullptr from the nothrow ones.
  const size_t huge = SIZE_MAX / 2;
  CHECK(throws_bad_alloc([&] { operator delete(operator new(huge)); }));
  CHECK(throws_bad_alloc([&] { operator delete[](operator new[](huge)); }));
  CHECK(throws_bad_alloc([&] { operator delete(operator new(huge, align_val_t(64)), align_val_t(64)); }));
  CHECK(operator new(huge, std::nothrow) == nullptr);
  CHECK(operator new[](huge, align_val_t(128), std::nothrow) == nullptr);
  // The new-handler is called before giving up.
  std::set_new_handler(handler);
  CHECK(throws_bad_alloc([&] { operator delete(operator new(huge)); }));
  CHECK(handler_calls == 1);

  // A sized delete frees: the object is the next one of its size (LIFO caches).
  int reused = 0;
  for (int k = 0; k < 1000; k++) {
    void* p = operator new(48);
    operator delete(p, size_t{48});
    void* q = operator new(48);
    reused += p == q;
    operator delete(q, size_t{48});
  }
  CHECK(reused > 900);

  // A sized delete with a wrong size (a larger class, a smaller one, a large size)
  // must not corrupt the heap.
  std::vector<char*> keep;
  const size_t lies[] = {8000, 16, 1 << 20};
  for (int k = 0; k < 1000; k++) {
    char* p = static_cast<char*>(operator new(64));
    operator delete(p, lies[k % 3]);
    char* q = static_cast<char*>(operator new(64));
    memset(q, k & 0xff, 64);
    keep.push_back(q);
  }
  bool intact = true;
  for (int k = 0; k < 1000; k++)
    for (int b = 0; b < 64; b++) intact &= keep[k][b] == static_cast<char>(k & 0xff);
  CHECK(intact);
  for (char* q : keep) operator delete(q, size_t{64});
  return check_done("new_delete");
}
