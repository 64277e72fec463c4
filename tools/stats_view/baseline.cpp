#include "baseline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace tcp2rdma::tools::stats_view {
namespace {

constexpr char kFirstLine[] = "tcp2rdma-stats-baseline 1";

bool parse_number(const std::string& word, uint64_t* value) {
  const char* end = word.data() + word.size();
  auto [at, error] = std::from_chars(word.data(), end, *value);
  return error == std::errc() && at == end && !word.empty();
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::string baseline_path() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && *runtime == '/') return std::string(runtime) + "/tcp2rdma-stats.baseline";
  return "/tmp/tcp2rdma-stats.baseline." + std::to_string(::getuid());
}

std::string format_baseline(const std::vector<stats::ProcessView>& live, uint64_t now_ms) {
  std::string out = std::string(kFirstLine) + "\nwritten_ms " + std::to_string(now_ms) + "\n";
  for (const stats::ProcessView& p : live) {
    if (p.stale) continue;
    out += std::to_string(p.pid) + " " + std::to_string(p.start_time);
    for (uint64_t value : counter_values(p.totals)) out += " " + std::to_string(value);
    out += "\n";
  }
  return out;
}

std::optional<Baseline> parse_baseline(const std::string& text, std::string* problem) {
  std::istringstream lines(text);
  std::string line;
  if (!std::getline(lines, line) || line != kFirstLine) {
    *problem = "line 1 is not \"" + std::string(kFirstLine) + "\"";
    return std::nullopt;
  }
  Baseline baseline;
  std::vector<std::string> words;
  if (!std::getline(lines, line) || (words = words_of(line)).size() != 2 || words[0] != "written_ms" ||
      !parse_number(words[1], &baseline.written_ms)) {
    *problem = "line 2 is not \"written_ms N\"";
    return std::nullopt;
  }
  for (int number = 3; std::getline(lines, line); ++number) {
    words = words_of(line);
    if (words.empty()) continue;
    uint64_t pid = 0, start_time = 0;
    stats::TotalsView totals;
    std::array<uint64_t*, kCounterCount> to = counters(&totals);
    bool ok = words.size() == 2 + kCounterCount && parse_number(words[0], &pid) && pid > 0 && pid <= INT32_MAX &&
              parse_number(words[1], &start_time);
    for (size_t i = 0; ok && i < kCounterCount; ++i) ok = parse_number(words[2 + i], to[i]);
    if (!ok) {
      *problem = "line " + std::to_string(number) + " is not a pid, a start time and " + std::to_string(kCounterCount) +
                 " counters";
      return std::nullopt;
    }
    baseline.processes[{static_cast<pid_t>(pid), start_time}] = totals;
  }
  return baseline;
}

bool write_baseline(const std::string& path, const std::string& text, std::string* problem) {
  // mkstemp makes the file 0600 and refuses a name that exists (a link planted in /tmp included);
  // rename then replaces the old baseline at once, so a reader never sees half of one.
  std::string temporary = path + ".XXXXXX";
  int fd = ::mkstemp(temporary.data());
  if (fd < 0) {
    *problem = "cannot create " + temporary + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool written = done == text.size();
  int write_error = errno;
  bool ok = ::close(fd) == 0 && written;
  if (!ok) *problem = "cannot write " + temporary + ": " + std::strerror(written ? errno : write_error);
  if (ok && ::rename(temporary.c_str(), path.c_str()) != 0) {
    *problem = "cannot rename " + temporary + " to " + path + ": " + std::strerror(errno);
    ok = false;
  }
  if (!ok) ::unlink(temporary.c_str());
  return ok;
}

std::optional<Baseline> read_baseline(const std::string& path, std::string* problem) {
  problem->clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) *problem = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st{};
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    // In /tmp anyone can make a file of that name: only our own is trusted.
    *problem = path + ": not a regular file of this user";
  } else {
    char buffer[65536];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *problem = path + ": " + std::strerror(errno);
        break;
      }
      text.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  if (!problem->empty()) return std::nullopt;
  std::string why;
  std::optional<Baseline> baseline = parse_baseline(text, &why);
  if (!baseline) *problem = path + ": " + why;
  return baseline;
}

}  // namespace tcp2rdma::tools::stats_view
