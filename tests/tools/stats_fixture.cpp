// A process with a stats segment of known content, for the tests of `tcp2rdma stat` and `stats`: the
// segment made in TCP2RDMA_STATS_DIR through the writer's API (no module, no network), three
// connections, then "ready" on stdout. It waits for SIGTERM and removes its segment, as a process under
// the module does at exit; SIGKILL leaves the segment behind, stale.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>

#include <cstdio>

#include "../config/test_endpoint.h"
#include "stats/stats_writer.h"

namespace {

using namespace tcp2rdma::stats;

using tcp2rdma::config::endpoint;  // tests/config/test_endpoint.h

}  // namespace

int main() {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, nullptr);  // before anything: a SIGTERM early must still be waited for

  // On RDMA: a client of 10.77.0.2:5201 by rule "lab", 3000000 bytes in and 5000000 out on RDMA (4000000
  // of them zero-copy) after 100 in and 200 out on TCP.
  sockaddr_storage local = endpoint("10.77.0.1", 40000), remote = endpoint("10.77.0.2", 5201);
  int32_t rdma =
      open_slot({7, true, reinterpret_cast<sockaddr*>(&local), reinterpret_cast<sockaddr*>(&remote), "lab", true});
  slot_add_tcp(rdma, 100, 200);
  slot_on_rdma(rdma, 256, 1024, 12, 3);
  slot_add_rdma(rdma, 3000000, 5000000, 4000000);

  // Decided for RDMA, on TCP: a server whose peer declined.
  sockaddr_storage local6 = endpoint("fd77::2", 6379), remote6 = endpoint("fd77::1", 50000);
  int32_t declined = open_slot({9, false, reinterpret_cast<sockaddr*>(&local6), reinterpret_cast<sockaddr*>(&remote6),
                                "lab6", true});
  slot_on_tcp(declined, TcpReason::kPeerDeclined, "the peer declined: no tcp2rdma listener");
  slot_add_tcp(declined, 7, 9);

  // Kept on TCP by the rules (no rule matched), over a dual-stack socket.
  sockaddr_storage mapped = endpoint("::ffff:10.77.0.1", 8080), mapped_peer = endpoint("::ffff:10.77.0.3", 41000);
  open_slot({11, false, reinterpret_cast<sockaddr*>(&mapped), reinterpret_cast<sockaddr*>(&mapped_peer), "", false});

  std::puts("ready");
  std::fflush(stdout);
  int signal = 0;
  sigwait(&term, &signal);
  remove_segment();
  return 0;
}
