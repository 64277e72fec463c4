// Device contexts by device and epoch (device_context.h).
#include "device_context.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "keep_forever.h"
#include "own_descriptors.h"

namespace tcp2rdma::transport {
namespace {

struct Contexts {
  std::mutex mu;
  Epoch epoch;
  std::vector<std::pair<ibv_device*, std::shared_ptr<DeviceContext>>> open;
};

Contexts*& contexts_slot() {
  static Contexts* c = new Contexts;  // never destroyed: links may outlive static destructors at exit
  return c;
}

Contexts& contexts() { return *contexts_slot(); }
std::atomic<pid_t> g_opened_by{0};  // the process that opened the latest context (opened_contexts_here)

// A new context with its descriptors moved up: nothing else holds it yet, so nothing reads the old
// numbers (the provider reads cmd_fd from the context at each command; its mappings hold the file).
ibv_context* open_placed(ibv_device* device) {
  OwnDescriptors window;
  ibv_context* context = ibv_open_device(device);
  if (context == nullptr) return nullptr;
  context->cmd_fd = window.place_if_room(context->cmd_fd);
  if (context->async_fd >= 0) context->async_fd = window.place_if_room(context->async_fd);
  return context;
}

}  // namespace

bool runs_on_host_cpus(const char* ibdev_path) {
  // No descriptor opened: open and close are the module's own wrappers (os_calls.h).
  std::string device = std::string(ibdev_path) + "/device";
  return faccessat(AT_FDCWD, device.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) != 0;
}

DeviceContext::~DeviceContext() {
  if (epoch_.pid == getpid()) ibv_close_device(context_);
}

std::shared_ptr<DeviceContext> device_context_for(ibv_device* device) {
  Contexts& c = contexts();
  std::lock_guard lock(c.mu);
  Epoch now = current_epoch();
  if (c.epoch != now) {
    // An older epoch's contexts: the links that hold them close them when they go.
    c.open.clear();
    c.epoch = now;
  }
  // A context whose device went away (removed, perhaps added again under the same ibv_device
  // address) answers no query: it is let go (its links close it) and a new one opened. A query per
  // new link, not per connection.
  std::erase_if(c.open, [&](const auto& open) {
    ibv_device_attr attr{};
    return open.first == device && ibv_query_device(open.second->get(), &attr) != 0;
  });
  for (auto& [d, context] : c.open) {
    if (d == device) return context;
  }
  ibv_context* opened = open_placed(device);
  if (opened == nullptr) return nullptr;
  auto context = std::make_shared<DeviceContext>(opened);
  c.open.emplace_back(device, context);
  g_opened_by.store(now.pid, std::memory_order_relaxed);
  return context;
}

bool opened_contexts_here() noexcept { return g_opened_by.load(std::memory_order_relaxed) == getpid(); }

void device_contexts_after_fork() noexcept { keep_forever(std::exchange(contexts_slot(), new Contexts)); }

}  // namespace tcp2rdma::transport
