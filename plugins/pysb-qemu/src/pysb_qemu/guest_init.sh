#!/bb/sh
# pysb qemu guest /init (PID 1 inside the VM). Part of the base initramfs; the per-run
# settings come from a second archive the host appends (files under /pysb), or, in a VM
# restored from a snapshot (pysb_qemu.snapshot), sends on the control port:
#   ports    NAME GUESTFD in|out|both   virtio-serial ports, opened here on fds 200, 201...
#   links    TARGET PATH                symlinks (merged-/usr hosts: /bin -> usr/bin)
#   mounts   TAG ro|rw CACHE PATH       9p shares (read-only ones are also read-only on the host)
#   binds    SRC DEST                   a share of the host's / (at /pysb/root) put in place
#   hide     dir|file PATH              ignored paths, masked after the shares are mounted
#   protect  PATH                       files made read-only (profile files)
#   net      present when a rule allows network; nft.rules is loaded before the program
#   nat      present when a rule allows the host's loopback (127.0.0.1 -> 10.0.2.2)
#   pids.max limits.processes, enforced by a pids cgroup
#   marker   end-of-stream marker written on every output port once the program has exited
#   run      the program: fd set-up, cwd, dropped capabilities, exact environment, exec
# Every failure before the program starts powers the VM off: the host reports it (fail closed).
export PATH=/bb
CTL=

# With PYSB_QEMU_DEBUG set on the host, /pysb/debug exists: stage times on the console.
stage() {
  [ -f /pysb/debug ] || return 0
  read -r up _ < /proc/uptime
  echo "pysb-guest: $up s: $1" > /dev/ttyS0
}

fail() {
  echo "pysb-guest: $*" > /dev/ttyS0
  [ -n "$CTL" ] && echo "fail $*" >&250
  sync
  poweroff -f
}

# Port names (ctl, fd0, fd1...) become shell variables P_<name>=/dev/vportNpM once every
# expected port has its name (names arrive after the devices). Builtins only: no forks.
ports_ready() {
  set -- /sys/class/virtio-ports/*
  [ -e "$1" ] && [ $# -ge "$want" ] || return 1
  for d in "$@"; do
    name=
    [ -r "$d/name" ] && read -r name < "$d/name"
    [ -n "$name" ] || return 1
    eval "P_$name=/dev/\${d##*/}"
  done
}

load_modules() {
  while read -r m; do
    insmod "/modules/$m.ko" || fail "cannot load kernel module $m"
  done < "/modules/$1.order"
}

wait_ports() {
  i=0
  until ports_ready; do
    i=$((i + 1))
    [ $i -gt 3000 ] && fail "the virtio-serial ports did not appear"
    usleep 5000
  done
  [ -n "$P_ctl" ] || fail "the control port did not appear"
  exec 250<>"$P_ctl"
  CTL=1
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
SNAPSHOT=
if [ -f /pysb/snapshot ]; then
  # A snapshot's boot (pysb_qemu.snapshot): the modules and the fixed set of ports now, then
  # "ready" on the control port, and the host saves the VM while this read waits. Every
  # restore resumes here and gets "run LEN SEED TIME", the run's archive (LEN bytes), "end":
  # nothing of a run is in the snapshot, and nothing runs before the kernel's random
  # generator is reseeded with the host's fresh entropy and the clock is set.
  load_modules core
  read -r want < /pysb/snapshot
  wait_ports
  echo "ready" >&250
  read -r cmd len seed now <&250
  [ "$cmd" = run ] || fail "bad restore request"
  case "$len$now" in ''|*[!0-9]*) fail "bad restore request" ;; esac
  [ ${#seed} -ge 64 ] || fail "no entropy in the restore request"
  echo "$seed" > /dev/urandom || fail "cannot add entropy"
  /pysb/reseed || fail "cannot reseed the kernel's random generator"
  unset seed
  date -u -s "@$now" > /dev/null || fail "cannot set the clock"
  # Unpacked as it arrives (PID 1's working directory is /: the archive's paths are
  # relative to it); "end" after the LEN bytes proves none was missing (an archive cut at
  # an entry's boundary unpacks without an error, short of its last files). dd reads
  # exactly LEN bytes (head -c reads ahead through stdio, and would swallow "end").
  dd bs=65536 count="$len" iflag=count_bytes,fullblock status=none <&250 \
    | cpio -i -d -u 2> /dev/null || fail "cannot unpack the run's archive"
  read -r end <&250
  [ "$end" = end ] || fail "the run's archive is incomplete"
  SNAPSHOT=1
  echo "restored" >&250
fi
stage "kernel booted"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
# /dev/shm and /tmp are bounded by the profile's `limits: tmp` (pysb/tmp-size, in bytes).
TMP_SIZE=
read -r TMP_SIZE < /pysb/tmp-size || fail "no tmp size"
case "$TMP_SIZE" in ''|*[!0-9]*) fail "bad tmp size" ;; esac
mount -t tmpfs -o "mode=1777,size=$TMP_SIZE" tmpfs /dev/shm
# /tmp is the program's private tmpfs (pysb_core.launch.tmpdir). Exposed files the host copied
# into the archive below /tmp (a script in a project under the host's /tmp) go onto it.
if [ -n "$(ls -A /tmp)" ]; then
  mkdir -p /pysb/tmp-seed && mount --bind /tmp /pysb/tmp-seed || fail "cannot keep /tmp"
fi
mount -t tmpfs -o "mode=1777,size=$TMP_SIZE" tmpfs /tmp
if [ -d /pysb/tmp-seed ]; then
  cp -a /pysb/tmp-seed/. /tmp/ && umount /pysb/tmp-seed || fail "cannot fill /tmp"
  # "cp -a DIR/." also copies DIR's own mode onto /tmp (0755): a normal user's program
  # could no longer write there.
  chmod 1777 /tmp || fail "cannot open /tmp"
fi
stage "init started"
[ -n "$SNAPSHOT" ] || load_modules core
stage "modules loaded"

if [ -z "$SNAPSHOT" ]; then
  want=1
  while read -r _; do want=$((want + 1)); done < /pysb/ports
  wait_ports
fi
stage "ports found"
k=200
while read -r name gfd dir; do
  eval "dev=\$P_$name"
  [ -n "$dev" ] || fail "port $name did not appear"
  eval "exec $k<>\"\$dev\""
  k=$((k + 1))
done < /pysb/ports

while read -r target path; do
  ln -s "$target" "$path" || fail "cannot link $path"
done < /pysb/links
while read -r tag mode cache path; do
  [ -d "$path" ] || mkdir -p "$path" || fail "cannot create the mount point $path"
  mount -t 9p -o "trans=virtio,version=9p2000.L,msize=512000,cache=$cache,$mode" "$tag" "$path" \
    || fail "cannot mount $path"
  if [ "$path" = /pysb/root ]; then
    # The host's / is exposed: its top-level directories go into place (binds SRC DEST).
    while read -r src dst; do
      { mkdir -p "$dst" && mount --bind "$src" "$dst"; } || fail "cannot bind $dst"
    done < /pysb/binds
    # Only the binds stay: the share itself would also show the host's /proc, /sys, /etc.
    umount /pysb/root || fail "cannot detach the host root share"
  fi
done < /pysb/mounts
while read -r kind path; do
  if [ "$kind" = dir ]; then
    mount -t tmpfs -o ro,mode=0555,size=4k pysb-hidden "$path" || fail "cannot hide $path"
  else
    { mount --bind /pysb/empty "$path" && mount -o remount,bind,ro "$path"; } \
      || fail "cannot hide $path"
  fi
done < /pysb/hide
while read -r path; do
  { mount --bind "$path" "$path" && mount -o remount,bind,ro "$path"; } \
    || fail "cannot protect $path"
done < /pysb/protect
stage "shares mounted"

# limits.processes: RLIMIT_NPROC never applies to uid 0 of the initial user namespace
# (the guest's root), so a pids cgroup holds the program instead. /pysb/run joins it and
# unmounts the cgroup filesystem before exec: without CAP_SYS_ADMIN it cannot come back.
if [ -f /pysb/pids.max ]; then
  { mount -t cgroup2 cgroup2 /sys/fs/cgroup \
      && echo +pids > /sys/fs/cgroup/cgroup.subtree_control \
      && mkdir /sys/fs/cgroup/pysb \
      && cat /pysb/pids.max > /sys/fs/cgroup/pysb/pids.max; } || fail "cannot set up the pids cgroup"
fi

ip link set lo up
if [ -f /pysb/net ]; then
  load_modules net
  { ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 \
      && ip route add default via 10.0.2.2; } || fail "cannot configure the network"
  if [ -f /pysb/nat ]; then
    load_modules nat
    # 127.0.0.1 is NATed to the host's loopback (slirp's 10.0.2.2) for allowed ports.
    echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
    echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet
  fi
  [ -x /usr/sbin/nft ] || fail "network rules need /usr/sbin/nft on the host (apt-get install nftables)"
  /usr/sbin/nft -f /pysb/nft.rules || fail "cannot load the packet filter; refusing to run unfiltered"
fi

read -r MARKER < /pysb/marker
rm -f /pysb/marker
# stdout and stderr reach their ports through a FIFO and a cat (children of /init, not of
# the program): when the host's end breaks (pysb run ... | head), killing the cat gives the
# program EPIPE on its next write, as natively.
k=200
while read -r name gfd dir; do
  if [ "$dir" = out ] && { [ "$gfd" = 1 ] || [ "$gfd" = 2 ]; }; then
    mkfifo -m 600 "/run/out$gfd" || fail "cannot create the output FIFO"
    eval "cat /run/out$gfd >&$k &"
    eval "RELAY_$gfd=\$!"
  fi
  k=$((k + 1))
done < /pysb/ports
(
  while read -r cmd arg; do
    case "$cmd" in
      sig)
        # A signal sent while the program is still starting waits for it (up to 10 s).
        i=0
        while [ ! -s /run/pysb.pid ] && [ $i -lt 1000 ]; do usleep 10000; i=$((i + 1)); done
        [ -s /run/pysb.pid ] && kill "-$arg" "$(cat /run/pysb.pid)" 2>/dev/null ;;
      brk)
        eval "relay=\$RELAY_$arg"
        [ -n "$relay" ] && kill "$relay" 2>/dev/null ;;
    esac
  done
) <&250 &
READER=$!
# The host starts the wall-time clock when the program starts, not at the VM's boot nor
# at the interpreter's (seconds under emulation): /pysb/run holds this FIFO's write end
# and the interpreter closes it as its last step before the program (pysb_qemu.started),
# or at its exit.
mkfifo -m 600 /run/started || fail "cannot create the start FIFO"
( read -r _ < /run/started; stage "bootstrap done"; echo "start" >&250 ) &
stage "program starts"
/bb/sh /pysb/run
rc=$?
stage "program exited ($rc)"
kill $READER 2>/dev/null
# The relays end at EOF; a background process still holding stdout gets 2 s, then is cut off.
if [ -n "$RELAY_1$RELAY_2" ]; then
  ( sleep 2; kill $RELAY_1 $RELAY_2 ) 2>/dev/null &
  TIMER=$!
  for relay in $RELAY_1 $RELAY_2; do wait "$relay"; done
  kill $TIMER 2>/dev/null
fi
sync
k=200
while read -r name gfd dir; do
  [ "$dir" = in ] || eval "printf '%s' \"\$MARKER\" >&$k"
  k=$((k + 1))
done < /pysb/ports
echo "rc $rc" >&250
# The host stops the VM as soon as it has the status and the end of every output stream.
read -r -t 30 _ <&250
poweroff -f
