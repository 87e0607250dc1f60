// net_devices: which network devices the UCX data plane may use, so that it
// listens where the topology says the node lives and nowhere else.
//
// UCX's TCP transport opens a listening socket on every network interface it
// is allowed (UCX_NET_DEVICES, default all): a node whose topology address is
// 127.0.0.1 would otherwise also accept data-plane connections on eth0.
// [cluster] ucx_net_devices:
//   "auto" (default): the interface that holds the node's own address (the
//     loopback interface for 127.0.0.0/8 and ::1); for an address that is not
//     loopback also every RDMA port (/sys/class/infiniband/DEV/ports/P as
//     "DEV:P"), which listens on no socket. An unspecified address (0.0.0.0,
//     ::) or one no interface holds: UCX's default (every device).
//   "all": UCX's default.
//   anything else: given to UCX as is ("eth0", "mlx5_0:1,eth0").
// UCX_NET_DEVICES in the environment still wins (the data plane does not
// override it).
#pragma once

#include <string>

namespace hetflow::dataplane {

// The UCX_NET_DEVICES value for `setting` and the node's host (a name or an
// address); empty = leave UCX's default. `why` (optional) says how it was
// chosen, for the node's log.
std::string net_devices_for(const std::string& setting, const std::string& host, std::string* why = nullptr);

}  // namespace hetflow::dataplane
