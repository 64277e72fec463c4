// The stats segment's file (stats_segment.h): made, swept of the files of this user's processes that
// are gone, and filled with the header the readers check. For stats_writer.cpp only.
#pragma once

#include <cstddef>

#include "stats/stats_segment.h"

namespace tcp2rdma::stats {

// Makes this process's file in segment_directory() (its name into path), maps it and fills its
// header; null when it cannot (the counters are then off for this process).
Header* make_segment(char* path, size_t path_size);

}  // namespace tcp2rdma::stats
