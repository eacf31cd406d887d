// core/platform/track.h: what AddressSanitizer is told about uslab's objects. Built
// into the AddressSanitizer unit tests only (tools/uslab test sanitize): elsewhere
// the calls are empty and there is nothing to see.
#include <catch2/catch.hpp>

#include <sanitizer/asan_interface.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/core.h"

using namespace uslab;

#if USLAB_TRACK_ASAN

namespace {

// Whether the program may touch all n bytes at p.
bool usable(const void* p, size_t n) { return __asan_region_is_poisoned(const_cast<void*>(p), n) == nullptr; }
// Whether the first byte at p is poisoned.
bool poisoned(const void* p) { return __asan_address_is_poisoned(p) != 0; }

// An object of `size` bytes: usable from its start to its usable size while held,
// poisoned at its start once freed.
void check_cycle(size_t size) {
  INFO("size " << size);
  void* p = heap::alloc(size);
  REQUIRE(p != nullptr);
  size_t n = heap::usable_size(p);
  CHECK(usable(p, n));
  memset(p, 1, n);
  heap::free(p);
  CHECK(poisoned(p));
}

}  // namespace

TEST_CASE("objects of every kind are the program's while held and poisoned once freed") {
  for (size_t size : {8, 16, 24, 100, 1024, 4000, 32768, 40000, 300000, 5 << 20, 40 << 20})
    check_cycle(size);
  // The same memory again: a freed slot handed out anew is usable again.
  for (int i = 0; i < 3; i++) check_cycle(64);
}

TEST_CASE("calloc, aligned allocation and realloc hand out usable memory") {
  void* z = heap::alloc_zeroed(3000);
  CHECK(usable(z, 3000));
  heap::free(z);
  CHECK(poisoned(z));
  void* a = heap::alloc_aligned(200, 4096);
  CHECK(usable(a, heap::usable_size(a)));
  heap::free(a);
  // realloc that moves: the old object is freed; grow and shrink a large one in place.
  char* p = static_cast<char*>(heap::alloc(64));
  char* q = static_cast<char*>(heap::realloc(p, 100000));
  CHECK(poisoned(p));
  CHECK(usable(q, heap::usable_size(q)));
  size_t before = heap::usable_size(q);
  char* r = static_cast<char*>(heap::realloc(q, 40000));
  CHECK(usable(r, heap::usable_size(r)));
  if (r == q && heap::usable_size(r) < before) CHECK(poisoned(r + heap::usable_size(r)));
  heap::free(r);
  CHECK(poisoned(r));
  // A huge block shrunk in place gives its tail back to the OS: whatever maps that
  // range next must find it unpoisoned (the fuzzer found this one).
  char* h = static_cast<char*>(heap::alloc(size_t{40} << 20));
  char* hs = static_cast<char*>(heap::realloc(h, size_t{10} << 20));
  REQUIRE(hs == h);
  CHECK(usable(hs, size_t{10} << 20));
  CHECK(usable(h + (size_t{20} << 20), 4096));
  heap::free(hs);
}

TEST_CASE("bulk allocations and object caches hand out and take back each object") {
  void* objs[100];
  REQUIRE(heap::alloc_bulk(48, 100, objs) == 100);
  for (void* o : objs) CHECK(usable(o, 48));
  heap::free_bulk(100, objs);
  for (void* o : objs) CHECK(poisoned(o));

  ObjCache* c = heap::cache_create("track_test", 40, 0, 0, [](void* o) { memset(o, 7, 40); });
  REQUIRE(c != nullptr);
  void* one = heap::cache_alloc(c);
  REQUIRE(one != nullptr);
  CHECK(usable(one, 40));
  CHECK(static_cast<unsigned char*>(one)[39] == 7);  // constructed while poisoned
  heap::cache_free(c, one);
  CHECK(poisoned(one));
  REQUIRE(heap::cache_alloc_bulk(c, 100, objs) == 100);
  for (void* o : objs) CHECK(usable(o, 40));
  heap::cache_free_bulk(c, 100, objs);
  for (void* o : objs) CHECK(poisoned(o));
  heap::cache_destroy(c);
}

TEST_CASE("AddressSanitizer reports a use after free of a uslab object") {
  // In a child, which dies of the report: its stderr goes to a pipe, read here.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    volatile char* p = static_cast<char*>(heap::alloc(100));
    p[0] = 1;
    heap::free(const_cast<char*>(p));
    char c = p[10];  // reported here
    _exit(c == 42 ? 3 : 0);
  }
  close(fds[1]);
  std::string err;
  char buf[4096];
  for (ssize_t k; (k = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, k);
  close(fds[0]);
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  INFO(err);
  CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
  CHECK(err.find("use-after-poison") != std::string::npos);
}

#endif
