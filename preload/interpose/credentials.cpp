// Changes of credentials: setuid and its kin, setgroups, initgroups, setfsuid, capset. The kernel runs
// a write() on an RDMA device (every rdma_cm command, rxe's send doorbell) only for the credentials
// that opened it (transport/credential_epoch.h), so a change of credentials is, for the module, what a
// fork is for a child: what exists is used no more, and what is needed is made again, lazily, under
// the new credentials (docs/architecture.md, "Credentials"). Before the change, while the old
// descriptors still answer: every connection on RDMA goes back to TCP at its exact byte (as before a
// fork), and every RDMA listener is destroyed (made again at the next accept). After it, whatever the
// result: a new resource generation, so that device contexts, links, listeners and the module's own
// threads are made anew by the thread that goes on (the kernel gives each thread of a process that
// changed credentials a cred object of its own, and a thread made later shares its maker's).
// A change made without these calls (syscall(2) directly, another library's raw system call) is not
// seen: its RDMA connections fail at their next write and carry on over TCP as after a path failure.
#include <grp.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include "back_to_tcp/move_back.h"
#include "back_to_tcp/path_watcher.h"
#include "libc/interposed.h"
#include "link_table.h"
#include "listener/prefork_listeners.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "util/log.h"
#include "util/saved_errno.h"

using tcp2rdma::preload::real;

namespace {

// Around the real call: the settling before, the new generation after.
class CredentialChange {
 public:
  explicit CredentialChange(const char* call) noexcept : call_(call) {
    tcp2rdma::preload::close_fork_gate();  // no upgrade session starts until the change is done
    tcp2rdma::preload::settle_all_sessions();
    // The process goes on using them, alone: each goes back to RDMA at its next call, under the new
    // credentials, and each peer learns so from the marker (docs/architecture.md, "Back to RDMA").
    tcp2rdma::preload::move_streams_back("a change of credentials", /*returning=*/true);
    tcp2rdma::preload::drop_listeners_for_credentials();
    tcp2rdma::transport::let_go_of_idle_links();
  }
  ~CredentialChange() {
    tcp2rdma::preload::SavedErrno keep_errno;  // the real call's
    tcp2rdma::preload::note_credentials_changed();
    tcp2rdma::preload::retire_path_watcher();
    tcp2rdma::preload::open_fork_gate(false);
    // Which user the process's later RDMA resources belong to (a worker that dropped to www-data).
    tcp2rdma::preload::log_line("credentials changed (%s): uid %u, gid %u from here on", call_,
                                static_cast<unsigned>(geteuid()), static_cast<unsigned>(getegid()));
  }
  CredentialChange(const CredentialChange&) = delete;
  CredentialChange& operator=(const CredentialChange&) = delete;

 private:
  const char* call_;
};

// The real call, with the change around it.
template <typename Call, typename... Args>
int changing_credentials(const char* name, Call call, Args... args) {
  CredentialChange change(name);
  return call(args...);
}

}  // namespace

T2R_INTERPOSE int setuid(uid_t uid) { return changing_credentials("setuid", real().setuid, uid); }
T2R_INTERPOSE int seteuid(uid_t uid) { return changing_credentials("seteuid", real().seteuid, uid); }
T2R_INTERPOSE int setreuid(uid_t ruid, uid_t euid) { return changing_credentials("setreuid", real().setreuid, ruid, euid); }
T2R_INTERPOSE int setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  return changing_credentials("setresuid", real().setresuid, ruid, euid, suid);
}
T2R_INTERPOSE int setgid(gid_t gid) { return changing_credentials("setgid", real().setgid, gid); }
T2R_INTERPOSE int setegid(gid_t gid) { return changing_credentials("setegid", real().setegid, gid); }
T2R_INTERPOSE int setregid(gid_t rgid, gid_t egid) { return changing_credentials("setregid", real().setregid, rgid, egid); }
T2R_INTERPOSE int setresgid(gid_t rgid, gid_t egid, gid_t sgid) {
  return changing_credentials("setresgid", real().setresgid, rgid, egid, sgid);
}
T2R_INTERPOSE int setgroups(size_t size, const gid_t* list) { return changing_credentials("setgroups", real().setgroups, size, list); }
T2R_INTERPOSE int initgroups(const char* user, gid_t group) { return changing_credentials("initgroups", real().initgroups, user, group); }
// setfsuid and setfsgid return the previous id, not a status: the change is assumed either way.
T2R_INTERPOSE int setfsuid(uid_t uid) { return changing_credentials("setfsuid", real().setfsuid, uid); }
T2R_INTERPOSE int setfsgid(gid_t gid) { return changing_credentials("setfsgid", real().setfsgid, gid); }
T2R_INTERPOSE int capset(void* header, const void* data) { return changing_credentials("capset", real().capset, header, data); }
