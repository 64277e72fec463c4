#include "registration_cache.h"

#include <cerrno>

#include "page_frames.h"

namespace tcp2rdma::transport {
RegistrationCache::~RegistrationCache() {
  for (Entry& e : entries_) ibv_dereg_mr(e.mr);
  if (uncached_ != nullptr) ibv_dereg_mr(uncached_);
}

RegistrationCache::Entry* RegistrationCache::find(uintptr_t first_page, size_t pages) {
  for (Entry& e : entries_) {
    if (e.first_page <= first_page && first_page + pages * kPageSize <= e.first_page + e.pages * kPageSize) return &e;
  }
  return nullptr;
}

bool RegistrationCache::still_mapped(const Entry& entry, uintptr_t first_page, size_t pages) {
  if (!read_page_frames(first_page, pages, &scratch_)) return false;
  size_t skip = (first_page - entry.first_page) / kPageSize;
  for (size_t i = 0; i < pages; ++i) {
    if (scratch_[i] != entry.frames[skip + i]) return false;
  }
  return true;
}

void RegistrationCache::drop(size_t index) {
  ibv_dereg_mr(entries_[index].mr);
  entries_[index] = std::move(entries_.back());
  entries_.pop_back();
}

Status RegistrationCache::acquire(const void* addr, size_t len, ibv_mr** mr) {
  uintptr_t first_page = reinterpret_cast<uintptr_t>(addr) & ~(kPageSize - 1);
  size_t pages = (reinterpret_cast<uintptr_t>(addr) + len - first_page + kPageSize - 1) / kPageSize;
  if (Entry* hit = find(first_page, pages); hit != nullptr) {
    if (still_mapped(*hit, first_page, pages)) {
      ++counters_.hits;
      hit->last_use = ++clock_;
      *mr = hit->mr;
      return Status::kOk;
    }
    ++counters_.stale;
    drop(static_cast<size_t>(hit - entries_.data()));
  }
  // No access flags: the adapter only reads. A page shared copy-on-write is pinned as it is now; if the
  // application writes it later, its frame changes and the next use re-registers.
  ibv_mr* fresh = ibv_reg_mr(pd_, reinterpret_cast<void*>(first_page), pages * kPageSize, 0);
  if (fresh == nullptr) return registration_failure(errno);
  ++counters_.registrations;
  std::vector<uint64_t> frames;
  bool provable = read_page_frames(first_page, pages, &frames);
  for (uint64_t f : frames) provable = provable && f != 0;
  if (!provable || max_entries_ == 0) {
    ++counters_.unverifiable;
    uncached_ = fresh;
    *mr = fresh;
    return Status::kOk;
  }
  if (entries_.size() >= max_entries_) {
    size_t oldest = 0;
    for (size_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].last_use < entries_[oldest].last_use) oldest = i;
    }
    ++counters_.evictions;
    drop(oldest);
  }
  entries_.push_back(Entry{first_page, pages, fresh, std::move(frames), ++clock_});
  *mr = fresh;
  return Status::kOk;
}

void RegistrationCache::release(ibv_mr* mr) {
  if (mr == uncached_) {
    ibv_dereg_mr(uncached_);
    uncached_ = nullptr;
  }
}

}  // namespace tcp2rdma::transport
