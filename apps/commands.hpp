#pragma once

// The commands of the `cmdbus` tool, each defined in its apps/cmd_*.cpp.
// Each takes the arguments after its name and returns the exit code; what
// it throws, program_main (cli/program.hpp) turns into one.

#include <string>
#include <vector>

namespace cmdbus::cli {

int run_migrate(const std::vector<std::string>& argv);
int run_api(const std::vector<std::string>& argv);
int run_grant(const std::vector<std::string>& argv);
int run_send(const std::vector<std::string>& argv);
int run_send_batch(const std::vector<std::string>& argv);
int run_cancel(const std::vector<std::string>& argv);
int run_prune(const std::vector<std::string>& argv);
int run_show(const std::vector<std::string>& argv);
int run_list(const std::vector<std::string>& argv);
int run_wait(const std::vector<std::string>& argv);
int run_tsq(const std::vector<std::string>& argv);
int run_batch(const std::vector<std::string>& argv);
int run_process(const std::vector<std::string>& argv);
int run_stats(const std::vector<std::string>& argv);
int run_queues(const std::vector<std::string>& argv);
int run_replies(const std::vector<std::string>& argv);
int run_worker(const std::vector<std::string>& argv);
int run_node(const std::vector<std::string>& argv);
int run_cluster(const std::vector<std::string>& argv);
int run_schedule(const std::vector<std::string>& argv);

} // namespace cmdbus::cli
