// The parent's side of an upgrade a fork interrupted (deferred_upgrade.h): its answer to a child's
// claim, and what it leaves its children when it exits or execs.
#include "process/deferred_upgrade.h"

#include <unistd.h>

#include <optional>
#include <utility>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "process/fork_service.h"
#include "registry/lent_streams.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"

namespace tcp2rdma::preload {
namespace {

// How long a parent's thread waits for the parent to let go of a connection a child claims: the
// postmaster closes its copy right after fork() returns.
constexpr int kLetGoLooks = 30;
constexpr useconds_t kLetGoLookUs = 10000;
constexpr int kKeptAnswerWaitMs = 1000;

// The parent gives a connection it took up to a child that uses it too: the session ends on TCP, or
// the stream it reached moves back (as a lent connection's does).
HandBack give_up_for_child(TrackedSocket* socket) {
  if (UpgradeSession* session = socket->active_session(); session != nullptr && session->settle()) {
    log_stays(socket, "a child process uses the connection too");
  }
  if (socket->stream() != nullptr && socket->path_is(Path::kRdma)) return move_back_for_child(socket, "a child that uses it");
  HandBack answer;
  answer.outcome = HandBack::Outcome::kStaysTcp;
  return answer;
}

// The answer this process kept when it let go (kResume, kStaysTcp), given once: the upgrade is one
// process's to take up, so a second child that holds the connection too gets kGone (its copy fails
// loudly rather than carry bytes beside the first child's stream). Waits out a hand-back under way
// (note_handing_back, then keep_handed_back: moments).
std::optional<HandBack> kept_answer(uint64_t serial) {
  std::optional<HandBack> handed = handed_back_for(serial, kKeptAnswerWaitMs);
  if (handed && handed->outcome == HandBack::Outcome::kResume) keep_handed_back(serial, HandBack{});
  return handed;
}

}  // namespace

HandBack answer_deferred_claim(uint64_t serial) noexcept {
  for (int look = 0; look < kLetGoLooks; ++look) {
    if (auto handed = kept_answer(serial)) return std::move(*handed);
    {
      SocketHold socket = SocketHold::live(serial);
      if (socket && !socket->has_deferred_upgrade()) {
        std::lock_guard lock(take_up_lock());  // a take-up under way finishes first
        return give_up_for_child(socket.get());
      }
    }
    usleep(kLetGoLookUs);  // the hold above is dropped: the parent's close can end the socket
  }
  std::lock_guard lock(take_up_lock());
  if (auto handed = kept_answer(serial)) return std::move(*handed);
  SocketHold socket = SocketHold::live(serial);
  if (!socket) return HandBack{};  // kGone
  if (auto record = socket->take_deferred_upgrade()) {
    log_stays(socket.get(), "a child process holds the connection too");
    record->listener->release();
    HandBack answer;
    answer.outcome = HandBack::Outcome::kStaysTcp;
    return answer;
  }
  return give_up_for_child(socket.get());
}

void hand_back_deferred_before_leaving(bool (*survives)(const TrackedSocket*)) noexcept {
  unsigned here = fork_generation();
  std::vector<SocketHold> held;
  for_each_tracked_fd([&](int, SocketHold& socket) {
    if (socket->has_deferred_upgrade() && is_lent(socket->serial())) held.emplace_back(socket.get());
  });
  for (SocketHold& socket : held) {
    std::lock_guard lock(take_up_lock());
    auto record = socket->take_deferred_upgrade();
    if (record == nullptr) continue;
    if (record->generation == here) {
      HandBack answer;
      answer.outcome = survives != nullptr && survives(socket.get()) ? HandBack::Outcome::kStaysTcp
                                                                     : HandBack::Outcome::kResume;
      note_handing_back(socket->serial());
      keep_handed_back(socket->serial(), std::move(answer));
    }
    record->listener->release();
  }
}

}  // namespace tcp2rdma::preload
