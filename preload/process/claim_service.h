// The parent's side of the fork service (fork_service.h): one thread, started at the first fork
// that lends something, answers every child's claims over their fork channels, and takes up the
// upgrades a fork deferred that no process used within kUnusedTakeUpAfter (deferred_upgrade.h).
#pragma once

namespace tcp2rdma::preload {

// Adds this process's end of a new child's channel to the thread's watch (starting the thread).
// False when there is no thread to be had: nobody would answer that child.
bool serve_channel(int channel) noexcept;
// A fork deferred upgrades and lent them to its child: they are looked at once they have waited.
void plan_unused_take_up() noexcept;
// In a forked child: the parent's thread, its channels to our siblings and its plans are not ours.
void forget_parents_service() noexcept;

}  // namespace tcp2rdma::preload
