// stream_limits: setup failures, each reported with its own status, in the Soft-RoCE VM.
//   stream_limits SELF_ADDR PORT            checks 1-3
//   stream_limits SELF_ADDR PORT removed    check 4, after `rdma link delete rxe0` (a separate process:
//                                           librdmacm keeps every device open while a process lives,
//                                           and the kernel waits for that before removing one)
// 1. no route: an address no interface of the guest reaches (TEST-NET-1; no packet leaves: the
//    guest has no default route)              -> "no route"
// 2. a completion queue larger than the device allows -> "cannot create RDMA resources"
// 3. a queue pair larger than the device allows       -> "cannot create RDMA resources"
// 4. the RDMA device removed (rdma link delete)        -> "no RDMA device"
#include <algorithm>

#include "peer_util.h"

using namespace peer_util;

namespace {

bool expect(const char* what, const char* host, const char* port, const StreamOptions& options, Status want) {
  sockaddr_in addr = ipv4(host, port);
  Pairing pairing;
  pairing.tuple.family = AF_INET;
  std::unique_ptr<RdmaStream> s;
  Status got = RdmaStream::connect(reinterpret_cast<sockaddr*>(&addr), pairing, options, &s);
  bool ok = got == want;
  std::printf("%s: %s (%s)\n", what, to_string(got), ok ? "as expected" : "WRONG");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) return 2;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  StreamOptions small;
  small.timeout_ms = 2000;
  if (argc == 4) return expect("device removed", argv[1], argv[2], small, Status::kNoDevice) ? 0 : 1;
  bool ok = expect("no route", "192.0.2.1", argv[2], small, Status::kNoRoute);
  StreamOptions huge_cq = small;
  huge_cq.send_queue_depth = 65000;  // rxe allows 32 Ki completion queue entries
  ok &= expect("oversized completion queue", argv[1], argv[2], huge_cq, Status::kResources);
  // A queue pair one work request deeper than the device allows, with a completion queue it does allow.
  ibv_device_attr attr{};
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  ibv_context* context = count > 0 ? ibv_open_device(devices[0]) : nullptr;
  if (context == nullptr || ibv_query_device(context, &attr) != 0) return 1;
  ibv_close_device(context);
  ibv_free_device_list(devices);
  std::printf("device limits: max_qp_wr %d, max_cqe %d\n", attr.max_qp_wr, attr.max_cqe);
  StreamOptions huge_qp = small;
  huge_qp.send_queue_depth = static_cast<uint16_t>(std::min(attr.max_qp_wr + 1, 65535));
  if (huge_qp.send_queue_depth + huge_qp.recv_queue_depth <= attr.max_cqe && attr.max_qp_wr < 65535) {
    ok &= expect("oversized queue pair", argv[1], argv[2], huge_qp, Status::kResources);
  } else {
    std::printf("oversized queue pair: not testable here (the completion queue would fail first)\n");
  }
  return ok ? 0 : 1;
}
