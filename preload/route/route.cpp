#include "route/route.h"

#include "registry/upgrade_session.h"

namespace tcp2rdma::preload {

StreamRef route_of(SocketHold socket) noexcept {
  if (!socket) return {};
  if (socket->upgrade_pending()) return StreamRef::of_kind(StreamRef::Kind::kPending, std::move(socket));
  if (UpgradeSession* session = socket->active_session(); session != nullptr) {
    session->note_used();  // every caller is an application's call on the connection
    auto kind = session->phase() == UpgradeSession::Phase::kOnTcp ? StreamRef::Kind::kSession
                                                                  : StreamRef::Kind::kSwitching;
    return StreamRef::of_kind(kind, std::move(socket), session);
  }
  transport::RdmaStream* stream = socket->stream();
  if (stream != nullptr) return StreamRef(std::move(socket), stream);
  if (socket->prefix.present()) return StreamRef::of_kind(StreamRef::Kind::kPrefixed, std::move(socket));
  return {};
}

StreamRef current_stream(int fd) noexcept {
  SocketHold socket = SocketHold::of(fd);
  transport::RdmaStream* stream = socket ? socket->stream() : nullptr;
  if (stream == nullptr) return {};
  return StreamRef(std::move(socket), stream);
}

}  // namespace tcp2rdma::preload
