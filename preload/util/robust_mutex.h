// A mutex in memory that several processes map (MAP_SHARED): process-shared, and robust, so that a
// process that died holding it does not stop the others. Whoever takes it after such a death finds
// the data as the dead holder left it between two stores; each user keeps its data valid at every
// store, so the lock is simply made consistent again.
#pragma once

#include <pthread.h>

#include <cerrno>

namespace tcp2rdma::preload {

// Initialises *m in shared memory; the pthread error, or 0.
inline int init_robust_mutex(pthread_mutex_t* m) noexcept {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
  return rc;
}

// Holds a robust mutex for a scope.
class RobustLock {
 public:
  explicit RobustLock(pthread_mutex_t* m) noexcept : m_(m) {
    if (pthread_mutex_lock(m_) == EOWNERDEAD) pthread_mutex_consistent(m_);
  }
  ~RobustLock() { pthread_mutex_unlock(m_); }
  RobustLock(const RobustLock&) = delete;
  RobustLock& operator=(const RobustLock&) = delete;

 private:
  pthread_mutex_t* m_;
};

}  // namespace tcp2rdma::preload
