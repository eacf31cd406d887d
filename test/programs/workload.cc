// test/programs/workload.cc — compiled by g++ running under uslab, then run under
// uslab: containers, strings, shared_ptr and exceptions. Deterministic output.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

int main() {
  std::map<std::string, std::vector<int>> m;
  std::unordered_map<int, std::shared_ptr<std::string>> u;
  for (int i = 0; i < 200000; i++) {
    std::string k = std::to_string((i * 7919) % 10007);
    m[k].push_back(i);
    u[i % 5000] = std::make_shared<std::string>(k + "/" + std::to_string(i));
  }
  size_t total = 0;
  for (auto& [k, v] : m) total += v.size() * k.size();
  std::vector<std::string> vals;
  for (auto& [k, v] : u) vals.push_back(*v);
  std::sort(vals.begin(), vals.end());
  int caught = 0;
  for (int i = 0; i < 1000; i++) {
    try {
      throw std::runtime_error(std::string(i % 300, 'e'));
    } catch (const std::exception& e) {
      caught += e.what()[0] == 'e' || i % 300 == 0;
    }
  }
  std::cout << m.size() << " " << total << " " << vals.front() << " " << vals.back() << " "
            << caught << "\n";
}
