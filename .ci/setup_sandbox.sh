#!/usr/bin/env bash
# Prepare the sandbox backends on a Debian 12 machine (idempotent, root only).
#
#   source .ci/setup_sandbox.sh     # exports DOCKER_HOST for the tests
#   .ci/setup_sandbox.sh            # prints "export DOCKER_HOST=..." to eval
#
# 1. installs bubblewrap, podman, runc and debootstrap when missing;
# 2. configures Podman for this VM: runtime runc (crun fails on rlimits here) and no
#    default ulimits;
# 3. builds the image gymhub-sandbox:bookworm (a debootstrapped minimal Debian with
#    python3, imported with `podman import`, because no registry is reachable) and caches
#    its root file system under /var/cache/gymhub so later runs only re-import it;
# 4. starts `podman system service` on a unix socket in the background.
#
# Sourcing it never aborts the calling script: each step that fails prints a warning and
# the docker-backend tests skip; the bwrap tests only need step 1.

_gh_sandbox_setup() {
  local sock_path=/run/gymhub-podman.sock
  local image=gymhub-sandbox:bookworm
  local cache=/var/cache/gymhub
  local conf=/etc/containers/containers.conf
  local log=/var/log/gymhub-podman.log
  if [ "$(id -u)" != 0 ]; then
    echo "setup_sandbox: not root; skipping system setup" >&2
    return 0
  fi

  local missing=()
  local pkg
  for pkg in bubblewrap podman runc debootstrap; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup_sandbox: installing ${missing[*]}" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
      >/dev/null || { echo "setup_sandbox: apt-get failed" >&2; return 0; }
  fi

  mkdir -p /etc/containers
  if ! grep -q 'gymhub-sandbox' "$conf" 2>/dev/null; then
    cat >>"$conf" <<'EOF'
# gymhub-sandbox: runc (crun fails on rlimits in this VM), no default ulimits, no systemd
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  fi

  if ! podman image exists "$image" 2>/dev/null; then
    mkdir -p "$cache"
    if [ ! -s "$cache/rootfs.tar" ]; then
      echo "setup_sandbox: debootstrapping a minimal Debian (a few minutes, once)" >&2
      local root="$cache/rootfs"
      rm -rf "$root"
      if ! debootstrap --variant=minbase --include=python3 bookworm "$root" \
          http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1; then
        echo "setup_sandbox: debootstrap failed, see $cache/debootstrap.log" >&2
        return 0
      fi
      rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
      tar -C "$root" -cf "$cache/rootfs.tar.tmp" . && mv "$cache/rootfs.tar.tmp" "$cache/rootfs.tar"
      rm -rf "$root"
    fi
    podman import --change 'CMD ["/bin/sh"]' "$cache/rootfs.tar" "$image" >/dev/null \
      || { echo "setup_sandbox: podman import failed" >&2; return 0; }
  fi

  export DOCKER_HOST="unix://$sock_path"
  if ! curl -sf --max-time 2 --unix-socket "$sock_path" http://d/_ping >/dev/null 2>&1; then
    rm -f "$sock_path"
    # setsid + nohup: the service outlives this shell; --time=0: it never exits when idle.
    setsid nohup podman system service --time=0 "unix://$sock_path" >"$log" 2>&1 </dev/null &
    local i
    for i in $(seq 1 50); do
      curl -sf --max-time 1 --unix-socket "$sock_path" http://d/_ping >/dev/null 2>&1 && break
      sleep 0.2
    done
  fi
  if curl -sf --max-time 2 --unix-socket "$sock_path" http://d/_ping >/dev/null 2>&1; then
    echo "export DOCKER_HOST=$DOCKER_HOST"
  else
    echo "setup_sandbox: podman service did not answer, see $log" >&2
  fi
  return 0
}

_gh_sandbox_setup
unset -f _gh_sandbox_setup
