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

// The numbers of the table's line that starts with `prefix` are, in order, the JSON's
// values at `paths`.
void same_numbers(const std::string& table, const std::string& prefix, const FlatJson& j,
                  const std::vector<std::string>& paths) {
  std::vector<size_t> t = numbers_of_line(table, prefix);
  INFO("the table's line '" << prefix << "'");
  REQUIRE(t.size() == paths.size());
  for (size_t f = 0; f < paths.size(); f++) {
    INFO(paths[f]);
    CHECK(t[f] == j.num(paths[f]));
  }
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
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%5zu ", j.num(at + "class"));
    same_numbers(table, prefix, j,
                 {at + "class", at + "size", at + "slabs", at + "objects", at + "active",
                  at + "cpu", at + "depot", at + "thread", at + "free", at + "hits",
                  at + "refills", at + "drains", at + "depot_hits", at + "slab_out",
                  at + "slab_in", at + "deferred", at + "remote"});
  }
  CHECK(rows >= 6);

  // The totals.
  same_numbers(table, "cached:", j, {"bytes.cached_cpu", "bytes.cached_depot", "bytes.cached_thread"});
  same_numbers(table, "small:", j, {"bytes.small_slabs", "bytes.small_allocated"});
  same_numbers(table, "large:", j,
               {"bytes.large_allocated", "huge_objects", "bytes.huge_allocated", "bytes.huge_kept"});
  same_numbers(table, "pages:", j,
               {"bytes.mapped", "bytes.resident", "bytes.free", "bytes.dirty", "bytes.returned",
                "bytes.metadata"});
  same_numbers(table, "deferred:", j,
               {"deferred.pending", "deferred.bytes_waiting", "deferred.blocks", "deferred.chained",
                "deferred.freed", "deferred.blocks_freed", "deferred.grace_periods"});
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
