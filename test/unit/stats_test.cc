// core/stats: one snapshot, rendered as the table and as the JSON document, says the
// same numbers in both; the document is well-formed JSON with each key once per object.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/core.h"
#include "core/stats/snapshot.h"

using namespace uslab;

namespace {

// A JSON document flattened to path -> value text ("bytes.mapped", "classes[2].size");
// fails the test on a syntax error or a key repeated in one object.
class FlatJson {
 public:
  explicit FlatJson(const std::string& text) : s_(text) {
    value("");
    space();
    REQUIRE(i_ == s_.size());
  }
  bool has(const std::string& path) const { return v_.count(path) != 0; }
  const std::string& at(const std::string& path) const {
    INFO("JSON path " << path);
    REQUIRE(has(path));
    return v_.at(path);
  }
  size_t num(const std::string& path) const { return std::stoull(at(path)); }

 private:
  void space() {
    while (i_ < s_.size() && isspace(static_cast<unsigned char>(s_[i_]))) i_++;
  }
  void expect(char c) {
    space();
    INFO("at byte " << i_ << " of the document");
    REQUIRE(i_ < s_.size());
    REQUIRE(s_[i_] == c);
    i_++;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') i_++;
      out += s_[i_++];
    }
    expect('"');
    return out;
  }
  void value(const std::string& path) {
    space();
    REQUIRE(i_ < s_.size());
    if (s_[i_] == '{') {
      i_++;
      std::vector<std::string> keys;
      space();
      if (s_[i_] == '}') {
        i_++;
        return;
      }
      for (;;) {
        std::string k = string();
        if (std::find(keys.begin(), keys.end(), k) != keys.end())
          FAIL_CHECK("object '" << path << "' has the key " << k << " twice");
        keys.push_back(k);
        expect(':');
        value(path.empty() ? k : path + "." + k);
        space();
        if (s_[i_] == ',') {
          i_++;
          continue;
        }
        expect('}');
        return;
      }
    }
    if (s_[i_] == '[') {
      i_++;
      space();
      if (s_[i_] == ']') {
        i_++;
        return;
      }
      for (size_t n = 0;; n++) {
        value(path + "[" + std::to_string(n) + "]");
        space();
        if (s_[i_] == ',') {
          i_++;
          continue;
        }
        expect(']');
        return;
      }
    }
    if (s_[i_] == '"') {
      v_[path] = string();
      return;
    }
    size_t start = i_;
    while (i_ < s_.size() && (isalnum(static_cast<unsigned char>(s_[i_])) || strchr("+-.", s_[i_])))
      i_++;
    REQUIRE(i_ > start);
    v_[path] = s_.substr(start, i_ - start);
  }

  const std::string& s_;
  size_t i_ = 0;
  std::map<std::string, std::string> v_;
};

void append(void* out, const char* text) { *static_cast<std::string*>(out) += text; }

// The numbers of the table's line that starts with `prefix`, in order.
std::vector<size_t> numbers_of_line(const std::string& table, const std::string& prefix) {
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    std::vector<size_t> out;
    for (size_t i = 0; i < line.size();) {
      if (isdigit(static_cast<unsigned char>(line[i])) &&
          (i == 0 || !isalnum(static_cast<unsigned char>(line[i - 1])))) {
        size_t n = 0;
        out.push_back(std::stoull(line.substr(i), &n));
        i += n;
      } else {
        i++;
      }
    }
    return out;
  }
  FAIL("no line of the table starts with '" << prefix << "'");
  return {};
}

}  // namespace

TEST_CASE("a snapshot's table and JSON document say the same numbers") {
  // Objects of several classes, a large and a huge one, live while the snapshot is read.
  std::vector<void*> live;
  for (size_t size : {8, 48, 200, 1024, 3000, 20000})
    for (int i = 0; i < 300; i++) live.push_back(heap::alloc(size));
  live.push_back(heap::alloc(100 << 10));
  live.push_back(heap::alloc(8 << 20));
  for (void* p : live) REQUIRE(p != nullptr);

  auto snap = std::make_unique<heap::Snapshot>(false);
  std::string table, json;
  heap::print_table(*snap, append, &table);
  heap::print_json(*snap, append, &json);
  FlatJson j(json);

  // Every class row, column for column.
  size_t rows = 0;
  for (size_t n = 0; j.has("classes[" + std::to_string(n) + "].class"); n++, rows++) {
    const std::string at = "classes[" + std::to_string(n) + "].";
    const size_t cls = j.num(at + "class");
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%5zu ", cls);
    std::vector<size_t> t = numbers_of_line(table, prefix);
    INFO("class " << cls);
    REQUIRE(t.size() == 17);
    const char* fields[] = {"class", "size",   "slabs",      "objects",  "active",  "cpu",
                            "depot", "thread", "free",       "hits",     "refills", "drains",
                            "depot_hits", "slab_out", "slab_in", "deferred", "remote"};
    for (size_t f = 0; f < 17; f++) {
      INFO(fields[f]);
      CHECK(t[f] == j.num(at + fields[f]));
    }
  }
  CHECK(rows >= 6);

  // The totals.
  std::vector<size_t> cached = numbers_of_line(table, "cached:");
  REQUIRE(cached.size() == 3);
  CHECK(cached[0] == j.num("bytes.cached_cpu"));
  CHECK(cached[1] == j.num("bytes.cached_depot"));
  CHECK(cached[2] == j.num("bytes.cached_thread"));
  std::vector<size_t> small = numbers_of_line(table, "small:");
  REQUIRE(small.size() == 2);
  CHECK(small[0] == j.num("bytes.small_slabs"));
  CHECK(small[1] == j.num("bytes.small_allocated"));
  std::vector<size_t> large = numbers_of_line(table, "large:");
  REQUIRE(large.size() == 4);
  CHECK(large[0] == j.num("bytes.large_allocated"));
  CHECK(large[1] == j.num("huge_objects"));
  CHECK(large[2] == j.num("bytes.huge_allocated"));
  CHECK(large[3] == j.num("bytes.huge_kept"));
  std::vector<size_t> pages = numbers_of_line(table, "pages:");
  REQUIRE(pages.size() == 6);
  CHECK(pages[0] == j.num("bytes.mapped"));
  CHECK(pages[1] == j.num("bytes.resident"));
  CHECK(pages[2] == j.num("bytes.free"));
  CHECK(pages[3] == j.num("bytes.dirty"));
  CHECK(pages[4] == j.num("bytes.returned"));
  CHECK(pages[5] == j.num("bytes.metadata"));
  std::vector<size_t> deferred = numbers_of_line(table, "deferred:");
  REQUIRE(deferred.size() == 7);
  CHECK(deferred[0] == j.num("deferred.pending"));
  CHECK(deferred[1] == j.num("deferred.bytes_waiting"));
  CHECK(deferred[2] == j.num("deferred.blocks"));
  CHECK(deferred[3] == j.num("deferred.chained"));
  CHECK(deferred[4] == j.num("deferred.freed"));
  CHECK(deferred[5] == j.num("deferred.blocks_freed"));
  CHECK(deferred[6] == j.num("deferred.grace_periods"));
  // The totals agree with the rows they are made from.
  size_t cpu_bytes = 0;
  for (size_t n = 0; n < rows; n++) {
    const std::string at = "classes[" + std::to_string(n) + "].";
    cpu_bytes += j.num(at + "cpu") * j.num(at + "size");
  }
  CHECK(cpu_bytes <= j.num("bytes.cached_cpu"));  // plus the remote-node buffers
  CHECK(j.num("bytes.allocated") >= (8u << 20) + (100u << 10));

  for (void* p : live) heap::free(p);
}
