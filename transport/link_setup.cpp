#include "link_setup.h"

#include <sys/eventfd.h>

#include <cstring>

namespace tcp2rdma::transport {

int LinkSetup::take_free_slot() {
  for (uint32_t s = 0; s < kSetupSlots; ++s) {
    if (!(taken_ & (uint64_t{1} << s))) {
      taken_ |= uint64_t{1} << s;
      return static_cast<int>(s);
    }
  }
  return -1;
}

void LinkSetup::give_back(uint32_t slot) {
  awaiting_[slot] = Slot{};
  taken_ &= ~(uint64_t{1} << slot);
}

std::optional<LinkSetup::Awaiting> LinkSetup::waiting_in(uint32_t slot) const {
  if (slot >= kSetupSlots || !awaiting_[slot].used) return std::nullopt;
  return awaiting_[slot].open;
}

void LinkSetup::forget_stream(uint32_t slot, const RdmaStream* stream) {
  if (slot < kSetupSlots && awaiting_[slot].open.stream == stream) awaiting_[slot].open.stream = nullptr;
}

Status LinkSetup::keep_open(uint32_t slot) {
  // At most one open a slot is outstanding: more would be more than the receives kept for them.
  if (!serves_ || slot >= kSetupSlots || opens_.size() >= kSetupSlots) return Status::kProtocolError;
  Open open{slot, {}};
  std::memcpy(&open.request, own_slot(slot), sizeof open.request);
  opens_.push_back(open);
  // The listener's engine may sleep: it answers the open once it sees it. eventfd_write is libc's
  // own call, never the module's wrapper (own_calls.h).
  if (bell_ >= 0) {
    (void)eventfd_write(bell_, 1);
    if (rung_ != nullptr) rung_->store(true, std::memory_order_release);  // after the write (take_link_opens)
  }
  return Status::kOk;
}

}  // namespace tcp2rdma::transport
