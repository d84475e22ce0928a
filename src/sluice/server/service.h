// `sluice serve`: wires config, store, limiter, HTTP planes, threads and signals together. The only
// place that names concrete stores.
#ifndef SLUICE_SERVER_SERVICE_H_
#define SLUICE_SERVER_SERVICE_H_

#include <string>

namespace sluice::server {

// Runs until SIGTERM or SIGINT; returns the process exit code (0 after a clean drain, 1 on a
// runtime failure, 78 on a configuration error). SIGHUP reloads `config_path`.
int Serve(const std::string& config_path);

}  // namespace sluice::server

#endif  // SLUICE_SERVER_SERVICE_H_
