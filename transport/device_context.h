// The verbs device contexts the links are made in: one per RDMA device and epoch (credential_epoch.h),
// opened by this process under its current credentials.
//
// librdmacm opens a context per device once per process and gives it to every rdma_cm id (id->verbs).
// A process that inherited it (a pre-fork server's worker, whose master bound an RDMA listener to an
// address) or changed its credentials since (a worker that dropped to `nobody`) cannot use it: the
// kernel refuses rxe's send doorbell, a write(), with EACCES. So a link's queue pair, completion
// queue and protection domain live in a context of the link's own epoch, and rdma_cm is given the
// queue pair's number only (stream_link.h, "ready_to_send").
#pragma once

#include <infiniband/verbs.h>

#include <memory>

#include "credential_epoch.h"

namespace tcp2rdma::transport {

// Whether the device whose sysfs directory is `ibdev_path` (ibv_device::ibdev_path) does its work on
// this host's CPUs: Soft-RoCE and Soft-iWARP are virtual devices with no bus device behind them (no
// `device` entry), a NIC has one (its PCI function). A directory that cannot be read counts as
// software: a spin that yields when it need not costs calls, one that does not when it should takes
// the CPU from the device's work.
bool runs_on_host_cpus(const char* ibdev_path);

class DeviceContext {
 public:
  explicit DeviceContext(ibv_context* context)
      : context_(context), epoch_(current_epoch()), software_(runs_on_host_cpus(context->device->ibdev_path)) {}
  // Closed in the process that opened it; a forked child never closes its parent's (the close would
  // not reach the parent, but an object built on it might still be in use by a copy of a link).
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  ibv_context* get() const { return context_; }
  // The device's work runs on this host's CPUs (runs_on_host_cpus).
  bool software() const { return software_; }

 private:
  ibv_context* context_;
  Epoch epoch_;
  bool software_;
};

// The context of `device` for this epoch, opened on first use (its two descriptors above the
// application's range when there is room: own_descriptors.h). Null, errno set, when it cannot be
// opened. Contexts of an older epoch stay open while a link holds one.
std::shared_ptr<DeviceContext> device_context_for(ibv_device* device);

// Whether this process has opened a device context itself (every link is made in one, so every
// connection this process put on RDMA). A forked child has not until it makes a link of its own; nor
// has a process that shares this memory without being the one that opened them (clone with
// CLONE_VM): its pid is not the opener's.
bool opened_contexts_here() noexcept;

// In a forked child, before anything else of the module runs: the parent's contexts are forgotten
// (never closed) and the lock made anew (another thread may have held it at the fork).
void device_contexts_after_fork() noexcept;

}  // namespace tcp2rdma::transport
