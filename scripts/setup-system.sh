#!/usr/bin/env bash
# System packages and services that gymhub's sandbox backends need, on Debian/Ubuntu.
#
#   scripts/setup-system.sh        # what `make test` and `make demo` run first; idempotent
#
# 1. installs bubblewrap (the default sandbox), podman, runc and debootstrap when missing,
#    and chromium with chromium-driver (the hub's web-page tests drive a headless browser);
# 2. configures Podman for this VM: runtime runc (crun fails on rlimits here) and no
#    default ulimits;
# 3. builds the image gymhub-sandbox:bookworm (a debootstrapped minimal Debian with
#    python3, imported with `podman import`, because no registry is reachable) and caches
#    its root file system under /var/cache/gymhub so later runs only re-import it;
# 4. starts `podman system service` on /run/gymhub-podman.sock, the first socket the
#    docker backend looks for when DOCKER_HOST is unset.
#
# It is quiet when everything is in place. It never fails the caller: a step that cannot
# be done says what to do by hand, and the tests of that backend skip with the reason.
# Not root: it changes nothing and prints the commands a root user would run.

setup_system() {
  local sock_path=/run/gymhub-podman.sock
  local image=gymhub-sandbox:bookworm
  local cache=/var/cache/gymhub
  local conf=/etc/containers/containers.conf
  local log=/var/log/gymhub-podman.log
  local missing=()
  local pkg
  for pkg in bubblewrap podman runc debootstrap curl chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ "$(id -u)" != 0 ]; then
    if [ "${#missing[@]}" -gt 0 ] || ! [ -S "$sock_path" ]; then
      echo "setup-system: not root, so the sandbox backends and the browser were not set up;" >&2
      echo "  the tests that need them will skip. To set them up, run as root:" >&2
      [ "${#missing[@]}" -gt 0 ] && echo "    apt-get install -y ${missing[*]}" >&2
      echo "    scripts/setup-system.sh" >&2
    fi
    return 0
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-system: installing ${missing[*]}" >&2
    mkdir -p "$cache"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        "${missing[@]}"; } >"$cache/apt.log" 2>&1; then
      cat "$cache/apt.log" >&2
      echo "setup-system: apt-get failed (above); the sandbox and browser tests will skip" >&2
      return 0
    fi
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
      echo "setup-system: debootstrapping a minimal Debian (a few minutes, once)" >&2
      local root="$cache/rootfs"
      rm -rf "$root"
      if ! debootstrap --variant=minbase --include=python3 bookworm "$root" \
          http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1; then
        echo "setup-system: debootstrap failed, see $cache/debootstrap.log" >&2
        return 0
      fi
      rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
      tar -C "$root" -cf "$cache/rootfs.tar.tmp" . && mv "$cache/rootfs.tar.tmp" "$cache/rootfs.tar"
      rm -rf "$root"
    fi
    if ! podman import --change 'CMD ["/bin/sh"]' "$cache/rootfs.tar" "$image" \
        >"$cache/import.log" 2>&1; then
      cat "$cache/import.log" >&2
      echo "setup-system: podman import failed (above)" >&2
      return 0
    fi
  fi

  if ! curl -sf --max-time 2 --unix-socket "$sock_path" http://d/_ping >/dev/null 2>&1; then
    rm -f "$sock_path"
    # setsid + nohup: the service outlives this shell; --time=0: it never exits when idle.
    # From $cache, not the caller's folder: conmon writes files such as "oom" into its
    # working directory, which must not be somebody's checkout.
    mkdir -p "$cache"
    (cd "$cache" && setsid nohup podman system service --time=0 "unix://$sock_path" \
      >"$log" 2>&1 </dev/null &)
    local i
    for i in $(seq 1 50); do
      curl -sf --max-time 1 --unix-socket "$sock_path" http://d/_ping >/dev/null 2>&1 && break
      sleep 0.2
    done
  fi
  if ! curl -sf --max-time 2 --unix-socket "$sock_path" http://d/_ping >/dev/null 2>&1; then
    echo "setup-system: podman service did not answer, see $log" >&2
  fi
  return 0
}

setup_system
