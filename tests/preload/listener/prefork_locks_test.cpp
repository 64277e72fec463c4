// A listener's lock in a forked child (preload/listener/prefork_listeners.h): the parent's directory thread
// or a background accept may hold it at the moment of fork(); that thread does not exist in the
// child, which must still be able to take the lock (its accept() does) instead of hanging.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "listener/listener_state.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

TEST(PreforkLocks, AChildCanTakeAListenerLockAThreadHeldAtTheFork) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  ASSERT_TRUE(test::bind_loopback(listener, &addr));
  ASSERT_EQ(listen(listener, 1), 0);
  TrackedSocket* socket = fd_table().find(listener);
  ASSERT_NE(socket, nullptr);
  ListenerState* tracked = make_listener_state(socket);  // as a listen() a rule may select RDMA for
  ASSERT_NE(tracked, nullptr);
  // This process accepts on it (an accept-then-fork server): fork does not take the lock itself.
  tracked->accept_generation.store(fork_generation());
  std::atomic<bool> held{false}, release{false};
  std::thread holder([&] {
    std::lock_guard lock(tracked->mutex);
    held = true;
    while (!release) std::this_thread::yield();
  });
  while (!held) std::this_thread::yield();
  pid_t pid = fork();  // through the module's wrapper, as an application's fork
  if (pid == 0) _exit(listener_state(fd_table().find(listener))->mutex.try_lock() ? 0 : 1);
  release = true;
  holder.join();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(listener);
}

}  // namespace
}  // namespace tcp2rdma::preload
