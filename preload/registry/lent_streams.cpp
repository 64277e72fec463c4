#include "registry/lent_streams.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <unistd.h>

#include "keep_forever.h"
#include "libc/real_calls.h"
#include "rdma_stream.h"
#include "registry/connection_path.h"
#include "registry/tcp_prefix.h"
#include "registry/tracked_socket.h"
#include "util/log.h"

namespace tcp2rdma::preload {

bool keep_answer_prefix(const HandBack& answer, TcpPrefix* prefix) {
  if (answer.outcome == HandBack::Outcome::kRelayed) return prefix->adopt_relay(answer.shared_prefix, answer.relay_wake);
  // The queue of the relay this child reads already: what the move added follows in it.
  if (answer.shared_prefix && prefix->maps(answer.shared_prefix)) return true;
  if (answer.shared_prefix) return prefix->adopt(answer.shared_prefix);
  return (answer.bytes.empty() && !answer.then_end) || prefix->set(answer.bytes, answer.then_end);
}

const char* to_string(HandBack::Outcome outcome) noexcept {
  switch (outcome) {
    case HandBack::Outcome::kMoved: return "moved";
    case HandBack::Outcome::kFailed: return "its move failed: reset";
    case HandBack::Outcome::kParents: return "the parent keeps it on rdma";
    case HandBack::Outcome::kGone: return "the parent holds it no more";
    case HandBack::Outcome::kResume: return "its upgrade is this process's to take up";
    case HandBack::Outcome::kStaysTcp: return "it stays tcp in both";
    case HandBack::Outcome::kRelayed: return "the parent relays its bytes";
  }
  return "?";
}

void refuse_parents_copy(TrackedSocket* socket, int fd, HandBack::Outcome outcome) noexcept {
  bool reset = outcome == HandBack::Outcome::kFailed || outcome == HandBack::Outcome::kMoved;
  log_line("%s: the parent's connection cannot be used here (%s)%s", connection_label(socket), to_string(outcome),
           reset ? ": reset" : "");
  if (reset) reset_connection(fd);
  replace_all_with_unconnected_sockets(socket);
}
namespace {

struct Lent {
  std::vector<int> holders;  // the channels of the children that may still ask
  bool handing = false;      // the parent let go; `answer` follows
  std::optional<HandBack> answer;
};

// A connection a child claimed while this process still held it (note_claimed).
struct Claimed {
  int channel = -1;
  bool forked = false;  // this process forked or spawned while it held a descriptor of it
  bool alone = false;   // let go of since, not forked with, and no other child holding it
};

// Made on first use and never destroyed (exit handlers use it); anew in a forked child.
struct Registry {
  std::mutex mutex;
  std::condition_variable answered;
  std::unordered_map<uint64_t, Lent> by_serial;
  std::atomic<size_t> count{0};  // by_serial.size(), for the look without the lock
  std::unordered_map<uint64_t, Claimed> claimed;
  std::atomic<size_t> claimed_count{0};  // claimed.size(), for the look without the lock
};
Registry*& registry_slot() {
  static Registry* registry = new Registry;
  return registry;
}

void erase_if_unheld(Registry* r, std::unordered_map<uint64_t, Lent>::iterator it) {
  if (!it->second.holders.empty()) return;
  r->by_serial.erase(it);
  r->count.store(r->by_serial.size(), std::memory_order_release);
}

}  // namespace

void lend_streams(int channel, const std::vector<uint64_t>& serials) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  try {
    for (uint64_t serial : serials) r->by_serial[serial].holders.push_back(channel);
  } catch (const std::bad_alloc&) {
    // Those not entered are not lent: at the parent's close they end as if no child held them. The
    // child's claim then finds them gone and fails loudly; nothing is silently lost.
  }
  r->count.store(r->by_serial.size(), std::memory_order_release);
}

bool is_lent(uint64_t serial) noexcept {
  Registry* r = registry_slot();
  if (r->count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(r->mutex);
  return r->by_serial.count(serial) != 0;
}

bool is_lent_to(uint64_t serial, int channel) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  auto it = r->by_serial.find(serial);
  if (it == r->by_serial.end()) return false;
  const auto& holders = it->second.holders;
  return std::find(holders.begin(), holders.end(), channel) != holders.end();
}

bool held_only_by(uint64_t serial, int channel) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  auto it = r->by_serial.find(serial);
  return it != r->by_serial.end() && it->second.holders.size() == 1 && it->second.holders.front() == channel;
}

void note_handing_back(uint64_t serial) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  if (auto it = r->by_serial.find(serial); it != r->by_serial.end()) it->second.handing = true;
}

void keep_handed_back(uint64_t serial, HandBack answer) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  auto it = r->by_serial.find(serial);
  if (it == r->by_serial.end()) return;  // every child that held it is gone meanwhile
  it->second.handing = true;
  it->second.answer = std::move(answer);
  r->answered.notify_all();
}

std::optional<HandBack> handed_back_for(uint64_t serial, int wait_ms) noexcept {
  Registry* r = registry_slot();
  std::unique_lock lock(r->mutex);
  auto it = r->by_serial.find(serial);
  if (it == r->by_serial.end() || !it->second.handing) return std::nullopt;
  r->answered.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
    it = r->by_serial.find(serial);
    return it == r->by_serial.end() || it->second.answer.has_value();
  });
  if (it == r->by_serial.end() || !it->second.answer) {
    HandBack failed;
    failed.outcome = HandBack::Outcome::kFailed;  // the hand-back outlived its own timeout
    return failed;
  }
  // The peer's unread bytes in a shared queue go to every child that gets the answer, each byte to
  // whichever reads it first, as from the socket. Bare bytes (no memfd could be had) go to the first
  // child; a later one gets the answer without them.
  if (it->second.answer->shared_prefix) return *it->second.answer;
  HandBack answer = std::move(*it->second.answer);  // the bytes move out; the rest is kept as it was
  it->second.answer->bytes.clear();
  return answer;
}

void note_answered(uint64_t serial, int channel) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  auto it = r->by_serial.find(serial);
  if (it == r->by_serial.end()) return;
  auto& holders = it->second.holders;
  holders.erase(std::remove(holders.begin(), holders.end(), channel), holders.end());
  erase_if_unheld(r, it);
}

void note_claimed(uint64_t serial, int channel) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  try {
    r->claimed[serial] = Claimed{channel, false, false};
  } catch (const std::bad_alloc&) {
    return;  // that child is never told it holds the connection alone: it stays on TCP
  }
  r->claimed_count.store(r->claimed.size(), std::memory_order_release);
}

void forget_claimed(uint64_t serial) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  r->claimed.erase(serial);
  r->claimed_count.store(r->claimed.size(), std::memory_order_release);
}

void note_forking_with_claims() noexcept {
  Registry* r = registry_slot();
  if (r->claimed_count.load(std::memory_order_acquire) == 0) return;
  // Every claimed connection this process still has a descriptor of goes to the new process too.
  for_each_tracked_fd([r](int, SocketHold& socket) {
    if (socket->serial() == 0) return;
    std::lock_guard lock(r->mutex);
    if (auto it = r->claimed.find(socket->serial()); it != r->claimed.end()) it->second.forked = true;
  });
}

void let_go_of_claims(bool (*survives)(const TrackedSocket*)) noexcept {
  if (registry_slot()->claimed_count.load(std::memory_order_acquire) == 0) return;
  for_each_tracked_fd([survives](int, SocketHold& socket) {
    if (socket->serial() != 0 && (survives == nullptr || !survives(socket.get()))) note_let_go(socket->serial());
  });
}

void note_let_go(uint64_t serial) noexcept {
  Registry* r = registry_slot();
  if (r->claimed_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(r->mutex);
  auto it = r->claimed.find(serial);
  if (it == r->claimed.end()) return;
  // A fork while this process held it gave it to another process, and a child it was lent to before
  // may still use it. The claimer itself is listed until its answer is sent (note_answered): a last
  // close during the claim's move lets go while it is, and it is no other holder.
  bool others = false;
  if (auto lent = r->by_serial.find(serial); lent != r->by_serial.end()) {
    const auto& holders = lent->second.holders;
    int claimer = it->second.channel;
    others = std::any_of(holders.begin(), holders.end(), [claimer](int h) { return h != claimer; });
  }
  it->second.alone = !it->second.forked && !others;
}

bool claimed_alone_by(uint64_t serial, int channel) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  auto it = r->claimed.find(serial);
  return it != r->claimed.end() && it->second.channel == channel && it->second.alone;
}

std::vector<std::pair<int, uint64_t>> claims_let_go() noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  std::vector<std::pair<int, uint64_t>> out;
  try {
    for (const auto& [serial, claim] : r->claimed) {
      if (claim.alone) out.emplace_back(claim.channel, serial);
    }
  } catch (const std::bad_alloc&) {
  }
  return out;
}

void forget_channel(int channel) noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  std::erase_if(r->claimed, [channel](const auto& entry) { return entry.second.channel == channel; });
  r->claimed_count.store(r->claimed.size(), std::memory_order_release);
  for (auto it = r->by_serial.begin(); it != r->by_serial.end();) {
    auto next = std::next(it);
    auto& holders = it->second.holders;
    holders.erase(std::remove(holders.begin(), holders.end(), channel), holders.end());
    erase_if_unheld(r, it);
    it = next;
  }
  r->answered.notify_all();
}

std::vector<std::pair<int, uint64_t>> unclaimed_hand_backs() noexcept {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  std::vector<std::pair<int, uint64_t>> out;
  try {
    for (const auto& [serial, lent] : r->by_serial) {
      if (!lent.answer) continue;
      for (int channel : lent.holders) out.emplace_back(channel, serial);
    }
  } catch (const std::bad_alloc&) {
  }
  return out;
}

void hand_back(transport::RdmaStream* stream, uint64_t serial) noexcept {
  auto started = std::chrono::steady_clock::now();
  std::vector<uint8_t> unread;
  bool peer_ended = false;
  HandBack answer;
  // A plain "to TCP": the child that holds it may never wait for a return (it execs a program without
  // the module, as plain inetd's does), and a peer told to return at once would wait for nothing.
  transport::Status s = stream->move_to_tcp(&unread, &peer_ended);
  if (s == transport::Status::kOk) {
    answer.outcome = HandBack::Outcome::kMoved;
    answer.then_end = peer_ended;
    TcpPrefix queue;  // only its memfd lives on, in the answer
    if (queue.set_shared(unread, peer_ended)) answer.shared_prefix = queue.shareable();
    if (!answer.shared_prefix) answer.bytes = unread;
    answer.write_shut = stream->write_was_shut();
    answer.alone = true;  // this process's last descriptor is gone: only children hold it
    stream->close();  // moved: the stream only disconnects; TCP carries the connection on
  } else {
    // The peer did not answer: neither side can know where the connection stands, so it is reset
    // (the child that claims it resets its TCP socket): never a clean end after lost bytes.
    answer.outcome = HandBack::Outcome::kFailed;
    stream->abort();
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
  log_line("stream %llu: handed back to tcp for the children that hold it (%s; %zu bytes of the peer's for them; %lld us)",
           static_cast<unsigned long long>(serial), transport::to_string(s), unread.size(),
           static_cast<long long>(us.count()));
  keep_handed_back(serial, std::move(answer));
}

void lent_streams_after_fork() noexcept {
  // The parent's lock may have been held at the fork by another of its threads; its lendings are its
  // own (the child's channel to it is process/fork_service.h's).
  transport::keep_forever(std::exchange(registry_slot(), new Registry));
}

}  // namespace tcp2rdma::preload
