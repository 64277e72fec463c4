#include "glob.h"

#include <cstddef>

namespace tcp2rdma::config {
namespace {

// Matches one bracket expression starting at pattern[i] == '[' against c; sets *next past it.
bool class_match(std::string_view pattern, size_t i, char c, size_t* next) {
  size_t j = i + 1;
  bool negate = j < pattern.size() && pattern[j] == '!';
  if (negate) ++j;
  bool found = false;
  bool first = true;
  for (; j < pattern.size() && (first || pattern[j] != ']'); ++j, first = false) {
    if (j + 2 < pattern.size() && pattern[j + 1] == '-' && pattern[j + 2] != ']') {
      if (c >= pattern[j] && c <= pattern[j + 2]) found = true;
      j += 2;
    } else if (pattern[j] == c) {
      found = true;
    }
  }
  *next = j + 1;
  return found != negate;
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative with one backtrack point, the last '*': linear enough for program names.
  size_t p = 0, t = 0, star = std::string_view::npos, star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
      continue;
    }
    if (p < pattern.size()) {
      size_t next = p + 1;
      bool ok = pattern[p] == '?' || (pattern[p] == '[' ? class_match(pattern, p, text[t], &next) : pattern[p] == text[t]);
      if (ok) {
        p = next;
        ++t;
        continue;
      }
    }
    if (star == std::string_view::npos) return false;
    p = star + 1;
    t = ++star_text;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool glob_valid(std::string_view pattern) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '[') continue;
    size_t j = i + 1;
    if (j < pattern.size() && pattern[j] == '!') ++j;
    if (j < pattern.size() && pattern[j] == ']') ++j;  // a leading ']' is a member
    while (j < pattern.size() && pattern[j] != ']') ++j;
    if (j >= pattern.size()) return false;
    i = j;
  }
  return !pattern.empty();
}

}  // namespace tcp2rdma::config
