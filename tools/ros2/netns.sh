#!/usr/bin/env bash
# Runs a command (an rclpy peer and the edgetam-ros2 nodes it starts) inside a private network
# and mount namespace, so that every DDS packet stays on this machine:
#   - `lo` is the only interface, brought up: every packet goes to 127.0.0.1;
#   - a private /dev/shm (tmpfs) for Fast DDS's shared-memory files, gone with the namespace;
#   - the peer's Fast DDS takes tools/ros2/fastdds-loopback.xml (UDPv4 on 127.0.0.1 + shared
#     memory, unicast discovery to 127.0.0.1, 4 MiB buffers) with
#     ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT (LOCALHOST would replace the profile's
#     transports); the nodes it starts get LOCALHOST (tools/ros2/rospeer.py);
#   - a random ROS_DOMAIN_ID unless one is set, ROS logs under ROS_LOG_DIR (default: a temp dir).
# Needs root (or unprivileged user namespaces). Usage: tools/ros2/netns.sh COMMAND [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$((RANDOM % 100 + 1))}
export ROS_LOG_DIR=${ROS_LOG_DIR:-$(mktemp -d /tmp/edgetam-ros2-log.XXXXXX)}
export FASTDDS_DEFAULT_PROFILES_FILE=$here/fastdds-loopback.xml
export ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT
export PYTHONDONTWRITEBYTECODE=1
exec unshare -n -m bash -c '
  set -eu
  mount -t tmpfs -o size=512m,mode=1777 edgetam-ros2-shm /dev/shm 2>/dev/null ||
    echo "note: no private /dev/shm (Fast DDS files go to the shared one)" >&2
  ip link set lo up
  exec "$@"
' netns "$@"
