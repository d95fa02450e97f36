// Interned names. Each distinct name is stored once, as recorded (escaping
// is the writer's business), and events refer to it by a 32-bit id.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

namespace cuprof {

using name_id = std::uint32_t;

class string_table {
 public:
  string_table() = default;
  // The index views the strings it indexes: a copy indexes its own copies
  // (a copied index would point into the original's storage).
  string_table(const string_table& other) : strings_(other.strings_), by_address_(other.by_address_) { reindex(); }
  string_table& operator=(const string_table& other) {
    if (this != &other) {
      strings_ = other.strings_;
      by_address_ = other.by_address_;
      reindex();
    }
    return *this;
  }
  string_table(string_table&&) = default;  // deque nodes move with their contents: views stay valid
  string_table& operator=(string_table&&) = default;

  name_id intern(std::string_view s) {
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    const name_id id = name_id(strings_.size());
    strings_.emplace_back(s);
    index_.emplace(std::string_view(strings_.back()), id);
    return id;
  }
  // Static names are looked up by address first: one hash of a pointer per
  // scope at collection instead of hashing the characters.
  name_id intern_static(const char* s) {
    auto it = by_address_.find(s);
    if (it != by_address_.end()) return it->second;
    const name_id id = intern(s);
    by_address_.emplace(s, id);
    return id;
  }
  const std::string& str(name_id id) const { return strings_[id]; }
  std::size_t size() const noexcept { return strings_.size(); }

 private:
  void reindex() {
    index_.clear();
    index_.reserve(strings_.size());
    for (std::size_t i = 0; i < strings_.size(); ++i) index_.emplace(std::string_view(strings_[i]), name_id(i));
  }

  std::deque<std::string> strings_;  // deque: references stay valid as it grows
  std::unordered_map<std::string_view, name_id> index_;
  std::unordered_map<const char*, name_id> by_address_;
};

}  // namespace cuprof
