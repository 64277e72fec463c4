// The tcp2rdma command-line tool's subcommands, one file each. Each returns the process exit status:
// 0 success, 1 the subject failed (a bad rule file, a machine that cannot do RDMA, a process without a
// stats segment), 2 bad usage.
#pragma once

#include <span>
#include <string_view>

namespace tcp2rdma::tools {

int check_command(std::span<char*> args);
int doctor_command(std::span<char*> args);
int explain_command(std::span<char*> args);
int run_command(std::span<char*> args);
int stat_command(std::span<char*> args);
int stats_command(std::span<char*> args);

}  // namespace tcp2rdma::tools
