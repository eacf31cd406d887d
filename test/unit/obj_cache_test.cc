// core/alloc/obj_cache.h: a cache's arguments and rounding, its class (reused after a
// clean destroy, retired after one with live objects), the constructor run once per
// object when its slab is carved, the zero flag, running out of cache classes, and the
// registry walk. Poison and the public API are tested through the shim
// (test/conformance/bulk_cache.c).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/alloc/obj_cache.h"
#include "core/core.h"

using namespace uslab;

namespace {
int g_ctor_calls;
void count_ctor(void* p) {
  g_ctor_calls++;
  memcpy(p, "made", 5);
}

ObjCache* create(const char* name, size_t size, size_t align = 0, unsigned flags = 0,
                 void (*ctor)(void*) = nullptr) {
  int err = -1;
  ObjCache* c = obj_cache_create(name, size, align, flags, ctor, &err);
  CHECK(err == (c ? 0 : ENOMEM));
  return c;
}

int refused(size_t size, size_t align, unsigned flags, void (*ctor)(void*) = nullptr) {
  int err = 0;
  ObjCache* c = obj_cache_create("refused", size, align, flags, ctor, &err);
  CHECK(c == nullptr);
  return err;
}
}  // namespace

TEST_CASE("a cache's arguments are checked and its size rounded up to its alignment") {
  CHECK(refused(0, 0, 0) == EINVAL);
  CHECK(refused(kMaxSmall + 1, 0, 0) == EINVAL);
  CHECK(refused(64, 24, 0) == EINVAL);                  // not a power of two
  CHECK(refused(64, 2 * kPageSize, 0) == EINVAL);       // above the slabs' alignment
  CHECK(refused(64, 0, kCacheFlags + 1) == EINVAL);     // an unknown flag
  CHECK(refused(64, 0, kCacheZero, count_ctor) == EINVAL);    // a constructed object
  CHECK(refused(64, 0, kCachePoison, count_ctor) == EINVAL);  // must stay as made

  struct Case {
    size_t size, align;
    unsigned flags;
    uint32_t want_size, want_align;
  } cases[] = {{20, 0, 0, 32, 16},          {4, 0, 0, 8, 8},      {20, 0, kCacheHwAlign, 64, 64},
               {100, 256, 0, 256, 256},     {8, 2, 0, 8, 8},      {kMaxSmall, 0, 0, kMaxSmall, 16},
               {24, 0, kCacheZero, 32, 16}};
  for (const Case& k : cases) {
    ObjCache* c = create("sizes", k.size, k.align, k.flags);
    REQUIRE(c != nullptr);
    CHECK(c->size == k.want_size);
    CHECK(c->align == k.want_align);
    CHECK(c->cls >= kFirstCacheClass);
    CHECK(obj_cache_of(c->cls) == c);
    CHECK(class_size(c->cls) == c->size);
    obj_cache_destroy(c);
    CHECK(obj_cache_of(c->cls) == nullptr);
  }
  // A name is kept up to its record's size, cut and terminated beyond.
  const std::string longer(100, 'n');
  ObjCache* c = create(longer.c_str(), 64);
  REQUIRE(c != nullptr);
  CHECK(std::string(c->name) == longer.substr(0, sizeof c->name - 1));
  obj_cache_destroy(c);
}

TEST_CASE("a destroyed cache's class is reused; one destroyed with live objects is retired") {
  ObjCache* a = create("first", 96);
  REQUIRE(a != nullptr);
  const unsigned cls = a->cls;
  obj_cache_destroy(a);
  ObjCache* b = create("second", 96);
  REQUIRE(b != nullptr);
  CHECK(b->cls == cls);  // the lowest free class
  void* live = heap::cache_alloc(b);
  REQUIRE(live != nullptr);
  obj_cache_destroy(b);  // reports the live object, keeps its slab
  CHECK(b->retired);
  CHECK(obj_cache_of(cls) == b);
  memset(live, 1, 96);  // still valid memory
  ObjCache* c = create("third", 96);
  REQUIRE(c != nullptr);
  CHECK(c->cls != cls);
  obj_cache_destroy(c);
}

TEST_CASE("a cache's constructor runs once per object, when its slab is carved") {
  ObjCache* c = create("constructed", 200, 0, 0, count_ctor);
  REQUIRE(c != nullptr);
  const unsigned cls = c->cls;
  const size_t per_slab = g_class_info[cls].objects;
  g_ctor_calls = 0;
  std::vector<void*> objs(per_slab);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), per_slab) == per_slab);
  CHECK(g_ctor_calls == static_cast<int>(per_slab));
  // Objects straight from the slabs are closed to the sanitizers until the facade
  // hands them out (track.h): opened to be read here.
  for (void* p : objs) {
    track_open(p, 5);
    REQUIRE(memcmp(p, "made", 5) == 0);
    track_close(p, 5);
  }
  // Back and out again: the same objects, as the constructor left them, not made again.
  central_free(cls, objs.data(), per_slab);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), per_slab) == per_slab);
  CHECK(g_ctor_calls == static_cast<int>(per_slab));
  central_free(cls, objs.data(), per_slab);
  obj_cache_destroy(c);
  CHECK(obj_cache_of(cls) == nullptr);
}

TEST_CASE("a zeroing cache hands out zeroed objects, whatever was written before") {
  ObjCache* c = create("zeroed", 72, 0, kCacheZero);
  REQUIRE(c != nullptr);
  std::vector<void*> objs;
  for (int i = 0; i < 100; i++) {
    void* p = heap::cache_alloc(c);
    REQUIRE(p != nullptr);
    memset(p, 0xee, 72);
    objs.push_back(p);
  }
  for (void* p : objs) heap::cache_free(c, p);
  bool zero = true;
  for (void*& p : objs) {
    p = heap::cache_alloc(c);
    for (int k = 0; k < 72; k++) zero &= static_cast<unsigned char*>(p)[k] == 0;
  }
  CHECK(zero);
  for (void* p : objs) heap::cache_free(c, p);
  obj_cache_destroy(c);
}

TEST_CASE("cache classes run out with ENOMEM, and a destroy gives one back") {
  std::vector<ObjCache*> made;
  int err = 0;
  for (;;) {
    ObjCache* c = obj_cache_create("many", 48, 0, 0, nullptr, &err);
    if (!c) break;
    made.push_back(c);
  }
  CHECK(err == ENOMEM);
  CHECK(!made.empty());
  CHECK(made.size() <= kMaxClasses - kFirstCacheClass);
  obj_cache_destroy(made.back());
  made.pop_back();
  ObjCache* again = obj_cache_create("again", 48, 0, 0, nullptr, &err);
  REQUIRE(again != nullptr);
  made.push_back(again);
  // The registry walk lists each of them.
  std::vector<const ObjCache*> seen;
  obj_cache_for_each([](const ObjCache* c, void* arg) {
    static_cast<std::vector<const ObjCache*>*>(arg)->push_back(c);
  }, &seen);
  for (ObjCache* c : made) CHECK(std::find(seen.begin(), seen.end(), c) != seen.end());
  for (ObjCache* c : made) obj_cache_destroy(c);
  seen.clear();
  obj_cache_for_each([](const ObjCache* c, void* arg) {
    static_cast<std::vector<const ObjCache*>*>(arg)->push_back(c);
  }, &seen);
  for (ObjCache* c : made) CHECK(std::find(seen.begin(), seen.end(), c) == seen.end());
}
