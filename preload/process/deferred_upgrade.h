// Upgrades a fork interrupts (docs/architecture.md, "Forks"). A server connection whose background
// upgrade is still on TCP when its process forks — PostgreSQL's postmaster and inetd fork right after
// accept(), before the client's RDMA request has been answered — belongs to the process that uses it
// next. The fork ends the session as *deferred*: its client's request is neither answered nor declined,
// and both processes keep a record of what the upgrade needs (TrackedSocket::DeferredUpgrade).
//   - The parent's first use takes the upgrade up again at once, on its own RDMA listener; a child
//     that later uses its copy claims it (fork_service.h) and the parent gives it up: the session
//     ends on TCP, or a connection that reached RDMA meanwhile moves back, as a lent one does.
//   - Unused for kUnusedTakeUpAfter, the parent takes it up on its own: the client waits in its
//     upgrade and may send nothing before it ends, while the parent's event loop waits for the
//     client's bytes and the child never touches its copy (redis's BGSAVE child).
//   - A child's first use claims it over the fork channel. A parent that has let go of its copy (the
//     postmaster closes it right after the fork) answers kResume: the child makes an RDMA listener on
//     a port of its own, publishes the connection in the family's directory, and the parent's
//     directory thread sends the client's request there. A parent that still holds its copy, unused,
//     after a moment answers kStaysTcp: two processes hold it, and it stays TCP in both.
// Client connections, and servers without a pre-fork directory, still stay TCP at a fork.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "registry/lent_streams.h"

namespace tcp2rdma::preload {

class ReturnHandOn;
class TrackedSocket;

// The fork wrapper's settle: every session still on TCP ends, a server's as deferred (logged).
void defer_sessions_for_fork() noexcept;
// The fork wrapper holds the take-up lock from before it closes the fork gate until the real fork is
// done (a take-up under way finishes first; none starts in between); the child gets its own.
void hold_take_ups_for_fork() noexcept;
void release_take_ups_after_fork(bool child) noexcept;
// With the take-up lock held (the fork wrapper's) or in a fresh child: no fork channel could be had,
// and this process's deferred upgrades end on TCP for good (the child could not tell us it uses its
// copy); in a forked child, the parent's deferred upgrades not lent to it stay TCP here.
void drop_deferred_upgrades() noexcept;
void drop_inherited_deferred_upgrades(bool (*lent_here)(uint64_t serial)) noexcept;

// At a call the module routes on a socket with a deferred upgrade: this process takes it up (the
// parent at once, a child after its parent's answer). `may_resume` false (before this process forks,
// execs or spawns): a child only claims it, and it stays TCP here.
void take_up_deferred_upgrade(TrackedSocket* socket, int fd, bool may_resume = true) noexcept;
// A connection with a deferred upgrade leaves this process's hands (passed to another process:
// descriptor_passing.h): a child's is claimed without resuming, this process's own given up; either
// way it stays TCP here, and `why` says so in the log.
void give_up_deferred_upgrade(TrackedSocket* socket, int fd, const char* why) noexcept;
// Every inherited one (with `survives`, exec's: only those the new program keeps a descriptor of),
// claimed without resuming: before this process forks (`lock_held`: the fork wrapper's), execs or spawns.
// With `hand_on` (exec's), one the parent gives this process (it let go), or one this program was
// given at its own exec, goes to the new program, which takes it up at its first use (exec_returns.h);
// it stays TCP if it cannot.
void claim_inherited_deferred_upgrades(bool (*survives)(const TrackedSocket*), bool lock_held,
                                       ReturnHandOn* hand_on = nullptr) noexcept;

// How long an upgrade a fork deferred waits for a process to use the connection. The postmaster lets
// go of its copy and its child claims it well within it; a child that uses the connection only later
// finds it on RDMA in the parent and asks for it as for any lent connection. The client waits this
// long in its upgrade, once per fork that crossed it.
constexpr std::chrono::milliseconds kUnusedTakeUpAfter{200};
// The fork service's thread (fork_service.h), when one is due: this process takes up every upgrade
// it deferred that has waited kUnusedTakeUpAfter since the latest fork that lent it. Returns when the
// next one is due (time_point::max(): none is left).
std::chrono::steady_clock::time_point take_up_unused_deferred_upgrades() noexcept;
// Held by close(), dup2() and close_range() while they free a number in [first, last] that names a
// socket with a deferred upgrade (or one taken up while a child holds the connection too), from
// before its session is settled until the table forgets the number (empty otherwise): the fork
// service's thread takes an upgrade up through a number it found in the table, under this lock, and
// must not start it on a number being freed.
[[nodiscard]] std::unique_lock<std::mutex> hold_take_ups_while_freeing(int first, int last) noexcept;
// The settle of a number being freed, under that lock: settle_session, except that an upgrade this
// process took up on its own after a fork, still on TCP, while a child holds the connection, is
// deferred again for the child (logged), which takes it up at its first use.
void settle_for_freeing(int fd) noexcept;

// The lock of every take-up in this process, which the parent's answers (deferred_answers.cpp) take
// too; and the log line and stats slot of a deferred connection that stays TCP, `why`.
std::mutex& take_up_lock() noexcept;
void log_stays(TrackedSocket* socket, const char* why) noexcept;

// The parent's thread that answers its children: a child claims the deferred connection `serial`
// that this process still held when the claim came (the live socket, not handed back).
HandBack answer_deferred_claim(uint64_t serial) noexcept;
// At exit and exec: deferred connections this process lent and still holds are answered now:
// kResume where this process lets go (exit; exec for descriptors that do not survive it),
// kStaysTcp where the new program keeps a descriptor.
void hand_back_deferred_before_leaving(bool (*survives)(const TrackedSocket*)) noexcept;

}  // namespace tcp2rdma::preload
