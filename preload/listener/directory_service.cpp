#include "listener/directory_service.h"

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <system_error>
#include <thread>

#include "libc/kept_descriptors.h"
#include "libc/real_calls.h"
#include "listener/listener_directory.h"
#include "listener/listener_state.h"
#include "listener/rdma_listener.h"
#include "stream_listener.h"
#include "util/log.h"
#include "util/quiet_thread.h"

namespace tcp2rdma::preload {

struct DirectoryService {
  std::atomic<bool> stop{false};
  std::thread thread;
};

namespace {

// How long the thread sleeps between looks: short while a request waits for its process to publish
// the connection (that process is accepting it right now), long when idle (only to notice stop).
constexpr int kWaitingPollMs = 5;
constexpr int kIdlePollMs = 100;

void log_redirect(int fd, const transport::StreamListener::Redirected& r) {
  char client[INET6_ADDRSTRLEN] = "?";
  inet_ntop(r.tuple.family, r.tuple.client_addr, client, sizeof client);
  log_line("fd %d listener: the RDMA request of client %s port %u sent on to rdma_cm port %u (the process "
           "that accepted its connection)",
           fd, client, static_cast<unsigned>(r.tuple.client_port), static_cast<unsigned>(r.port));
}

// One look: takes new requests, sends on those another process published, and says how long to
// sleep (-1: this process holds the port no more, the thread ends).
int look(int fd, ListenerState* listener, int* rdma_fd) {
  ListenerDirectory* directory = listener->directory.load();
  std::lock_guard lock(listener->mutex);
  // The first holder's own listener is on the port; one that took it over keeps its own port too.
  transport::StreamListener* rdma =
      listener->own_rdma_port == 0 ? listener->rdma_listener.get() : listener->directory_listener.get();
  if (rdma == nullptr || directory == nullptr || listener->listener_generation != fork_generation()) return -1;
  rdma->collect(listener->request_hold);
  auto port_for = [directory](const transport::TcpTuple& t) { return directory->port_for(t); };
  for (const auto& r : rdma->redirect(port_for)) log_redirect(fd, r);
  *rdma_fd = rdma->fd();
  return rdma->held() > 0 ? kWaitingPollMs : kIdlePollMs;
}

void serve(int fd, ListenerState* listener, DirectoryService* service) {
  while (!service->stop.load()) {
    int rdma_fd = -1;
    int sleep_ms = look(fd, listener, &rdma_fd);
    if (sleep_ms < 0) return;
    pollfd p{rdma_fd, POLLIN, 0};
    real().poll(&p, 1, sleep_ms);
  }
}

}  // namespace

void start_directory_service(int fd, ListenerState* listener) noexcept {
  if (listener->directory.load() == nullptr) return;
  unsigned here = fork_generation();
  if (listener->directory_service != nullptr && listener->service_generation == here) return;
  // An ancestor's thread does not exist here: its object is only a copy, left alone.
  auto* service = new DirectoryService;
  service->thread = start_quiet_thread([fd, listener, service] { serve(fd, listener, service); });
  if (!service->thread.joinable()) {
    delete service;
    log_line("fd %d listener: cannot start the pre-fork directory's thread: connections accepted by the server's "
             "other processes stay tcp",
             fd);
    return;
  }
  listener->directory_service = service;
  listener->service_generation = here;
  log_line("fd %d listener: this process holds the RDMA listener's port and sends the other processes' "
           "requests on to them",
           fd);
}

void stop_directory_service(ListenerState* listener) noexcept {
  DirectoryService* service = listener->directory_service;
  if (service == nullptr || listener->service_generation != fork_generation()) return;
  listener->directory_service = nullptr;
  service->stop.store(true);
  service->thread.join();
  delete service;
}

void forget_directory(ListenerState* listener) noexcept {
  stop_directory_service(listener);
  ListenerDirectory* directory = listener->directory.exchange(nullptr);
  if (int memfd = listener->directory_memfd.exchange(-1); memfd >= 0) {
    release_to_application(memfd);
    real().close(memfd);
  }
  if (directory == nullptr) return;
  directory->release_holder(getpid());  // if it is this process
  ListenerDirectory::unmap(directory);
}

}  // namespace tcp2rdma::preload
